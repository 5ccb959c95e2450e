"""One storm worker process: its share of the fleet, over connections of its own, driven by the
generator loop of the extension (namesrv.fastpath.RequestGenerator).

Life: connect, bring its brokers up (one unmeasured registration each), report ready, wait for
the coordinator's start time, then run the open or closed loop until the end time, drain, and
ship the last delta. Every second it ships what it recorded (`Delta`) to the coordinator.

Python decides what is sent and when, a few milliseconds ahead (`WorkerRequests`: numpy arrays of
intended times, templates and connections); the generator loop sends each request at its
intended time, reads the answers and counts latencies in HDR buckets, with no Python call per
request. So one worker on a core of its own is not what bounds a knee below ~150k requests/s.

Ctrl-C reaches the coordinator only: storm processes are started with SIGINT ignored
(`start_shielded_from_sigint`), so that holds from their first instruction. The coordinator
writes the moment it was pressed into the shared `cut` value, and the worker ends its loop
there, drains briefly and reports as usual, so what was measured is kept.

With flaps (bench/storm/flaps.py) each of its brokers that is to flap has a connection of its
own (as a real broker does), so closing it takes exactly that broker's routes away; while the
broker is down its turns to register or heartbeat pass without a request.
"""
from __future__ import annotations

import logging
import os
import signal
import socket
import sys
import time
import traceback
from collections import deque
from collections.abc import Callable, Iterable, MutableSequence
from dataclasses import dataclass, field
from multiprocessing.process import BaseProcess
from multiprocessing.queues import Queue
from multiprocessing.synchronize import Event

import numpy as np

from bench.lib.fleet import HEARTBEAT, REGISTER, ROUTE, FleetShape, heartbeat_template, register_body, \
    register_template, route_template
from bench.lib.hdr import generator_layout
from bench.lib.output import response_name
from bench.storm.flaps import CLOSE, REGISTER_AGAIN, FlapSchedule, change_index
from bench.storm.recorder import Delta
from namesrv.fastpath import RequestGenerator
from namesrv.protocol import DataVersion

log = logging.getLogger(__name__)
SECOND = 1_000_000_000
#: A recorder's measure start before the coordinator's start signal: nothing counts as measured yet.
NOT_STARTED = sys.maxsize // 4
#: Longest wait for the coordinator's start signal, seconds.
START_TIMEOUT_S = 120.0
#: After Ctrl-C, how long a worker waits for answers to what it already sent, seconds.
CUT_DRAIN_S = 1.0
#: How far ahead the open loop's requests are scheduled, ns: the Python loop's turn.
SLICE_NS = 5_000_000
#: A closed loop's request mix, drawn once per connection and cycled.
CYCLE = 1 << 14
#: A delta is shipped this long after each interval boundary, ns (answers of the interval's end arrive).
SHIP_AFTER_NS = 20_000_000


@dataclass(frozen=True)
class WorkerPlan:
    """What one worker does; `rates` (open loop, per second) or `weights` (closed loop mix) per code."""

    index: int
    workers: int
    host: str
    port: int
    fleet: FleetShape
    mode: str
    rates: dict[int, float] = field(default_factory=dict)
    weights: dict[int, float] = field(default_factory=dict)
    connections: int = 4
    in_flight: int = 16
    warmup_s: float = 5.0
    duration_s: float = 30.0
    drain_s: float = 5.0
    max_requests: int = 10_000_000
    seed: int = 0
    flaps: FlapSchedule | None = None
    #: The CPUs the worker runs on (None: wherever the coordinator runs).
    cpus: tuple[int, ...] | None = None
    #: An echo of a request counts as its answer (the ceiling as a target).
    echo_ok: bool = False

    @property
    def broker_indexes(self) -> range:
        return range(self.index, self.fleet.brokers, self.workers)

    def slot_of(self, broker: int) -> int:
        """Position of fleet broker `broker` (one of this worker's) in `broker_indexes`."""
        return broker // self.workers

    def own_flaps(self) -> list[int]:
        """The flaps of this worker's brokers, in time order."""
        if self.flaps is None:
            return []
        return [flap for flap in range(self.flaps.count) if self.flaps.broker(flap) % self.workers == self.index]


class WorkerRequests:
    """The worker's request templates and how each code picks its next ones, many at a time.

    Each broker has its own DataVersion (stamped at its start, as a real broker's); with churn it
    also has a second version, and a churned registration switches to the other one. Brokers take
    turns (each registers once per period); clients ask for random topics. A broker marked down
    (`down`) sends nothing: its turns pass.
    """

    def __init__(self, plan: WorkerPlan, generator: RequestGenerator) -> None:
        fleet = plan.fleet
        indexes = list(plan.broker_indexes) or [plan.index % fleet.brokers]
        epoch_ms = int(time.time() * 1000)
        versions = 2 if fleet.register_churn > 0 else 1
        register = []
        for index in indexes:
            broker = fleet.broker(index)
            bodies = [register_body(fleet, broker.cluster, DataVersion(counter, epoch_ms + index, 0))
                      for counter in range(1, versions + 1)]
            register.append([generator.template(*register_template(fleet, broker, body).parts()) for body in bodies])
        #: Template ids: [slot, version] of registrations, [slot] of heartbeats, the route queries' by topic.
        self.register = np.array(register, dtype=np.int32).reshape(len(indexes), versions)
        self.heartbeat = np.array([generator.template(*heartbeat_template(fleet, fleet.broker(i)).parts())
                                   for i in indexes], dtype=np.int32)
        self.route = np.array([generator.template(*route_template(fleet, topic).parts())
                               for topic in fleet.all_topics()], dtype=np.int32)
        self._churn = fleet.register_churn
        self._version = np.zeros(len(indexes), dtype=np.int64)
        self._rng = np.random.default_rng(plan.seed * 1000 + plan.index)
        self._turn = {REGISTER: 0, HEARTBEAT: 0}
        #: Slots of the brokers that are down (flapping).
        self.down: set[int] = set()
        #: Turns that passed because their broker was down.
        self.skipped = 0

    @property
    def slots(self) -> int:
        return len(self.heartbeat)

    def bring_up(self) -> np.ndarray:
        """Each broker's first registration."""
        return self.register[:, 0].copy()

    def registration(self, slot: int) -> int:
        """The registration broker `slot` sends now (its current DataVersion)."""
        return int(self.register[slot, self._version[slot]])

    def next(self, code: int, count: int) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        """(templates, broker slots (-1: a client's), which of the `count` turns send: None for all) of
        the next `count` requests of `code`; a down broker's turns pass."""
        if code == ROUTE:
            return (self.route[self._rng.integers(0, len(self.route), count)], np.full(count, -1, dtype=np.int64),
                    None)
        turns = self._turn[code] + np.arange(count)
        self._turn[code] += count
        slots, up = turns % self.slots, None
        if self.down:
            up = ~np.isin(slots, list(self.down))
            self.skipped += int(count - up.sum())
            slots = slots[up]
        if code == HEARTBEAT:
            return self.heartbeat[slots], slots, up
        return self.register[slots, self._versions(slots)], slots, up

    def _versions(self, slots: np.ndarray) -> np.ndarray:
        """Each registration's version: churned ones switch their broker to its other version, in turn."""
        if not self._churn or not len(slots):
            return self._version[slots]
        flips = (self._rng.random(len(slots)) < self._churn).astype(np.int64)
        order = np.argsort(slots, kind="stable")
        grouped, flipped = slots[order], flips[order]
        running = np.cumsum(flipped)
        starts = np.r_[0, np.flatnonzero(np.diff(grouped)) + 1]
        before = np.repeat(running[starts] - flipped[starts], np.diff(np.r_[starts, len(grouped)]))
        versions = np.empty_like(slots)
        versions[order] = (self._version[grouped] + running - before) % 2
        ends = np.r_[starts[1:] - 1, len(grouped) - 1]
        self._version[grouped[ends]] = versions[order][ends]
        return versions


class Worker:
    def __init__(self, plan: WorkerPlan, out: Queue, changed_at: MutableSequence[int] | None = None,
                 cut=None) -> None:
        self.plan = plan
        self.out = out
        self.changed_at = changed_at
        #: Shared monotonic ns at which the coordinator cut the run short (0: not cut); None in tests.
        self.cut = cut
        self.generator = RequestGenerator(*generator_layout(), echo_ok=plan.echo_ok)
        self.requests = WorkerRequests(plan, self.generator)
        #: Shared by route queries and the brokers without a connection of their own.
        self.shared: list[int] = []
        #: Broker slot -> its own connection (the brokers that flap).
        self.own: dict[int, int] = {}
        self._sockets: dict[int, socket.socket] = {}
        self._next_shared = 0
        self.start_ns = self.end_ns = NOT_STARTED
        self._shipped_sent = 0
        self._unmeasured: dict[int, int] = {}
        self._next_ship = NOT_STARTED

    # ---- life cycle
    def run(self, go: Event, start_value) -> None:
        if self.plan.cpus:
            os.sched_setaffinity(0, self.plan.cpus)
        self.shared = [self._connect() for _ in range(self.plan.connections)]
        flaps = self.plan.own_flaps()
        for slot in sorted({self.plan.slot_of(self.plan.flaps.broker(flap)) for flap in flaps}):
            self.own[slot] = self._connect()
        self._bring_up()
        self._delta()  # the bring-up's answers, before the window: tallied by response code
        self.out.put(("ready", self.plan.index, self._names(self._unmeasured)))
        self._unmeasured.clear()
        self.start_ns = start_ns = wait_for_start(go, start_value)
        self.generator.measure_start_ns = start_ns + int(self.plan.warmup_s * SECOND)
        self.end_ns = self.generator.measure_start_ns + int(self.plan.duration_s * SECOND)
        self._next_ship = self._ship_time(time.monotonic_ns())
        if self.plan.mode == "open":
            self._open_loop(start_ns, deque(flaps))
        else:
            self._closed_loop(start_ns)
        self._drain()
        connections = [*self.shared, *self.own.values()]
        lost = sum(not self.generator.alive(conn) for conn in connections)
        for conn in connections:
            self.generator.drop(conn)
        self.out.put(("delta", self._delta()))
        for sock in self._sockets.values():
            sock.close()
        self.out.put(("done", self.plan.index, {"sent": self.generator.sent, "connections_lost": lost,
                                                 "skipped_while_down": self.requests.skipped, "flaps": len(flaps),
                                                 "warmup_responses": self._names(self._unmeasured)}))

    def _connect(self) -> int:
        sock = socket.create_connection((self.plan.host, self.plan.port), timeout=5)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.setblocking(False)
        conn = self.generator.connect(sock.fileno())
        self._sockets[conn] = sock
        return conn

    def hang_up(self, slot: int) -> None:
        """Close broker `slot`'s own connection now, as a broker going down does (the peer sees the end of the
        stream at once), and open the one it will come back on."""
        conn = self.own[slot]
        sock = self._sockets.pop(conn)
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.generator.drop(conn)
        sock.close()
        self.own[slot] = self._connect()

    def _bring_up(self) -> None:
        """Register each of this worker's brokers once, so routes exist before anyone asks."""
        templates = self.requests.bring_up()
        now = time.monotonic_ns()
        self.schedule(np.full(len(templates), now, dtype=np.int64), templates, np.arange(len(templates)))
        self._pump_until_answered(30.0, lambda: self.generator.pending + self.generator.scheduled)

    def _drain(self) -> None:
        drain_s = min(self.plan.drain_s, CUT_DRAIN_S) if self._cut_short() else self.plan.drain_s
        self._pump_until_answered(drain_s, lambda: self.generator.pending)

    def _pump_until_answered(self, timeout_s: float, left: Callable[[], int]) -> None:
        deadline = time.monotonic_ns() + int(timeout_s * SECOND)
        while left() and (now := time.monotonic_ns()) < deadline:
            self.generator.pump(min(deadline, now + 10_000_000))
            self._ship_if_due()

    def _cut_short(self) -> bool:
        """Whether the coordinator cut the run (Ctrl-C); the end moves to the moment it did."""
        if self.cut is None or not self.cut.value:
            return False
        if self.cut.value < self.end_ns:
            self.end_ns = self.cut.value
            self.generator.cancel(self.end_ns)
        return True

    # ---- open loop: requests at their intended times, latency from those times
    def _open_loop(self, start_ns: int, flaps: deque[int]) -> None:
        """Each code is a constant-rate stream; worker i's stream is offset by i/W of a period so the
        workers' streams interleave evenly. Late sends go out at once (never skipped: only a down
        broker's turns pass): their lateness is part of the latency they record. Nothing is scheduled
        past this worker's next flap event, so a flap's requests follow it in time."""
        streams = [_Stream(code, SECOND / rate, start_ns + SECOND / rate * self.plan.index / self.plan.workers)
                   for code, rate in sorted(self.plan.rates.items()) if rate > 0]
        horizon = start_ns
        flapping: _Flap | None = None
        while True:
            if self._cut_short():  # the flaps still to come are not made; one half made stays so
                flaps.clear()
                flapping = None
            now = time.monotonic_ns()
            if flapping is None and flaps:
                flapping = _Flap(flaps.popleft(), self.plan, self.generator.measure_start_ns)
            if flapping is not None and flapping.step(self, now):
                flapping = None
                continue
            next_event = self.end_ns if flapping is None else flapping.next_event_ns
            if horizon < min(now + SLICE_NS, self.end_ns, next_event):
                horizon = self._fill(streams, min(now + SLICE_NS, self.end_ns, next_event))
            if horizon >= self.end_ns and not self.generator.scheduled and flapping is None:
                return
            self.generator.pump(min(now + SLICE_NS, self._next_ship, next_event))
            self._ship_if_due()

    def _fill(self, streams: list[_Stream], until: int) -> int:
        """Schedule every request intended before `until` not scheduled yet; the new horizon (the end
        of the run once the request budget is spent)."""
        room = self.plan.max_requests - self.generator.sent - self.generator.scheduled
        if room <= 0:
            return self.end_ns
        parts = []
        for stream in streams:
            intended = stream.take(until)
            if len(intended):
                templates, slots, up = self.requests.next(stream.code, len(intended))
                parts.append((intended if up is None else intended[up], templates, slots))
        if parts:
            intended = np.concatenate([part[0] for part in parts])
            order = np.argsort(intended, kind="stable")[:room]
            self.schedule(intended[order], np.concatenate([part[1] for part in parts])[order],
                           np.concatenate([part[2] for part in parts])[order])
        return until

    def schedule(self, intended: np.ndarray, templates: np.ndarray, slots: np.ndarray) -> None:
        """Schedule requests; a broker's go on its own connection, the rest round-robin on the shared ones."""
        conns = np.empty(len(slots), dtype=np.int32)
        shared = np.ones(len(slots), dtype=bool)
        for slot, conn in self.own.items():
            mine = slots == slot
            conns[mine] = conn
            shared &= ~mine
        count = int(shared.sum())
        conns[shared] = np.array(self.shared, dtype=np.int32)[(self._next_shared + np.arange(count)) % len(self.shared)]
        self._next_shared = (self._next_shared + count) % len(self.shared)
        self.generator.schedule(intended.astype(np.int64), templates.astype(np.int32), conns)

    # ---- closed loop: a fixed number in flight per connection, each answer sends the next
    def _closed_loop(self, start_ns: int) -> None:
        time.sleep(max(0.0, (start_ns - time.monotonic_ns()) / SECOND))
        codes = sorted(self.plan.weights)
        weights = np.array([self.plan.weights[c] for c in codes], dtype=float)
        rng = np.random.default_rng(self.plan.seed * 1000 + self.plan.index + 1)
        now = time.monotonic_ns()
        for conn in self.shared:  # (no broker is down: flaps need the open loop)
            drawn = rng.choice(len(codes), size=CYCLE, p=weights / weights.sum())
            cycle = np.empty(CYCLE, dtype=np.int32)
            for i, code in enumerate(codes):
                mine = np.flatnonzero(drawn == i)
                cycle[mine] = self.requests.next(code, len(mine))[0]
            self.generator.refill(conn, cycle, min(self.plan.in_flight, self.plan.max_requests), now, self.end_ns)
        while (now := time.monotonic_ns()) < self.end_ns and self.generator.sent < self.plan.max_requests:
            if self._cut_short() or not any(self.generator.alive(conn) for conn in self.shared):
                break
            self.generator.pump(min(self.end_ns, self._next_ship, now + 50_000_000))
            self._ship_if_due()

    # ---- shipping: what was recorded, once a second
    def _ship_time(self, now: int) -> int:
        start = self.generator.measure_start_ns
        return start + ((now - start) // SECOND + 1) * SECOND + SHIP_AFTER_NS

    def _ship_if_due(self) -> None:
        now = time.monotonic_ns()
        if now >= self._next_ship:
            self.out.put(("delta", self._delta()))
            self._next_ship = self._ship_time(now)

    def _delta(self) -> Delta:
        """What the loop recorded since the last delta; the response codes of requests intended before the
        window (the bring-up's, the warm-up's) are tallied here, the rest the coordinator sums."""
        histograms, responses = self.generator.take()
        keys = np.frombuffer(responses, dtype=np.int64)
        before = keys < (1 << 32)  # interval -1, stored as 0
        if before.any():
            for key in keys[before].tolist():
                code = (key & 0xFFFF) - 1
                self._unmeasured[code] = self._unmeasured.get(code, 0) + 1
            responses = keys[~before].tobytes()
        delta = Delta(self.plan.index, sent=self.generator.sent - self._shipped_sent, keys=(histograms, responses))
        self._shipped_sent = self.generator.sent
        return delta

    @staticmethod
    def _names(counts: dict[int, int]) -> dict[str, int]:
        return {response_name(code): n for code, n in sorted(counts.items())}


class _Stream:
    """One request code's constant-rate stream: request k is intended at first + k × period."""

    def __init__(self, code: int, period_ns: float, first_ns: float) -> None:
        self.code, self.period, self.first, self.next = code, period_ns, first_ns, 0

    def take(self, until_ns: int) -> np.ndarray:
        """The intended times of the requests before `until_ns` not taken yet."""
        last = max(self.next, int(np.ceil((until_ns - self.first) / self.period)))
        intended = (self.first + np.arange(self.next, last) * self.period).astype(np.int64)
        self.next = last
        return intended


class _Flap:
    """One flap of one of this worker's brokers: down (its connection closed once what it sent is
    answered, or after a second), then back half a period later on a new connection, registering.
    Each change's time is written to the shared array just before it is made, so a subscriber
    receiving the push finds it there."""

    def __init__(self, flap: int, plan: WorkerPlan, measure_start_ns: int) -> None:
        schedule = plan.flaps
        self.flap = flap
        self.slot = plan.slot_of(schedule.broker(flap))
        self.close_ns = schedule.due_ns(flap, CLOSE, measure_start_ns)
        self.again_ns = schedule.due_ns(flap, REGISTER_AGAIN, measure_start_ns)
        self.phase = "up"
        self.closing_deadline = 0

    @property
    def next_event_ns(self) -> int:
        return self.close_ns if self.phase == "up" else self.again_ns

    def step(self, worker: Worker, now: int) -> bool:
        """Make the change that is due; True once the broker is back."""
        generator, conn = worker.generator, worker.own[self.slot]
        if self.phase == "up" and now >= self.close_ns:
            worker.requests.down.add(self.slot)
            self.phase, self.closing_deadline = "closing", now + SECOND
        if self.phase == "closing" and (not generator.pending_of(conn) or now >= self.closing_deadline):
            worker.changed_at[change_index(self.flap, CLOSE)] = time.monotonic_ns()
            worker.hang_up(self.slot)
            self.phase = "down"
        if self.phase == "down" and now >= self.again_ns:
            now = time.monotonic_ns()
            worker.changed_at[change_index(self.flap, REGISTER_AGAIN)] = now
            worker.requests.down.discard(self.slot)
            worker.schedule(np.array([now]), np.array([worker.requests.registration(self.slot)]), np.array([self.slot]))
            return True
        return False


def wait_for_start(go: Event, start_value) -> int:
    """The coordinator's start time (monotonic ns), once it gives the signal."""
    if not go.wait(START_TIMEOUT_S):
        raise TimeoutError("the coordinator never gave the start signal")
    return start_value.value


def start_shielded_from_sigint(processes: Iterable[BaseProcess]) -> None:
    """Start `processes` (spawned) with SIGINT ignored, so a Ctrl-C cannot interrupt their imports
    with a traceback: a child inherits an ignored signal across exec and Python leaves it ignored
    (SIG_IGN set in the child's target comes too late, and a blocked mask does not survive
    multiprocessing's own starts). A Ctrl-C pressed during the starts themselves, a few
    milliseconds, is dropped. Main thread only."""
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        for process in processes:
            process.start()
    finally:
        signal.signal(signal.SIGINT, previous)


def report_failures(name: str, out: Queue, body: Callable[[], None]) -> None:
    """A storm process's body: any failure reaches the coordinator as ("error", name, traceback)."""
    logging.basicConfig(level=logging.WARNING, format=f"{name}: %(levelname)s %(message)s")
    try:
        body()
    except BaseException:  # noqa: BLE001 - report everything, the coordinator decides
        out.put(("error", name, traceback.format_exc()))


def worker_main(plan: WorkerPlan, out: Queue, go: Event, start_value,
                changed_at: MutableSequence[int] | None = None, cut=None) -> None:
    """Process entry point: run the worker (`changed_at`: the flaps' shared change times; `cut`:
    the shared moment the coordinator cut the run short, 0 until it does)."""
    report_failures(f"worker {plan.index}", out, lambda: Worker(plan, out, changed_at, cut).run(go, start_value))
