"""The thread that tells brokers their group's lowest broker id changed (NOTIFY_MIN_BROKER_ID_CHANGE, 5.x).

The route table reports each change as plain data (`MinBrokerIdChange`, while notifyMinBrokerIdChanged
is on) from under its write lock, on whatever thread made the change: an executor, the reactor (a
closed connection), the expiry scan. `submit` only queues it, in a bounded queue: a change that does
not fit is dropped and logged, never waited for. This thread sends each as a oneway request to every
broker it names, as 5.x's invokeOneway(brokerAddr, request, 300) does: over a connection of the
NameServer's own to the broker's address, connected and written within SEND_TIMEOUT_SECONDS each. A
broker that cannot be reached is logged and skipped, holding up the next one by those timeouts at most.

Connections are kept per broker address for the next change (a failover usually brings the
master back), at most MAX_CONNECTIONS of them, each closed after IDLE_SECONDS unused or when the
broker closed it (a broker answers no oneway request, so anything readable on one means it is closed).

With worker processes, every worker applies every change: only worker 0 runs a notifier, so each
change is sent once (namesrv.controller).
"""
from __future__ import annotations

import itertools
import logging
import queue
import select
import socket
import threading
import time

from namesrv.protocol.codes import LanguageCode, RequestCode
from namesrv.protocol.command import RemotingCommand
from namesrv.routeinfo import MinBrokerIdChange, RouteInfoManager

log = logging.getLogger(__name__)

#: Changes waiting to be sent; more are dropped (a change is rare: a master leaving or coming back).
QUEUE_SIZE = 1024
#: Connect and send timeout per broker, as 5.x's invokeOneway(..., 300).
SEND_TIMEOUT_SECONDS = 0.3
#: Connections kept open to brokers, and how long an unused one stays open.
MAX_CONNECTIONS = 64
IDLE_SECONDS = 60.0
#: How often the thread looks whether it should stop, seconds.
STOP_POLL_SECONDS = 0.1

_OPAQUE_MASK = 0x7FFFFFFF


class BrokerNotifier:
    """`start()` listens to the route table and sends; `stop()` stops listening, then sending."""

    def __init__(self, routes: RouteInfoManager, *, queue_size: int = QUEUE_SIZE,
                 timeout: float = SEND_TIMEOUT_SECONDS, max_connections: int = MAX_CONNECTIONS,
                 idle_seconds: float = IDLE_SECONDS) -> None:
        self._routes = routes
        self._queue: queue.Queue[MinBrokerIdChange] = queue.Queue(queue_size)
        self._timeout = timeout
        self._max_connections = max_connections
        self._idle_seconds = idle_seconds
        #: broker address -> (connection, when it was last written to), oldest use first.
        self._connections: dict[str, tuple[socket.socket, float]] = {}
        self._opaques = itertools.count(1)
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="NamesrvBrokerNotifier", daemon=True)
        #: Requests written to a broker's connection, requests that could not be, changes dropped unsent.
        self.sent = 0
        self.failed = 0
        self.dropped = 0

    def start(self) -> None:
        self._routes.min_broker_id_listener = self.submit
        self._thread.start()

    def stop(self) -> None:
        if self._routes.min_broker_id_listener == self.submit:
            self._routes.min_broker_id_listener = None
        self._stopping.set()
        if self._thread.ident is not None:
            self._thread.join(5)

    def submit(self, change: MinBrokerIdChange) -> None:
        """Queue `change` for sending; never blocks (the caller holds the route table's write lock)."""
        try:
            self._queue.put_nowait(change)
        except queue.Full:
            self.dropped += 1
            log.warning("min broker id of %s changed to %d, but %d notifications wait to be sent: not notifying %s",
                        change.broker_name, change.min_broker_id, self._queue.maxsize, list(change.notify))

    def send(self, change: MinBrokerIdChange) -> None:
        """Send `change` to every broker it names (this thread's work; callable directly in tests)."""
        log.info("min broker id changed to %d, notify %s, offline broker addr %s (broker group %s)",
                 change.min_broker_id, list(change.notify), change.offline_broker_addr, change.broker_name)
        for broker_addr in change.notify:
            request = RemotingCommand.request(RequestCode.NOTIFY_MIN_BROKER_ID_CHANGE, change.ext_fields(),
                                              opaque=next(self._opaques) & _OPAQUE_MASK, oneway=True,
                                              language=LanguageCode.JAVA)
            try:
                self._write(broker_addr, request.encode())
            except (OSError, ValueError) as exc:
                self.failed += 1
                log.warning("NOTIFY_MIN_BROKER_ID_CHANGE to %s failed: %s", broker_addr, exc)
            else:
                self.sent += 1

    def close_idle(self, now: float) -> None:
        """Close the connections unused for IDLE_SECONDS at `now` (time.monotonic())."""
        for broker_addr, (_, used) in list(self._connections.items()):
            if now - used >= self._idle_seconds:
                self._close(broker_addr)

    def close_all(self) -> None:
        for broker_addr in list(self._connections):
            self._close(broker_addr)

    def connected(self) -> list[str]:
        """The broker addresses a connection is kept to, oldest use first."""
        return list(self._connections)

    def _write(self, broker_addr: str, frame: bytes) -> None:
        """Write `frame` on the kept connection to `broker_addr`, or a new one; a connection that
        fails is closed (the broker is told of the next change on a fresh one)."""
        kept = self._connections.pop(broker_addr, None)
        sock = None
        if kept is not None:
            sock = kept[0]
            if _closed_by_peer(sock):
                sock.close()
                sock = None
        if sock is None:
            sock = socket.create_connection(broker_address(broker_addr), timeout=self._timeout)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            sock.sendall(frame)
        except OSError:
            sock.close()
            raise
        self._connections[broker_addr] = (sock, time.monotonic())
        while len(self._connections) > self._max_connections:
            self._close(next(iter(self._connections)))

    def _close(self, broker_addr: str) -> None:
        sock, _ = self._connections.pop(broker_addr)
        sock.close()

    def _run(self) -> None:
        try:
            while not self._stopping.is_set():
                try:
                    change = self._queue.get(timeout=STOP_POLL_SECONDS)
                except queue.Empty:
                    self.close_idle(time.monotonic())
                    continue
                try:
                    self.send(change)
                except Exception:  # noqa: BLE001 - one failed change must not end the notifications
                    log.exception("notifying brokers of %s failed", change)
        finally:
            self.close_all()
            left = self._queue.qsize()
            if left:
                log.info("%d min broker id notifications not sent: shutting down", left)


def broker_address(broker_addr: str) -> tuple[str, int]:
    """A broker address as it registers (`host:port`, an IPv6 host optionally in brackets) as a
    socket address; ValueError naming it when it is not one."""
    host, sep, port = broker_addr.rpartition(":")
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        raise ValueError(f"not a broker address: {broker_addr!r}")
    return host.strip("[]"), int(port)


def _closed_by_peer(sock: socket.socket) -> bool:
    """Is a kept connection closed (or reset) by its broker? A broker writes nothing back to oneway
    requests, so a connection with anything to read is one to give up."""
    poller = select.poll()
    poller.register(sock, select.POLLIN)
    return bool(poller.poll(0))
