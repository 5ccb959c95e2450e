"""The status page (namesrv.status_page) on real server processes: its JSON, the admin guard and the
switch that turns it off, one view over worker processes, and the page itself in a real headless
Chromium with a real Java broker 4.9.8 registering, then killed."""
from __future__ import annotations

import json
import os
import subprocess
import time
import urllib.request
from html.parser import HTMLParser
from pathlib import Path

import pytest
from test_operator_http import RMQ, free_broker_port, get, java_reference_skip_reason

from bench.report import browser
from namesrv.client import BrokerIdentity, BrokerService, BrokerTopicTable, RemotingClient
from namesrv.client.remoting import client_tls_context
from namesrv.protocol import RequestCode, ResponseCode, TopicConfig

#: Screenshots of the page, kept after the run (runs/ is not versioned).
ARTEFACTS = Path(__file__).resolve().parents[1] / "runs" / "test-artifacts"
TOKEN = "status-page-token-0123456789"


def get_json(url: str, token: str | None = None) -> tuple[int, dict]:
    request = urllib.request.Request(url, headers={"X-Admin-Token": token} if token else {})
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def broker(name: str, port: int, addresses: list[str], topics: int = 3, **options: object) -> BrokerService:
    service = BrokerService(BrokerIdentity("PageCluster", name, f"127.0.0.1:{port}", 0, f"127.0.0.1:{port + 1}"),
                            addresses, BrokerTopicTable(TopicConfig(f"{name}-T{i}", 4, 4) for i in range(topics)),
                            period_override_ms=60_000, **options)
    service.start()
    return service


def brokers_of(overview: dict) -> dict[str, dict]:
    return {b["addr"]: {**b, "group": g["name"]} for c in overview["clusters"] for g in c["groups"] for b in g["brokers"]}


def wait_for(condition, timeout: float, what: str):
    """`condition()`'s first true value, polled until `timeout`."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        assert time.monotonic() < deadline, f"not within {timeout} s: {what}"
        time.sleep(0.2)


def test_the_json_names_brokers_their_connections_topics_and_the_stream(namesrv_factory) -> None:
    server = namesrv_factory(scanNotActiveBrokerInterval=200)
    first = broker("broker-j1", 40911, [server.address])
    second = broker("broker-j2", 41911, [server.address], topics=60)
    secure = broker("broker-tls", 39911, [server.address], tls=client_tls_context())  # tlsMode permissive
    try:
        status, overview = get_json(server.http_url + "/status.json")
        assert status == 200
        found = brokers_of(overview)["127.0.0.1:40911"]
        assert found["group"] == "broker-j1" and found["live"] and found["timeoutMillis"] == 120_000
        assert found["connection"]["transport"] == "tcp" and found["connection"]["security"] == "plain"
        assert found["connection"]["peer"].startswith("127.0.0.1:") and found["dataVersion"]["counter"] >= 0
        assert brokers_of(overview)["127.0.0.1:39911"]["connection"]["security"].startswith("TLSv1.")
        assert overview["sizes"]["topics"] == 66 and overview["server"]["address"] == server.address
        page = get_json(server.http_url + "/status/topics.json?q=J2-t&offset=50")[1]
        expected = sorted(f"broker-j2-T{i}" for i in range(60))[50:]
        assert (page["total"], [t["topic"] for t in page["topics"]]) == (60, expected)
        assert page["topics"][0]["queueDatas"] == [{"brokerName": "broker-j2", "perm": 6, "readQueueNums": 4,
                                                    "topicSysFlag": 0, "writeQueueNums": 4}]
        second.close()
        events = wait_for(lambda: [e for e in get_json(server.http_url + "/status/events.json?after=0")[1]["events"]
                                   if e["kind"] == "unregistered"], 5, "the unregistration in the stream")
        assert events[0]["brokerName"] == "broker-j2" and events[0]["topics"] == 60
        overview = json.loads(urllib.request.urlopen(server.http_url + "/status.json").read())
        time.sleep(1.1)  # past the cache
        overview = get_json(server.http_url + "/status.json")[1]
        assert [g["brokerName"] for g in overview["gone"]] == ["broker-j2"]
        assert "unregistered" in overview["gone"][0]["reason"]
        answer = get_json(server.http_url + "/status/explain.json?topic=broker-j2-T7")[1]
        assert not answer["route"] and "broker-j2" in answer["verdict"]
        assert get_json(server.http_url + "/status/explain.json?topic=bad%20name")[0] == 400
        assert get_json(server.http_url + "/status/topics.json?" + "&".join(f"k{i}=v" for i in range(20)))[0] == 400
    finally:
        for service in (first, second, secure):
            service.close()


def test_the_admin_guard_applies_to_the_data_and_a_key_turns_the_page_off(namesrv_factory) -> None:
    guarded = namesrv_factory(adminToken=TOKEN)
    assert get(guarded.http_url + "/status")[0] == 200  # the HTML holds no data
    status, refused = get_json(guarded.http_url + "/status.json")
    assert status == 403 and "adminToken" in refused["error"] and refused["tokenHeader"] == "X-Admin-Token"
    assert get_json(guarded.http_url + "/status.json", TOKEN)[0] == 200
    assert get_json(guarded.http_url + "/status.json", "wrong-token-0123456789")[0] == 403
    outside = namesrv_factory(adminAllowedNetworks="10.0.0.0/8")
    assert get_json(outside.http_url + "/status/events.json")[0] == 403
    off = namesrv_factory(statusPageEnable="false")
    for path in ("/", "/status", "/status.json", "/status/topics.json"):
        assert get(off.http_url + path)[0] == 404
    assert get(off.http_url + "/health")[0] == 200


def test_worker_processes_show_one_view(namesrv_factory) -> None:
    server = namesrv_factory(serverWorkerProcesses=2)
    services = [broker(f"broker-w{n}", 42911 + 10 * n, [server.address]) for n in range(6)]
    subscribers = []
    try:
        for _ in range(8):  # the kernel spreads the connections over both workers
            client = RemotingClient(timeout=5)
            client.invoke(server.address, client.request(RequestCode.SUBSCRIBE_ROUTE_CHANGES, {"all": "true"}))
            subscribers.append(client)
        overview = wait_for(lambda: (o := get_json(server.http_url + "/status.json")[1])["subscribers"]["count"] == 8
                            and o, 5, "every worker's subscribers")
        assert overview["server"]["workersReporting"] == 2
        found = brokers_of(overview)
        assert len(found) == 6 and {b["connection"]["security"] for b in found.values()} == {"plain"}
        services.pop().close()
        answers = set()
        for _ in range(8):  # connections to either worker: the same history
            with RemotingClient(timeout=5) as client:
                response = client.invoke(server.address, client.request(RequestCode.EXPLAIN_ROUTE,
                                                                        {"topic": "broker-w5-T1"}))
                assert response.code == ResponseCode.SUCCESS
                answers.add(json.dumps(json.loads(response.body)["events"], sort_keys=True))
        assert len(answers) == 1 and "unregistered" in answers.pop()
    finally:
        for client in subscribers:
            client.close()
        for service in services:
            service.close()


class Dom(HTMLParser):
    """The dumped DOM's elements that carry data-* attributes: (tag, their attributes, their text)."""

    def __init__(self, html: str) -> None:
        super().__init__()
        self.found: list[tuple[str, dict[str, str], list[str]]] = []
        self._open: list[tuple[str, list[str] | None]] = []
        self.feed(html)

    def handle_starttag(self, tag: str, attrs: list) -> None:
        data = {key: value or "" for key, value in attrs if key.startswith("data-") or key == "id"}
        text = None
        if any(key.startswith("data-") or key == "id" for key in data):
            text = []
            self.found.append((tag, data, text))
        if tag not in ("br", "img", "input", "meta", "link"):
            self._open.append((tag, text))

    def handle_endtag(self, tag: str) -> None:
        while self._open:
            if self._open.pop()[0] == tag:
                break

    def handle_data(self, data: str) -> None:
        for _, text in self._open:
            if text is not None:
                text.append(data)

    def select(self, tag: str, **wanted: str) -> list[str]:
        """The text of each `tag` whose data attributes hold `wanted` (data_broker= for data-broker)."""
        wanted = {key.replace("_", "-"): value for key, value in wanted.items()}
        return ["".join(text) for found_tag, attrs, text in self.found
                if found_tag == tag and all(attrs.get(key) == value for key, value in wanted.items())]


def open_page(url: str, tmp_path: Path, shot: str) -> Dom:
    """The page after its scripts ran in headless Chromium; a screenshot of it kept in ARTEFACTS."""
    ARTEFACTS.mkdir(parents=True, exist_ok=True)
    dumped = browser.run(url, tmp_path / "profile", "--dump-dom", budget_ms=4000)
    assert dumped.returncode == 0, dumped.stderr[-2000:]
    assert browser.console_errors(dumped) == []
    picture = browser.run(url, tmp_path / "profile", "--window-size=1100,1500", f"--screenshot={ARTEFACTS / shot}",
                           "--hide-scrollbars", budget_ms=4000)
    assert picture.returncode == 0 and (ARTEFACTS / shot).stat().st_size > 10_000, picture.stderr[-2000:]
    return Dom(dumped.stdout)


@pytest.mark.timeout(300)
@pytest.mark.skipif(not browser.available(), reason=browser.SKIP_REASON)
@pytest.mark.skipif(java_reference_skip_reason() is not None, reason=str(java_reference_skip_reason()))
def test_the_page_in_chromium_shows_a_java_broker_then_why_it_is_gone(namesrv_factory, tmp_path) -> None:
    server = namesrv_factory(scanNotActiveBrokerInterval=200)
    env = {**os.environ, "ROCKETMQ_REF_RUN": str(tmp_path / "rmq")}
    port = free_broker_port()
    started = subprocess.run([RMQ / "bin" / "broker", server.address, str(port), "broker-page"], env=env, check=True,
                             capture_output=True, text=True, timeout=180)
    pid = int(started.stdout.split()[0])
    address = f"127.0.0.1:{port}"
    try:
        wait_for(lambda: address in brokers_of(get_json(server.http_url + "/status.json")[1]), 30,
                 "the Java broker registered")
        dom = open_page(server.http_url + "/status?explain=TBW102", tmp_path, "status-page-registered.png")
        row = dom.select("tr", data_broker="broker-page", data_addr=address, data_live="yes")
        assert len(row) == 1 and "tcp 127.0.0.1:" in row[0] and "plain" in row[0] and "120 s" in row[0], row
        assert dom.select("h3", data_cluster="DefaultCluster")
        assert any("broker-page[0]" in text for text in dom.select("li", data_kind="registered"))
        assert "TBW102 has a route here: served by broker-page" in dom.select("p", id="explain-verdict")[0]
        assert dom.select("tr", data_topic="TBW102")

        os.kill(pid, 9)  # a crash: the kernel closes its connections, the NameServer sees it at once
        wait_for(lambda: get_json(server.http_url + "/status.json")[1]["gone"], 30, "the broker gone")
        dom = open_page(server.http_url + "/status?explain=TBW102", tmp_path, "status-page-gone.png")
        assert not dom.select("tr", data_broker="broker-page", data_live="yes")
        gone = dom.select("tr", data_broker="broker-page", data_addr=address, data_kind="channel closed")
        assert len(gone) == 1 and "'s connection from 127.0.0.1:" in gone[0] and "closed" in gone[0], gone
        assert any("broker-page[0]" in text for text in dom.select("li", data_kind="channel closed"))
        verdict = dom.select("p", id="explain-verdict")[0]
        assert verdict.startswith("TBW102 has no route here since") and "connection from 127.0.0.1:" in verdict
    finally:
        subprocess.run([RMQ / "bin" / "stop", "broker-page", "-9"], env=env, capture_output=True, timeout=60)
