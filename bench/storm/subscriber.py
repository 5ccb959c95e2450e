"""Route-change subscribers: connections that subscribe to some of the fleet's topics and time the pushes.

Each subscriber is one connection that sends SUBSCRIBE_ROUTE_CHANGES for its topics (drawn by
`choose_topics` with the run's seed) once the fleet is up, then only reads ROUTE_CHANGED pushes.
They live in processes of their own, so reading and parsing pushes never delays the workers'
request loops (whose latencies they would distort).

A change reaches a thousand subscribers at once; were each push parsed as it is read, the last
subscriber's would be stamped after the parsing of all the others' (the generator's work, not the
server's). So chunks are stamped as they are read and parsed afterwards (`Inbox`).

Per topic a subscriber keeps the version it knows and which flapping brokers (bench/storm/flaps.py)
the topic's route lacks. A change whose version is not the known one + 1 is a version missed. A
change that alters which flapping brokers a route lacks is a *sighting* of a flap: a broker gone
(its close) or back (its registration). Its propagation latency — arrival of the push minus the
moment of the change, read from the flaps' shared change times — is recorded as metric
`propagation`, code ROUTE_CHANGED, in the interval of the change. A sighting is timed against the
broker's latest change only when that change is of the same kind: the end of the run closing every
connection, or a push so late that the broker changed again, is not timed against the wrong flap.
"""
from __future__ import annotations

import asyncio
import json
import logging
import os
import random
import time
from collections import Counter, deque
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from multiprocessing.queues import Queue
from multiprocessing.synchronize import Event

from bench.lib.fleet import ROUTE_CHANGED, FleetShape, subscribe_template
from bench.lib.output import response_name
from bench.storm.flaps import CLOSE, REGISTER_AGAIN, FlapSchedule
from bench.storm.recorder import IntervalRecorder
from bench.storm.worker import NOT_STARTED, SECOND, report_failures, wait_for_start
from namesrv.protocol import FrameDecoder, ProtocolError, RemotingCommand, ResponseCode

PROPAGATION = "propagation"
#: Subscriptions opened at once while subscribing (a burst of connects the server's backlog absorbs).
_CONCURRENT_SUBSCRIBES = 64
#: Longest wait for one subscription's answer, seconds.
_SUBSCRIBE_TIMEOUT_S = 30.0
#: The inbox parses for at most this long per event-loop turn, so chunks arriving meanwhile are stamped soon.
_PARSE_SLICE_NS = 1_000_000
_NOTHING: frozenset[int] = frozenset()
log = logging.getLogger(__name__)


def choose_topics(fleet: FleetShape, subscribers: int, per_subscriber: int, seed: int) -> list[tuple[str, ...]]:
    """Each subscriber's topics: `per_subscriber` distinct topics of the fleet, drawn with the run's seed."""
    topics = fleet.all_topics()
    rng = random.Random(f"storm-subscribers-{seed}")
    return [tuple(rng.sample(topics, per_subscriber)) for _ in range(subscribers)]


def expected_sightings(fleet: FleetShape, topics: Sequence[Sequence[str]], flaps: FlapSchedule,
                       changed_at: Sequence[int]) -> int:
    """Sightings the changes made should give: a change of a broker reaches every (subscriber,
    topic) pair whose topic is of the broker's cluster (every topic of a cluster lists all its brokers)."""
    pairs = Counter(fleet.cluster_of(topic) for mine in topics for topic in mine)
    return sum(pairs[fleet.broker(broker).cluster] for broker, _ in flaps.changes_made(changed_at))


@dataclass(frozen=True)
class SubscriberPlan:
    """One subscriber process: a subscriber (connection) per entry of `topics`."""

    index: int
    host: str
    port: int
    fleet: FleetShape
    topics: tuple[tuple[str, ...], ...]
    flaps: FlapSchedule | None
    warmup_s: float
    #: Longest wait for the coordinator's end of the run, seconds.
    stop_timeout_s: float
    #: The CPUs the process runs on (None: wherever the coordinator runs).
    cpus: tuple[int, ...] | None = None

    @property
    def name(self) -> str:
        return f"subscribers {self.index}"


@dataclass(slots=True)
class Subscriber:
    """What one subscriber knows: each topic's version and the flapping brokers its route lacks."""

    topics: tuple[str, ...]
    known: dict[str, int] = field(default_factory=dict)
    absent: dict[str, frozenset[int]] = field(default_factory=dict)
    dropped: bool = False


@dataclass(slots=True)
class PushCounts:
    """One subscriber process's tallies (summed over processes by the coordinator)."""

    subscribed: int = 0
    pushes: int = 0
    changes: int = 0
    versions_missed: int = 0
    dropped: int = 0
    sightings: int = 0
    connections_lost: int = 0


class PushObserver:
    """Versions, drops and flap sightings of one process's subscribers (sans-IO: tests drive it)."""

    def __init__(self, fleet: FleetShape, flaps: FlapSchedule | None, changed_at: Sequence[int] | None,
                 recorder: IntervalRecorder) -> None:
        self.counts = PushCounts()
        self._fleet = fleet
        self._flaps = flaps
        self._changed_at = changed_at
        self._recorder = recorder
        #: cluster -> (broker, address) of its brokers that flap.
        self._watched: dict[str, list[tuple[int, str]]] = {}
        for broker in flaps.flapping_brokers() if flaps is not None else ():
            identity = fleet.broker(broker)
            self._watched.setdefault(identity.cluster, []).append((broker, identity.address))

    def subscribed(self, subscriber: Subscriber, body: bytes) -> None:
        """The subscription's answer: each topic's version and route now."""
        for entry in json.loads(body)["routes"]:
            subscriber.known[entry["topic"]] = entry["version"]
            subscriber.absent[entry["topic"]] = self._absent(entry["topic"], entry["route"])
        self.counts.subscribed += 1

    def pushed(self, subscriber: Subscriber, command: RemotingCommand, arrived_ns: int) -> None:
        """A ROUTE_CHANGED that arrived at `arrived_ns`: changes, or the news of being dropped to polling."""
        self.counts.pushes += 1
        if "dropped" in (command.ext_fields or {}):
            self.counts.dropped += not subscriber.dropped
            subscriber.dropped = True
            return
        for change in json.loads(command.body)["changes"]:
            self._changed(subscriber, change, arrived_ns)

    def _changed(self, subscriber: Subscriber, change: dict, arrived_ns: int) -> None:
        topic, version = change["topic"], change["version"]
        self.counts.changes += 1
        if version != subscriber.known.get(topic, 0) + 1:
            self.counts.versions_missed += 1
        subscriber.known[topic] = version
        absent = self._absent(topic, change["route"])
        before = subscriber.absent.get(topic, _NOTHING)
        for broker in absent - before:
            self._sighted(broker, CLOSE, arrived_ns)
        for broker in before - absent:
            self._sighted(broker, REGISTER_AGAIN, arrived_ns)
        subscriber.absent[topic] = absent

    def _absent(self, topic: str, route: dict | None) -> frozenset[int]:
        """The flapping brokers of the topic's cluster that its route (None: no route) does not list."""
        watched = self._watched.get(self._fleet.cluster_of(topic))
        if not watched:
            return _NOTHING
        listed = set() if route is None else {address for data in route.get("brokerDatas") or ()
                                              for address in (data.get("brokerAddrs") or {}).values()}
        return frozenset(broker for broker, address in watched if address not in listed)

    def _sighted(self, broker: int, kind: int, arrived_ns: int) -> None:
        latest = self._flaps.latest_change(self._changed_at, broker)
        if latest is not None and latest[0] == kind:
            self._recorder.observe(PROPAGATION, ROUTE_CHANGED, latest[1], arrived_ns)
            self.counts.sightings += 1


class Inbox:
    """Received chunks, stamped when read and parsed in later turns of the event loop, a slice of
    `_PARSE_SLICE_NS` at a time: the loop reads (and stamps) what arrived meanwhile between slices."""

    def __init__(self) -> None:
        self._chunks: deque[tuple[FramedConnection, bytes, int]] = deque()

    def put(self, connection: FramedConnection, data: bytes) -> None:
        if not self._chunks:
            asyncio.get_running_loop().call_soon(self._parse)
        self._chunks.append((connection, data, time.monotonic_ns()))

    def _parse(self) -> None:
        until = time.monotonic_ns() + _PARSE_SLICE_NS
        while self._chunks and time.monotonic_ns() < until:
            connection, data, arrived_ns = self._chunks.popleft()
            connection.feed(data, arrived_ns)
        if self._chunks:
            asyncio.get_running_loop().call_soon(self._parse)


class FramedConnection(asyncio.Protocol):
    """An asyncio protocol that hands each received command to `received(command, arrived_ns)`; a bad
    frame aborts the connection. Chunks are decoded when `feed` is called (the inbox stamps them first)."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self._decoder = FrameDecoder()

    @classmethod
    async def open(cls, host: str, port: int, *args: object, timeout: float = 5.0) -> FramedConnection:
        """Connect; `args` go to the constructor."""
        loop = asyncio.get_running_loop()
        async with asyncio.timeout(timeout):
            _, connection = await loop.create_connection(lambda: cls(*args), host, port)
        return connection

    def received(self, command: RemotingCommand, arrived_ns: int) -> None:
        raise NotImplementedError

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def feed(self, data: bytes, arrived_ns: int) -> None:
        """Decode a chunk that arrived at `arrived_ns`."""
        try:
            for frame in self._decoder.feed(data):
                self.received(RemotingCommand.decode(frame), arrived_ns)
        except ProtocolError as exc:
            log.error("bad frame from the server, closing the connection: %s", exc)
            if self.transport is not None:
                self.transport.abort()


class SubscriberConnection(FramedConnection):
    """One subscriber: its subscription's answer in `answer`, its pushes to the observer (via `inbox`)."""

    def __init__(self, observer: PushObserver, subscriber: Subscriber, inbox: Inbox) -> None:
        super().__init__()
        self.observer = observer
        self.subscriber = subscriber
        self.inbox = inbox
        self.answer: asyncio.Future[RemotingCommand] = asyncio.get_running_loop().create_future()
        self.lost = False

    def data_received(self, data: bytes) -> None:
        self.inbox.put(self, data)

    def received(self, command: RemotingCommand, arrived_ns: int) -> None:
        if command.is_response:
            if not self.answer.done():
                self.answer.set_result(command)
        elif command.code == ROUTE_CHANGED:
            self.observer.pushed(self.subscriber, command, arrived_ns)

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.answer.done():
            self.answer.set_exception(ConnectionError(f"the server closed the subscriber's connection ({exc})"))
        self.lost = True


class SubscriberProcess:
    """Subscribe every subscriber, report ready, then read pushes until the coordinator ends the run."""

    def __init__(self, plan: SubscriberPlan, out: Queue, changed_at: Sequence[int] | None) -> None:
        self.plan = plan
        self.out = out
        self.recorder = IntervalRecorder(plan.index, NOT_STARTED)
        self.observer = PushObserver(plan.fleet, plan.flaps, changed_at, self.recorder)
        self.inbox = Inbox()
        self.connections: list[SubscriberConnection] = []

    async def run(self, go: Event, start_value, stop: Event) -> None:
        if self.plan.cpus:
            os.sched_setaffinity(0, self.plan.cpus)
        answers = await self._subscribe_all()
        self.out.put(("ready", self.plan.name, answers))
        loop = asyncio.get_running_loop()
        start_ns = await loop.run_in_executor(None, wait_for_start, go, start_value)
        self.recorder.measure_start_ns = start_ns + int(self.plan.warmup_s * SECOND)
        ticker = asyncio.create_task(self._ship_every_second())
        try:
            if not await asyncio.get_running_loop().run_in_executor(None, stop.wait, self.plan.stop_timeout_s):
                raise TimeoutError("the coordinator never ended the run")
        finally:
            ticker.cancel()
        self.out.put(("delta", self.recorder.ship()))
        self.observer.counts.connections_lost = sum(c.lost for c in self.connections)
        for connection in self.connections:
            connection.transport.close()
        self.out.put(("subscribers-done", self.plan.name, asdict(self.observer.counts)))

    async def _ship_every_second(self) -> None:
        """Ship what the recorder holds just after each interval boundary, until cancelled."""
        measure_start = self.recorder.measure_start_ns
        while True:
            now = time.monotonic_ns()
            next_boundary = measure_start + ((now - measure_start) // SECOND + 1) * SECOND
            await asyncio.sleep((next_boundary - now) / SECOND + 0.02)
            self.out.put(("delta", self.recorder.ship()))

    async def _subscribe_all(self) -> dict[str, int]:
        """Subscribe in batches; the answers by response code."""
        answers: Counter[str] = Counter()
        topics = self.plan.topics
        for first in range(0, len(topics), _CONCURRENT_SUBSCRIBES):
            batch = topics[first:first + _CONCURRENT_SUBSCRIBES]
            for connection, code in await asyncio.gather(*(self._subscribe(mine) for mine in batch)):
                self.connections.append(connection)
                answers[response_name(code)] += 1
        return dict(answers)

    async def _subscribe(self, topics: tuple[str, ...]) -> tuple[SubscriberConnection, int]:
        connection = await SubscriberConnection.open(self.plan.host, self.plan.port, self.observer, Subscriber(topics),
                                                     self.inbox)
        connection.transport.write(subscribe_template(self.plan.fleet, topics).render(1))
        async with asyncio.timeout(_SUBSCRIBE_TIMEOUT_S):
            answer = await connection.answer
        if answer.code == ResponseCode.SUCCESS:
            self.observer.subscribed(connection.subscriber, answer.body)
        return connection, answer.code


def subscribers_main(plan: SubscriberPlan, out: Queue, go: Event, start_value, stop: Event,
                     changed_at: Sequence[int] | None) -> None:
    """Process entry point (`changed_at`: the flaps' shared change times, None without flaps)."""
    report_failures(plan.name, out,
                    lambda: asyncio.run(SubscriberProcess(plan, out, changed_at).run(go, start_value, stop)))
