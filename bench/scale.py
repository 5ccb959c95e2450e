"""The route table at RocketMQ issue #4245's scale (300 brokers x 10,000 topics), in one process or over TCP.

    python -m bench scale --brokers 300 --topics 10000                  # the request path, in this process
    python -m bench scale --wire --java auto                            # 10 million entries, namesrv and Java
    python -m bench scale --wire --java auto --topics 100               # memory per entry

RocketMQ's first topic-route cache crashed its NameServer during registration at this size.

In process (the default) the real request path (RequestProcessor: CRC, body decode,
RouteInfoManager, route cache) reports time and memory for what such a cluster does: first
registration of every broker, one full round of periodic re-registrations (unchanged DataVersion:
the steady state), one round in which every broker changed one topic; route queries, a miss (pick
up + encode + cache) and a hit; and the broker-wide writes that must invalidate 10,000 cached routes
(a slave joining a group, an expiry, a perm wipe).

Over TCP (--wire), every server (a fresh namesrv, and the Java NameServer 4.9.8 of ../shared with
--java) gets the same phases, one server after the other, from this process and one route-client
process:

1. **first registration**: every broker connects and sends its whole topic table (REGISTER_BROKER,
   ~1.6 MB of JSON at 10,000 topics), `--concurrency` of them in flight at a time (a fleet starting
   together; 4.9.x brokers retry a refused registration, so SYSTEM_BUSY is retried here too). Its
   wall time, the registrations' latencies, and the server's RSS once the fleet is in;
2. **route queries, idle**: the route client alone, `--route-rate` queries a second;
3. **steady state**: every broker re-registers its unchanged table once per `--period` seconds,
   spread evenly (4.9.x brokers send everything every 30 s: 53 MB/s at the full scale), with the
   route client querying meanwhile: the server's CPU % of one core and the route queries' p99.

Route latency is measured from each query's intended send time (one in flight, paced), so a stalled
server cannot hide its stall by delaying the next query. With Java, RSS is what the OS sees; its live
heap after a full GC (`jcmd GC.run`, `GC.heap_info`) is printed beside it.

Topology (bench/lib/fleet.scale_fleet): `--brokers` master brokers in clusters of about
`--brokers-per-cluster`; each cluster's `--topics` topics are served by every broker of the cluster.
`--brokers-per-cluster` equal to `--brokers` is the worst case for route size.
"""
from __future__ import annotations

import argparse
import gc
import multiprocessing
import random
import re
import resource
import selectors
import statistics
import subprocess
import tempfile
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

import psutil

from bench.lib import cli
from bench.lib.client import Client
from bench.lib.fleet import FleetShape, register_body, register_command, route_template, scale_fleet
from bench.lib.output import Printed, write_results
from bench.lib.servers import JavaNamesrvProcess, java_wanted, percentile, tree_cpu_seconds, tree_rss_bytes
from namesrv.channel import Channel
from namesrv.config import NamesrvConfig
from namesrv.fastpath import IMPLEMENTATION
from namesrv.kvconfig import KVConfigManager
from namesrv.launcher import NamesrvProcess
from namesrv.processor import RequestProcessor
from namesrv.protocol import DataVersion, RemotingCommand, RequestCode, ResponseCode
from namesrv.routeinfo import RouteInfoManager

#: The steady state's DataVersion, and the one with a topic changed.
FIRST, CHANGED = DataVersion(1, 1_700_000_000_000, 0), DataVersion(2, 1_700_000_000_000, 0)



@dataclass
class RoundResult:
    """One round of registrations: per-registration latency (first byte sent to answer), retries, failures."""

    seconds: float = 0.0
    latencies: list[float] = field(default_factory=list)
    busy_retries: int = 0
    failures: list[str] = field(default_factory=list)
    send_lag: list[float] = field(default_factory=list)


class _Connection:
    __slots__ = ("broker", "client", "out", "sent_at", "busy")

    def __init__(self, broker: int, client: Client) -> None:
        self.broker = broker
        self.client = client
        self.out: list[memoryview] = []
        self.sent_at = 0.0
        self.busy = False


class RegistrationDriver:
    """The fleet's broker connections, one per broker, driven without blocking on any of them."""

    def __init__(self, address: str, fleet: FleetShape) -> None:
        self._address = address
        self.fleet = fleet
        bodies = {cluster: register_body(fleet, cluster, FIRST) for cluster in cluster_names(fleet)}
        #: Each frame is sent as its head and its cluster's body, shared: 1,000 brokers' 1.6 MB frames
        #: need not be held as 1.6 GB.
        self._heads = []
        for b in range(fleet.brokers):
            command = register_command(fleet, fleet.broker(b), bodies[fleet.broker(b).cluster])
            command.opaque = b + 1
            self._heads.append(command.encode_parts()[0])
        self._bodies = {cluster: memoryview(body) for cluster, body in bodies.items()}
        self.body_bytes = len(next(iter(bodies.values())))
        self._selector = selectors.DefaultSelector()
        self._connections: dict[int, _Connection] = {}
        self._result = RoundResult()
        self._pending = 0

    def close(self) -> None:
        for connection in self._connections.values():
            connection.client.close()
        self._selector.close()

    def _connection(self, broker: int) -> _Connection:
        connection = self._connections.get(broker)
        if connection is None:
            client = Client(self._address, timeout=10)
            client.sock.setblocking(False)
            connection = self._connections[broker] = _Connection(broker, client)
            self._selector.register(client.sock, selectors.EVENT_READ, connection)
        return connection

    def _send(self, broker: int) -> None:
        connection = self._connection(broker)
        connection.out = [memoryview(self._heads[broker]), self._bodies[self.fleet.broker(broker).cluster]]
        connection.sent_at = time.perf_counter()
        connection.busy = True
        self._pending += 1
        self._flush(connection)

    def _flush(self, connection: _Connection) -> None:
        while connection.out:
            try:
                sent = connection.client.sock.sendmsg(connection.out)
            except BlockingIOError:
                break
            while sent and connection.out:
                head = connection.out[0]
                if sent >= len(head):
                    sent -= len(head)
                    connection.out.pop(0)
                else:
                    connection.out[0] = head[sent:]
                    sent = 0
        events = selectors.EVENT_READ | (selectors.EVENT_WRITE if connection.out else 0)
        self._selector.modify(connection.client.sock, events, connection)

    def _receive(self, connection: _Connection, retry: list[int]) -> None:
        try:
            frames = connection.client.read()
        except ConnectionError as exc:
            raise ConnectionError(f"the server closed broker {connection.broker}'s connection") from exc
        for frame in frames:
            response = RemotingCommand.decode(frame)
            connection.busy = False
            self._pending -= 1
            if response.code == ResponseCode.SUCCESS:
                self._result.latencies.append(time.perf_counter() - connection.sent_at)
            elif response.code == ResponseCode.SYSTEM_BUSY:
                self._result.busy_retries += 1
                retry.append(connection.broker)
            else:
                self._result.failures.append(f"broker {connection.broker}: code {response.code} {response.remark}")

    def _poll(self, timeout: float, retry: list[int]) -> None:
        for key, events in self._selector.select(timeout):
            connection = key.data
            if events & selectors.EVENT_WRITE:
                self._flush(connection)
            if events & selectors.EVENT_READ:
                self._receive(connection, retry)

    def first_round(self, concurrency: int, deadline_s: float) -> RoundResult:
        """Every broker registers once, `concurrency` at a time; raises TimeoutError past `deadline_s`."""
        self._result = RoundResult()
        waiting = list(range(self.fleet.brokers))
        waiting.reverse()
        start = time.perf_counter()
        while waiting or self._pending:
            while waiting and self._pending < concurrency:
                self._send(waiting.pop())
            retry: list[int] = []
            self._poll(0.5, retry)
            waiting.extend(retry)
            if time.perf_counter() - start > deadline_s:
                raise TimeoutError(f"{len(self._result.latencies)} of {self.fleet.brokers} brokers registered in "
                                   f"{deadline_s:.0f} s")
        self._result.seconds = time.perf_counter() - start
        return self._result

    def steady(self, period_s: float, seconds: float) -> RoundResult:
        """Each broker re-registers its unchanged table every `period_s`, spread evenly, for `seconds`;
        a broker whose previous registration is still unanswered skips its turn (a failure)."""
        self._result = RoundResult()
        start = time.perf_counter()
        interval = period_s / self.fleet.brokers
        turn = 0
        while True:
            now = time.perf_counter()
            due = start + turn * interval
            if due > start + seconds:
                break
            while due <= now:
                broker = turn % self.fleet.brokers
                if self._connections[broker].busy:
                    self._result.failures.append(f"broker {broker}: previous registration still unanswered")
                else:
                    self._result.send_lag.append(now - due)
                    self._send(broker)
                turn += 1
                due = start + turn * interval
            retry: list[int] = []
            self._poll(max(0.0, min(due - time.perf_counter(), 0.05)), retry)
            self._result.failures.extend(f"broker {b}: SYSTEM_BUSY" for b in retry)
        while self._pending and time.perf_counter() - start < seconds + 30:
            self._poll(0.5, [])
        self._result.seconds = time.perf_counter() - start
        return self._result


def probe_routes(address: str, topics: list[str], rate: float, seconds: float, results) -> None:
    """A route client (its own process): one query in flight, paced at `rate`, latency from the intended
    send time; puts (latencies, failures) on `results`."""
    picker = random.Random(7)
    fleet = FleetShape(brokers=1, clusters=1)  # only its route template is used
    frames = [route_template(fleet, t).render(i + 1) for i, t in enumerate(topics)]
    latencies: list[float] = []
    failures = 0
    with Client(address, timeout=30) as client:
        start = time.perf_counter()
        sent = 0
        while True:
            intended = start + sent / rate
            if intended > start + seconds:
                break
            pause = intended - time.perf_counter()
            if pause > 0:
                time.sleep(pause)
            client.send(picker.choice(frames))
            sent += 1
            answers = client.receive()  # one query in flight: its answer is the one frame to come
            latencies.append(time.perf_counter() - intended)
            failures += sum(RemotingCommand.decode(answer).code != ResponseCode.SUCCESS for answer in answers)
    results.put((latencies, failures))


class RouteClient:
    """`probe_routes` in a child process, so the brokers' sends never delay a query."""

    def __init__(self, address: str, topics: list[str], rate: float, seconds: float) -> None:
        context = multiprocessing.get_context("spawn")
        self._results = context.Queue()
        self._process = context.Process(target=probe_routes, args=(address, topics, rate, seconds, self._results),
                                        daemon=True)
        self._seconds = seconds
        self._process.start()

    def result(self) -> tuple[list[float], int]:
        latencies, failures = self._results.get(timeout=self._seconds + 120)
        self._process.join(10)
        return latencies, failures


@dataclass
class ServerFigures:
    name: str
    first_seconds: float = 0.0
    first_p99_ms: float = 0.0
    busy_retries: int = 0
    rss_start_mb: float = 0.0
    rss_fleet_mb: float = 0.0
    live_heap_start_mb: float | None = None
    live_heap_mb: float | None = None
    route_idle_p99_ms: float = 0.0
    route_steady_p50_ms: float = 0.0
    route_steady_p99_ms: float = 0.0
    route_steady_max_ms: float = 0.0
    steady_cpu_percent: float = 0.0
    steady_p99_ms: float = 0.0
    rss_end_mb: float = 0.0
    failure: str | None = None
    notes: list[str] = field(default_factory=list)

    def bytes_per_entry(self, entries: int) -> float:
        return (self.rss_fleet_mb - self.rss_start_mb) * 2 ** 20 / entries

    def live_bytes_per_entry(self, entries: int) -> float | None:
        if self.live_heap_mb is None or self.live_heap_start_mb is None:
            return None
        return (self.live_heap_mb - self.live_heap_start_mb) * 2 ** 20 / entries


def queue_entries(fleet: FleetShape) -> int:
    return fleet.brokers * fleet.topics_per_broker


def percentile_ms(values: list[float], p: float) -> float:
    return percentile(sorted(values), p) * 1e3


def rss_mb(pid: int) -> float:
    return tree_rss_bytes(psutil.Process(pid)) / 2 ** 20


def java_live_heap_mb(pid: int) -> float | None:
    """The JVM's used heap after a full GC, or None when jcmd cannot attach."""
    try:
        subprocess.run(["jcmd", str(pid), "GC.run"], capture_output=True, timeout=120, check=True)
        info = subprocess.run(["jcmd", str(pid), "GC.heap_info"], capture_output=True, text=True, timeout=60,
                              check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    used = re.search(r"used (\d+)K", info)
    return int(used.group(1)) / 1024 if used else None


def raise_open_file_limit(needed: int) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < needed:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(needed, hard), hard))


def cluster_names(fleet: FleetShape) -> list[str]:
    return [f"storm-cluster-{c}" for c in range(fleet.clusters)]


def measure(name: str, address: str, pid: int, fleet: FleetShape, *, concurrency: int, period_s: float,
            steady_s: float, route_rate: float, idle_s: float, first_deadline_s: float, is_java: bool,
            say=print) -> ServerFigures:
    """The three phases against one server; a phase that fails ends the run for that server, saying why."""
    figures = ServerFigures(name)
    if is_java:
        figures.live_heap_start_mb = java_live_heap_mb(pid)
    figures.rss_start_mb = rss_mb(pid)
    topics = [topic for cluster in cluster_names(fleet)
              for topic in fleet.cluster_topics(cluster)[::max(1, fleet.topics_per_broker // 200)]]
    driver = RegistrationDriver(address, fleet)
    try:
        say(f"{name}: first registration of {fleet.brokers} brokers ({driver.body_bytes / 2 ** 20:.2f} MB each), "
            f"{concurrency} in flight ...")
        first = driver.first_round(concurrency, first_deadline_s)
        figures.first_seconds = first.seconds
        figures.first_p99_ms = percentile_ms(first.latencies, 99)
        figures.busy_retries = first.busy_retries
        if first.failures:
            figures.notes.append(f"{len(first.failures)} registrations refused, first: {first.failures[0]}")
        time.sleep(2)
        figures.rss_fleet_mb = rss_mb(pid)
        if is_java:
            figures.live_heap_mb = java_live_heap_mb(pid)
        say(f"{name}: fleet registered in {first.seconds:.1f} s, RSS {figures.rss_fleet_mb:.0f} MB")
        idle, idle_failures = RouteClient(address, topics, route_rate, idle_s).result()
        figures.route_idle_p99_ms = percentile_ms(idle, 99)
        say(f"{name}: steady state for {steady_s:.0f} s (each broker every {period_s:.0f} s) ...")
        client = RouteClient(address, topics, route_rate, steady_s)
        server = psutil.Process(pid)
        cpu_before, wall_before = tree_cpu_seconds(server), time.perf_counter()
        steady = driver.steady(period_s, steady_s)
        figures.steady_cpu_percent = (tree_cpu_seconds(server) - cpu_before) / (time.perf_counter() - wall_before) * 100
        latencies, route_failures = client.result()
        figures.route_steady_p50_ms = percentile_ms(latencies, 50)
        figures.route_steady_p99_ms = percentile_ms(latencies, 99)
        figures.route_steady_max_ms = max(latencies) * 1e3 if latencies else float("nan")
        figures.steady_p99_ms = percentile_ms(steady.latencies, 99)
        if steady.failures:
            figures.notes.append(f"{len(steady.failures)} steady registrations failed, first: {steady.failures[0]}")
        if idle_failures or route_failures:
            figures.notes.append(f"{idle_failures + route_failures} route queries not SUCCESS")
        if steady.send_lag and statistics.median(steady.send_lag) > 0.05:
            figures.notes.append(f"the generator lagged: median send lag {statistics.median(steady.send_lag):.3f} s")
        figures.rss_end_mb = rss_mb(pid)
    except (OSError, TimeoutError, psutil.Error) as error:
        figures.failure = f"{type(error).__name__}: {error}"
        say(f"{name}: failed: {figures.failure}")
    finally:
        driver.close()
    return figures


def render(fleet: FleetShape, servers: list[ServerFigures]) -> str:
    """The side-by-side table, and namesrv ÷ Java where both finished."""
    rows = [
        ("first registration of the fleet (s)", lambda s: f"{s.first_seconds:.1f}"),
        ("  registration p99 (ms)", lambda s: f"{s.first_p99_ms:.0f}"),
        ("  SYSTEM_BUSY retried", lambda s: f"{s.busy_retries}"),
        ("RSS before (MB)", lambda s: f"{s.rss_start_mb:.0f}"),
        ("RSS with the fleet (MB)", lambda s: f"{s.rss_fleet_mb:.0f}"),
        ("  bytes per queue entry (RSS growth)", lambda s: f"{s.bytes_per_entry(queue_entries(fleet)):.0f}"),
        ("  Java live heap after full GC (MB)", lambda s: "-" if s.live_heap_mb is None else f"{s.live_heap_mb:.0f}"),
        ("  Java live heap bytes per queue entry",
         lambda s: "-" if s.live_bytes_per_entry(queue_entries(fleet)) is None
         else f"{s.live_bytes_per_entry(queue_entries(fleet)):.0f}"),
        ("route p99, idle (ms)", lambda s: f"{s.route_idle_p99_ms:.2f}"),
        ("steady re-registration CPU (% of a core)", lambda s: f"{s.steady_cpu_percent:.0f}"),
        ("  re-registration p99 (ms)", lambda s: f"{s.steady_p99_ms:.1f}"),
        ("route p50 / p99 / max under it (ms)",
         lambda s: f"{s.route_steady_p50_ms:.2f} / {s.route_steady_p99_ms:.2f} / {s.route_steady_max_ms:.1f}"),
        ("RSS at the end (MB)", lambda s: f"{s.rss_end_mb:.0f}"),
    ]
    width = max(len(label) for label, _ in rows) + 2
    lines = [f"{'':{width}}" + "".join(f"{s.name:>24}" for s in servers)]
    for label, cell in rows:
        lines.append(f"{label:{width}}" + "".join(f"{cell(s) if s.failure is None else '-':>24}" for s in servers))
    for server in servers:
        if server.failure:
            lines.append(f"{server.name} failed: {server.failure}")
        lines.extend(f"{server.name}: {note}" for note in server.notes)
    done = {s.name: s for s in servers if s.failure is None}
    if "namesrv" in done and "java" in done:
        ours, java = done["namesrv"], done["java"]
        lines.append(
            f"namesrv vs java: first registration in {ours.first_seconds / java.first_seconds:.2f} of Java's time, "
            f"RSS with the fleet {ours.rss_fleet_mb / java.rss_fleet_mb:.2f} of Java's, steady CPU "
            f"{ours.steady_cpu_percent / max(java.steady_cpu_percent, 1e-9):.2f} of Java's, route p99 under load "
            f"{ours.route_steady_p99_ms / java.route_steady_p99_ms:.2f} of Java's")
    return "\n".join(lines)


# ---------------------------------------------------------------- in process


class Clock:
    def __init__(self) -> None:
        self.now = 1_700_000_000_000

    def __call__(self) -> int:
        return self.now


def own_rss_mb() -> float:
    gc.collect()
    return psutil.Process().memory_info().rss / 2 ** 20


def in_process(fleet: FleetShape, query_topics: int, say) -> None:
    """The request path in this process, phase by phase (see the module's docstring)."""
    clusters = cluster_names(fleet)
    say(f"fast path: {IMPLEMENTATION}; {fleet.brokers} brokers in {fleet.clusters} clusters, {fleet.topics_per_broker} "
        f"topics per broker ({fleet.clusters * fleet.topics_per_broker} topics, {queue_entries(fleet)} queue entries)")
    base = own_rss_mb()
    say(f"RSS at start: {base:.0f} MB")
    bodies = {cluster: register_body(fleet, cluster, FIRST) for cluster in clusters}
    say(f"registration body: {len(bodies[clusters[0]]) / 2 ** 20:.2f} MB of JSON per broker")
    clock = Clock()
    tmp = tempfile.mkdtemp(prefix="scale-")
    config = NamesrvConfig(kv_config_path=str(Path(tmp, "kv.json")), config_store_path=str(Path(tmp, "ns.prop")),
                           max_queue_datas=max(NamesrvConfig.max_queue_datas, queue_entries(fleet)),
                           max_brokers=max(NamesrvConfig.max_brokers, 2 * fleet.brokers))
    routes = RouteInfoManager(config, clock=clock)
    processor = RequestProcessor(config, routes, KVConfigManager(config.kv_config_path), clock=clock)
    brokers = [fleet.broker(b) for b in range(fleet.brokers)]
    requests = [register_command(fleet, broker, bodies[broker.cluster]) for broker in brokers]
    channels = [Channel("tcp", b.to_bytes(4, "big")) for b in range(fleet.brokers)]

    def register_all(requests: list[RemotingCommand] = requests) -> list[float]:
        times = []
        for request, channel in zip(requests, channels):
            start = time.perf_counter()
            response = processor.process(request, channel)
            times.append(time.perf_counter() - start)
            assert response.code == ResponseCode.SUCCESS, response.remark
        return times

    def timed(label: str, action, count: int = 1) -> None:
        start = time.perf_counter()
        action()
        elapsed = time.perf_counter() - start
        say(f"  {label}: {elapsed:.2f} s" + (f", {elapsed / count * 1e6:.1f} us each" if count > 1 else ""))

    say("registration (CRC + decode + register, through RequestProcessor):")
    first = register_all()
    say(f"  first registration of all brokers: {sum(first):.1f} s, mean {statistics.mean(first) * 1e3:.1f} ms, "
        f"max {max(first) * 1e3:.1f} ms")
    after_register = own_rss_mb()
    say(f"  RSS after registration: {after_register:.0f} MB (+{after_register - base:.0f} MB)")
    clock.now += 30_000
    again = register_all()
    say(f"  periodic re-registration (unchanged DataVersion): mean {statistics.mean(again) * 1e3:.1f} ms, "
        f"max {max(again) * 1e3:.1f} ms -> {statistics.mean(again) * fleet.brokers / 30 * 100:.0f}% of one core "
        f"at {fleet.brokers} brokers / 30 s")
    changed = {cluster: register_body(fleet, cluster, CHANGED, read_only=0) for cluster in clusters}
    bumped = register_all([register_command(fleet, broker, changed[broker.cluster]) for broker in brokers])
    say(f"  one topic changed (new DataVersion): mean {statistics.mean(bumped) * 1e3:.1f} ms, "
        f"max {max(bumped) * 1e3:.1f} ms; RSS {own_rss_mb():.0f} MB")

    all_topics = routes.all_topics().topic_list
    queried = all_topics[:: max(1, len(all_topics) // query_topics)][:query_topics]
    say(f"route queries over {len(queried)} topics (standard JSON, through RequestProcessor):")
    queries = [RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": t}) for t in queried]
    client = Channel("tcp", b"client")

    def query_all() -> None:
        for request in queries:
            assert processor.process(request, client).code == ResponseCode.SUCCESS

    timed("cold (pick up + encode + cache)", query_all, len(queries))
    timed("warm (cache hit)", query_all, len(queries))
    entries, cached_bytes = routes.route_cache_size()
    route_size = len(processor.process(queries[0], client).body)
    after_queries = own_rss_mb()
    say(f"  route body {route_size} bytes; cache: {entries} topics, {cached_bytes / 2 ** 20:.0f} MB charged; "
        f"RSS {after_queries:.0f} MB (+{after_queries - after_register:.0f} MB)")
    if fleet.brokers < 3:
        say("broker-wide changes: skipped (they change brokers 0..2)")
    else:
        say("broker-wide changes (each invalidates the cached routes of one broker's topics):")
        slave = register_command(fleet, replace(brokers[0], broker_id=1, address="127.0.0.2:10911"),
                                 bodies[brokers[0].cluster])
        timed(f"a slave joins {brokers[0].name}", lambda: processor.process(slave, Channel("tcp", b"slave")))
        timed(f"wipe write perm of {brokers[1].name}", lambda: routes.wipe_write_perm_of_broker(brokers[1].name))
        clock.now += 130_000
        for broker in brokers[3:]:  # everyone but the masters of brokers 0-2 heartbeats
            routes.update_broker_timestamp(broker.cluster, broker.address)
        routes.update_broker_timestamp(brokers[0].cluster, slave.ext_fields["brokerAddr"])
        removed: list = []
        timed("expiry scan: the masters of brokers 0..2 expire (1 and 2 leave with all their queues)",
              lambda: removed.extend(routes.scan_not_active_brokers()))
        assert len(removed) == 3, removed
        timed("re-query after the changes", query_all, len(queries))
    say(f"RSS at end: {own_rss_mb():.0f} MB")


# ---------------------------------------------------------------- command line


def over_tcp(args: argparse.Namespace, fleet: FleetShape, say) -> list[ServerFigures]:
    start_java, java_skipped = java_wanted(args.java)
    raise_open_file_limit(fleet.brokers + 256)
    say(f"{fleet.brokers} brokers in {fleet.clusters} clusters, {fleet.topics_per_broker} topics each: "
        f"{queue_entries(fleet):,} queue entries; fast path {IMPLEMENTATION}")
    phases = dict(concurrency=args.concurrency, period_s=args.period, steady_s=args.seconds,
                  route_rate=args.route_rate, idle_s=args.idle_seconds, first_deadline_s=args.first_deadline)
    servers = []
    overrides = {"maxQueueDatas": max(NamesrvConfig.max_queue_datas, queue_entries(fleet)),
                 "maxBrokers": max(NamesrvConfig.max_brokers, fleet.brokers), **cli.parse_overrides(args.server_set)}
    with NamesrvProcess(overrides) as namesrv:
        servers.append(measure("namesrv", namesrv.address, namesrv.pid, fleet, is_java=False, say=say, **phases))
    if start_java:
        with JavaNamesrvProcess(args.java_opts) as java:
            servers.append(measure("java", java.address, java.pid, fleet, is_java=True, say=say, **phases))
    elif java_skipped:
        say(java_skipped)
    for line in render(fleet, servers).splitlines():
        say(line)
    return servers


def main(argv: list[str] | None = None) -> int:
    parser = cli.parser("scale", __doc__)
    parser.add_argument("--brokers", type=int, default=300, help="master brokers registered")
    parser.add_argument("--topics", type=int, default=10_000, help="topics per broker (and per cluster)")
    parser.add_argument("--brokers-per-cluster", type=int, default=30,
                        help="brokers per cluster, all serving the cluster's topics (equal to --brokers: the worst "
                             "case for route size)")
    parser.add_argument("--query-topics", type=int, default=20_000, help="distinct topics queried (in process)")
    cli.add_out(parser)
    wire = parser.add_argument_group("over TCP (--wire): real server processes, one after the other")
    wire.add_argument("--wire", action="store_true",
                      help="drive a fresh namesrv (and Java with --java) over TCP instead of the request path in "
                           "this process")
    cli.add_java(wire, opts="-Xms1g -Xmx8g -XX:MaxDirectMemorySize=2g")
    wire.add_argument("--concurrency", type=int, default=16, help="first registrations in flight at a time")
    wire.add_argument("--period", type=float, default=30.0, help="seconds between a broker's registrations")
    cli.add_seconds(wire, 30.0, "length of the steady-state phase, seconds")
    wire.add_argument("--route-rate", type=float, default=200.0, help="route queries a second (one in flight)")
    wire.add_argument("--idle-seconds", type=float, default=5.0, help="route queries before the steady phase")
    cli.add_server_set(wire)
    wire.add_argument("--first-deadline", type=float, default=900.0,
                      help="seconds the fleet's first registration may take before that server is given up")
    args = parser.parse_args(argv)
    fleet = scale_fleet(args.brokers, args.topics, args.brokers_per_cluster)
    say = Printed()
    results = []
    if args.wire:
        results = [{**vars(figures), "bytes_per_entry": figures.bytes_per_entry(queue_entries(fleet))}
                   for figures in over_tcp(args, fleet, say)]
    else:
        in_process(fleet, args.query_topics, say)
    write_results(cli.out_dir(args, "scale"), "scale", results, say, wire=args.wire)
    return 0
