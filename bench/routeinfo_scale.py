"""Route table at RocketMQ issue #4245's scale: 300 brokers x 10,000 topics each.

RocketMQ's first topic-route cache crashed its NameServer during registration at this size. This
script drives the real request path (RequestProcessor: CRC, body decode, RouteInfoManager, route
cache) in one process and reports time and memory for what such a cluster does:

* first registration of every broker, then one full round of periodic re-registrations (unchanged
  DataVersion: the steady state, every 30 s per broker), then one round in which every broker
  changed one topic (a new DataVersion: only the changed topic entries are read);
* route queries: a miss (pick up + encode + cache) and a hit, over `--query-topics` topics;
* the broker-wide writes that must invalidate 10,000 cached routes: a slave joining a group, an
  expiry of a broker, a perm wipe.

Topology: `--brokers` master brokers in clusters of `--brokers-per-cluster`; each cluster has its
own `--topics` topics served by every broker of the cluster (each broker holds `--topics` topics).
`--brokers-per-cluster` equal to `--brokers` is the worst case for route size (every route lists
every broker).

Run: `.venv/bin/python bench/routeinfo_scale.py --brokers 300 --topics 10000 --brokers-per-cluster 30`
"""
from __future__ import annotations

import argparse
import gc
import statistics
import sys
import tempfile
import time
from pathlib import Path

import psutil

if __package__ in (None, ""):  # run as a script: make `bench` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.cli_help import HelpFormatter  # noqa: E402
from namesrv.channel import Channel  # noqa: E402
from namesrv.config import NamesrvConfig
from namesrv.fastpath import IMPLEMENTATION, body_crc32
from namesrv.kvconfig import KVConfigManager
from namesrv.processor import RequestProcessor
from namesrv.protocol import (
    DataVersion,
    RegisterBrokerBody,
    RemotingCommand,
    RequestCode,
    ResponseCode,
    TopicConfig,
    TopicConfigSerializeWrapper,
)
from namesrv.routeinfo import RouteInfoManager


class Clock:
    def __init__(self) -> None:
        self.now = 1_700_000_000_000

    def __call__(self) -> int:
        return self.now


def rss_mb() -> float:
    gc.collect()
    return psutil.Process().memory_info().rss / 2 ** 20


def cluster_body(cluster: int, topics: int, counter: int = 1) -> bytes:
    """The body of the cluster's brokers; from counter 2 on, its first topic has 16 queues, not 8."""
    names = [f"c{cluster}-topic-{i:05d}" for i in range(topics)]
    table = {name: TopicConfig(name, 8, 16 if i == 0 and counter > 1 else 8) for i, name in enumerate(names)}
    return RegisterBrokerBody(TopicConfigSerializeWrapper(table, DataVersion(counter, 1_700_000_000_000, 0)),
                              []).encode()


def register_request(broker: int, cluster: int, body: bytes, broker_id: int = 0) -> RemotingCommand:
    addr = f"10.{broker // 250}.{broker % 250}.{broker_id + 1}:10911"
    return RemotingCommand.request(RequestCode.REGISTER_BROKER, {
        "brokerName": f"broker-{broker:03d}", "brokerAddr": addr, "clusterName": f"cluster-{cluster}",
        "haServerAddr": addr.replace("10911", "10912"), "brokerId": broker_id, "bodyCrc32": body_crc32(body)}, body)


def timed(label: str, action, count: int = 1) -> float:
    start = time.perf_counter()
    action()
    elapsed = time.perf_counter() - start
    per = f", {elapsed / count * 1e6:.1f} us each" if count > 1 else ""
    print(f"  {label}: {elapsed:.2f} s{per}", flush=True)
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=HelpFormatter)
    parser.add_argument("--brokers", type=int, default=300, help="master brokers registered")
    parser.add_argument("--topics", type=int, default=10_000, help="topics per broker (and per cluster)")
    parser.add_argument("--brokers-per-cluster", type=int, default=30,
                        help="brokers per cluster, all serving the cluster's topics (equal to --brokers: the worst "
                             "case for route size)")
    parser.add_argument("--query-topics", type=int, default=20_000, help="distinct topics queried")
    args = parser.parse_args()
    clusters = -(-args.brokers // args.brokers_per_cluster)
    print(f"fast path: {IMPLEMENTATION}; {args.brokers} brokers in {clusters} clusters, {args.topics} topics per "
          f"broker ({clusters * args.topics} topics, {args.brokers * args.topics} queue entries)")
    base = rss_mb()
    print(f"RSS at start: {base:.0f} MB")

    bodies = [cluster_body(c, args.topics) for c in range(clusters)]
    print(f"registration body: {len(bodies[0]) / 2 ** 20:.2f} MB of JSON per broker")
    clock = Clock()
    tmp = tempfile.mkdtemp(prefix="routeinfo-scale-")
    config = NamesrvConfig(kv_config_path=str(Path(tmp, "kv.json")), config_store_path=str(Path(tmp, "ns.prop")))
    routes = RouteInfoManager(config, clock=clock)
    processor = RequestProcessor(config, routes, KVConfigManager(config.kv_config_path), clock=clock)
    requests = [register_request(b, b // args.brokers_per_cluster, bodies[b // args.brokers_per_cluster])
                for b in range(args.brokers)]
    channels = [Channel("tcp", b.to_bytes(4, "big")) for b in range(args.brokers)]

    def register_all(requests: list[RemotingCommand] = requests) -> list[float]:
        times = []
        for request, channel in zip(requests, channels):
            start = time.perf_counter()
            response = processor.process(request, channel)
            times.append(time.perf_counter() - start)
            assert response.code == ResponseCode.SUCCESS, response.remark
        return times

    print("registration (CRC + decode + register, through RequestProcessor):")
    first = register_all()
    print(f"  first registration of all brokers: {sum(first):.1f} s, mean {statistics.mean(first) * 1e3:.1f} ms, "
          f"max {max(first) * 1e3:.1f} ms")
    after_register = rss_mb()
    print(f"  RSS after registration: {after_register:.0f} MB (+{after_register - base:.0f} MB)")
    clock.now += 30_000
    again = register_all()
    print(f"  periodic re-registration (unchanged DataVersion): mean {statistics.mean(again) * 1e3:.1f} ms, "
          f"max {max(again) * 1e3:.1f} ms -> {statistics.mean(again) * args.brokers / 30 * 100:.0f}% of one core "
          f"at {args.brokers} brokers / 30 s")
    changed = [cluster_body(c, args.topics, counter=2) for c in range(clusters)]
    bumped = register_all([register_request(b, b // args.brokers_per_cluster, changed[b // args.brokers_per_cluster])
                           for b in range(args.brokers)])
    print(f"  one topic changed (new DataVersion): mean {statistics.mean(bumped) * 1e3:.1f} ms, "
          f"max {max(bumped) * 1e3:.1f} ms; RSS {rss_mb():.0f} MB")

    all_topics = routes.all_topics().topic_list
    queried = all_topics[:: max(1, len(all_topics) // args.query_topics)][: args.query_topics]
    print(f"route queries over {len(queried)} topics (standard JSON, through RequestProcessor):")
    queries = [RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": t}) for t in queried]
    client = Channel("tcp", b"client")

    def query_all() -> None:
        for request in queries:
            assert processor.process(request, client).code == ResponseCode.SUCCESS

    timed("cold (pick up + encode + cache)", query_all, len(queries))
    timed("warm (cache hit)", query_all, len(queries))
    entries, cached_bytes = routes.route_cache_size()
    route_size = len(processor.process(queries[0], client).body)
    after_queries = rss_mb()
    print(f"  route body {route_size} bytes; cache: {entries} topics, {cached_bytes / 2 ** 20:.0f} MB charged; "
          f"RSS {after_queries:.0f} MB (+{after_queries - after_register:.0f} MB)")

    if args.brokers < 3:
        print("broker-wide changes: skipped (they change brokers 000..002)")
    else:
        print("broker-wide changes (each invalidates the cached routes of one broker's topics):")
        slave = register_request(0, 0, bodies[0], broker_id=1)
        timed("a slave joins broker-000", lambda: processor.process(slave, Channel("tcp", b"slave")))
        timed("wipe write perm of broker-001", lambda: routes.wipe_write_perm_of_broker("broker-001"))
        clock.now += 130_000
        for broker in range(3, args.brokers):  # everyone but the masters of brokers 0-2 heartbeats
            routes.update_broker_timestamp(f"cluster-{broker // args.brokers_per_cluster}",
                                           requests[broker].ext_fields["brokerAddr"])
        routes.update_broker_timestamp("cluster-0", slave.ext_fields["brokerAddr"])
        removed: list = []
        timed("expiry scan: masters of broker-000..002 expire (001, 002 leave with all their queues)",
              lambda: removed.extend(routes.scan_not_active_brokers()))
        assert len(removed) == 3, removed
        timed("re-query after the changes", query_all, len(queries))
    print(f"RSS at end: {rss_mb():.0f} MB")


if __name__ == "__main__":
    main()
