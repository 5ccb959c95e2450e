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
from pathlib import Path

import pytest

from namesrv.client import BrokerIdentity, BrokerService, BrokerTopicTable
from namesrv.operator_http import MAX_CLIENTS
from namesrv.protocol import TopicConfig


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


def test_connections_past_the_bound_are_closed_at_once_and_service_resumes(namesrv_factory) -> None:
    server = namesrv_factory()
    host, port = server.http_url.removeprefix("http://").rsplit(":", 1)
    idle = [socket.create_connection((host, int(port))) for _ in range(MAX_CLIENTS)]
    try:
        time.sleep(0.3)
        with socket.create_connection((host, int(port)), timeout=5) as extra:
            extra.sendall(b"GET /health HTTP/1.0\r\n\r\n")
            assert extra.recv(1024) == b""  # closed unanswered
    finally:
        for sock in idle:
            sock.close()
    time.sleep(0.3)
    assert get(server.http_url + "/health")[0] == 200


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
    exported = {line.split()[2] for line in get(server.http_url + "/metrics")[2].splitlines()
                if line.startswith("# TYPE ")}
    # a counter is exported as <name>_total; PromQL names what the exposition names
    exported |= {name + "_total" for name in exported}
    for query in queries:
        names = set(re.findall(r"\b(?:namesrv|process)_[a-z_]+", query))
        assert names and names <= exported, (query, names - exported)
