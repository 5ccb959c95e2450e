"""One storm worker process: its share of the fleet, on its own event loop and connections.

Life: connect, bring its brokers up (one unmeasured registration each), report ready, wait for
the coordinator's start time, then run the open or closed loop until the end time, drain, and
ship the last delta. Every second it ships what it recorded (`Delta`) to the coordinator.
Ctrl-C reaches the coordinator only: storm processes are started with SIGINT ignored
(`start_shielded_from_sigint`), so that holds from their first instruction. The
coordinator writes the moment it was pressed into the shared `cut` value, and the worker ends its
loop there, drains briefly and reports as usual, so what was measured is kept.

With flaps (bench/storm/flaps.py) each of its brokers that is to flap has a connection of its
own (as a real broker does), so closing it takes exactly that broker's routes away; while the
broker is down its turns to register or heartbeat pass without a request.
"""
from __future__ import annotations

import asyncio
import bisect
import logging
import random
import signal
import sys
import time
import traceback
from collections.abc import Callable, Coroutine, Iterable, MutableSequence
from dataclasses import dataclass, field
from itertools import accumulate
from multiprocessing.process import BaseProcess
from multiprocessing.queues import Queue
from multiprocessing.synchronize import Event

from bench.storm.connection import StormConnection
from bench.storm.fleet import HEARTBEAT, REGISTER, ROUTE, FleetShape, heartbeat_template, register_body, \
    register_template, route_template
from bench.storm.flaps import CLOSE, REGISTER_AGAIN, FlapSchedule, change_index
from bench.storm.recorder import IntervalRecorder
from bench.storm.rundir import response_name
from bench.storm.template import FrameTemplate
from namesrv.protocol import DataVersion

log = logging.getLogger(__name__)
SECOND = 1_000_000_000
#: Open loop: at most this many sends per loop turn before letting answers in.
_BURST = 512
#: A recorder's measure start before the coordinator's start signal: nothing counts as measured yet.
NOT_STARTED = sys.maxsize // 4
#: Longest wait for the coordinator's start signal, seconds.
START_TIMEOUT_S = 120.0
#: After Ctrl-C, how long a worker waits for answers to what it already sent, seconds.
CUT_DRAIN_S = 1.0
#: A request and the slot of the broker sending it in this worker (None: a client's route query).
Request = tuple[FrameTemplate, int | None]


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
    """The worker's request templates and how each code picks its next one.

    Each broker has its own DataVersion (stamped at its start, as a real broker's); with churn it
    also has a second version, and a churned registration switches to the other one. A broker
    marked down (`down`) sends nothing: its turns pass.
    """

    def __init__(self, plan: WorkerPlan, rng: random.Random) -> None:
        fleet = plan.fleet
        indexes = list(plan.broker_indexes) or [plan.index % fleet.brokers]
        epoch_ms = int(time.time() * 1000)
        versions = 2 if fleet.register_churn > 0 else 1
        self.register: list[list[FrameTemplate]] = []
        for index in indexes:
            broker = fleet.broker(index)
            bodies = [register_body(fleet, broker.cluster, DataVersion(counter, epoch_ms + index, 0))
                      for counter in range(1, versions + 1)]
            self.register.append([register_template(fleet, broker, body) for body in bodies])
        self.heartbeat = [heartbeat_template(fleet, fleet.broker(index)) for index in indexes]
        self.route = [route_template(fleet, topic) for topic in fleet.all_topics()]
        self._churn = fleet.register_churn
        self._version = [0] * len(indexes)
        self._rng = rng
        self._turn = {REGISTER: 0, HEARTBEAT: 0}
        #: Slots of the brokers that are down (flapping).
        self.down: set[int] = set()

    def bring_up(self) -> list[FrameTemplate]:
        """Each broker's first registration."""
        return [templates[0] for templates in self.register]

    def registration(self, broker: int) -> FrameTemplate:
        """The registration broker slot `broker` sends now (its current DataVersion)."""
        return self.register[broker][self._version[broker]]

    def next(self, code: int) -> Request | None:
        """Brokers take turns (each registers once per period); clients ask for random topics.
        None: it is the turn of a broker that is down."""
        if code == ROUTE:
            return self.route[int(self._rng.random() * len(self.route))], None
        turn = self._turn[code]
        self._turn[code] = turn + 1
        broker = turn % len(self.heartbeat)
        if broker in self.down:
            return None
        if code == HEARTBEAT:
            return self.heartbeat[broker], broker
        if self._churn and self._rng.random() < self._churn:
            self._version[broker] ^= 1
        return self.registration(broker), broker


class Worker:
    def __init__(self, plan: WorkerPlan, out: Queue, changed_at: MutableSequence[int] | None = None,
                 cut=None) -> None:
        self.plan = plan
        self.out = out
        self.changed_at = changed_at
        #: Shared monotonic ns at which the coordinator cut the run short (0: not cut); None in tests.
        self.cut = cut
        self.rng = random.Random(plan.seed * 1000 + plan.index)
        self.recorder = IntervalRecorder(plan.index, NOT_STARTED)
        self.requests = WorkerRequests(plan, self.rng)
        #: Shared by route queries and the brokers without a connection of their own.
        self.connections: list[StormConnection] = []
        #: Broker slot -> its own connection (the brokers that flap).
        self.broker_connections: dict[int, StormConnection] = {}
        self.sent = 0
        #: Turns that passed because their broker was down.
        self.skipped = 0
        self.start_ns = self.end_ns = NOT_STARTED
        self._next_connection = 0
        codes = sorted(plan.weights)
        self._mix_codes = codes
        self._mix_cumulative = list(accumulate(plan.weights[c] for c in codes))

    # ---- life cycle ----
    async def run(self, go: Event, start_value) -> None:
        on_answers = self._refill if self.plan.mode == "closed" else None
        self.connections = [await self._open(on_answers) for _ in range(self.plan.connections)]
        flaps = self.plan.own_flaps()
        own = {self.plan.slot_of(self.plan.flaps.broker(flap)) for flap in flaps}
        self.broker_connections = {slot: await self._open() for slot in sorted(own)}
        await self._bring_up()
        self.out.put(("ready", self.plan.index, self._unmeasured()))
        self.recorder.unmeasured.clear()
        self.start_ns = start_ns = await wait_for_start(go, start_value)
        self.recorder.measure_start_ns = start_ns + int(self.plan.warmup_s * SECOND)
        self.end_ns = self.recorder.measure_start_ns + int(self.plan.duration_s * SECOND)
        ticker = asyncio.create_task(ship_every_second(self.recorder, self.out))
        flapping = asyncio.create_task(self._flap(flaps)) if flaps else None
        try:
            if self.plan.mode == "open":
                await self._open_loop(start_ns)
            else:
                await self._closed_loop(start_ns)
            if flapping is not None and not self._cut_short():
                await flapping
            await self._drain()
        finally:
            ticker.cancel()
            if flapping is not None:
                flapping.cancel()
        connections = self._all_connections()
        for connection in connections:
            connection.abandon()
        self.out.put(("delta", self.recorder.ship()))
        lost = sum(c.lost for c in connections)
        for connection in connections:
            connection.close()
        self.out.put(("done", self.plan.index, {"sent": self.sent, "connections_lost": lost,
                                                 "skipped_while_down": self.skipped, "flaps": len(flaps),
                                                 "warmup_responses": self._unmeasured()}))

    async def _open(self, on_answers: Callable[[StormConnection, int], None] | None = None) -> StormConnection:
        return await StormConnection.open(self.plan.host, self.plan.port, self.recorder, on_answers)

    async def _bring_up(self) -> None:
        """Register each of this worker's brokers once, so routes exist before anyone asks."""
        now = time.monotonic_ns()
        for broker, template in enumerate(self.requests.bring_up()):
            self._connection_of(broker).send(template, now, now)
        self._flush()
        await self._wait_answered(30.0, self._all_connections())

    async def _drain(self) -> None:
        drain_s = min(self.plan.drain_s, CUT_DRAIN_S) if self._cut_short() else self.plan.drain_s
        await self._wait_answered(drain_s, self._all_connections())

    def _cut_short(self) -> bool:
        """Whether the coordinator cut the run (Ctrl-C); the end moves to the moment it did."""
        if self.cut is None or not self.cut.value:
            return False
        self.end_ns = min(self.end_ns, self.cut.value)
        return True

    @staticmethod
    async def _wait_answered(timeout: float, connections: list[StormConnection]) -> None:
        deadline = time.monotonic() + timeout
        while any(c.pending for c in connections) and time.monotonic() < deadline:
            await asyncio.sleep(0.01)

    # ---- flaps: a broker goes down (its connection closes) and comes back half a period later ----
    async def _flap(self, flaps: list[int]) -> None:
        """This worker's `flaps`, in time order. Each change's time is written to the shared array
        just before the change is made, so a subscriber receiving the push finds it there."""
        schedule = self.plan.flaps
        measure_start = self.recorder.measure_start_ns
        for flap in flaps:
            slot = self.plan.slot_of(schedule.broker(flap))
            await _sleep_until(schedule.due_ns(flap, CLOSE, measure_start))
            self.requests.down.add(slot)
            going = self.broker_connections[slot]
            await self._wait_answered(1.0, [going])  # what it sent is answered before it goes
            self.changed_at[change_index(flap, CLOSE)] = time.monotonic_ns()
            going.hang_up()
            self.broker_connections[slot] = back = await self._open()
            await _sleep_until(schedule.due_ns(flap, REGISTER_AGAIN, measure_start))
            now = time.monotonic_ns()
            self.changed_at[change_index(flap, REGISTER_AGAIN)] = now
            self.requests.down.discard(slot)
            back.send(self.requests.registration(slot), now, now)
            back.flush()

    # ---- open loop: requests at their intended times, latency from those times ----
    async def _open_loop(self, start_ns: int) -> None:
        """Each code is a constant-rate stream; worker i's stream is offset by i/W of a period so
        the workers' streams interleave evenly. Late sends go out at once (never skipped: only a
        down broker's turns pass): their lateness is part of the latency they record."""
        streams = []
        for code, rate in sorted(self.plan.rates.items()):
            if rate > 0:
                period = SECOND / rate
                streams.append([start_ns + period * self.plan.index / self.plan.workers, period, code])
        budget = self.plan.max_requests
        while self.sent < budget:
            self._cut_short()
            now = time.monotonic_ns()
            burst = 0
            for stream in streams:  # everything due, even when we woke after the end: it was scheduled
                while stream[0] <= now and stream[0] < self.end_ns and burst < _BURST and self.sent < budget:
                    self._send(stream[2], int(stream[0]), now)
                    stream[0] += stream[1]
                    burst += 1
            self._flush()
            if burst >= _BURST:
                await asyncio.sleep(0)
                continue
            upcoming = [s[0] for s in streams if s[0] < self.end_ns]
            if not upcoming:
                break
            await asyncio.sleep(min(0.1, max(0.0, (min(upcoming) - time.monotonic_ns()) / SECOND)))

    # ---- closed loop: a fixed number in flight per connection, each answer sends the next ----
    async def _closed_loop(self, start_ns: int) -> None:
        await asyncio.sleep(max(0.0, (start_ns - time.monotonic_ns()) / SECOND))
        for connection in self.connections:
            self._refill(connection, self.plan.in_flight)
        while time.monotonic_ns() < self.end_ns and self.sent < self.plan.max_requests:
            if all(c.lost for c in self.connections) or self._cut_short():
                break
            await asyncio.sleep(0.05)

    def _refill(self, connection: StormConnection, count: int) -> None:
        now = time.monotonic_ns()
        if not self.start_ns <= now < self.end_ns:  # bring-up answers and late answers send nothing
            return
        count = min(count, self.plan.max_requests - self.sent)
        for _ in range(count):
            index = bisect.bisect_right(self._mix_cumulative, self.rng.random() * self._mix_cumulative[-1])
            self._send(self._mix_codes[index], now, now, connection)
        connection.flush()

    # ---- helpers ----
    def _send(self, code: int, intended_ns: int, now: int, connection: StormConnection | None = None) -> None:
        """The next request of `code`, on `connection` or else its broker's (or the next shared one);
        nothing when its broker is down."""
        request = self.requests.next(code)
        if request is None:
            self.skipped += 1
            return
        template, broker = request
        (connection or self._connection_of(broker)).send(template, intended_ns, now)
        self.sent += 1

    def _unmeasured(self) -> dict[str, int]:
        return {response_name(code): n for code, n in sorted(self.recorder.unmeasured.items())}

    def _connection_of(self, broker: int | None) -> StormConnection:
        """The broker's own connection if it has one, else the next shared one."""
        own = self.broker_connections.get(broker) if broker is not None else None
        if own is not None:
            return own
        self._next_connection = (self._next_connection + 1) % len(self.connections)
        return self.connections[self._next_connection]

    def _all_connections(self) -> list[StormConnection]:
        return [*self.connections, *self.broker_connections.values()]

    def _flush(self) -> None:
        for connection in self.connections:
            connection.flush()
        for connection in self.broker_connections.values():
            connection.flush()


async def wait_for_start(go: Event, start_value) -> int:
    """The coordinator's start time (monotonic ns), once it gives the signal."""
    loop = asyncio.get_running_loop()
    if not await loop.run_in_executor(None, go.wait, START_TIMEOUT_S):
        raise TimeoutError("the coordinator never gave the start signal")
    return start_value.value


async def ship_every_second(recorder: IntervalRecorder, out: Queue) -> None:
    """Ship what `recorder` holds just after each interval boundary, until cancelled."""
    measure_start = recorder.measure_start_ns
    while True:
        now = time.monotonic_ns()
        next_boundary = measure_start + ((now - measure_start) // SECOND + 1) * SECOND
        await asyncio.sleep((next_boundary - now) / SECOND + 0.02)
        out.put(("delta", recorder.ship()))


async def _sleep_until(deadline_ns: int) -> None:
    await asyncio.sleep(max(0.0, (deadline_ns - time.monotonic_ns()) / SECOND))


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


def run_reporting_failures(name: str, out: Queue, main: Callable[[], Coroutine[object, object, None]]) -> None:
    """A storm process's body: run `main` on a fresh event loop; any failure reaches the
    coordinator as ("error", name, traceback)."""
    logging.basicConfig(level=logging.WARNING, format=f"{name}: %(levelname)s %(message)s")
    try:
        asyncio.run(main())
    except BaseException:  # noqa: BLE001 - report everything, the coordinator decides
        out.put(("error", name, traceback.format_exc()))


def worker_main(plan: WorkerPlan, out: Queue, go: Event, start_value,
                changed_at: MutableSequence[int] | None = None, cut=None) -> None:
    """Process entry point: run the worker (`changed_at`: the flaps' shared change times; `cut`:
    the shared moment the coordinator cut the run short, 0 until it does)."""
    run_reporting_failures(f"worker {plan.index}", out,
                           lambda: Worker(plan, out, changed_at, cut).run(go, start_value))
