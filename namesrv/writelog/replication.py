"""One worker process's end of the write log (namesrv.writelog.log): proposing, applying, catching up.

In a worker, a write is never applied where it is received. The executors hand every write
request to `WorkerBus.forward`, which prepares it (the handler's `prepare`: the admin guard, the
header, the body decoded and checked), remembers it as pending and proposes its change to the
supervisor's sequencer; the reactor proposes the close of a connection that carried writes, the
expiry scan proposes the brokers it finds silent. One thread (NamesrvBus) applies the log in
order, the same in every worker: each change through its handler's `apply` on a
RequestProcessor that changes memory only (the sequencer wrote the files), with the route
table's clock set to each entry's time. So a sibling pays only for the change to its tables,
never for reading the request again. When an entry is this worker's own, it answers the pending
request; when its change was prepared with a hint that no longer held where it landed (RETRY,
alike in every worker: nothing was applied), it prepares the request again without hints and
proposes that. A write is answered once it is in the log and applied here, and (for a persisted
one) on disk.

Getting to a consistent start: the first tick tells a worker where the log stands. At 0 (a fresh
start, nothing written yet) it starts from the KV file and no routes. Otherwise it copies a
serving sibling's tables (`snapshot`), buffering the log meanwhile, and applies what the copy
does not include; no copy within CATCH_UP_SECONDS: `SyncError`, the worker exits and the
supervisor starts it again, so it never serves empty tables while a sibling serves full ones.
A gap in the log (an entry lost: this worker fell more than the high-water mark behind) cannot
be repaired in place: the worker reports lost sync and exits, to be restarted from a copy.
"""
from __future__ import annotations

import itertools
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import msgpack
import zmq

from namesrv.channel import Channel
from namesrv.config import NamesrvConfig
from namesrv.kvconfig import KVConfigManager
from namesrv.processor import RequestProcessor
from namesrv.processor.context import RETRY, Hints, Refusal
from namesrv.protocol.codes import ResponseCode
from namesrv.protocol.command import RemotingCommand
from namesrv.errors import ProtocolError
from namesrv.remoting.codecs import encode_reply
from namesrv.remoting.dispatch import OVERLOAD_REMARK
from namesrv.remoting.outbox import Outbox
from namesrv.request_stats import WRITE_LOG, RequestStats
from namesrv.routeinfo import RouteInfoManager
from namesrv.writelog import snapshot
from namesrv.writelog.log import (CLOSE, EXPIRE, GONE, TICK, WRITE, Entry, Proposal, SiblingChannel, Verdict, admit,
                                  pack_write, unpack_write)
from namesrv.writelog.sequencer import HIGH_WATER_MARK, endpoint

log = logging.getLogger(__name__)

#: How long a starting worker waits for the log's first tick.
FIRST_TICK_SECONDS = 10.0
#: How long one sibling may take to send its tables; all siblings together: CATCH_UP_SECONDS.
SNAPSHOT_SECONDS = 10.0
CATCH_UP_SECONDS = 30.0
#: Entries applied per poll round before serving snapshot requests again.
READ_BUDGET = 1024
SNAPSHOT_REQUEST = b"snapshot"


class SyncError(Exception):
    """The worker could not start from a consistent copy of its siblings' tables."""


@dataclass(frozen=True)
class WorkerRole:
    """Who a worker process is among its siblings (the supervisor's spec, JSON on its stdin)."""

    index: int
    #: The supervisor's spawn count: tells the incarnations of one index apart.
    generation: int
    workers: int
    #: The server's name in the abstract socket namespace (namesrv.writelog.sequencer.new_bus_name).
    bus_name: str

    def endpoint(self, what: str) -> str:
        return endpoint(self.bus_name, what)


class LogClock:
    """The route table's clock in a worker: the time of the log entry being applied, so that every
    worker stamps a broker's liveness alike (and expiry, decided by timestamp, agrees)."""

    def __init__(self) -> None:
        self.now = 0

    def __call__(self) -> int:
        return self.now


@dataclass
class _Fetch:
    """A table copy asked of one sibling."""

    source: int
    socket: zmq.Socket
    deadline: float


class WorkerBus:
    """`start()` (before serving), `wait_synchronised()`, then it runs by itself; `stop()` last.

    `forward`, `propose_close` and `propose_expiry` are thread-safe."""

    def __init__(self, role: WorkerRole, config: NamesrvConfig, routes: RouteInfoManager, kv: KVConfigManager,
                 clock: LogClock, outbox: Outbox, on_lost_sync: Callable[[str], None], max_pending: int,
                 stats: RequestStats, on_fresh_log: Callable[[], None] | None = None) -> None:
        """`stats`: where the writes answered once applied are counted; `on_fresh_log`: called (on the
        bus thread, before any entry is applied) when the log has nothing written yet."""
        self.role = role
        self._config = config
        self._routes = routes
        self._kv = kv
        self._clock = clock
        self._outbox = outbox
        self._on_lost_sync = on_lost_sync
        self._max_pending = max_pending
        self._stats = stats
        self._on_fresh_log = on_fresh_log
        #: Prepares writes (executor threads) and applies the log's changes (the bus thread).
        self._processor = RequestProcessor(config, routes, kv, persist=False)
        self._context = zmq.Context(io_threads=1)
        self._propose_socket = self._context.socket(zmq.DEALER)
        self._propose_lock = threading.Lock()
        self._ids = itertools.count(1)
        #: proposal id -> the request to answer once applied, its connection and arrival (time.monotonic).
        self._pending: dict[int, tuple[Channel, RemotingCommand, float]] = {}
        #: Local connections that carried a write: only their closes concern the log.
        self._writers: set[Channel] = set()
        self._position = 0
        #: The log while a start waits for its copy of a sibling's tables (None: applied at once).
        self._backlog: list[Entry] | None = None
        self._first_tick = False
        #: The sequence number of the first tick: a copy of a sibling's tables must include that far.
        self._heard_from = 0
        self._fetch: _Fetch | None = None
        self._fetches = 0
        self._lost = False
        self._failure: str | None = None
        self._synchronised = threading.Event()
        self._stopping = False
        self._started = 0.0
        self._sub: zmq.Socket | None = None
        self._router: zmq.Socket | None = None
        self._thread = threading.Thread(target=self._run, name="NamesrvBus", daemon=True)

    # ---- lifecycle (the controller's thread)
    def start(self) -> None:
        role = self.role
        self._propose_socket.setsockopt(zmq.LINGER, 1000)
        self._propose_socket.setsockopt(zmq.SNDHWM, HIGH_WATER_MARK)
        self._propose_socket.connect(role.endpoint("propose"))
        sub = self._context.socket(zmq.SUB)
        sub.setsockopt(zmq.RCVHWM, HIGH_WATER_MARK)
        sub.setsockopt(zmq.LINGER, 0)
        sub.setsockopt(zmq.SUBSCRIBE, b"")
        sub.connect(role.endpoint("log"))
        router = self._context.socket(zmq.ROUTER)
        router.setsockopt(zmq.LINGER, 0)
        router.bind(role.endpoint(f"snapshot-{role.index}"))
        self._sub, self._router = sub, router
        self._started = time.monotonic()
        self._thread.start()

    def wait_synchronised(self) -> None:
        """Return once this worker may serve; SyncError if it may not."""
        self._synchronised.wait()
        if self._failure is not None:
            raise SyncError(self._failure)

    def drain(self, timeout: float) -> bool:
        """Wait (shutdown) until every forwarded write came back through the log; False on timeout."""
        deadline = time.monotonic() + timeout
        while self._pending and not self._lost and time.monotonic() < deadline:
            time.sleep(0.005)
        return not self._pending

    def stop(self) -> None:
        self._stopping = True
        if self._thread.ident is not None:
            self._thread.join(5)
        for sock in (self._sub, self._router, self._fetch and self._fetch.socket):
            if sock is not None:
                sock.close(0)
        self._propose_socket.close()
        self._context.term()

    # ---- proposing (any thread)
    def forward(self, request: RemotingCommand, channel: Channel, arrived: float) -> RemotingCommand | None:
        """Prepare a write request received on a local connection and propose its change (None: it
        is answered once applied), or its response now: SYSTEM_BUSY if too many are pending, or what
        `prepare` answered (bad input, a refusal: nothing to apply)."""
        if len(self._pending) >= self._max_pending:
            return request.make_response(ResponseCode.SYSTEM_BUSY, OVERLOAD_REMARK)
        change = self._processor.prepare(request, channel)
        if type(change) is RemotingCommand:
            return change
        self._writers.add(channel)
        self._propose_change(request, channel, arrived, change)
        return None

    def _propose_change(self, request: RemotingCommand, channel: Channel, arrived: float, change: object) -> None:
        proposal_id = next(self._ids)
        self._pending[proposal_id] = (channel, request, arrived)
        self._propose(WRITE, proposal_id, channel, pack_write(request.code, change))

    def propose_close(self, channel: Channel) -> None:
        """A local connection closed; only one that carried writes can have registered a broker."""
        if channel in self._writers:
            self._writers.discard(channel)
            self._propose(CLOSE, 0, channel, b"")

    def propose_expiry(self, now: int) -> None:
        """Propose every broker this worker's scan finds silent (applied only if still silent)."""
        for (cluster_name, broker_addr), stamp in self._routes.expiry_candidates(now):
            self._propose(EXPIRE, 0, Channel("tcp", b""), msgpack.packb((cluster_name, broker_addr, stamp)))

    def _propose(self, kind: int, proposal_id: int, channel: Channel, payload: bytes) -> None:
        role = self.role
        data = Proposal(kind, role.index, role.generation, proposal_id, channel, payload).encode()
        with self._propose_lock:
            self._propose_socket.send(data)

    # ---- the bus thread
    def _run(self) -> None:
        poller = zmq.Poller()
        poller.register(self._sub, zmq.POLLIN)
        poller.register(self._router, zmq.POLLIN)
        while not self._stopping:
            try:
                if not self._synchronised.is_set():
                    self._start_up(time.monotonic(), poller)
                events = dict(poller.poll(100))
                if self._sub in events:
                    self._drain(READ_BUDGET)
                if self._router in events:
                    self._serve_snapshot()
                if self._fetch is not None and self._fetch.socket in events:
                    self._take_snapshot(poller)
            except Exception:  # noqa: BLE001 - the bus must outlive one bad round; it logs and goes on
                log.exception("write log round failed")

    def _drain(self, budget: int | None) -> None:
        """Take up to `budget` (None: all) queued log entries."""
        while budget is None or budget > 0:
            try:
                data = self._sub.recv(zmq.NOBLOCK)
            except zmq.Again:
                return
            self._receive(data)
            if budget is not None:
                budget -= 1

    def _receive(self, data: bytes) -> None:
        try:
            entry = Entry.decode(data)
        except ProtocolError as exc:
            log.error("dropped a log entry: %s", exc)
            return
        if self._lost:
            return
        if not self._first_tick:
            if entry.kind != TICK:
                return  # the log is read from a tick on: it says where a start stands
            self._first_tick = True
            self._position = self._heard_from = entry.seq
            if entry.seq:
                self._backlog = []  # written to before this worker heard it: copy a sibling's tables
            elif self._on_fresh_log is not None:
                self._on_fresh_log()  # every worker starts from the same tables (a warm restart)
            return
        if self._backlog is not None:
            self._backlog.append(entry)
            return
        verdict = admit(self._position, entry)
        if verdict is Verdict.APPLY:
            self._apply(entry)
        elif verdict is Verdict.GAP:
            self._lost = True
            reason = f"lost sync with the write log: entry {entry.seq} came after {self._position}"
            log.error("%s; exiting so that the supervisor restarts this worker from a sibling's tables", reason)
            self._on_lost_sync(reason)

    def _apply(self, entry: Entry) -> None:
        self._position = entry.seq
        self._clock.now = entry.time_ms
        proposal = entry.proposal
        mine = (proposal.origin, proposal.generation) == (self.role.index, self.role.generation)
        channel = proposal.channel if mine else SiblingChannel.stand_in(proposal.origin, proposal.generation,
                                                                        proposal.channel)
        if entry.kind == CLOSE:
            self._routes.on_channel_destroy(channel)
        elif entry.kind == GONE:
            gone = (proposal.origin, proposal.generation)
            for stand_in in self._routes.channels():
                if isinstance(stand_in, SiblingChannel) and stand_in.incarnation == gone:
                    self._routes.on_channel_destroy(stand_in)
        elif entry.kind == EXPIRE:
            cluster_name, broker_addr, stamp = msgpack.unpackb(proposal.payload)
            removed = self._routes.expire_if_unchanged((cluster_name, broker_addr), stamp)
            if removed is not None and removed.channel is not None and not isinstance(removed.channel,
                                                                                       SiblingChannel):
                self._outbox.close_channel(removed.channel, f"broker {removed.broker_addr} expired")
        elif entry.kind == WRITE:
            self._apply_write(entry, channel, proposal.proposal_id if mine else None)

    def _apply_write(self, entry: Entry, channel: Channel, proposal_id: int | None) -> None:
        pending = None if proposal_id is None else self._pending.pop(proposal_id, None)
        try:
            code, change = unpack_write(entry.proposal.payload)
        except ProtocolError as exc:
            log.error("unreadable write %d from worker %d: %s", entry.seq, entry.proposal.origin, exc)
            return
        outcome = Refusal(*entry.refused) if entry.refused is not None else self._processor.apply(
            code, change, channel, logged=True)
        if pending is None:
            if type(outcome) is Refusal:
                log.debug("write %d (code %d) from %s: %d %s", entry.seq, code, channel, *outcome)
            return
        origin, request, arrived = pending
        if outcome is RETRY:  # prepared with a hint that no longer held: nothing was applied anywhere
            change = self._processor.prepare(request, origin, Hints.NONE)
            if type(change) is not RemotingCommand:
                self._propose_change(request, origin, arrived, change)
                return
            response = change
        else:
            response = self._processor.answer(request, outcome)
        if not request.is_oneway:
            self._outbox.put([(origin, encode_reply(origin, response))])
            self._stats.tally().add(request.code, response.code, WRITE_LOG, time.monotonic() - arrived)

    # ---- start-up
    def _start_up(self, now: float, poller: zmq.Poller) -> None:
        """Wait for the first tick, then (written to already) copy a sibling's tables."""
        if not self._first_tick:
            if now - self._started > FIRST_TICK_SECONDS:
                self._fail(f"no tick from the write log within {FIRST_TICK_SECONDS:.0f} s")
            return
        if self._backlog is None:
            self._synchronised.set()
        elif self._fetch is not None and now > self._fetch.deadline:
            log.warning("worker %d sent no tables within %.0f s", self._fetch.source, SNAPSHOT_SECONDS)
            self._drop_fetch(poller)
        elif self._fetch is None:
            sources = [index for index in range(self.role.workers) if index != self.role.index]
            if not sources or now - self._started > CATCH_UP_SECONDS:
                self._fail(f"no sibling sent its tables within {CATCH_UP_SECONDS:.0f} s")
                return
            source = sources[self._fetches % len(sources)]
            self._fetches += 1
            sock = self._context.socket(zmq.DEALER)
            sock.setsockopt(zmq.LINGER, 0)
            sock.connect(self.role.endpoint(f"snapshot-{source}"))
            sock.send(SNAPSHOT_REQUEST)
            poller.register(sock, zmq.POLLIN)
            self._fetch = _Fetch(source, sock, now + SNAPSHOT_SECONDS)

    def _take_snapshot(self, poller: zmq.Poller) -> None:
        source = self._fetch.source
        payload = self._fetch.socket.recv()
        self._drop_fetch(poller)
        if not payload:
            log.info("worker %d cannot give its tables yet", source)
            time.sleep(0.05)
            return
        copied = snapshot.restore(payload, self._routes, self._kv, self._config)
        backlog = [entry for entry in self._backlog if entry.kind != TICK and entry.seq > copied.position]
        first_missing = backlog[0].seq if backlog else self._heard_from + 1
        if copied.position < min(first_missing - 1, self._heard_from):
            log.info("the tables of worker %d end at entry %d, before the %d this worker heard first; asking again",
                     source, copied.position, first_missing)
            return  # the backlog is kept: the next copy is applied with all of it
        self._position = copied.position
        for entry in backlog:
            if admit(self._position, entry) is Verdict.APPLY:
                self._apply(entry)
        log.info("copied the tables of worker %d (%s, %d bytes) at entry %d, then the %d log entries received "
                 "meanwhile", source, copied.summary, len(payload), copied.position, len(backlog))
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
        """A starting sibling asks for this worker's tables: the log queued here is applied first."""
        requester, *_ = self._router.recv_multipart()
        if not self._synchronised.is_set() or self._lost:
            self._router.send_multipart([requester, b""])  # no consistent tables to give
            return
        self._drain(None)
        if self._lost:
            self._router.send_multipart([requester, b""])
            return
        role = self.role
        payload = snapshot.take(role.index, role.generation, self._position, self._routes, self._kv, self._config)
        self._router.send_multipart([requester, payload])
        log.info("sent this worker's tables (%d bytes, entry %d) to a starting sibling", len(payload), self._position)
