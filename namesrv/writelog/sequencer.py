"""The supervisor's sequencer: one total order for every write of every worker, and the one file writer.

Workers send proposals to a ROUTER socket; the sequencer numbers them in arrival order, stamps
them with its clock and publishes them on a PUB socket that every worker applies in order
(namesrv.writelog.log). A persisted write (the request table's `persisted` rows: the KV table,
the config file) has its change applied here first, through a RequestProcessor over the
supervisor's own KV table and config with files written atomically, and only then published: so
an answered write is already on disk, and a kill -9 of anything afterwards cannot lose it. A
persisted change this processor refuses (a bad config value, an unwritable file) is published as
refused: no worker applies it, and its origin answers with the refusal. (The admin guard and
every check of the request itself ran where it arrived, before it was proposed.)

Both sockets live in Linux's abstract socket namespace (`ipc://@...`): nothing is created on
disk, so nothing is left behind whatever kills the server.
"""
from __future__ import annotations

import logging
import os
import queue
import secrets
import threading
import time

import zmq

from namesrv.channel import Channel
from namesrv.config import NamesrvConfig
from namesrv.kvconfig import KVConfigManager
from namesrv.processor import PERSISTED_CODES, RequestProcessor
from namesrv.processor.context import Refusal
from namesrv.errors import ProtocolError
from namesrv.routeinfo import RouteInfoManager, now_ms
from namesrv.writelog.log import GONE, TICK, WRITE, Entry, Proposal, unpack_write

log = logging.getLogger(__name__)

#: How often the last sequence number is repeated (a subscriber that lost an entry learns it this soon).
TICK_SECONDS = 0.1
#: Entries queued per subscriber before the PUB socket drops (a gap: that worker restarts from a copy).
HIGH_WATER_MARK = 100_000


def new_bus_name() -> str:
    """A name for one server's sockets in the abstract namespace, unique to this supervisor."""
    return f"namesrv-{os.getpid()}-{secrets.token_hex(4)}"


def endpoint(bus_name: str, what: str) -> str:
    return f"ipc://@{bus_name}/{what}"


class Sequencer:
    """`start()` binds and runs the thread; `stop()` ends it."""

    def __init__(self, config: NamesrvConfig, bus_name: str) -> None:
        self._bus_name = bus_name
        self._kv = KVConfigManager(config.kv_config_path)
        # Only persisted codes ever reach it: the route table stays empty.
        self._processor = RequestProcessor(config, RouteInfoManager(config), self._kv)
        self._context = zmq.Context(io_threads=1)
        self._router = self._context.socket(zmq.ROUTER)
        self._pub = self._context.socket(zmq.PUB)
        self._seq = 0
        self._stopping = False
        #: Workers that exited, (index, generation), put by the supervisor's thread.
        self._gone: queue.SimpleQueue[tuple[int, int]] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="NamesrvSequencer", daemon=True)

    def start(self) -> None:
        self._kv.load()
        for sock in (self._router, self._pub):
            sock.setsockopt(zmq.LINGER, 0)
        self._router.setsockopt(zmq.RCVHWM, HIGH_WATER_MARK)
        self._pub.setsockopt(zmq.SNDHWM, HIGH_WATER_MARK)
        self._router.bind(endpoint(self._bus_name, "propose"))
        self._pub.bind(endpoint(self._bus_name, "log"))
        self._thread.start()

    def stop(self) -> None:
        self._stopping = True
        if self._thread.ident is not None:
            self._thread.join(5)
        self._router.close(0)
        self._pub.close(0)
        self._context.term()

    def worker_gone(self, index: int, generation: int) -> None:
        """Log that a worker exited (any thread): every worker then drops the brokers whose
        connection was one of its, as a closed connection drops them (within a tick)."""
        self._gone.put((index, generation))

    def _run(self) -> None:
        poller = zmq.Poller()
        poller.register(self._router, zmq.POLLIN)
        next_tick = 0.0
        while not self._stopping:
            try:
                now = time.monotonic()
                if now >= next_tick:
                    next_tick = now + TICK_SECONDS
                    while not self._gone.empty():
                        index, generation = self._gone.get()
                        self._publish(Proposal(GONE, index, generation, 0, Channel("tcp", b"", ""), b""), None)
                    self._pub.send(Entry(self._seq, TICK).encode())
                if poller.poll(max(0.0, next_tick - time.monotonic()) * 1000):
                    for _ in range(1024):
                        try:
                            _, data = self._router.recv_multipart(zmq.NOBLOCK)
                        except zmq.Again:
                            break
                        self._sequence(data)
            except Exception:  # noqa: BLE001 - the log must outlive one bad round; it logs and goes on
                log.exception("sequencer round failed")

    def _sequence(self, data: bytes) -> None:
        try:
            proposal = Proposal.decode(data)
        except ProtocolError as exc:
            log.error("dropped a proposal: %s", exc)
            return
        if proposal.kind == GONE:
            log.error("dropped a GONE proposal from worker %d: only the supervisor says a worker is gone",
                      proposal.origin)
            return
        self._publish(proposal, self._persist(proposal) if proposal.kind == WRITE else None)

    def _publish(self, proposal: Proposal, refused: tuple[int, str | None] | None) -> None:
        self._seq += 1
        self._pub.send(Entry(self._seq, proposal.kind, now_ms(), proposal, refused).encode())

    def _persist(self, proposal: Proposal) -> tuple[int, str | None] | None:
        """Apply a persisted write's change here, files included; its refusal, or None (applied, or
        not persisted)."""
        try:
            code, change = unpack_write(proposal.payload)
        except ProtocolError:
            return None  # every worker fails to read it alike
        if code not in PERSISTED_CODES:
            return None
        outcome = self._processor.apply(code, change, proposal.channel, logged=True)
        return tuple(outcome) if type(outcome) is Refusal else None
