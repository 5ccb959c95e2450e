"""The reactor: one thread owns every ZeroMQ socket and polls them together.

Per poll round it reads what the sockets hold (bounded), decodes frames (the requests the inline
paths answer are answered then), hands the round's other requests to the executors in one batch
per pool, sends back whatever replies there are (all of one connection's in one send), retries
the backlog of peers whose pipe was full, and closes idle connections. Nothing in the loop waits
on a peer or on a worker.
"""
from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

import zmq
from zmq.utils.monitor import recv_monitor_message

from namesrv.channel import Channel
from namesrv.config import NamesrvConfig
from namesrv.remoting.codecs import ZMQ_TRANSPORT, Decode, decode_all
from namesrv.remoting.curve import CurveServer
from namesrv.remoting.dispatch import RequestDispatcher
from namesrv.remoting.endpoints import MAX_MESSAGE_BYTES, Endpoint, Job, RouterEndpoint, StreamEndpoint
from namesrv.remoting.sockets import bytes_written
from namesrv.remoting.tls import TlsServer
from namesrv.remoting.zmq_intake import CHECK_PERIOD, IntakeWatch
from namesrv.remoting.outbox import Close, Delivery, Outbox

log = logging.getLogger(__name__)

#: Messages taken from one socket per round: bounds how long a flood delays replies and other sockets.
READ_BUDGET = 2048
#: Reply bytes sent per round at most (whole batches; the rest waits for the next round): a round of
#: route-change pushes to many subscribers must not keep the reactor from reading for its whole length.
DRAIN_BYTES = 4 << 20
#: How soon a peer whose pipe was full is retried (ZeroMQ gives no per-peer writable event).
BLOCKED_RETRY_MS = 5
IDLE_SWEEP_SECONDS = 1.0
#: While going away, how often the reactor checks whether every connection was told.
SETTLE_CHECK_SECONDS = 0.1


#: The configuration keys each endpoint is bound from, named in a BindError.
TCP_KEYS = "bindAddress, listenPort"
ZMQ_KEY = "zmqListenAddress"
HTTP_KEY = "httpListenAddress"


class BindError(Exception):
    """An endpoint could not be bound (port in use, bad address); the message names the keys to change."""

    def __init__(self, endpoint: str, keys: str, reason: str) -> None:
        super().__init__(f"cannot listen on {endpoint} ({keys}): {reason}")
        self.endpoint = endpoint


def tcp_endpoint(host: str, port: int) -> str:
    """ZeroMQ endpoint for bindAddress/listenPort; port 0 picks a free one."""
    return f"tcp://{f'[{host}]' if ':' in host else host}:{port or '*'}"


class Reactor:
    """The server's I/O thread: bind, start, pause reading, stop after flushing."""

    def __init__(self, config: NamesrvConfig, dispatcher: RequestDispatcher, outbox: Outbox,
                 on_channel_closed: Callable[[Channel], None], io_threads: int, decode: Decode = decode_all) -> None:
        """`io_threads`: the ZeroMQ context's I/O threads (namesrv.controller.selector_threads);
        `decode`: how TCP frames become requests, answering those the reactor may answer itself
        (namesrv.processor.inline)."""
        self._config = config
        self._dispatcher = dispatcher
        self._decode = decode
        self._outbox = outbox
        self._on_channel_closed = on_channel_closed
        self._context = zmq.Context(io_threads=io_threads)
        self._endpoints: dict[str, Endpoint] = {}
        self._thread = threading.Thread(target=self._run, name="NamesrvReactor", daemon=True)
        self._paused = False
        #: Shutting down: GO_AWAY is answered (set by go_away(), applied by the reactor thread).
        self._going_away = False
        self._going_away_applied = False
        #: Set once every open connection was told GO_AWAY or is an older client's (while going away).
        self._settled = threading.Event()
        self._reading_stopped = threading.Event()
        self._stop_deadline: float | None = None
        #: "host:port" of the RocketMQ endpoint and the ZeroMQ endpoint actually bound (after bind()).
        self.tcp_address = ""
        self.zmq_address: str | None = None
        self._curve: CurveServer | None = None
        #: TLS on the RocketMQ port (tlsMode), made in bind().
        self.tls: TlsServer | None = None
        self._stream: StreamEndpoint | None = None
        #: Connection events of the ZeroMQ TCP endpoint, for its IntakeWatch.
        self._monitor: zmq.Socket | None = None

    # ---- lifecycle (any thread)
    def bind(self, tcp_fd: int | None = None, zmq_fd: int | None = None, bind_zmq: bool = True) -> None:
        """Bind both endpoints (in the caller's thread, so a port in use is reported before start).

        Worker processes (namesrv.workers) share the ports: `tcp_fd`/`zmq_fd` is a socket of theirs,
        bound with SO_REUSEPORT and listening, that ZeroMQ takes over (ZMQ_USE_FD) instead of binding
        its own; `bind_zmq=False` leaves an ipc/inproc ZeroMQ endpoint to the one worker binding it.
        """
        config = self._config
        zmq_address = config.zmq_listen_address if bind_zmq else ""
        if zmq_address:
            self._curve = CurveServer.from_config(self._context, config)
        self.tls = TlsServer(config)
        try:
            stream = self._listen(zmq.STREAM, tcp_endpoint(config.bind_address, config.listen_port), TCP_KEYS,
                                  tcp_fd)
            stream.setsockopt(zmq.STREAM_NOTIFY, 1)
            self._stream = StreamEndpoint(stream, self._max_backlog_bytes(), self._on_channel_closed,
                                          config.max_frame_length, max_connections=config.max_connections,
                                          decode=self._decode, tls=self.tls)
            self._add(self._stream)
            self.tcp_address = _bound(stream).removeprefix("tcp://")
            if zmq_address:
                router = self._listen(zmq.ROUTER, zmq_address, ZMQ_KEY, zmq_fd)
                intake = None
                if zmq_address.startswith("tcp://"):
                    intake = IntakeWatch(2 * config.max_frame_length)
                    self._monitor = router.get_monitor_socket(zmq.EVENT_ACCEPTED | zmq.EVENT_DISCONNECTED)
                self._add(RouterEndpoint(router, self._max_backlog_bytes(), self._on_channel_closed,
                                         config.max_frame_length, intake, max_connections=config.max_connections))
                self.zmq_address = _bound(router)
        except BindError:
            self._close_sockets(0)
            self._stop_curve()
            raise

    def start(self) -> None:
        self.tls.start()
        self._thread.start()

    def go_away(self) -> None:
        """Answer GO_AWAY from now on to clients that understand it (RocketMQ 5.x's shutdown): every
        request goes through the dispatcher, which decides (namesrv.remoting.dispatch)."""
        self._going_away = True
        self._outbox.wake()

    def wait_settled(self, timeout: float) -> bool:
        """Wait (after go_away) until every open connection was told GO_AWAY or is an older client's."""
        return self._settled.wait(timeout)

    def pause_reading(self) -> None:
        """Stop taking requests (shutdown) and return once the reactor has; replies keep flowing."""
        self._paused = True
        self._outbox.wake()
        if self._thread.is_alive():
            self._reading_stopped.wait(5)

    def stop(self, timeout: float) -> None:
        """Send every reply already posted (up to `timeout` seconds), then close the sockets."""
        self._stop_deadline = time.monotonic() + timeout
        self._outbox.wake()
        if self._thread.ident is None:
            self._close_sockets(0)
        else:
            self._thread.join(timeout + 2)
            if self._thread.is_alive():
                log.error("the reactor did not stop within %.1f s; leaving its sockets open", timeout + 2)
                return
        self._stop_curve()
        if self.tls is not None:
            self.tls.stop()
        self._context.term()

    @property
    def zmq_authenticated(self) -> bool:
        """The ZeroMQ endpoint authenticates its peers (CURVE)."""
        return self._curve is not None

    def backlog_bytes(self) -> dict[str, int]:
        """Unsent reply bytes queued for slow readers, per transport."""
        return {transport: endpoint.backlog_bytes for transport, endpoint in self._endpoints.items()}

    def refused_counts(self) -> dict[str, int]:
        """Connections turned away for maxConnections since start, per transport."""
        return {transport: endpoint.refused for transport, endpoint in self._endpoints.items()}

    def cut_counts(self) -> dict[tuple[str, str], int]:
        """Connections closed from our side since start, per (transport, cause)."""
        return {(transport, cause): count for transport, endpoint in self._endpoints.items()
                for cause, count in endpoint.cut.items()}

    def tls_handshakes(self) -> dict[str, int]:
        """TLS handshakes on the RocketMQ port since start, by result."""
        return dict(self._stream.handshakes) if self._stream is not None else {}

    def unsent_of(self, channel: Channel) -> int | None:
        """The reply bytes one connection holds unsent in this process (any thread: racy but safe
        reads): its backlog here, and what ZeroMQ's pipe holds for it (the bytes handed to ZeroMQ
        less those the kernel has taken, read off the socket). None once it is closed. The
        kernel's own send buffer is not counted: the kernel bounds it."""
        endpoint = self._endpoints.get(channel.transport)
        conn = None if endpoint is None else endpoint.connections.get(channel.ident)
        if conn is None:
            return None
        held = conn.backlog_bytes
        if conn.fd is not None:
            written = bytes_written(conn.fd, conn.channel.remote_addr)
            if written is None:
                return None if conn.channel.ident not in endpoint.connections else held
            held += max(0, conn.handed - written)
        return held

    def security_of(self, channel: Channel) -> str | None:
        """A connection's protection: its TLS version, "plain", "CURVE" (ZeroMQ), "undecided" (no byte
        yet), or None when it is not open here (any thread: a racy but safe read)."""
        endpoint = self._endpoints.get(channel.transport)
        conn = None if endpoint is None else endpoint.connections.get(channel.ident)
        if conn is None:
            return None
        if channel.transport != "tcp":
            return "CURVE" if self._curve is not None else "plain"
        return "plain" if conn.tls is None else getattr(conn.tls, "version", None) or "undecided"

    def connection_counts(self) -> dict[str, int]:
        """Open connections per transport (a snapshot; exact only from the reactor thread or once it stopped)."""
        return {transport: len(endpoint.connections) for transport, endpoint in self._endpoints.items()}

    # ---- internals
    def _listen(self, kind: int, endpoint: str, keys: str, fd: int | None = None) -> zmq.Socket:
        """A socket bound to `endpoint` (configured by `keys`), or serving the listening socket `fd`
        (ZeroMQ closes it)."""
        config = self._config
        sock = self._context.socket(kind)
        if fd is not None:
            sock.setsockopt(zmq.USE_FD, fd)  # bind() still parses `endpoint`, then accepts on `fd`
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.BACKLOG, config.server_socket_backlog)
        if config.server_socket_snd_buf_size:
            sock.setsockopt(zmq.SNDBUF, config.server_socket_snd_buf_size)
        if config.server_socket_rcv_buf_size:
            sock.setsockopt(zmq.RCVBUF, config.server_socket_rcv_buf_size)
        sock.setsockopt(zmq.SNDHWM, self._send_high_water_mark())
        if kind == zmq.ROUTER:
            sock.setsockopt(zmq.ROUTER_MANDATORY, 1)  # a full or vanished peer is an error we see, not a silent drop
            sock.setsockopt(zmq.MAXMSGSIZE, config.max_frame_length)
            if self._curve is not None:
                self._curve.secure(sock)
        if "[" in endpoint:
            sock.setsockopt(zmq.IPV6, 1)
        try:
            sock.bind(endpoint)
        except zmq.ZMQError as exc:
            sock.close(0)
            raise BindError(endpoint, keys, zmq.strerror(exc.errno)) from None
        return sock

    def _stop_curve(self) -> None:
        if self._curve is not None:
            self._curve.stop()
            self._curve = None

    def _add(self, endpoint: Endpoint) -> None:
        self._endpoints[endpoint.transport] = endpoint

    def _send_high_water_mark(self) -> int:
        """Messages ZeroMQ may hold per peer: writeBufferHighWaterMark, else half of maxConnectionOutputBytes."""
        config = self._config
        return config.write_buffer_high_water_mark or max(2, config.max_connection_output_bytes // (2 * MAX_MESSAGE_BYTES))

    def _max_backlog_bytes(self) -> int:
        """What maxConnectionOutputBytes leaves for our own per-connection backlog."""
        return max(0, self._config.max_connection_output_bytes - self._send_high_water_mark() * MAX_MESSAGE_BYTES)

    def _run(self) -> None:
        """The loop (reactor thread)."""
        poller = zmq.Poller()
        endpoints = list(self._endpoints.values())
        stream = self._stream
        for endpoint in endpoints:
            poller.register(endpoint.socket, zmq.POLLIN)
        wake_fd = self._outbox.fileno()
        poller.register(wake_fd, zmq.POLLIN)
        monitor = self._monitor
        router = self._endpoints.get(ZMQ_TRANSPORT)
        intake = None if monitor is None or router is None else router.intake
        if monitor is not None:
            poller.register(monitor, zmq.POLLIN)
        idle_seconds = self._config.server_channel_max_idle_time_seconds
        next_sweep = time.monotonic() + IDLE_SWEEP_SECONDS
        next_settle_check = 0.0
        reading = True
        while True:
            now = time.monotonic()
            if self._going_away and now >= next_settle_check:
                next_settle_check = now + SETTLE_CHECK_SECONDS
                self._apply_go_away()
            if reading and self._paused:
                for endpoint in endpoints:
                    poller.unregister(endpoint.socket)
                reading = False
                self._reading_stopped.set()
            blocked = any(endpoint.blocked for endpoint in endpoints)
            if self._stop_deadline is not None and (now >= self._stop_deadline or not (blocked or len(self._outbox))):
                break
            if blocked or self._stop_deadline is not None or stream.resets:  # (only TCP connections wait for one)
                timeout = BLOCKED_RETRY_MS
            else:
                timeout = max(0.0, next_sweep - now) * 1000
                if intake is not None and intake.intakes:
                    timeout = min(timeout, CHECK_PERIOD * 1000)
                if self._going_away:
                    timeout = min(timeout, SETTLE_CHECK_SECONDS * 1000)
            try:
                events = dict(poller.poll(timeout))
                now = time.monotonic()
                if monitor is not None and monitor in events:
                    self._connection_events(monitor, intake, now)
                if intake is not None and intake.due(now):
                    router.check_intake(now)
                if reading:
                    jobs: list[Job] = []
                    for endpoint in endpoints:
                        if endpoint.socket in events or endpoint.resets:
                            endpoint.read(READ_BUDGET, now, jobs)
                    self._make_room(jobs)
                    if jobs:
                        self._deliver(self._dispatcher.dispatch(jobs), now)
                if wake_fd in events:
                    self._deliver(self._outbox.drain(DRAIN_BYTES), now)
                    self._outbox.sent()
                for endpoint in endpoints:
                    if endpoint.blocked:
                        endpoint.flush_blocked()
                if now >= next_sweep:
                    next_sweep = now + IDLE_SWEEP_SECONDS
                    stream.expire_handshakes(now)
                    if idle_seconds:
                        for endpoint in endpoints:
                            endpoint.expire_idle(now - idle_seconds, idle_seconds)
            except Exception:  # noqa: BLE001 - the reactor is the server: log, keep serving
                log.exception("reactor round failed")
        self._close_sockets(int(max(0.0, (self._stop_deadline or now) - time.monotonic()) * 1000))

    def _apply_go_away(self) -> None:
        """Reactor thread, while going away: every request to the dispatcher (no inline answers, so
        none escapes GO_AWAY); then see whether every open connection has been settled."""
        dispatcher = self._dispatcher
        if not self._going_away_applied:
            self._going_away_applied = True
            dispatcher.going_away = True
            for endpoint in self._endpoints.values():
                endpoint.route_all_to_executors()
        told, served = dispatcher.told_go_away, dispatcher.served_old
        if not self._settled.is_set() and all(conn.channel in told or conn.channel in served
                                              for endpoint in self._endpoints.values()
                                              for conn in endpoint.connections.values()):
            self._settled.set()

    @staticmethod
    def _connection_events(monitor: zmq.Socket, intake: IntakeWatch, now: float) -> None:
        """ZeroMQ's accepted and disconnected TCP connections, for the intake watch."""
        for _ in range(READ_BUDGET):
            try:
                event = recv_monitor_message(monitor, zmq.NOBLOCK)
            except zmq.Again:
                return
            if event["event"] == zmq.EVENT_ACCEPTED:
                intake.accepted(int(event["value"]), now)
            elif event["event"] == zmq.EVENT_DISCONNECTED:
                intake.disconnected(int(event["value"]))

    def _make_room(self, jobs: list[Job]) -> None:
        """Count the endpoints' incomplete frames into the budget; if they and this round's requests
        would pass it, close the connections whose incomplete frames started longest ago first
        (namesrv.remoting.budget)."""
        budget = self._dispatcher.budget
        endpoints = self._endpoints.values()
        budget.incomplete = sum(endpoint.incomplete_bytes for endpoint in endpoints)
        if not budget.incomplete:
            return
        excess = budget.held + sum(request.wire_size for _, request, _ in jobs) - budget.limit
        if excess <= 0:
            return
        closed = 0
        for endpoint in endpoints:
            before = endpoint.incomplete_bytes
            closed += endpoint.close_incomplete(excess, budget.limit)
            excess -= before - endpoint.incomplete_bytes
        budget.incomplete = sum(endpoint.incomplete_bytes for endpoint in endpoints)
        budget.evicted += closed
        budget.report(f"{closed} connections closed for their incomplete frames")

    def _deliver(self, items: list[Delivery], now: float) -> None:
        """Send posted replies, all of one connection's in one message; then the requested closes."""
        grouped: dict[Channel, list[bytes]] = {}
        closes: list[tuple[Channel, Close]] = []
        for channel, payload in items:
            if isinstance(payload, Close):
                closes.append((channel, payload))
            else:
                batch = grouped.get(channel)
                if batch is None:
                    grouped[channel] = [payload]
                else:
                    batch.append(payload)
        endpoints = self._endpoints
        for channel, payloads in grouped.items():
            endpoints[channel.transport].send(channel.ident, payloads, now)
        for channel, close in closes:
            endpoint = endpoints[channel.transport]
            conn = endpoint.connections.get(channel.ident)
            if conn is not None:
                endpoint.close(conn, close.cause, close.reason, reset=close.reset)

    def _close_sockets(self, linger_ms: int) -> None:
        if self._monitor is not None:
            self._monitor.close(0)
        for endpoint in self._endpoints.values():
            endpoint.socket.close(linger_ms)


def _bound(sock: zmq.Socket) -> str:
    return sock.getsockopt_string(zmq.LAST_ENDPOINT)
