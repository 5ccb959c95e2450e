"""One worker process's end of the replication bus.

`Replicator` is the sending end, called wherever a write has been applied (the executors'
`RequestDispatcher._run_batch`, the reactor's inline registration path) and wherever a connection
that carried one closes. `ReplicationBus` owns it and one thread that applies the siblings' logs,
in order, through a `RequestProcessor(persist=False)` with stand-in channels (so the KV and config
files are written once, by the worker that took the write), serves table copies to restarting
siblings, and gets this worker to a consistent start:

* Barrier: a worker serves only once every sibling the supervisor named has ticked that it hears
  this worker (and so this worker hears it): no write of either can be missed by the other.
* A fresh start (every worker starting together) begins from the KV file and no routes.
* A restart copies a sibling's tables first (`snapshot`), buffering the live stream meanwhile,
  then applies what the copy does not include. No copy within CATCH_UP_SECONDS: `SyncError`,
  the worker exits and the supervisor starts it again - it never serves empty tables while a
  sibling serves full ones.

A gap in a sibling's log (the bus dropped messages: a sibling more than HIGH_WATER_MARK messages
behind) cannot be repaired in place, so the worker reports lost sync and exits; the supervisor
restarts it and it copies a sibling's tables again.
"""
from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import zmq

from namesrv.channel import Channel
from namesrv.config import NamesrvConfig
from namesrv.kvconfig import KVConfigManager
from namesrv.processor import RequestProcessor
from namesrv.protocol.codes import ResponseCode
from namesrv.protocol.command import RemotingCommand
from namesrv.protocol.errors import ProtocolError
from namesrv.protocol.msgpack_codec import decode_msgpack
from namesrv.remoting.endpoints import ZMQ_TRANSPORT
from namesrv.routeinfo import RouteInfoManager
from namesrv.workers import snapshot
from namesrv.workers.bus import (CLOSE, TICK, BusMessage, Positions, SiblingChannel, Verdict, decode, encode_close,
                                 encode_tick, encode_write)

log = logging.getLogger(__name__)

#: How often each worker ticks (its last sequence number, the incarnations it hears).
TICK_SECONDS = 0.1
#: How long a starting worker waits for the siblings the supervisor named to hear it.
BARRIER_SECONDS = 10.0
#: How long one sibling may take to send its tables; all siblings together: CATCH_UP_SECONDS.
SNAPSHOT_SECONDS = 10.0
CATCH_UP_SECONDS = 30.0
#: Messages queued per sibling, each way, before the bus drops (a gap: the receiver restarts).
HIGH_WATER_MARK = 100_000
#: A restarted sibling's publisher is reconnected this soon.
RECONNECT_MS = 20
#: How long the last writes may take to leave at shutdown.
LINGER_MS = 1000
SNAPSHOT_REQUEST = b"snapshot"
#: Messages applied per poll round before ticking and serving snapshot requests again.
READ_BUDGET = 1024


class SyncError(Exception):
    """The worker could not start from a consistent copy of its siblings' tables."""


@dataclass(frozen=True)
class WorkerRole:
    """Who a worker process is among its siblings (the supervisor's spec, JSON on its stdin)."""

    index: int
    #: The supervisor's spawn count: tells the incarnations of one index apart.
    generation: int
    workers: int
    #: The supervisor's private directory of the bus's ipc endpoints.
    bus_dir: str
    #: Siblings the supervisor knows to be running: the barrier waits for them.
    siblings: tuple[int, ...]
    #: Copy a sibling's tables before serving (a restart while siblings serve).
    catch_up: bool

    def endpoint(self, kind: str, index: int) -> str:
        return f"ipc://{self.bus_dir}/{kind}-{index}"


class Replicator:
    """The sending end of this worker's log; every method is thread-safe."""

    def __init__(self, context: zmq.Context, role: WorkerRole) -> None:
        self._role = role
        self._socket = context.socket(zmq.PUB)
        self._socket.setsockopt(zmq.SNDHWM, HIGH_WATER_MARK)
        self._socket.setsockopt(zmq.LINGER, LINGER_MS)
        self._lock = threading.Lock()  # one thread at a time on the socket, and sequence numbers in send order
        self._seq = 0
        #: Local connections that carried a published write: only their closes concern the siblings.
        self._writers: set[Channel] = set()

    def bind(self) -> None:
        self._socket.bind(self._role.endpoint("pub", self._role.index))

    @property
    def last_seq(self) -> int:
        """Sequence number of the last message published."""
        return self._seq

    def publish_request(self, frame: bytes, channel: Channel) -> None:
        """`frame`, a request this worker applied, one frame as `channel`'s transport carries it
        (remoting: without its 4-byte length prefix); call it after applying, before answering."""
        self._writers.add(channel)
        role = self._role
        with self._lock:
            self._seq += 1
            self._socket.send(encode_write(role.index, role.generation, self._seq, frame, channel))

    def publish_close(self, channel: Channel) -> None:
        """A local connection closed (after this worker's own on_channel_destroy)."""
        if channel not in self._writers:
            return
        self._writers.discard(channel)
        role = self._role
        with self._lock:
            self._seq += 1
            self._socket.send(encode_close(role.index, role.generation, self._seq, channel))

    def publish_tick(self, heard: Iterable[tuple[int, int]]) -> None:
        role = self._role
        with self._lock:
            self._socket.send(encode_tick(role.index, role.generation, self._seq, heard))

    def close(self) -> None:
        self._socket.close()


@dataclass
class _Fetch:
    """A table copy asked of one sibling."""

    source: int
    socket: zmq.Socket
    deadline: float


class ReplicationBus:
    """`start()` (before serving), `wait_synchronised()`, then it runs by itself; `stop()` last."""

    def __init__(self, role: WorkerRole, config: NamesrvConfig, routes: RouteInfoManager, kv: KVConfigManager,
                 on_lost_sync: Callable[[str], None]) -> None:
        self.role = role
        self._config = config
        self._routes = routes
        self._kv = kv
        self._on_lost_sync = on_lost_sync
        self._context = zmq.Context(io_threads=1)
        self.replicator = Replicator(self._context, role)
        self._replica = RequestProcessor(config, routes, kv, persist=False)
        self._positions = Positions()
        self._heard: dict[int, int] = {}  # origin index -> newest generation heard
        self._acked: set[int] = set()  # siblings whose ticks say they hear this incarnation
        #: The siblings' messages while a restart waits for its copy of their tables (None: applied at once).
        self._backlog: list[BusMessage] | None = [] if role.catch_up else None
        self._fetch: _Fetch | None = None
        self._fetches = 0
        self._lost = False
        self._failure: str | None = None
        self._synchronised = threading.Event()
        self._stopping = False
        self._started = 0.0
        self._barrier_passed = False
        self._sub: zmq.Socket | None = None
        self._router: zmq.Socket | None = None
        self._thread = threading.Thread(target=self._run, name="NamesrvBus", daemon=True)

    # ---- lifecycle (the controller's thread)
    def start(self) -> None:
        role = self.role
        self.replicator.bind()
        sub = self._context.socket(zmq.SUB)
        sub.setsockopt(zmq.RCVHWM, HIGH_WATER_MARK)
        sub.setsockopt(zmq.LINGER, 0)
        sub.setsockopt(zmq.RECONNECT_IVL, RECONNECT_MS)
        sub.setsockopt(zmq.SUBSCRIBE, b"")
        for index in range(role.workers):
            if index != role.index:
                sub.connect(role.endpoint("pub", index))
        router = self._context.socket(zmq.ROUTER)
        router.setsockopt(zmq.LINGER, 0)
        router.bind(role.endpoint("snapshot", role.index))
        self._sub, self._router = sub, router
        self._started = time.monotonic()
        self._thread.start()

    def wait_synchronised(self) -> None:
        """Return once this worker may serve; SyncError if it may not."""
        self._synchronised.wait()
        if self._failure is not None:
            raise SyncError(self._failure)

    def stop(self) -> None:
        """After the executors finished: the last writes leave (LINGER_MS), then everything closes."""
        self._stopping = True
        if self._thread.ident is not None:
            self._thread.join(5)
        for sock in (self._sub, self._router, self._fetch and self._fetch.socket):
            if sock is not None:
                sock.close(0)
        self.replicator.close()
        self._context.term()

    # ---- the bus thread
    def _run(self) -> None:
        poller = zmq.Poller()
        poller.register(self._sub, zmq.POLLIN)
        poller.register(self._router, zmq.POLLIN)
        next_tick = time.monotonic()
        while not self._stopping:
            try:
                now = time.monotonic()
                if now >= next_tick:
                    next_tick = now + TICK_SECONDS
                    self.replicator.publish_tick(self._heard.items())
                    if not self._synchronised.is_set():
                        self._start_up(now, poller)
                events = dict(poller.poll(max(0.0, next_tick - time.monotonic()) * 1000))
                if self._sub in events:
                    self._drain(READ_BUDGET)
                if self._router in events:
                    self._serve_snapshot()
                if self._fetch is not None and self._fetch.socket in events:
                    self._take_snapshot(poller)
            except Exception:  # noqa: BLE001 - the bus must outlive one bad round; it logs and goes on
                log.exception("replication bus round failed")

    def _drain(self, budget: int | None) -> None:
        """Take up to `budget` (None: all) queued messages of the siblings."""
        sub = self._sub
        while budget is None or budget > 0:
            try:
                data = sub.recv(zmq.NOBLOCK)
            except zmq.Again:
                return
            self._receive(data)
            if budget is not None:
                budget -= 1

    def _receive(self, data: bytes) -> None:
        try:
            message = decode(data)
        except ProtocolError as exc:
            log.error("dropped a bus message: %s", exc)
            return
        if message.generation >= self._heard.get(message.origin, 0):
            self._heard[message.origin] = message.generation
        if message.kind == TICK and (self.role.index, self.role.generation) in message.heard:
            self._acked.add(message.origin)
        if self._lost:
            return
        if self._backlog is not None:
            self._backlog.append(message)
        elif not self._admit(message):
            self._lost = True
            reason = f"lost sync with worker {message.origin}: {self._gap(message)}"
            log.error("%s; exiting so that the supervisor restarts this worker from a sibling's tables", reason)
            self._on_lost_sync(reason)

    def _gap(self, message: BusMessage) -> str:
        last = self._positions.last(message.origin)
        return (f"message {message.seq} of generation {message.generation} came after "
                f"{'nothing' if last is None else f'message {last[1]} of generation {last[0]}'}")

    def _admit(self, message: BusMessage) -> bool:
        """Apply `message` if it is the next of its log; False if one before it is missing."""
        verdict = self._positions.admit(message)
        if verdict is Verdict.APPLY:
            self._apply(message)
        return verdict is not Verdict.GAP

    def _apply(self, message: BusMessage) -> None:
        origin = message.channel
        channel = SiblingChannel.stand_in(message.origin, message.generation, origin)
        if message.kind == CLOSE:
            self._routes.on_channel_destroy(channel)
            return
        try:
            if origin.transport == ZMQ_TRANSPORT:
                request = decode_msgpack(message.frame)
            else:  # the reactor's shortcut first: an unchanged re-registration costs here what it cost there
                request = self._replica.inline.answer(message.frame, channel)
                if isinstance(request, bytes):
                    return
                if request is None:
                    request = RemotingCommand.decode(message.frame)
        except ProtocolError as exc:
            log.error("undecodable write %d from worker %d: %s", message.seq, message.origin, exc)
            return
        response = self._replica.process(request, channel)
        if response.code != ResponseCode.SUCCESS:
            log.warning("write (code %d) from %s, applied there, failed here: %d %s", request.code, channel,
                        response.code, response.remark)

    # ---- start-up
    def _start_up(self, now: float, poller: zmq.Poller) -> None:
        """Barrier, then (a restart) the copy of a sibling's tables; called every tick until synchronised."""
        missing = [index for index in self.role.siblings if index not in self._acked]
        if not self._barrier_passed:
            if missing and now - self._started < BARRIER_SECONDS:
                return
            self._barrier_passed = True
            if missing:
                log.warning("workers %s did not answer within %.0f s; starting without them", missing,
                            BARRIER_SECONDS)
        if self._backlog is None:
            self._synchronised.set()
        elif self._fetch is not None and now > self._fetch.deadline:
            log.warning("worker %d sent no tables within %.0f s", self._fetch.source, SNAPSHOT_SECONDS)
            self._drop_fetch(poller)
        elif self._fetch is None:
            sources = sorted(self._acked)
            if not sources or now - self._started > CATCH_UP_SECONDS:
                self._fail(f"no sibling sent its tables within {CATCH_UP_SECONDS:.0f} s" if sources
                           else "no sibling answers to copy the tables from")
                return
            source = sources[self._fetches % len(sources)]
            self._fetches += 1
            sock = self._context.socket(zmq.DEALER)
            sock.setsockopt(zmq.LINGER, 0)
            sock.connect(self.role.endpoint("snapshot", source))
            sock.send(SNAPSHOT_REQUEST)
            poller.register(sock, zmq.POLLIN)
            self._fetch = _Fetch(source, sock, now + SNAPSHOT_SECONDS)

    def _take_snapshot(self, poller: zmq.Poller) -> None:
        source = self._fetch.source
        payload = self._fetch.socket.recv()
        self._drop_fetch(poller)
        if not payload:
            log.info("worker %d cannot give its tables yet", source)
            return
        copied = snapshot.restore(payload, self._routes, self._kv, self._config)
        self._positions = Positions({origin: mark for origin, mark in copied.marks.items()
                                     if origin != self.role.index})
        for message in self._backlog:
            if not self._admit(message):
                log.info("the tables of worker %d miss a write of worker %d this worker saw (%s); asking again",
                         source, message.origin, self._gap(message))
                return  # the backlog is kept: the next copy is applied with all of it
        log.info("copied the tables of worker %d (%s, %d bytes), then the %d bus messages received meanwhile", source,
                 copied.summary, len(payload), len(self._backlog))
        self._backlog = None
        self._synchronised.set()

    def _drop_fetch(self, poller: zmq.Poller) -> None:
        poller.unregister(self._fetch.socket)
        self._fetch.socket.close(0)
        self._fetch = None

    def _fail(self, reason: str) -> None:
        self._failure = reason
        self._lost = True
        self._synchronised.set()

    def _serve_snapshot(self) -> None:
        """A restarting sibling asks for this worker's tables: the siblings' queued writes first."""
        requester, *_ = self._router.recv_multipart()
        if self._backlog is not None or self._lost:
            self._router.send_multipart([requester, b""])  # no consistent tables to give
            return
        self._drain(None)
        if self._lost:
            self._router.send_multipart([requester, b""])
            return
        role = self.role
        marks = self._positions.marks()
        marks[role.index] = (role.generation, self.replicator.last_seq)
        payload = snapshot.take(role.index, role.generation, marks, self._routes, self._kv, self._config)
        self._router.send_multipart([requester, payload])
        log.info("sent this worker's tables (%d bytes) to a restarting sibling", len(payload))
