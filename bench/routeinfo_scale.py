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
from functools import partial
from pathlib import Path

import psutil

if __package__ in (None, ""):  # run as a script: make `bench` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.cli_help import HelpFormatter  # noqa: E402
from bench.routeinfo_wire import measure, raise_open_file_limit, render  # noqa: E402
from bench.scale_fleet import ScaleFleet  # noqa: E402
from bench.storm.java_namesrv import JavaNamesrvProcess, java_wanted  # noqa: E402
from namesrv.channel import Channel  # noqa: E402
from namesrv.config import NamesrvConfig
from namesrv.fastpath import IMPLEMENTATION
from namesrv.kvconfig import KVConfigManager
from namesrv.launcher import NamesrvProcess
from namesrv.processor import RequestProcessor
from namesrv.protocol import RemotingCommand, RequestCode, ResponseCode
from namesrv.routeinfo import RouteInfoManager


class Clock:
    def __init__(self) -> None:
        self.now = 1_700_000_000_000

    def __call__(self) -> int:
        return self.now


def rss_mb() -> float:
    gc.collect()
    return psutil.Process().memory_info().rss / 2 ** 20


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
    parser.add_argument("--query-topics", type=int, default=20_000, help="distinct topics queried (in-process)")
    wire = parser.add_argument_group("over TCP (--wire): real server processes, one after the other")
    wire.add_argument("--wire", action="store_true",
                      help="drive a fresh namesrv (and Java with --java) over TCP instead of the request path in "
                           "this process (bench/routeinfo_wire.py)")
    wire.add_argument("--java", choices=("off", "auto", "on"), default="off",
                      help="also the Java NameServer 4.9.8 of ../shared (auto: when Java 17 is present)")
    wire.add_argument("--java-opts", default="-Xms1g -Xmx8g -XX:MaxDirectMemorySize=2g",
                      help="JVM options for the Java NameServer (the issue allows it up to 8 GB of heap)")
    wire.add_argument("--concurrency", type=int, default=16, help="first registrations in flight at a time")
    wire.add_argument("--period", type=float, default=30.0, help="seconds between a broker's registrations")
    wire.add_argument("--steady-seconds", type=float, default=30.0, help="length of the steady-state phase")
    wire.add_argument("--route-rate", type=float, default=200.0, help="route queries a second (one in flight)")
    wire.add_argument("--idle-seconds", type=float, default=5.0, help="route queries before the steady phase")
    wire.add_argument("--namesrv-option", action="append", default=[], metavar="KEY=VALUE",
                      help="a namesrv setting for the run (repeatable), e.g. routeSnapshotEnable=false")
    wire.add_argument("--first-deadline", type=float, default=900.0,
                      help="seconds the fleet's first registration may take before that server is given up")
    args = parser.parse_args()
    if args.wire:
        return wire_main(args)
    fleet = ScaleFleet(args.brokers, args.topics, args.brokers_per_cluster)
    clusters = fleet.clusters
    print(f"fast path: {IMPLEMENTATION}; {args.brokers} brokers in {clusters} clusters, {args.topics} topics per "
          f"broker ({clusters * args.topics} topics, {fleet.queue_entries} queue entries)")
    base = rss_mb()
    print(f"RSS at start: {base:.0f} MB")

    bodies = [fleet.cluster_body(c) for c in range(clusters)]
    print(f"registration body: {len(bodies[0]) / 2 ** 20:.2f} MB of JSON per broker")
    clock = Clock()
    tmp = tempfile.mkdtemp(prefix="routeinfo-scale-")
    config = NamesrvConfig(kv_config_path=str(Path(tmp, "kv.json")), config_store_path=str(Path(tmp, "ns.prop")),
                           max_queue_datas=max(NamesrvConfig.max_queue_datas, args.brokers * args.topics),
                           max_brokers=max(NamesrvConfig.max_brokers, 2 * args.brokers))
    routes = RouteInfoManager(config, clock=clock)
    processor = RequestProcessor(config, routes, KVConfigManager(config.kv_config_path), clock=clock)
    requests = [fleet.register_request(b, bodies[fleet.cluster_of(b)])
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
    changed = [fleet.cluster_body(c, counter=2) for c in range(clusters)]
    bumped = register_all([fleet.register_request(b, changed[fleet.cluster_of(b)])
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
        slave = fleet.register_request(0, bodies[0], broker_id=1)
        timed("a slave joins broker-0000", lambda: processor.process(slave, Channel("tcp", b"slave")))
        timed("wipe write perm of broker-0001", lambda: routes.wipe_write_perm_of_broker("broker-0001"))
        clock.now += 130_000
        for broker in range(3, args.brokers):  # everyone but the masters of brokers 0-2 heartbeats
            routes.update_broker_timestamp(f"cluster-{fleet.cluster_of(broker)}",
                                           requests[broker].ext_fields["brokerAddr"])
        routes.update_broker_timestamp("cluster-0", slave.ext_fields["brokerAddr"])
        removed: list = []
        timed("expiry scan: masters of broker-0000..0002 expire (0001, 0002 leave with all their queues)",
              lambda: removed.extend(routes.scan_not_active_brokers()))
        assert len(removed) == 3, removed
        timed("re-query after the changes", query_all, len(queries))
    print(f"RSS at end: {rss_mb():.0f} MB")


def wire_main(args: argparse.Namespace) -> None:
    fleet = ScaleFleet(args.brokers, args.topics, args.brokers_per_cluster)
    start_java, java_skipped = java_wanted(args.java)
    raise_open_file_limit(args.brokers + 256)
    print(f"{fleet.brokers} brokers in {fleet.clusters} clusters, {fleet.topics} topics each: "
          f"{fleet.queue_entries:,} queue entries; fast path {IMPLEMENTATION}", flush=True)
    phases = dict(concurrency=args.concurrency, period_s=args.period, steady_s=args.steady_seconds,
                  route_rate=args.route_rate, idle_s=args.idle_seconds, first_deadline_s=args.first_deadline)
    say = partial(print, flush=True)
    servers = []
    overrides = {"maxQueueDatas": max(NamesrvConfig.max_queue_datas, fleet.queue_entries),
                 "maxBrokers": max(NamesrvConfig.max_brokers, fleet.brokers),
                 **dict(option.split("=", 1) for option in args.namesrv_option)}
    with NamesrvProcess(overrides) as namesrv:
        servers.append(measure("namesrv", namesrv.address, namesrv.pid, fleet, is_java=False, say=say, **phases))
    if start_java:
        with JavaNamesrvProcess(args.java_opts) as java:
            servers.append(measure("java", java.address, java.pid, fleet, is_java=True, say=say, **phases))
    elif java_skipped:
        print(java_skipped)
    print(render(fleet, servers))


if __name__ == "__main__":
    main()
