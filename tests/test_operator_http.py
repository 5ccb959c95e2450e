"""The operator's HTTP port on real server processes: /health, /ready (needWaitForService), the
address service RocketMQ clients fetch name server lists from, and its bound on connections."""
from __future__ import annotations

import json
import re
import os
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.request
import zlib
from pathlib import Path

import psutil
import pytest

from namesrv.client import BrokerIdentity, BrokerService, BrokerTopicTable
from namesrv.operator_http import MAX_CLIENTS, PAGES, REQUEST_SECONDS, OperatorHttp, answer
from namesrv.protocol import (DataVersion, RegisterBrokerBody, RequestCode, ResponseCode, TopicConfig,
                              TopicConfigSerializeWrapper)


def get(url: str) -> tuple[int, str, str]:
    """(status, content type, body) of a GET."""
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, response.headers["Content-Type"], response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.headers["Content-Type"], error.read().decode()


def test_health_and_readiness_with_the_route_tables_sizes(namesrv_factory) -> None:
    server = namesrv_factory()
    assert get(server.http_url + "/health") == (200, "application/json", '{"status": "UP"}')
    broker = BrokerService(BrokerIdentity("C", "broker-h", "127.0.0.1:40911", 0, "127.0.0.1:40912"), [server.address],
                           BrokerTopicTable(TopicConfig(f"T{i}", 4, 4) for i in range(3)), period_override_ms=60_000)
    try:
        assert len(broker.start()) == 1
        status, kind, body = get(server.http_url + "/ready")
        assert (status, kind) == (200, "application/json")
        assert json.loads(body) == {"status": "READY", "brokers": 1, "clusters": 1, "brokerGroups": 1, "topics": 3,
                                    "queueDatas": 3}
        status, kind, metrics = get(server.http_url + "/metrics")
        assert (status, kind) == (200, "text/plain; version=0.0.4; charset=utf-8")
        samples = dict(line.rsplit(" ", 1) for line in metrics.splitlines() if line and not line.startswith("#"))
        assert float(samples["namesrv_brokers"]) == 1 and float(samples["namesrv_topics"]) == 3
        assert float(samples['namesrv_connections{transport="tcp"}']) >= 1
        assert float(samples["process_resident_memory_bytes"]) > 10 << 20
        assert float(samples["namesrv_in_flight_limit_bytes"]) == 256 << 20
        assert float(samples['namesrv_registrations_total{outcome="applied"}']) == 1
        assert float(samples['namesrv_output_backlog_bytes{transport="tcp"}']) == 0
    finally:
        broker.close()
    samples = dict(line.rsplit(" ", 1) for line in get(server.http_url + "/metrics")[2].splitlines()
                   if line and not line.startswith("#"))
    assert float(samples['namesrv_broker_removals_total{cause="unregistered"}']) == 1
    assert float(samples['namesrv_broker_removals_total{cause="expired"}']) == 0
    assert get(server.http_url + "/nothing")[0] == 404


def test_not_ready_while_waiting_for_brokers_to_re_register(namesrv_factory) -> None:
    server = namesrv_factory(needWaitForService=True, waitSecondsForService=2)
    status, _, body = get(server.http_url + "/ready")
    assert status == 503 and json.loads(body)["status"] == "NOT_READY"
    assert "needWaitForService" in json.loads(body)["reason"]
    assert get(server.http_url + "/health")[0] == 200  # alive all the same
    deadline = time.monotonic() + 10
    while get(server.http_url + "/ready")[0] != 200:
        assert time.monotonic() < deadline
        time.sleep(0.2)


def test_the_address_service_answers_rocketmq_clients_the_configured_list(namesrv_factory) -> None:
    listed = namesrv_factory(namesrvAddressList="10.0.0.1:9876;10.0.0.2:9876")
    assert get(listed.http_url + "/rocketmq/nsaddr") == (200, "text/plain; charset=utf-8",
                                                         "10.0.0.1:9876;10.0.0.2:9876")
    assert get(listed.http_url + "/rocketmq/other-subgroup")[0] == 200
    unlisted = namesrv_factory()
    assert get(unlisted.http_url + "/rocketmq/nsaddr")[0] == 404


def closed_by_server(sock: socket.socket, wait: float) -> bool:
    sock.settimeout(wait)
    try:
        return sock.recv(1024) == b""
    except TimeoutError:
        return False
    except OSError:
        return True


def test_a_newcomer_past_the_bound_is_served_and_the_longest_waiting_connection_closed(namesrv_factory) -> None:
    server = namesrv_factory()
    host, port = server.http_url.removeprefix("http://").rsplit(":", 1)
    idle = []
    try:
        for _ in range(MAX_CLIENTS):
            idle.append(socket.create_connection((host, int(port))))
            time.sleep(0.01)  # accepted in this order
        idle[-1].sendall(b"GET /hea")  # a request on its way
        time.sleep(0.3)
        with socket.create_connection((host, int(port)), timeout=5) as extra:
            extra.sendall(b"GET /health HTTP/1.0\r\n\r\n")
            assert extra.recv(1024).startswith(b"HTTP/1.0 200 ")
        assert closed_by_server(idle[0], 1.0)  # the one waiting longest made room
        assert not any(closed_by_server(sock, 0.01) for sock in idle[1:])
        started = time.monotonic()
        assert all(closed_by_server(sock, REQUEST_SECONDS + 1.0) for sock in idle[1:])  # past their deadline
        assert time.monotonic() - started < REQUEST_SECONDS + 1.0
    finally:
        for sock in idle:
            sock.close()
    assert get(server.http_url + "/health")[0] == 200


def raw_http(server, request: bytes) -> bytes:
    host, port = server.http_url.removeprefix("http://").rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=5) as sock:
        sock.sendall(request)
        return sock.recv(1024)


def test_odd_requests_get_their_error_and_serving_goes_on(namesrv_factory) -> None:
    server = namesrv_factory()
    assert raw_http(server, b"POST /health HTTP/1.0\r\nContent-Length: 2\r\n\r\nxx").startswith(b"HTTP/1.0 501")
    assert raw_http(server, b"GET /" + b"a" * 70000 + b" HTTP/1.0\r\n\r\n").startswith(b"HTTP/1.0 414")
    assert raw_http(server, b"GET /health HTTP/1.0\r\nX: " + b"a" * 70000 + b"\r\n\r\n").startswith(b"HTTP/1.0 431")
    assert raw_http(server, b"GET /../../etc/passwd HTTP/1.0\r\n\r\n").startswith(b"HTTP/1.0 404")
    assert b"400 - Bad request" in raw_http(server, b"\x16\x03\x01\x02\x00\x01\r\n\r\n")  # no version: no status line
    assert get(server.http_url + "/health")[0] == 200


def test_each_path_is_answered_from_the_one_table_of_pages() -> None:
    service = OperatorHttp("127.0.0.1:0", lambda: (True, {"brokers": 0}), lambda: "", lambda: b"m 1\n")
    assert answer(service, "/health") == (200, "application/json", '{"status": "UP"}')
    assert answer(service, "/ready")[0:2] == (200, "application/json")
    assert answer(service, "/rocketmq/nsaddr")[0] == 404  # namesrvAddressList not set
    for path in ("/", "/nothing", "/rocketmq/a/b", "/health/x", "/../etc/passwd"):
        status, _, body = answer(service, path)
        assert status == 404 and "/health" in body and "/rocketmq/<subgroup>" in body, path
    assert set(PAGES) == {"/health", "/ready", "/metrics", "/rocketmq/"}


RMQ = Path(__file__).resolve().parents[2] / "shared" / "rocketmq-4.9.8"


def java_reference_skip_reason() -> str | None:
    """Why the Java reference cannot run here (the test then skips, saying so), or None."""
    if not (RMQ / "bin" / "check").exists():
        return f"the Java RocketMQ 4.9.8 reference is not at {RMQ}"
    check = subprocess.run([RMQ / "bin" / "check"], capture_output=True, text=True)
    if check.returncode:
        return "Java RocketMQ 4.9.8 reference unusable: " + check.stderr.strip()
    if shutil.which("javac") is None:
        return "javac (JDK 17) is not installed"
    return None


def free_broker_port() -> int:
    """A port p with p-2 (the broker's VIP channel), p and p+1 (HA) free."""
    for _ in range(100):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        if port < 20000 or port > 60000:
            continue
        try:
            for candidate in (port - 2, port, port + 1):
                with socket.socket() as sock:
                    sock.bind(("127.0.0.1", candidate))
            return port
        except OSError:
            continue
    raise RuntimeError("no free broker port")


@pytest.mark.timeout(240)
@pytest.mark.skipif(java_reference_skip_reason() is not None, reason=str(java_reference_skip_reason()))
def test_a_java_producer_without_a_namesrv_address_finds_it_through_the_address_service(namesrv_factory,
                                                                                          tmp_path) -> None:
    """The real RocketMQ 4.9.8 client, started with -Drocketmq.namesrv.domain=<http port> and no
    namesrvAddr, fetches the list from /rocketmq/nsaddr and sends through a real Java broker."""
    server = namesrv_factory()
    listed = namesrv_factory(namesrvAddressList=server.address)  # the address service of another NameServer
    env = {k: v for k, v in os.environ.items() if k != "NAMESRV_ADDR"}
    env["ROCKETMQ_REF_RUN"] = str(tmp_path / "rmq")
    port = free_broker_port()
    subprocess.run([RMQ / "bin" / "broker", server.address, str(port), "broker-addr"], env=env, check=True,
                   capture_output=True, text=True, timeout=120)
    try:
        classes = tmp_path / "classes"
        subprocess.run(["javac", "-nowarn", "-cp", f"{RMQ}/lib/*", "-d", classes,
                        Path(__file__).parent / "java" / "NoAddressProducer.java"], check=True, capture_output=True,
                       timeout=120)
        domain = listed.http_url.removeprefix("http://")
        result = subprocess.run(["java", f"-Drocketmq.namesrv.domain={domain}", f"-Duser.home={tmp_path}",
                                 "-cp", f"{classes}:{RMQ}/lib/*", "NoAddressProducer", "AddressServiceTopic"],
                                env=env, capture_output=True, text=True, timeout=120)
        assert result.returncode == 0, (result.stdout, result.stderr[-2000:])
        assert f"namesrv [{server.address}]" in result.stdout and "status SEND_OK" in result.stdout
    finally:
        subprocess.run([RMQ / "bin" / "stop", "broker-addr"], env=env, capture_output=True, timeout=60)


def test_every_query_of_the_grafana_dashboard_names_a_metric_the_server_exports(namesrv_factory) -> None:
    dashboard = json.loads((Path(__file__).resolve().parent.parent / "conf" / "grafana" / "namesrv.json").read_text())
    queries = [target["expr"] for panel in dashboard["panels"] for target in panel["targets"]]
    assert queries
    server = namesrv_factory()
    types = dict(line.split()[2:4] for line in get(server.http_url + "/metrics")[2].splitlines()
                 if line.startswith("# TYPE "))
    # PromQL names the samples: the TYPE line's name (a counter's ends in _total); a histogram's _bucket, _sum, _count
    suffixes = {"histogram": ("_bucket", "_sum", "_count")}
    exported = {name + suffix for name, kind in types.items() for suffix in suffixes.get(kind, ("",))}
    for query in queries:
        names = set(re.findall(r"\b(?:namesrv|process)_[a-z_]+", query))
        assert names and names <= exported, (query, names - exported)


def scrape(server) -> dict[str, float]:
    """The samples of one /metrics scrape: {'name{labels}': value}."""
    return {key: float(value) for key, value in (line.rsplit(" ", 1) for line in get(server.http_url + "/metrics")[2]
                                                 .splitlines() if line and not line.startswith("#"))}


def requests_of(samples: dict[str, float], request: str) -> dict[tuple[str, str], float]:
    """{(response, path): answers} of one request code."""
    found = {}
    for key, value in samples.items():
        if key.startswith("namesrv_requests_total{") and f'request="{request}"' in key:
            labels = dict(re.findall(r'(\w+)="([^"]*)"', key))
            found[labels["response"], labels["path"]] = value
    return found


def register_broker(conn, name: str = "broker-m") -> None:
    table = {topic: TopicConfig(topic, 4, 4) for topic in ("TopicM", "TopicN")}
    body = RegisterBrokerBody(TopicConfigSerializeWrapper(table, DataVersion(1, 1_700_000_000_000, 0))).encode()
    header = {"brokerName": name, "brokerAddr": "127.0.0.1:10911", "clusterName": "M", "brokerId": 0,
              "haServerAddr": "127.0.0.1:10912", "bodyCrc32": zlib.crc32(body) & 0x7FFFFFFF}
    assert conn.call(conn.request(RequestCode.REGISTER_BROKER, header, body)).code == ResponseCode.SUCCESS


def test_answers_are_counted_by_request_response_and_path_with_their_latency(namesrv_factory, raw_connect) -> None:
    server = namesrv_factory()
    conn = raw_connect(server.address)
    register_broker(conn)
    register_broker(conn)  # the unchanged repeat
    for _ in range(6):
        assert conn.call(conn.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "TopicM"})).code == 0
    assert conn.call(conn.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "Nowhere"})).code == 17
    assert conn.call(conn.request(4242)).code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
    conn.send(conn.request(RequestCode.PUT_KV_CONFIG, {"namespace": "N", "key": "k", "value": "v"}, oneway=True))
    bad = raw_connect(server.address)
    bad.sock.sendall(b"\x00\x00\x00\x04\xff\xff\xff\xff")  # a header longer than its frame
    assert bad.closed_by_server()
    deadline = time.monotonic() + 5
    while not requests_of(samples := scrape(server), "PUT_KV_CONFIG") and time.monotonic() < deadline:
        time.sleep(0.01)  # the oneway request has no answer to wait for
    routes = requests_of(samples, "GET_ROUTEINFO_BY_TOPIC")
    # the first query of a topic fills the route cache in an executor; the others are answered from it
    assert routes == {("SUCCESS", "executor"): 1, ("SUCCESS", "fast_path"): 5, ("TOPIC_NOT_EXIST", "executor"): 1}
    registrations = requests_of(samples, "REGISTER_BROKER")
    assert sum(registrations.values()) == 2 and registrations.get(("SUCCESS", "fast_path")), registrations
    assert requests_of(samples, "OTHER") == {("REQUEST_CODE_NOT_SUPPORTED", "executor"): 1}
    assert requests_of(samples, "PUT_KV_CONFIG") == {("NONE", "executor"): 1}
    for request, answers in (("GET_ROUTEINFO_BY_TOPIC", 7), ("REGISTER_BROKER", 2), ("OTHER", 1)):
        assert samples[f'namesrv_request_duration_seconds_count{{request="{request}"}}'] == answers
        assert samples[f'namesrv_request_duration_seconds_bucket{{le="+Inf",request="{request}"}}'] == answers
        assert 0 < samples[f'namesrv_request_duration_seconds_sum{{request="{request}"}}'] < answers * 1.0
    # a query answered on a quiet loopback takes well under 50 ms: the buckets hold real durations
    assert samples['namesrv_request_duration_seconds_bucket{le="0.05",request="GET_ROUTEINFO_BY_TOPIC"}'] == 7
    assert samples['namesrv_connections_cut_total{cause="bad_input",transport="tcp"}'] == 1
    assert samples['namesrv_connections_cut_total{cause="idle",transport="tcp"}'] == 0


def test_worker_processes_report_one_view_of_the_whole_server(namesrv_factory, raw_connect) -> None:
    server = namesrv_factory(serverWorkerProcesses=2)
    workers = {worker.pid for worker in psutil.Process(server.pid).children()}
    per_worker: dict[int, object] = {}
    for _ in range(100):  # the kernel spreads connections over the workers: one on each
        conn = raw_connect(server.address)
        port = conn.sock.getsockname()[1]
        conn.call(conn.request(RequestCode.GET_KV_CONFIG, {"namespace": "N", "key": "k"}))  # accepted by now
        pid = next(worker.pid for worker in map(psutil.Process, workers)
                   if any(c.raddr and c.raddr.port == port for c in worker.net_connections("tcp")))
        per_worker.setdefault(pid, conn)
        if len(per_worker) == 2:
            break
    assert len(per_worker) == 2
    conn_a, conn_b = per_worker.values()
    register_broker(conn_a)
    for i in range(3):
        conn_b.call(conn_b.request(RequestCode.PUT_KV_CONFIG, {"namespace": "N", "key": f"k{i}", "value": "v"}))
    for conn in (conn_a, conn_b):
        for _ in range(4):
            conn.call(conn.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "TopicM"}))
    samples = scrape(server)
    assert samples["namesrv_worker_processes_reporting"] == 2
    assert sum(requests_of(samples, "GET_ROUTEINFO_BY_TOPIC").values()) == 8  # 4 on each worker
    assert requests_of(samples, "PUT_KV_CONFIG") == {("SUCCESS", "write_log"): 3}
    # one per connection opened (all still open), on whichever worker took it
    assert sum(requests_of(samples, "GET_KV_CONFIG").values()) == samples['namesrv_connections{transport="tcp"}']
    # the tables every worker holds alike are reported once, not once per worker
    assert (samples["namesrv_brokers"], samples["namesrv_topics"], samples["namesrv_kv_entries"]) == (1, 2, 3)
    assert samples['namesrv_registrations_total{outcome="applied"}'] == 1
    assert samples['namesrv_connections{transport="tcp"}'] >= 2
    threads = sum(psutil.Process(pid).num_threads() for pid in workers)
    assert abs(samples["namesrv_threads"] - threads) <= 4  # summed over the workers
