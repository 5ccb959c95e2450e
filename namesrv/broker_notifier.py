"""The thread that tells brokers their group's lowest broker id changed (NOTIFY_MIN_BROKER_ID_CHANGE, 5.x).

The route table reports each change as plain data (`MinBrokerIdChange`, while notifyMinBrokerIdChanged
is on) from under its write lock, on whatever thread made the change: an executor, the reactor (a
closed connection), the expiry scan. `submit` only queues it, in a bounded queue: a change that does
not fit is dropped and logged, never waited for. This thread sends each as a oneway request to every
broker it names, as 5.x's invokeOneway(brokerAddr, request, 300) does: over a connection of the
NameServer's own to the broker's address, connected and written within SEND_TIMEOUT_SECONDS each.

Broker addresses are whatever a registrant wrote (REGISTER_BROKER is unauthenticated), so the
notifications are bounded as what a stranger makes us send:
* per change (one inbound request or closed connection), at most MAX_TARGETS_PER_CHANGE brokers,
  lowest ids first (a real group is a master and a few slaves);
* at most RATE_PER_SECOND on average, RATE_BURST at once: past it the thread waits, the queue
  fills and further changes are dropped (logged);
* a broker that could not be reached (refused, timed out, not an address) is not tried again for
  BACKOFF_FIRST_SECONDS, doubling with each failure up to BACKOFF_MAX_SECONDS (MAX_BACKOFFS
  addresses remembered);
* a host name (a numeric address needs no lookup) is resolved on a thread of its own and waited
  for SEND_TIMEOUT_SECONDS at most: a resolver that hangs never holds this thread longer.

Connections are kept per broker address for the next change (a failover usually brings the master
back), at most MAX_CONNECTIONS of them: once that many are kept a new one is used for its
notification and closed, so those kept are reused whatever the order of the addresses (an LRU
would evict every one before its reuse once a change names more than it keeps). Each is closed
after IDLE_SECONDS unused or when the broker closed it (a broker answers no oneway request, so
anything readable on one means it is closed).

With worker processes, every worker applies every change: only worker 0 runs a notifier, so each
change is sent once (namesrv.controller).
"""
from __future__ import annotations

import concurrent.futures
import itertools
import logging
import queue
import select
import socket
import threading
import time
from collections import OrderedDict
from collections.abc import Callable

from namesrv.protocol.codes import LanguageCode, RequestCode
from namesrv.protocol.command import RemotingCommand
from namesrv.routeinfo import MinBrokerIdChange, RouteInfoManager

log = logging.getLogger(__name__)

#: Changes waiting to be sent; more are dropped (a change is rare: a master leaving or coming back).
QUEUE_SIZE = 1024
#: Connect, send and host-name lookup timeout per broker, as 5.x's invokeOneway(..., 300).
SEND_TIMEOUT_SECONDS = 0.3
#: Connections kept open to brokers, and how long an unused one stays open.
MAX_CONNECTIONS = 64
IDLE_SECONDS = 60.0
#: Brokers told of one change at most.
MAX_TARGETS_PER_CHANGE = 8
#: Notifications sent per second on average, and at once.
RATE_PER_SECOND = 50.0
RATE_BURST = 100
#: How long a broker that could not be reached is left alone, after its first failure and at most.
BACKOFF_FIRST_SECONDS = 1.0
BACKOFF_MAX_SECONDS = 60.0
MAX_BACKOFFS = 4096
#: Host names resolved are remembered this long (at most this many).
RESOLVED_SECONDS = 60.0
MAX_RESOLVED = 1024
#: How often the thread looks whether it should stop, seconds.
STOP_POLL_SECONDS = 0.1

_OPAQUE_MASK = 0x7FFFFFFF


class BrokerNotifier:
    """`start()` listens to the route table and sends; `stop()` stops listening, then sending."""

    def __init__(self, routes: RouteInfoManager, *, queue_size: int = QUEUE_SIZE,
                 timeout: float = SEND_TIMEOUT_SECONDS, max_connections: int = MAX_CONNECTIONS,
                 idle_seconds: float = IDLE_SECONDS, rate: float = RATE_PER_SECOND, burst: int = RATE_BURST,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._routes = routes
        self._clock = clock
        self._queue: queue.Queue[MinBrokerIdChange] = queue.Queue(queue_size)
        self._timeout = timeout
        self._max_connections = max_connections
        self._idle_seconds = idle_seconds
        self._rate = rate
        self._burst = burst
        self._tokens = float(burst)
        self._filled = clock()
        #: broker address -> (connection, when it was last written to).
        self._connections: dict[str, tuple[socket.socket, float]] = {}
        #: broker address -> (failures in a row, not tried again before), oldest failure first.
        self._backoffs: OrderedDict[str, tuple[int, float]] = OrderedDict()
        #: host name -> (socket address, resolved at).
        self._resolved: OrderedDict[str, tuple[str, float]] = OrderedDict()
        self._resolver = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="NamesrvBrokerResolver")
        self._opaques = itertools.count(1)
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="NamesrvBrokerNotifier", daemon=True)
        #: Requests written to a broker's connection, requests that could not be, changes dropped unsent,
        #: brokers not told (past MAX_TARGETS_PER_CHANGE, or backing off), connections opened.
        self.sent = 0
        self.failed = 0
        self.dropped = 0
        self.skipped = 0
        self.opened = 0

    def start(self) -> None:
        self._routes.min_broker_id_listener = self.submit
        self._thread.start()

    def stop(self) -> None:
        if self._routes.min_broker_id_listener == self.submit:
            self._routes.min_broker_id_listener = None
        self._stopping.set()
        if self._thread.ident is not None:
            self._thread.join(5)
        self._resolver.shutdown(wait=False, cancel_futures=True)

    def submit(self, change: MinBrokerIdChange) -> None:
        """Queue `change` for sending; never blocks (the caller holds the route table's write lock)."""
        try:
            self._queue.put_nowait(change)
        except queue.Full:
            self.dropped += 1
            log.warning("min broker id of %s changed to %d, but %d notifications wait to be sent: not notifying %s",
                        change.broker_name, change.min_broker_id, self._queue.maxsize,
                        list(change.notify[:MAX_TARGETS_PER_CHANGE]))

    def send(self, change: MinBrokerIdChange) -> None:
        """Send `change` to the brokers it names, within the bounds (this thread's work; callable
        directly in tests)."""
        targets = change.notify[:MAX_TARGETS_PER_CHANGE]
        log.info("min broker id changed to %d, notify %s, offline broker addr %s (broker group %s)",
                 change.min_broker_id, list(targets), change.offline_broker_addr, change.broker_name)
        if len(change.notify) > len(targets):
            self.skipped += len(change.notify) - len(targets)
            log.warning("broker group %s names %d brokers to notify: only the first %d are told",
                        change.broker_name, len(change.notify), MAX_TARGETS_PER_CHANGE)
        for broker_addr in targets:
            now = self._clock()
            backoff = self._backoffs.get(broker_addr)
            if backoff is not None and now < backoff[1]:
                self.skipped += 1
                log.debug("NOTIFY_MIN_BROKER_ID_CHANGE to %s skipped: unreachable, %d failures in a row",
                          broker_addr, backoff[0])
                continue
            if not self._take_token():
                return  # stopping
            request = RemotingCommand.request(RequestCode.NOTIFY_MIN_BROKER_ID_CHANGE, change.ext_fields(),
                                              opaque=next(self._opaques) & _OPAQUE_MASK, oneway=True,
                                              language=LanguageCode.JAVA)
            try:
                self._write(broker_addr, request.encode())
            except (OSError, ValueError) as exc:
                self.failed += 1
                pause = self._back_off(broker_addr, backoff)
                log.warning("NOTIFY_MIN_BROKER_ID_CHANGE to %s failed: %s (not tried again for %.0f s)",
                            broker_addr, exc, pause)
            else:
                self.sent += 1
                if backoff is not None:
                    del self._backoffs[broker_addr]

    def close_idle(self, now: float) -> None:
        """Close the connections unused for IDLE_SECONDS at `now` (by the notifier's clock)."""
        for broker_addr, (_, used) in list(self._connections.items()):
            if now - used >= self._idle_seconds:
                self._close(broker_addr)

    def close_all(self) -> None:
        for broker_addr in list(self._connections):
            self._close(broker_addr)

    def connected(self) -> list[str]:
        """The broker addresses a connection is kept to, first kept first."""
        return list(self._connections)

    def _take_token(self) -> bool:
        """Wait until the rate allows one more notification; False if stopping meanwhile."""
        while True:
            now = self._clock()
            self._tokens = min(float(self._burst), self._tokens + (now - self._filled) * self._rate)
            self._filled = now
            if self._tokens >= 1.0:
                self._tokens -= 1.0
                return True
            if self._stopping.wait((1.0 - self._tokens) / self._rate):
                return False

    def _back_off(self, broker_addr: str, backoff: tuple[int, float] | None) -> float:
        """Record one more failure of `broker_addr`; returns how long it is now left alone."""
        failures = 1 if backoff is None else backoff[0] + 1
        pause = min(BACKOFF_MAX_SECONDS, BACKOFF_FIRST_SECONDS * 2 ** (failures - 1))
        self._backoffs.pop(broker_addr, None)
        self._backoffs[broker_addr] = (failures, self._clock() + pause)
        while len(self._backoffs) > MAX_BACKOFFS:
            self._backoffs.popitem(last=False)
        return pause

    def _write(self, broker_addr: str, frame: bytes) -> None:
        """Write `frame` on the kept connection to `broker_addr`, or a new one (kept if there is
        room); a connection that fails is closed (the broker is told of the next change on a fresh one)."""
        kept = self._connections.pop(broker_addr, None)
        sock = None
        if kept is not None:
            sock = kept[0]
            if _closed_by_peer(sock):
                sock.close()
                sock = None
        if sock is None:
            sock = socket.create_connection(self._address_of(broker_addr), timeout=self._timeout)
            self.opened += 1
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            sock.sendall(frame)
        except OSError:
            sock.close()
            raise
        if kept is None and len(self._connections) >= self._max_connections:
            sock.close()  # full: those kept stay, for their next change
            return
        self._connections[broker_addr] = (sock, self._clock())

    def _address_of(self, broker_addr: str) -> tuple[str, int]:
        """The socket address to connect to: a numeric host as it is, a host name looked up on the
        resolver thread within the timeout (OSError past it) and remembered for RESOLVED_SECONDS."""
        host, port = broker_address(broker_addr)
        try:
            socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_NUMERICHOST)
            return host, port
        except socket.gaierror:
            pass
        now = self._clock()
        resolved = self._resolved.get(host)
        if resolved is not None and now - resolved[1] < RESOLVED_SECONDS:
            return resolved[0], port
        lookup = self._resolver.submit(socket.getaddrinfo, host, port, type=socket.SOCK_STREAM)
        try:
            numeric = lookup.result(timeout=self._timeout)[0][4][0]
        except concurrent.futures.TimeoutError:
            raise OSError(f"looking up {host!r} took longer than {self._timeout:g} s") from None
        self._resolved.pop(host, None)
        self._resolved[host] = (numeric, now)
        while len(self._resolved) > MAX_RESOLVED:
            self._resolved.popitem(last=False)
        return numeric, port

    def _close(self, broker_addr: str) -> None:
        sock, _ = self._connections.pop(broker_addr)
        sock.close()

    def _run(self) -> None:
        try:
            while not self._stopping.is_set():
                try:
                    change = self._queue.get(timeout=STOP_POLL_SECONDS)
                except queue.Empty:
                    self.close_idle(self._clock())
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
