"""The scale fleet over TCP: what a NameServer process does with 1,000 brokers × 10,000 topics.

    .venv/bin/python -m bench.routeinfo_scale --wire --java auto                       # 10 million entries
    .venv/bin/python -m bench.routeinfo_scale --wire --java auto --topics 100          # memory per entry

Every server (a fresh namesrv, and the Java NameServer 4.9.8 of ../shared with `--java`) gets the
same phases, one server after the other, from this process and one route-client process:

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
"""
from __future__ import annotations

import multiprocessing
import random
import re
import resource
import selectors
import socket
import statistics
import subprocess
import time
from dataclasses import dataclass, field

import psutil

from bench.measure import percentile, tree_cpu_seconds, tree_rss_bytes
from bench.scale_fleet import ScaleFleet
from namesrv.protocol import FrameDecoder, RemotingCommand, RequestCode, ResponseCode

_RECV_BYTES = 1 << 16


@dataclass
class RoundResult:
    """One round of registrations: per-registration latency (first byte sent to answer), retries, failures."""

    seconds: float = 0.0
    latencies: list[float] = field(default_factory=list)
    busy_retries: int = 0
    failures: list[str] = field(default_factory=list)
    send_lag: list[float] = field(default_factory=list)


class _Connection:
    __slots__ = ("broker", "sock", "out", "decoder", "sent_at", "busy")

    def __init__(self, broker: int, sock: socket.socket) -> None:
        self.broker = broker
        self.sock = sock
        self.out: list[memoryview] = []
        self.decoder = FrameDecoder()
        self.sent_at = 0.0
        self.busy = False


class RegistrationDriver:
    """The fleet's broker connections, one per broker, driven without blocking on any of them."""

    def __init__(self, address: str, fleet: ScaleFleet) -> None:
        host, port = address.rsplit(":", 1)
        self._address = (host, int(port))
        self.fleet = fleet
        bodies = [fleet.cluster_body(c) for c in range(fleet.clusters)]
        #: Each frame is sent as its head and its cluster's body, shared: 1,000 brokers' 1.6 MB frames
        #: need not be held as 1.6 GB.
        self._heads = [fleet.register_request(b, bodies[fleet.cluster_of(b)], opaque=b + 1).encode_parts()[0]
                       for b in range(fleet.brokers)]
        self._bodies = [memoryview(body) for body in bodies]
        self.body_bytes = len(bodies[0])
        self._selector = selectors.DefaultSelector()
        self._connections: dict[int, _Connection] = {}
        self._result = RoundResult()
        self._pending = 0

    def close(self) -> None:
        for connection in self._connections.values():
            connection.sock.close()
        self._selector.close()

    def _connection(self, broker: int) -> _Connection:
        connection = self._connections.get(broker)
        if connection is None:
            sock = socket.create_connection(self._address, timeout=10)
            sock.setblocking(False)
            connection = self._connections[broker] = _Connection(broker, sock)
            self._selector.register(sock, selectors.EVENT_READ, connection)
        return connection

    def _send(self, broker: int) -> None:
        connection = self._connection(broker)
        connection.out = [memoryview(self._heads[broker]), self._bodies[self.fleet.cluster_of(broker)]]
        connection.sent_at = time.perf_counter()
        connection.busy = True
        self._pending += 1
        self._flush(connection)

    def _flush(self, connection: _Connection) -> None:
        while connection.out:
            try:
                sent = connection.sock.sendmsg(connection.out)
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
        self._selector.modify(connection.sock, events, connection)

    def _receive(self, connection: _Connection, retry: list[int]) -> None:
        data = connection.sock.recv(_RECV_BYTES)
        if not data:
            raise ConnectionError(f"the server closed broker {connection.broker}'s connection")
        for frame in connection.decoder.feed(data):
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
    host, port = address.rsplit(":", 1)
    picker = random.Random(7)
    frames = [RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": t}, opaque=i + 1).encode()
              for i, t in enumerate(topics)]
    latencies: list[float] = []
    failures = 0
    decoder = FrameDecoder()
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        start = time.perf_counter()
        sent = 0
        while True:
            intended = start + sent / rate
            if intended > start + seconds:
                break
            pause = intended - time.perf_counter()
            if pause > 0:
                time.sleep(pause)
            sock.sendall(picker.choice(frames))
            sent += 1
            answers: list[bytes] = []
            while not answers:  # one query in flight: its answer is the one frame to come
                chunk = sock.recv(_RECV_BYTES)
                if not chunk:
                    raise ConnectionError("the server closed the route client's connection")
                answers = decoder.feed(chunk)
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


def measure(name: str, address: str, pid: int, fleet: ScaleFleet, *, concurrency: int, period_s: float,
            steady_s: float, route_rate: float, idle_s: float, first_deadline_s: float, is_java: bool,
            say=print) -> ServerFigures:
    """The three phases against one server; a phase that fails ends the run for that server, saying why."""
    figures = ServerFigures(name)
    if is_java:
        figures.live_heap_start_mb = java_live_heap_mb(pid)
    figures.rss_start_mb = rss_mb(pid)
    topics = [fleet.topic(c, i) for c in range(fleet.clusters) for i in range(0, fleet.topics,
                                                                               max(1, fleet.topics // 200))]
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


def render(fleet: ScaleFleet, servers: list[ServerFigures]) -> str:
    """The side-by-side table, and namesrv ÷ Java where both finished."""
    rows = [
        ("first registration of the fleet (s)", lambda s: f"{s.first_seconds:.1f}"),
        ("  registration p99 (ms)", lambda s: f"{s.first_p99_ms:.0f}"),
        ("  SYSTEM_BUSY retried", lambda s: f"{s.busy_retries}"),
        ("RSS before (MB)", lambda s: f"{s.rss_start_mb:.0f}"),
        ("RSS with the fleet (MB)", lambda s: f"{s.rss_fleet_mb:.0f}"),
        ("  bytes per queue entry (RSS growth)", lambda s: f"{s.bytes_per_entry(fleet.queue_entries):.0f}"),
        ("  Java live heap after full GC (MB)", lambda s: "-" if s.live_heap_mb is None else f"{s.live_heap_mb:.0f}"),
        ("  Java live heap bytes per queue entry",
         lambda s: "-" if s.live_bytes_per_entry(fleet.queue_entries) is None
         else f"{s.live_bytes_per_entry(fleet.queue_entries):.0f}"),
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
