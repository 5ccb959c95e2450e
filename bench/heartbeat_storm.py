"""Heartbeat storm: a simulated RocketMQ fleet against any RocketMQ-protocol NameServer.

    python bench/heartbeat_storm.py --address 127.0.0.1:9876 --duration 30 --brokers 64 --register-period 1 \
        --heartbeat-period 1 --route-clients 2000 --route-poll-period 1
    python -m bench storm --launch --seconds 10          # the same, as a verb: a fresh namesrv

B brokers (masters + slaves of C clusters, T topics of Q queues each) register every P seconds
(and optionally heartbeat), and R clients poll routes of random topics, spread over worker
processes (bench/storm/worker.py, each sending through the extension's generator loop). Open loop
(default): each request kind is sent at the fleet's rate and latency counts from the *intended*
send time (no coordinated omission, as wrk2 and OpenMessaging Benchmark do). Closed loop (--mode
closed): a fixed number of requests in flight per connection, for maximum throughput. Warm-up is
excluded. The run directory (bench/lib/output.py) feeds `python -m bench report`.

Route-change push: --subscribers N connections (in processes of their own) subscribe to
--subscriber-topics topics each, and every --flap-period seconds a broker closes its connection
and registers again half a period later (bench/storm/flaps.py); how long each change takes to
reach each subscriber is recorded as `propagation` (bench/storm/subscriber.py).

Ctrl-C ends the run gracefully: the workers stop sending at that moment, late answers are waited
for briefly, and the run directory keeps what was measured, marked `"partial": true` with the
measured seconds as its duration (a second Ctrl-C abandons it).
"""
from __future__ import annotations

import argparse
import ipaddress
import logging
import multiprocessing
import os
import queue
import shutil
import socket
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field, fields, replace
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path

import psutil
from hdrh.histogram import HdrHistogram
from tqdm import tqdm

if __package__ in (None, ""):  # run as a script: make `bench` and `namesrv` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import namesrv  # noqa: E402
from bench.lib import cli  # noqa: E402
from bench.lib.client import Client  # noqa: E402
from bench.lib.fleet import HEARTBEAT, REGISTER, ROUTE, ROUTE_CHANGED, FleetShape  # noqa: E402
from bench.lib.hdr import new_histogram  # noqa: E402
from bench.lib.output import (  # noqa: E402
    SEND_DELAY_WARNING_US,
    RunRecorder,
    machine,
    machine_line,
    request_name,
    thread_config,
)
from bench.lib.verdict import Slo, step_facts  # noqa: E402
from bench.lib.servers import CorePlan, core_plan, listening_pid, pin  # noqa: E402
from bench.storm.flaps import MIN_PERIOD_S, FlapSchedule, new_change_times  # noqa: E402
from bench.storm.resources import ResourceSampler  # noqa: E402
from bench.storm.subscriber import (  # noqa: E402
    PROPAGATION,
    PushCounts,
    SubscriberPlan,
    choose_topics,
    expected_sightings,
    subscribers_main,
)
from bench.storm.worker import SECOND, WorkerPlan, start_shielded_from_sigint, worker_main  # noqa: E402
from namesrv.config import parse_properties  # noqa: E402
from namesrv.launcher import NamesrvProcess, NamesrvStartError  # noqa: E402
from namesrv.protocol import RemotingCommand, RequestCode, ResponseCode, Version  # noqa: E402

log = logging.getLogger("heartbeat_storm")

MAX_DURATION_S = 3600.0
MAX_WARMUP_S = 600.0
#: Subscribers are connections of this host's generator: mind `ulimit -n` (and the server's maxConnections).
MAX_SUBSCRIBERS = 20_000
#: Exit status after Ctrl-C (128 + SIGINT, as shells report it), also when the partial run was kept.
INTERRUPTED = 130
#: brokers × topics bound: each broker's registration body is held in memory (~200 B per topic).
MAX_TOPIC_ENTRIES = 5_000_000


@dataclass
class StormSettings:
    """Everything one storm run needs; the CLI fills it, the knee, the sweep and tests build it directly."""

    address: str = "127.0.0.1:9876"
    fleet: FleetShape = field(default_factory=FleetShape)
    mode: str = "open"
    duration_s: float = 30.0
    warmup_s: float = 5.0
    drain_s: float = 5.0
    workers: int = 1
    connections: int = 4
    in_flight: int = 32
    max_requests: int = 20_000_000
    runs_dir: Path = Path("runs")
    run_id: str | None = None
    server_pid: int | None = None
    allow_remote: bool = False
    progress: bool = True
    seed: int = 1
    extra_meta: dict = field(default_factory=dict)
    #: Start a fresh namesrv (namesrv.launcher) with these config overrides for this run; None = use `address`.
    launch: dict[str, str] | None = None
    #: The server's Prometheus endpoint, scraped as the measured window starts (after warm-up) and at
    #: 90 % of it (before the fleet unregisters) into the run directory (metrics-start.prom,
    #: metrics-end.prom); with `launch`, the launched server's.
    metrics_url: str | None = None
    #: Route-change subscribers, `subscriber_topics` topics each, in `subscriber_processes` processes; 0 = none.
    subscribers: int = 0
    subscriber_topics: int = 4
    subscriber_processes: int = 1
    #: A broker flaps every this many seconds of the measured window (bench/storm/flaps.py); 0 = never.
    flap_period_s: float = 0.0
    #: The CPUs of the server (when launched here) and of the generator; None: not pinned.
    cores: CorePlan | None = None
    #: An echo of a request counts as its answer (the ceiling as a target: what the generator reaches).
    echo_ok: bool = False

    def validate(self) -> tuple[str, int]:
        """(host, port) of the target, or ValueError naming what is wrong."""
        host, sep, port = self.address.rpartition(":")
        if not sep or not port.isdigit():
            raise ValueError(f"address {self.address!r} must be host:port")
        host = host.strip("[]")
        if not self.allow_remote and not ipaddress.ip_address(socket.gethostbyname(host)).is_loopback:
            raise ValueError(f"{host} is not a loopback address; pass --allow-remote to storm another host")
        if self.mode not in ("open", "closed"):
            raise ValueError("mode must be open or closed")
        if not 0 < self.duration_s <= MAX_DURATION_S or not 0 <= self.warmup_s <= MAX_WARMUP_S:
            raise ValueError(f"duration must be in (0, {MAX_DURATION_S:g}] s and warm-up in [0, {MAX_WARMUP_S:g}] s")
        if not 1 <= self.workers <= 64 or not 1 <= self.connections <= 1024 or not 1 <= self.in_flight <= 4096:
            raise ValueError("workers must be 1..64, connections 1..1024, in-flight 1..4096")
        if self.fleet.brokers * self.fleet.topics_per_broker > MAX_TOPIC_ENTRIES:
            raise ValueError(f"brokers × topics must be <= {MAX_TOPIC_ENTRIES:,} (every broker's registration "
                             "body is held in memory)")
        if self.mode == "open":
            planned = sum(self.fleet.rates().values()) * (self.warmup_s + self.duration_s)
            if planned > self.max_requests:
                raise ValueError(f"the open loop would send {planned:,.0f} requests, over --max-requests "
                                 f"{self.max_requests:,}")
        self._validate_push()
        return host, int(port)

    def _validate_push(self) -> None:
        """Subscribers and flaps; either alone is allowed (the summary says it recorded nothing)."""
        if not 0 <= self.subscribers <= MAX_SUBSCRIBERS:
            raise ValueError(f"subscribers must be 0..{MAX_SUBSCRIBERS}")
        topics = self.fleet.clusters * self.fleet.topics_per_broker
        if self.subscribers and not 1 <= self.subscriber_topics <= topics:
            raise ValueError(f"subscriber topics must be 1..{topics} (the fleet's distinct topics)")
        if self.subscribers and not 1 <= self.subscriber_processes <= min(64, self.subscribers):
            raise ValueError("subscriber processes must be 1..64 and at most the subscribers")
        if self.flap_period_s and not MIN_PERIOD_S <= self.flap_period_s <= self.duration_s:
            raise ValueError(f"flap period must be 0 (off) or {MIN_PERIOD_S:g} s up to the duration "
                             f"({self.duration_s:g} s), so that at least one broker flaps")
        if self.flap_period_s and self.mode != "open":
            raise ValueError("flapping needs --mode open: the closed loop sends each request on the connection "
                             "that answered, so no broker has a connection of its own to close")

    def flap_schedule(self) -> FlapSchedule | None:
        """The run's flaps (None when brokers do not flap): workers and subscribers derive them alike."""
        if not self.flap_period_s:
            return None
        return FlapSchedule.over(self.flap_period_s, self.duration_s, self.fleet.brokers)


@dataclass
class StormResult:
    run_dir: Path
    summary: list[dict]
    #: meta.json's "propagation": the route-change subscribers' view, None without subscribers and flaps.
    propagation: dict | None = None
    #: Cut short by Ctrl-C: `duration_s` is the part measured before it.
    partial: bool = False
    duration_s: float = 0.0
    #: The measured window's resource samples (process, t, cpu_percent, rss_bytes, ...), as resources.parquet.
    resources: list[dict] = field(default_factory=list)


def run_storm(settings: StormSettings) -> StormResult:
    """Run one storm and write its run directory; raises if a worker fails.

    With `settings.launch`, a fresh namesrv is started for the run and stopped after it; its log
    is kept in the run directory as server.log.
    """
    settings.validate()  # before a server is started for nothing
    if settings.launch is None:
        return _storm(settings)
    with tempfile.TemporaryDirectory(prefix="storm-namesrv-") as workdir:
        server = NamesrvProcess(settings.launch, workdir=workdir)
        with server:
            if settings.cores is not None:
                pin(server.pid, settings.cores.server)
            metrics_url = None if server.http_url is None else server.http_url + "/metrics"
            result = _storm(replace(settings, address=server.address, server_pid=server.pid, metrics_url=metrics_url,
                                    extra_meta={**settings.extra_meta, "launched": {"overrides": settings.launch}}))
        shutil.copyfile(server.log_path, result.run_dir / "server.log")
    return result


def _storm(settings: StormSettings) -> StormResult:
    host, port = settings.validate()
    facts = probe_server(settings.address)
    if facts["probe_problem"] and facts["version_ordinal"] is None:
        raise ConnectionError(f"no NameServer at {settings.address}: {facts['probe_problem']}")
    server_pid = settings.server_pid or listening_pid(port)
    own_cpus = os.sched_getaffinity(0)  # given back after the run: a caller (a knee, a test) goes on unpinned
    if settings.cores is not None:
        os.sched_setaffinity(0, settings.cores.generator)
    run_id = settings.run_id or f"storm-{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:6]}"
    run = RunRecorder(run_id)
    flaps = settings.flap_schedule()
    context = multiprocessing.get_context("spawn")
    changed_at = None if flaps is None else new_change_times(context, flaps)
    messages = context.Queue()
    go, stop = context.Event(), context.Event()
    start_value = context.Value("q", 0)
    cut = context.Value("q", 0)
    processes = [context.Process(target=worker_main, args=(plan, messages, go, start_value, changed_at, cut),
                                 name=f"storm-worker-{plan.index}", daemon=True)
                 for plan in _plans(settings, host, port, flaps)]
    topics = choose_topics(settings.fleet, settings.subscribers, settings.subscriber_topics, settings.seed)
    listeners = [context.Process(target=subscribers_main, args=(plan, messages, go, start_value, stop, changed_at),
                                 name=f"storm-subscribers-{plan.index}", daemon=True)
                 for plan in _subscriber_plans(settings, host, port, flaps, topics)]
    load_before = os.getloadavg()
    scrapes: dict[str, bytes | str | None] = {}
    sampler = None
    timed_scrapes: list[threading.Timer] = []
    try:
        try:
            start_shielded_from_sigint(processes)
            warmup_answers = _wait_ready(messages, len(processes), processes, "bring-up registrations")
            start_shielded_from_sigint(listeners)  # once the fleet is up and quiet: no change races a subscription
            subscription_answers = _wait_ready(messages, len(listeners), processes + listeners, "subscriptions")
        except KeyboardInterrupt:
            raise KeyboardInterrupt("interrupted during bring-up, before the measured window: nothing was measured") \
                from None
        start_ns = time.monotonic_ns() + SECOND // 5
        measure_start_ns = start_ns + int(settings.warmup_s * SECOND)
        start_epoch_s = time.time() + (measure_start_ns - time.monotonic_ns()) / SECOND
        start_value.value = start_ns
        go.set()
        trees = {"generator": lambda: [p.pid for p in processes if p.pid]}
        if listeners:
            trees["subscribers"] = lambda: [p.pid for p in listeners if p.pid]
        if server_pid:
            trees["server"] = lambda: [server_pid]
        sampler = ResourceSampler(trees, run.add_resource, measure_start_ns)
        sampler.start()
        # the server's view of the measured window: from its start to near its end, before the fleet unregisters
        to_start = (measure_start_ns - time.monotonic_ns()) / SECOND
        for name, delay in (("metrics-start.prom", to_start), ("metrics-end.prom", to_start + 0.9 * settings.duration_s)):
            timed_scrapes.append(threading.Timer(delay, lambda name=name: scrapes.update(
                {name: _scrape(settings.metrics_url)})))
            timed_scrapes[-1].start()
        done, finished = _collect(settings, run, messages, processes, listeners, stop, measure_start_ns, cut)
    except BaseException:
        for process in processes + listeners:  # the run is abandoned: nothing of theirs is waited for
            if process.pid is not None:
                process.kill()
        raise
    finally:
        os.sched_setaffinity(0, own_cpus)
        stop.set()
        for timer in timed_scrapes:
            timer.cancel()
            timer.join()
        if sampler is not None:
            sampler.stop()
        for process in processes + listeners:
            if process.pid is None:  # never started
                continue
            process.join(timeout=10)
            if process.is_alive():
                process.kill()
                process.join()
    if settings.metrics_url is None:
        scrapes = {"metrics-start.prom": None, "metrics-end.prom": None}
    scrapes.setdefault("metrics-start.prom", "not scraped: the run ended before its measured window began")
    scrapes.setdefault("metrics-end.prom", _scrape(settings.metrics_url))
    measured_s = settings.duration_s
    if cut.value:
        measured_s = min(settings.duration_s, max(0.0, (cut.value - measure_start_ns) / SECOND))
        if measured_s <= 0:
            raise KeyboardInterrupt("interrupted before the measured window began: nothing was measured")
    summary = summarize(run, measured_s)
    propagation = summarize_propagation(run, settings, flaps, changed_at, topics, finished, subscription_answers)
    meta = {
        "tool": "bench/heartbeat_storm.py",
        "started_at": datetime.fromtimestamp(start_epoch_s, timezone.utc).isoformat(timespec="milliseconds"),
        "start_epoch_s": start_epoch_s,
        "mode": settings.mode, "duration_s": measured_s, "warmup_s": settings.warmup_s,
        "drain_s": settings.drain_s, "partial": bool(cut.value), "planned_duration_s": settings.duration_s,
        "load": {"workers": settings.workers, "connections_per_worker": settings.connections,
                 "in_flight_per_connection": settings.in_flight if settings.mode == "closed" else None,
                 "rates_per_s" if settings.mode == "open" else "weights":
                     {request_name(c): r for c, r in settings.fleet.rates().items()},
                 "max_requests": settings.max_requests, "seed": settings.seed,
                 "latency_from": "intended send time" if settings.mode == "open" else "send time",
                 "bring_up_responses": warmup_answers,
                 "workers_done": done},
        "fleet": settings.fleet.describe(),
        "server": _server_meta(settings.address, server_pid, facts),
        "host": machine(load_before),
        "generator": {"loop": "namesrv.fastpath.RequestGenerator", "hdrhistogram": metadata.version("hdrhistogram"),
                      "cores": None if settings.cores is None else settings.cores.describe()},
        "summary": summary,
        "propagation": propagation,
        "server_metrics": {"url": settings.metrics_url,
                           **{name: (name if isinstance(text, bytes) else text) for name, text in scrapes.items()}},
        **settings.extra_meta,
    }
    run_dir = run.write(settings.runs_dir / run_id, meta, start_epoch_s)
    for name, text in scrapes.items():
        if isinstance(text, bytes):
            (run_dir / name).write_bytes(text)
    return StormResult(run_dir, summary, propagation, bool(cut.value), measured_s, run.resource_rows())


def _scrape(url: str | None) -> bytes | str | None:
    """The server's metrics as exposed (bytes), why they could not be read (str), or None without a URL."""
    if url is None:
        return None
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.read(16 << 20)
    except (OSError, ValueError) as exc:
        return f"not scraped: {exc}"


def _plans(settings: StormSettings, host: str, port: int, flaps: FlapSchedule | None) -> list[WorkerPlan]:
    """Split the fleet: brokers round-robin over workers, rates in proportion, the request cap evenly
    (each worker flaps its own brokers)."""
    fleet = settings.fleet
    rates = fleet.rates()
    plans = []
    for index in range(settings.workers):
        brokers = len(range(index, fleet.brokers, settings.workers))
        share = {code: rate * (brokers / fleet.brokers if code != ROUTE else 1 / settings.workers)
                 for code, rate in rates.items()}
        plans.append(WorkerPlan(
            index=index, workers=settings.workers, host=host, port=port, fleet=fleet, mode=settings.mode,
            rates=share if settings.mode == "open" else {}, weights=rates if settings.mode == "closed" else {},
            connections=settings.connections, in_flight=settings.in_flight, warmup_s=settings.warmup_s,
            duration_s=settings.duration_s, drain_s=settings.drain_s,
            max_requests=settings.max_requests // settings.workers, seed=settings.seed, flaps=flaps,
            cpus=None if settings.cores is None else settings.cores.generator, echo_ok=settings.echo_ok))
    return plans


def _subscriber_plans(settings: StormSettings, host: str, port: int, flaps: FlapSchedule | None,
                      topics: list[tuple[str, ...]]) -> list[SubscriberPlan]:
    """The subscribers round-robin over their processes (none without subscribers)."""
    count = settings.subscriber_processes if topics else 0
    wait_s = settings.warmup_s + settings.duration_s + settings.drain_s + 120
    return [SubscriberPlan(index=index, host=host, port=port, fleet=settings.fleet, topics=tuple(topics[index::count]),
                           flaps=flaps, warmup_s=settings.warmup_s, stop_timeout_s=wait_s,
                           cpus=None if settings.cores is None else settings.cores.generator)
            for index in range(count)]


def _wait_ready(messages, count: int, processes, what: str) -> dict[str, int]:
    """Wait until `count` processes are ready (workers: connected and their brokers up; subscriber
    processes: subscribed); their answers (`what`) by response code."""
    answers: dict[str, int] = {}
    ready = 0
    deadline = time.monotonic() + 120
    while ready < count:
        kind, worker, payload = _next_message(messages, deadline, processes)
        if kind == "ready":
            ready += 1
            for name, n in payload.items():
                answers[name] = answers.get(name, 0) + n
    if set(answers) - {"SUCCESS"}:
        log.warning("%s were not all answered SUCCESS: %s", what, answers)
    return answers


def _next_message(messages, deadline: float, processes) -> tuple:
    while True:
        try:
            message = messages.get(timeout=0.25)
        except queue.Empty:
            if time.monotonic() > deadline:
                raise TimeoutError("storm workers stopped reporting") from None
            dead = [p for p in processes if p.exitcode not in (None, 0)]
            if dead:
                raise RuntimeError(f"storm process {dead[0].name} died with exit code {dead[0].exitcode}")
            continue
        if message[0] == "error":
            raise RuntimeError(f"storm {message[1]} failed:\n{message[2]}")
        if message[0] == "delta":
            return "delta", message[1].worker, message[1]
        return message


def _collect(settings: StormSettings, run: RunRecorder, messages, workers, listeners, stop,
             measure_start_ns: int, cut) -> tuple[list[dict], list[dict]]:
    """Merge deltas until every worker is done, then end the subscribers (`stop`: no change is coming)
    and merge theirs; drive the progress bar meanwhile. The workers' and subscriber processes' reports.

    The first Ctrl-C moves the end to now (`cut`): the workers finish early and report as usual."""
    total_s = settings.warmup_s + settings.duration_s
    deadline = time.monotonic() + total_s + settings.drain_s + 60
    processes = workers + listeners
    done: list[dict] = []
    finished: list[dict] = []
    sent_this_second = 0
    bar = tqdm(total=round(total_s), unit="s", disable=not settings.progress, dynamic_ncols=True,
               bar_format="{l_bar}{bar}| {n_fmt}/{total_fmt} s [{elapsed}<{remaining}{postfix}]")
    shown_second = -int(settings.warmup_s)
    try:
        while len(done) < len(workers) or len(finished) < len(listeners):
            try:
                kind, _, payload = _next_message(messages, deadline, processes)
            except KeyboardInterrupt:
                if cut.value:
                    raise
                cut.value = time.monotonic_ns()
                deadline = time.monotonic() + 30
                bar.write("interrupted: ending the run now and keeping what was measured (Ctrl-C again abandons it)",
                          file=sys.stderr)
                continue
            if kind == "delta":
                payload.apply_to(run)
                sent_this_second += payload.sent
            elif kind == "done":
                done.append(payload)
                if len(done) == len(workers):
                    stop.set()
            elif kind == "subscribers-done":
                finished.append(payload)
            second = (time.monotonic_ns() - measure_start_ns) // SECOND
            if second > shown_second and bar.n < bar.total:
                bar.update(min(second - shown_second, bar.total - bar.n))
                bar.set_postfix_str(_progress_text(run, second - 1, sent_this_second), refresh=True)
                shown_second, sent_this_second = second, 0
    finally:
        bar.close()
    return done, finished


_SHORT_NAMES = {REGISTER: "register", HEARTBEAT: "heartbeat", ROUTE: "route"}


def _progress_text(run: RunRecorder, interval: int, sent: int) -> str:
    if interval < 0:
        return f"warm-up, sent {sent}/s"
    parts = [f"sent {sent}/s"]
    for code in run.request_codes():
        histogram = run.interval_histogram("latency", interval, code)
        if histogram is not None and histogram.get_total_count():
            parts.append(f"{_SHORT_NAMES.get(code, request_name(code))} {histogram.get_total_count()}/s "
                         f"p99 {histogram.get_value_at_percentile(99) / 1000:.1f}ms")
    pushes = run.interval_histogram(PROPAGATION, interval, ROUTE_CHANGED)
    if pushes is not None and pushes.get_total_count():
        parts.append(f"push p99 {pushes.get_value_at_percentile(99) / 1000:.1f}ms")
    return ", ".join(parts)


def summarize(run: RunRecorder, duration_s: float) -> list[dict]:
    """Per request code: throughput and percentiles of the merged run histogram, errors. A code sent
    in the window but never answered (say every connection was closed) has a row too: all errors,
    no percentiles."""
    counts = run.response_counts()
    rows = []
    everything = new_histogram()
    for code in sorted(set(run.request_codes()) | {code for code, _ in counts}):
        histogram = run.merged("latency", code)
        everything.add(histogram)
        requests = sum(n for (c, _), n in counts.items() if c == code)
        errors = sum(n for (c, r), n in counts.items() if c == code and r != 0)
        rows.append(_row(request_name(code), histogram, duration_s, requests, errors, run.merged("send_delay", code)))
    if len(rows) > 1:
        requests = sum(counts.values())
        errors = sum(n for (_, r), n in counts.items() if r != 0)
        rows.append(_row("ALL", everything, duration_s, requests, errors, None))
    return rows


def _row(name: str, histogram: HdrHistogram, duration_s: float, requests: int, errors: int,
         send_delay: HdrHistogram | None) -> dict:
    """`send_delay`: the kind's histogram of the generator's own lateness (intended -> actual send), whose
    p99.9 shows how much of the latency's p99.9 is the generator's, not the server's; None for "ALL"."""
    delays = {} if send_delay is None else {
        key: send_delay.get_value_at_percentile(p) / 1000.0 for key, p in (("p99_ms", 99), ("p99_9_ms", 99.9))}
    return {"request": name, "requests": requests, "answered": histogram.get_total_count(),
            "throughput_per_s": histogram.get_total_count() / duration_s, **_milliseconds(histogram, (50, 99, 99.9)),
            "errors": errors, "send_delay_p99_ms": delays.get("p99_ms"), "send_delay_p99_9_ms": delays.get("p99_9_ms")}


def _milliseconds(histogram, percentiles: tuple[float, ...]) -> dict[str, float | None]:
    """{"p50_ms": ..., "p99_9_ms": ..., "max_ms": ...} of a histogram of microseconds (None when empty)."""
    empty = not histogram.get_total_count()
    stats = {f"p{p:g}_ms".replace(".", "_"): None if empty else histogram.get_value_at_percentile(p) / 1000.0
             for p in percentiles}
    stats["max_ms"] = None if empty else histogram.get_max_value() / 1000.0
    return stats


def summarize_propagation(run: RunRecorder, settings: StormSettings, flaps: FlapSchedule | None,
                          changed_at: Sequence[int] | None, topics: list[tuple[str, ...]], finished: list[dict],
                          subscriptions: dict[str, int]) -> dict | None:
    """The subscribers' view: propagation percentiles of the merged histogram, sightings against the
    ones expected, versions missed, subscribers dropped to polling. None without subscribers and flaps;
    with only one of them, a note says why nothing was recorded."""
    if not settings.subscribers and flaps is None:
        return None
    changes = 0 if flaps is None else len(flaps.changes_made(changed_at))
    summary: dict = {"subscribers": settings.subscribers, "subscriber_topics": settings.subscriber_topics,
                     "subscriber_processes": settings.subscriber_processes, "flap_period_s": settings.flap_period_s,
                     "flaps": 0 if flaps is None else flaps.count, "changes": changes}
    if not settings.subscribers:
        return {**summary, "note": "brokers flapped but nobody subscribed (--subscribers 0): no propagation recorded"}
    counts = {count.name: sum(report[count.name] for report in finished) for count in fields(PushCounts)}
    histogram = run.merged(PROPAGATION, ROUTE_CHANGED)
    recorded = histogram.get_total_count()
    summary.update(subscription_responses=subscriptions, count=recorded,
                   sightings_expected=0 if flaps is None else expected_sightings(settings.fleet, topics, flaps,
                                                                                 changed_at),
                   **_milliseconds(histogram, (50, 90, 99, 99.9)),
                   versions_missed=counts["versions_missed"], subscribers_dropped=counts["dropped"],
                   pushes=counts["pushes"], changes_pushed=counts["changes"],
                   subscriber_connections_lost=counts["connections_lost"])
    if flaps is None:
        summary["note"] = "no broker flapped (--flap-period 0): no route changed, no propagation recorded"
    return summary


def format_summary(rows: list[dict]) -> str:
    """The end-of-run table, plus a warning when the generator itself sent late."""
    header = f"{'request':<24}{'answered':>10}{'req/s':>10}{'p50 ms':>9}{'p99 ms':>9}{'p99.9 ms':>10}" \
             f"{'max ms':>9}{'errors':>8}"
    lines = [header]
    for row in rows:
        lines.append(f"{row['request']:<24}{row['answered']:>10}{row['throughput_per_s']:>10.0f}"
                     f"{_cell(row['p50_ms'], 9)}{_cell(row['p99_ms'], 9)}{_cell(row['p99_9_ms'], 10)}"
                     f"{_cell(row['max_ms'], 9)}{row['errors']:>8}")
    delays = [row["send_delay_p99_ms"] for row in rows if row["send_delay_p99_ms"] is not None]
    if delays and max(delays) * 1000 > SEND_DELAY_WARNING_US:
        lines.append(f"note: the generator sent up to {max(delays):.1f} ms late (send delay p99): the latencies above "
                     "include that lag (CPU contention on this host, or too few --workers)")
    return "\n".join(lines)


def _cell(milliseconds: float | None, width: int) -> str:
    return f"{'–':>{width}}" if milliseconds is None else f"{milliseconds:>{width}.3f}"


def format_propagation(propagation: dict | None) -> str:
    """The end-of-run line on route-change push ("" when the run had neither subscribers nor flaps)."""
    if propagation is None:
        return ""
    if "note" in propagation:
        return f"route-change propagation: {propagation['note']}"
    if not propagation["count"]:
        timing = "no change was seen by any subscriber"
    else:
        timing = (f"p50 {propagation['p50_ms']:.3f} ms, p99 {propagation['p99_ms']:.3f} ms, "
                  f"max {propagation['max_ms']:.3f} ms")
    return (f"route-change propagation to {propagation['subscribers']} subscribers, {propagation['changes']} "
            f"changes: {propagation['count']} of {propagation['sightings_expected']} expected sightings, {timing}; "
            f"versions missed {propagation['versions_missed']}, subscribers dropped to polling "
            f"{propagation['subscribers_dropped']}")


def probe_server(address: str) -> dict:
    """What the storm records about its target before the run: the server's own answer to
    GET_NAMESRV_CONFIG (thread pools, selector threads; Apache RocketMQ's NameServer answers it
    too) and the version ordinal it stamps on responses; `probe_problem` says why it is incomplete."""
    facts: dict = {"version_ordinal": None, "version": None, "config": {}, "probe_problem": None}
    try:
        with Client(address, timeout=5.0) as client:
            response = client.call(RemotingCommand.request(RequestCode.GET_NAMESRV_CONFIG, opaque=1))
    except (OSError, ConnectionError) as exc:
        facts["probe_problem"] = f"cannot reach {address}: {exc}"
        return facts
    facts["version_ordinal"] = response.version
    try:
        facts["version"] = Version(response.version).name
    except ValueError:
        facts["version"] = f"ordinal {response.version}"
    if response.is_response and response.code == ResponseCode.SUCCESS and response.body:
        facts["config"] = parse_properties(response.body.decode("utf-8", errors="replace"))
    else:
        facts["probe_problem"] = f"GET_NAMESRV_CONFIG answered code {response.code}: {response.remark}"
    return facts


def _server_meta(address: str, pid: int | None, facts: dict) -> dict:
    cmdline: list[str] = []
    if pid:
        try:
            cmdline = psutil.Process(pid).cmdline()
        except psutil.Error:
            cmdline = []
    joined = " ".join(cmdline)
    if cmdline and Path(cmdline[0]).name.startswith("java"):
        implementation = "java"  # Apache RocketMQ's NamesrvStartup (its class path says "namesrv" too)
    elif "namesrv" in joined:
        implementation = "namesrv"
    else:
        implementation = "unknown"
    return {"address": address, "pid": pid, "cmdline": cmdline, "implementation": implementation,
            "namesrv_version": namesrv.__version__ if implementation == "namesrv" else None, **facts,
            "thread_config": thread_config(facts["config"])}


# ---------------------------------------------------------------- CLI


def build_parser(add_help: bool = True, prog: str | None = None) -> argparse.ArgumentParser:
    """The storm's options (the knee and the sweep reuse them as a parent parser)."""
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0], add_help=add_help,
                                     formatter_class=cli.HelpFormatter)
    defaults = FleetShape()
    target = parser.add_argument_group("target and run")
    cli.add_namesrv(target, launch_flag=True, names=("--namesrv", "--address"), default="127.0.0.1:9876")
    target.add_argument("--metrics-url", help="the server's /metrics, scraped at the start and end of the run "
                        "(default with --launch: the launched server's)")
    target.add_argument("--allow-remote", action="store_true", help="allow a non-loopback target")
    target.add_argument("--server-pid", type=int, help="pid whose CPU and RSS are sampled (when absent: whoever "
                        "listens on the port)")
    target.add_argument("--pin", choices=("auto", "off"), default="off",
                        help="auto: on a host of two CPUs or more, the server this run launches and the generator "
                        "each on CPUs of their own (half each); off: wherever the scheduler puts them")
    target.add_argument("--mode", choices=("open", "closed"), default="open",
                        help="open: each request kind at its fleet rate, latency from the intended send time; "
                        "closed: --in-flight requests per connection, as fast as answered")
    cli.add_seconds(target, 30.0, "measured seconds", "--duration")
    target.add_argument("--warmup", type=float, default=5.0, help="unmeasured seconds before")
    target.add_argument("--drain", type=float, default=5.0, help="seconds to wait for late answers")
    target.add_argument("--workers", type=int, default=max(1, (os.cpu_count() or 2) // 2),
                        help="generator processes")
    target.add_argument("--connections", type=int, default=4, help="connections per worker")
    target.add_argument("--in-flight", type=int, default=32, help="closed loop: requests in flight per connection")
    target.add_argument("--max-requests", type=int, default=20_000_000, help="hard cap on requests sent")
    target.add_argument("--out", type=Path, help="the run directory to write (when absent: --runs-dir/--run-id)")
    target.add_argument("--runs-dir", type=Path, default=Path("runs"), help="where the run directory goes")
    target.add_argument("--run-id", help="run directory name (when absent: storm-<time>-<random>)")
    target.add_argument("--seed", type=int, default=1, help="seed of the random topic choices and churn")
    target.add_argument("--no-progress", action="store_true", help="no progress bar")
    fleet = parser.add_argument_group("fleet shape")
    fleet.add_argument("--brokers", type=int, default=defaults.brokers, help="brokers, masters and slaves")
    fleet.add_argument("--slaves-per-master", type=int, default=defaults.slaves_per_master,
                       help="slaves in each broker group beside its master")
    fleet.add_argument("--topics", type=int, default=defaults.topics_per_broker, help="topics per broker")
    fleet.add_argument("--queues", type=int, default=defaults.queues_per_topic, help="queues per topic")
    fleet.add_argument("--clusters", type=int, default=defaults.clusters,
                       help="clusters the broker groups are spread over; each has its own topics")
    fleet.add_argument("--register-period", type=float, default=defaults.register_period_s,
                       help="seconds between a broker's registrations (RocketMQ: 30; 0 = off)")
    fleet.add_argument("--heartbeat-period", type=float, default=defaults.heartbeat_period_s,
                       help="seconds between a broker's BROKER_HEARTBEATs (acting master: 1; 0 = off)")
    fleet.add_argument("--route-clients", type=int, default=defaults.route_clients,
                       help="producers/consumers asking for routes (GET_ROUTEINFO_BY_TOPIC)")
    fleet.add_argument("--route-poll-period", type=float, default=defaults.route_poll_period_s,
                       help="seconds between a client's route queries (RocketMQ: 30; 0 = off)")
    fleet.add_argument("--register-churn", type=float, default=defaults.register_churn,
                       help="share of registrations carrying a changed topic-table version (0..1)")
    fleet.add_argument("--serialize", choices=("json", "rocketmq"), default=defaults.serialize,
                       help="request header codec")
    push = parser.add_argument_group("route-change push")
    push.add_argument("--subscribers", type=int, default=0,
                      help="connections subscribed to route changes (SUBSCRIBE_ROUTE_CHANGES); 0 = none")
    push.add_argument("--subscriber-topics", type=int, default=4,
                      help="topics each subscriber subscribes to, drawn from the fleet's with --seed")
    push.add_argument("--subscriber-processes", type=int, default=1, help="processes the subscribers run in")
    push.add_argument("--flap-period", type=float, default=0.0,
                      help="every this many seconds of the measured window a broker closes its connection and "
                      "registers again half a period later (open loop only); 0 = off")
    return parser


def settings_from_args(args: argparse.Namespace) -> StormSettings:
    fleet = FleetShape(brokers=args.brokers, slaves_per_master=args.slaves_per_master, topics_per_broker=args.topics,
                       queues_per_topic=args.queues, clusters=args.clusters, register_period_s=args.register_period,
                       heartbeat_period_s=args.heartbeat_period, route_clients=args.route_clients,
                       route_poll_period_s=args.route_poll_period, register_churn=args.register_churn,
                       serialize=args.serialize)
    runs_dir, run_id = (args.out.parent, args.out.name) if args.out else (args.runs_dir, args.run_id)
    return StormSettings(address=args.namesrv, fleet=fleet, mode=args.mode, duration_s=args.seconds,
                         warmup_s=args.warmup, drain_s=args.drain, workers=args.workers, connections=args.connections,
                         in_flight=args.in_flight, max_requests=args.max_requests, runs_dir=runs_dir,
                         run_id=run_id, server_pid=args.server_pid, allow_remote=args.allow_remote,
                         progress=not args.no_progress, seed=args.seed,
                         launch=cli.parse_overrides(args.server_set) if args.launch else None,
                         metrics_url=args.metrics_url, subscribers=args.subscribers,
                         subscriber_topics=args.subscriber_topics, subscriber_processes=args.subscriber_processes,
                         flap_period_s=args.flap_period, cores=core_plan(args.pin))


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    args = build_parser(prog=prog).parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    print(machine_line(machine()), flush=True)
    try:
        settings = settings_from_args(args)
        result = run_storm(settings)
    except (ValueError, ConnectionError, NamesrvStartError) as exc:
        print(f"heartbeat_storm: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as exc:
        print(f"heartbeat_storm: {exc or 'interrupted'}", file=sys.stderr)
        return INTERRUPTED
    print(format_summary(result.summary))
    server_cpu = step_facts(result.summary, result.resources, offered_per_s=0.0, duration_s=result.duration_s,
                            workers=settings.workers, slo=Slo()).server_cpu_us_per_answer
    print(f"server CPU: {server_cpu:.1f} µs per answered request" if server_cpu is not None else
          "server CPU: not sampled (a server of another host, or no --server-pid)")
    if result.propagation is not None:
        print(format_propagation(result.propagation))
    if result.partial:
        print(f"partial run (Ctrl-C): {result.duration_s:.1f} s of {settings.duration_s:g} s measured and kept")
    print(f"run directory: {result.run_dir}")
    return INTERRUPTED if result.partial else 0


if __name__ == "__main__":
    raise SystemExit(main())
