"""Divergence across NameServers (namesrv.divergence): the comparison itself (sans-IO), `namesrv-admin
diff` against two namesrvs and the Java NameServer 4.9.8 with a real Java broker that registers with
all three, then with two only, then with all three again; and the continuous check of a namesrv
against its peers on /metrics."""
from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys

import pytest
from test_operator_http import RMQ, free_broker_port, java_reference_skip_reason, scrape
from test_status_page import get_json, wait_for

from bench.lib.servers import JavaNamesrvProcess
from namesrv.client import RemotingClient
from namesrv.config import ConfigError, NamesrvConfig
from namesrv.divergence.checker import peer_addresses
from namesrv.divergence.compare import Comparison
from namesrv.divergence.fetch import compare
from namesrv.protocol.route import BrokerData, ClusterInfo

ADMIN = [sys.executable, "-m", "namesrv.admin"]


def info(**groups: dict[int, str]) -> ClusterInfo:
    return ClusterInfo({name: BrokerData("C", name, addrs) for name, addrs in groups.items()}, {"C": sorted(groups)})


class FakeSource:
    """A NameServer's answers as plain data (the comparison never sees where they come from)."""

    def __init__(self, address: str, groups: dict[str, dict[int, str]], routes: dict[str, dict[str, tuple]],
                 broken: bool = False) -> None:
        self.address, self._groups, self._routes, self._broken = address, groups, routes, broken
        self.pages: list[int] = []

    async def cluster_info(self) -> ClusterInfo:
        if self._broken:
            raise OSError("connection refused")
        return info(**self._groups)

    async def topics_of(self, cluster: str) -> list[str]:
        return list(self._routes)

    async def routes(self, topics):
        self.pages.append(len(topics))
        return {topic: self._routes.get(topic) for topic in topics}


def test_the_comparison_names_brokers_topics_and_queue_entries_and_who_holds_what() -> None:
    full = {f"T{i}": {"a": (8, 8, 6, 0), "b": (8, 8, 6, 0)} for i in range(10)} | {"OnlyA": {"a": (4, 4, 6, 0)}}
    one = FakeSource("ns1", {"a": {0: "10.0.0.1:10911"}, "b": {0: "10.0.0.2:10911"}}, full)
    two = FakeSource("ns2", {"a": {0: "10.0.0.1:10911"}, "b": {0: "10.0.0.2:10911"}},
                     {**full, "T3": {"a": (8, 8, 4, 0), "b": (8, 8, 6, 0)}})
    three = FakeSource("ns3", {"b": {0: "10.0.0.2:10911"}}, {t: {"b": q["b"]} for t, q in full.items() if "b" in q})
    report = asyncio.run(compare([one, two, three], page_topics=4)).report()
    assert not report["agree"] and report["unreachable"] == {}
    assert report["brokers"] == [{"cluster": "C", "brokerName": "a", "brokerId": 0, "addr": "10.0.0.1:10911",
                                  "on": ["ns1", "ns2"], "missingOn": ["ns3"]}]
    assert report["topics"] == [{"topic": "OnlyA", "on": ["ns1", "ns2"], "missingOn": ["ns3"], "servedBy": ["a"]}]
    missing = {item["topic"] for item in report["queueDatas"] if item["byNamesrv"]["ns3"] is None}
    assert missing == {f"T{i}" for i in range(10)}
    assert [item for item in report["queueDatas"] if item["topic"] == "T3"] == [{"topic": "T3", "brokerName": "a",
                                                                                 "byNamesrv": {
        "ns1": {"readQueueNums": 8, "writeQueueNums": 8, "perm": 6, "topicSysFlag": 0},
        "ns2": {"readQueueNums": 8, "writeQueueNums": 8, "perm": 4, "topicSysFlag": 0}, "ns3": None}}]
    assert report["againstReference"] == {"ns2": {"brokers": 0, "topics": 0, "queueDatas": 1},
                                          "ns3": {"brokers": 1, "topics": 1, "queueDatas": 10}}
    assert one.pages == [4, 4, 3] and report["topicsCompared"] == 11
    assert "broker a[0] 10.0.0.1:10911 of cluster C missing on ns3 (listed by ns1, ns2)" in report["summary"]
    assert "topic OnlyA missing on ns3 (served by a elsewhere)" in report["summary"]


def test_what_the_comparison_keeps_is_bounded_and_the_counts_complete() -> None:
    one = FakeSource("ns1", {"a": {0: "x:1"}}, {f"T{i}": {"a": (8, 8, 6, 0)} for i in range(500)})
    two = FakeSource("ns2", {"a": {0: "x:1"}}, {})
    report = asyncio.run(compare([one, two], max_items=20)).report()
    assert report["counts"]["topics"] == 500 and len(report["topics"]) == 20 and report["truncated"]
    assert report["summary"][-1] == "... and 480 more topics differ (not listed)"


def test_a_namesrv_that_cannot_be_read_is_named_and_left_out() -> None:
    routes = {"T1": {"a": (8, 8, 6, 0)}}
    report = asyncio.run(compare([FakeSource("ns1", {"a": {0: "x:1"}}, routes),
                                  FakeSource("ns2", {"a": {0: "x:1"}}, routes),
                                  FakeSource("ns3", {}, {}, broken=True)])).report()
    assert report["unreachable"] == {"ns3": "OSError: connection refused"} and not report["agree"]
    assert report["counts"] == {"brokers": 0, "topics": 0, "queueDatas": 0}
    assert Comparison(["a", "b"]).agree


def test_the_peers_are_the_list_or_the_address_services_without_this_server() -> None:
    config = NamesrvConfig(listen_port=9876, peer_divergence_peers="10.0.0.2:9876; 10.0.0.3:9876")
    assert peer_addresses(config) == ["10.0.0.2:9876", "10.0.0.3:9876"]
    config = NamesrvConfig(listen_port=9876, peer_divergence_peers="namesrvAddressList",
                           namesrv_address_list="127.0.0.1:9876;10.255.0.9:9876;127.0.0.1:9877")
    assert peer_addresses(config) == ["10.255.0.9:9876", "127.0.0.1:9877"]
    with pytest.raises(ConfigError, match="peerDivergencePeers"):
        NamesrvConfig.load(overrides={"peerDivergencePeers": "not-an-address"})


def diff(*addresses: str) -> tuple[int, dict]:
    result = subprocess.run([*ADMIN, "diff", "-n", ";".join(addresses), "--json"], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode in (0, 1, 3), result.stderr
    return result.returncode, json.loads(result.stdout)


@pytest.mark.timeout(400)
@pytest.mark.skipif(java_reference_skip_reason() is not None, reason=str(java_reference_skip_reason()))
def test_diff_names_the_broker_and_topics_a_third_namesrv_misses_until_it_registers_again(namesrv_factory,
                                                                                          tmp_path) -> None:
    java = JavaNamesrvProcess(java_opts="-Xms128m -Xmx256m").start()
    env = {**os.environ, "ROCKETMQ_REF_RUN": str(tmp_path / "rmq")}
    third = namesrv_factory()
    first = namesrv_factory(peerDivergencePeers=f"{third.address};{java.address}", peerDivergenceIntervalSeconds=1)
    # Probed once the servers hold their ports: a server started after the probe may be given the
    # broker's HA port (p+1) by the kernel, and the broker then fails to start (a CI run saw it).
    port = free_broker_port()
    everywhere = (first.address, java.address, third.address)

    def start_broker(*addresses: str) -> None:
        subprocess.run([RMQ / "bin" / "broker", ";".join(addresses), str(port), "broker-div"], check=True,
                       env={**env, "KEEP_STORE": "1"}, capture_output=True, text=True, timeout=180)

    def registered(address: str) -> bool:
        with RemotingClient(timeout=5) as client:
            return "broker-div" in client.get_broker_cluster_info(address).broker_addr_table

    def divergence(peer: str) -> float | None:
        return scrape(first).get(f'namesrv_peer_divergence_brokers{{peer="{peer}"}}')

    try:
        start_broker(*everywhere)
        wait_for(lambda: all(registered(a) for a in everywhere), 60, "the broker registered with all three")
        code, report = diff(*everywhere)
        assert (code, report["agree"], report["counts"]) == (0, True, {"brokers": 0, "topics": 0, "queueDatas": 0})
        assert report["topicsCompared"] >= 7  # the broker's own topics: TBW102, its name, its cluster's, ...

        subprocess.run([RMQ / "bin" / "stop", "broker-div"], env=env, check=True, capture_output=True, timeout=90)
        start_broker(first.address, java.address)  # its namesrvAddr changed: the third is left out
        wait_for(lambda: registered(first.address) and registered(java.address), 60, "registered with two")
        code, report = diff(*everywhere)
        with RemotingClient(timeout=5) as client:
            topics = set(client.get_topics_by_cluster(first.address, "DefaultCluster").topic_list)
        assert code == 1 and not report["agree"]
        assert [(b["brokerName"], b["addr"], b["missingOn"]) for b in report["brokers"]] == [
            ("broker-div", f"127.0.0.1:{port}", [third.address])]
        assert {t["topic"] for t in report["topics"]} == topics
        assert {(tuple(t["missingOn"]), tuple(t["servedBy"])) for t in report["topics"]} == {
            ((third.address,), ("broker-div",))}
        assert report["queueDatas"] == [] and report["unreachable"] == {}
        wait_for(lambda: divergence(third.address) == 1 and divergence(java.address) == 0, 30,
                 "the continuous check's metrics")
        samples = scrape(first)
        assert samples[f'namesrv_peer_divergence_topics{{peer="{third.address}"}}'] == len(topics)
        status = get_json(first.http_url + "/status.json")[1]["divergence"]  # the status page's section
        assert status["peers"] == [third.address, java.address] and not status["last"]["agree"]
        assert any(line.startswith(f"broker broker-div[0] 127.0.0.1:{port} of cluster DefaultCluster missing on "
                                   f"{third.address}") for line in status["last"]["summary"])
        assert samples[f'namesrv_peer_divergence_peer_up{{peer="{java.address}"}}'] == 1

        subprocess.run([RMQ / "bin" / "stop", "broker-div"], env=env, check=True, capture_output=True, timeout=90)
        start_broker(*everywhere)
        wait_for(lambda: all(registered(a) for a in everywhere), 60, "registered with all three again")
        code, report = diff(*everywhere)
        assert (code, report["brokers"], report["topics"], report["queueDatas"]) == (0, [], [], [])
        wait_for(lambda: divergence(third.address) == 0, 30, "the continuous check agreeing again")
        assert scrape(first)['namesrv_peer_divergence_passes_total{result="agree"}'] >= 1
    finally:
        subprocess.run([RMQ / "bin" / "stop", "broker-div", "-9"], env=env, capture_output=True, timeout=60)
        java.close()


def test_diff_of_one_namesrv_is_a_usage_error_and_an_unreachable_one_exits_3(namesrv_factory) -> None:
    server = namesrv_factory()
    one = subprocess.run([*ADMIN, "diff", "-n", server.address], capture_output=True, text=True, timeout=60)
    assert one.returncode == 2 and "at least two" in one.stderr
    code, report = diff(server.address, "127.0.0.1:1")
    assert code == 3 and list(report["unreachable"]) == ["127.0.0.1:1"]
    assert report["complete"]
    alias = server.address.replace("127.0.0.1", "localhost")  # the same server twice
    stopped = subprocess.run([*ADMIN, "diff", "-n", f"{server.address};{alias}", "--max-seconds", "1e-9"],
                             capture_output=True, text=True, timeout=60)
    assert stopped.returncode == 0 and "agree so far (stopped after --max-seconds 1e-09)" in stopped.stdout
