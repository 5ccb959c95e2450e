"""One storm worker process: its share of the fleet, on its own event loop and connections.

Life: connect, bring its brokers up (one unmeasured registration each), report ready, wait for
the coordinator's start time, then run the open or closed loop until the end time, drain, and
ship the last delta. Every second it ships what it recorded (`Delta`) to the coordinator.
"""
from __future__ import annotations

import asyncio
import bisect
import logging
import random
import sys
import time
import traceback
from dataclasses import dataclass, field
from itertools import accumulate
from multiprocessing.queues import Queue
from multiprocessing.synchronize import Event

from bench.storm.connection import StormConnection
from bench.storm.fleet import HEARTBEAT, REGISTER, ROUTE, FleetShape, heartbeat_template, register_body, \
    register_template, route_template
from bench.storm.recorder import IntervalRecorder
from bench.storm.rundir import response_name
from bench.storm.template import FrameTemplate
from namesrv.protocol import DataVersion

log = logging.getLogger(__name__)
SECOND = 1_000_000_000
#: Open loop: at most this many sends per loop turn before letting answers in.
_BURST = 512
_NOT_STARTED = sys.maxsize // 4


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

    @property
    def broker_indexes(self) -> range:
        return range(self.index, self.fleet.brokers, self.workers)


class WorkerRequests:
    """The worker's request templates and how each code picks its next one.

    Each broker has its own DataVersion (stamped at its start, as a real broker's); with churn it
    also has a second version, and a churned registration switches to the other one.
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

    def bring_up(self) -> list[FrameTemplate]:
        """Each broker's first registration."""
        return [templates[0] for templates in self.register]

    def next(self, code: int) -> FrameTemplate:
        """Brokers take turns (each registers once per period); clients ask for random topics."""
        if code == ROUTE:
            return self.route[int(self._rng.random() * len(self.route))]
        turn = self._turn[code]
        self._turn[code] = turn + 1
        broker = turn % len(self.heartbeat)
        if code == HEARTBEAT:
            return self.heartbeat[broker]
        if self._churn and self._rng.random() < self._churn:
            self._version[broker] ^= 1
        return self.register[broker][self._version[broker]]


class Worker:
    def __init__(self, plan: WorkerPlan, out: Queue) -> None:
        self.plan = plan
        self.out = out
        self.rng = random.Random(plan.seed * 1000 + plan.index)
        self.recorder = IntervalRecorder(plan.index, _NOT_STARTED)
        self.requests = WorkerRequests(plan, self.rng)
        self.connections: list[StormConnection] = []
        self.sent = 0
        self.start_ns = self.end_ns = _NOT_STARTED
        self._next_connection = 0
        codes = sorted(plan.weights)
        self._mix_codes = codes
        self._mix_cumulative = list(accumulate(plan.weights[c] for c in codes))

    # ---- life cycle ----
    async def run(self, go: Event, start_value) -> None:
        on_answers = self._refill if self.plan.mode == "closed" else None
        self.connections = [await StormConnection.open(self.plan.host, self.plan.port, self.recorder, on_answers)
                            for _ in range(self.plan.connections)]
        await self._bring_up()
        self.out.put(("ready", self.plan.index, self._unmeasured()))
        self.recorder.unmeasured.clear()
        loop = asyncio.get_running_loop()
        if not await loop.run_in_executor(None, go.wait, 120.0):
            raise TimeoutError("the coordinator never gave the start signal")
        self.start_ns = start_ns = start_value.value
        self.recorder.measure_start_ns = start_ns + int(self.plan.warmup_s * SECOND)
        self.end_ns = self.recorder.measure_start_ns + int(self.plan.duration_s * SECOND)
        ticker = asyncio.create_task(self._ship_every_second())
        try:
            if self.plan.mode == "open":
                await self._open_loop(start_ns)
            else:
                await self._closed_loop(start_ns)
            await self._drain()
        finally:
            ticker.cancel()
        for connection in self.connections:
            connection.abandon()
        self.out.put(("delta", self.recorder.ship()))
        lost = sum(c.lost for c in self.connections)
        for connection in self.connections:
            connection.close()
        self.out.put(("done", self.plan.index, {"sent": self.sent, "connections_lost": lost,
                                                 "warmup_responses": self._unmeasured()}))

    async def _bring_up(self) -> None:
        """Register each of this worker's brokers once, so routes exist before anyone asks."""
        now = time.monotonic_ns()
        for template in self.requests.bring_up():
            self._connection().send(template, now, now)
        self._flush()
        await self._wait_answered(30.0)

    async def _drain(self) -> None:
        await self._wait_answered(self.plan.drain_s)

    async def _wait_answered(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while any(c.pending for c in self.connections) and time.monotonic() < deadline:
            await asyncio.sleep(0.01)

    async def _ship_every_second(self) -> None:
        measure_start = self.recorder.measure_start_ns
        while True:
            now = time.monotonic_ns()
            next_boundary = measure_start + ((now - measure_start) // SECOND + 1) * SECOND
            await asyncio.sleep((next_boundary - now) / SECOND + 0.02)
            self.out.put(("delta", self.recorder.ship()))

    # ---- open loop: requests at their intended times, latency from those times ----
    async def _open_loop(self, start_ns: int) -> None:
        """Each code is a constant-rate stream; worker i's stream is offset by i/W of a period so
        the workers' streams interleave evenly. Late sends go out at once (never skipped): their
        lateness is part of the latency they record."""
        streams = []
        for code, rate in sorted(self.plan.rates.items()):
            if rate > 0:
                period = SECOND / rate
                streams.append([start_ns + period * self.plan.index / self.plan.workers, period, code])
        budget = self.plan.max_requests
        while self.sent < budget:
            now = time.monotonic_ns()
            burst = 0
            for stream in streams:  # everything due, even when we woke after the end: it was scheduled
                while stream[0] <= now and stream[0] < self.end_ns and burst < _BURST and self.sent < budget:
                    self._connection().send(self.requests.next(stream[2]), int(stream[0]), now)
                    stream[0] += stream[1]
                    burst += 1
                    self.sent += 1
            self._flush()
            if burst >= _BURST:
                await asyncio.sleep(0)
                continue
            upcoming = [s[0] for s in streams if s[0] < self.end_ns]
            if not upcoming:
                break
            await asyncio.sleep(max(0.0, (min(upcoming) - time.monotonic_ns()) / SECOND))

    # ---- closed loop: a fixed number in flight per connection, each answer sends the next ----
    async def _closed_loop(self, start_ns: int) -> None:
        await asyncio.sleep(max(0.0, (start_ns - time.monotonic_ns()) / SECOND))
        for connection in self.connections:
            self._refill(connection, self.plan.in_flight)
        while time.monotonic_ns() < self.end_ns and self.sent < self.plan.max_requests:
            if all(c.lost for c in self.connections):
                break
            await asyncio.sleep(0.05)

    def _refill(self, connection: StormConnection, count: int) -> None:
        now = time.monotonic_ns()
        if not self.start_ns <= now < self.end_ns:  # bring-up answers and late answers send nothing
            return
        count = min(count, self.plan.max_requests - self.sent)
        for _ in range(count):
            index = bisect.bisect_right(self._mix_cumulative, self.rng.random() * self._mix_cumulative[-1])
            connection.send(self.requests.next(self._mix_codes[index]), now, now)
        self.sent += count
        connection.flush()

    # ---- helpers ----
    def _unmeasured(self) -> dict[str, int]:
        return {response_name(code): n for code, n in sorted(self.recorder.unmeasured.items())}

    def _connection(self) -> StormConnection:
        self._next_connection = (self._next_connection + 1) % len(self.connections)
        return self.connections[self._next_connection]

    def _flush(self) -> None:
        for connection in self.connections:
            connection.flush()


def worker_main(plan: WorkerPlan, out: Queue, go: Event, start_value) -> None:
    """Process entry point: run the worker; any failure reaches the coordinator as ("error", ...)."""
    logging.basicConfig(level=logging.WARNING, format=f"worker {plan.index}: %(levelname)s %(message)s")
    try:
        asyncio.run(Worker(plan, out).run(go, start_value))
    except BaseException:  # noqa: BLE001 - report everything, the coordinator decides
        out.put(("error", plan.index, traceback.format_exc()))
