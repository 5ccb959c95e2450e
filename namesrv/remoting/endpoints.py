"""The two listening endpoints and their connection tables (reactor thread only).

`StreamEndpoint` is a ZeroMQ STREAM socket speaking raw RocketMQ remoting TCP: ZeroMQ hands us
byte chunks per connection (an empty chunk announces a connect or a disconnect) and we split them
into frames ourselves. `RouterEndpoint` is a ROUTER socket for DEALER peers speaking the msgpack
framing, one command per ZeroMQ frame. Each hands its frames to its transport's `Decode`
(namesrv.remoting.codecs), sends at once the replies that answered, and reports the requests
left for the executors. Both keep, per connection, a bounded backlog of replies a slow reader
has not taken yet, and an LRU order of activity for the idle sweep.

What one connection's unsent replies may hold: up to the send high-water mark of messages of at
most MAX_MESSAGE_BYTES inside ZeroMQ, plus `max_backlog_bytes` queued here and one reply more.
A reply is always taken whole, however large (a client reading a big topic list gets all of it);
a peer whose unsent replies, less one, pass `max_backlog_bytes` is not reading, and its
connection is reset at the socket at once (namesrv.remoting.sockets): ZeroMQ's own close would
wait behind output that never drains. Each table holds at most `max_connections` peers; a
newcomer beyond that is turned away at once (a TCP connection is closed, a ZeroMQ peer's message
dropped), so a connection flood costs a bounded table, not memory without end.

What input is held before it is whole: a TCP connection's incomplete frame, counted per
connection in `incomplete_bytes` (oldest first in `incomplete`); for the ZeroMQ endpoint, what
libzmq holds per peer, measured by its IntakeWatch. The reactor counts both into the in-flight
budget and, past it, has `close_incomplete` close the connections holding them
(namesrv.remoting.budget).
"""
from __future__ import annotations

import logging
import ssl
import time
from collections import OrderedDict, deque
from collections.abc import Callable

import zmq

from namesrv.channel import Channel
from namesrv.protocol.command import RemotingCommand
from namesrv.errors import ProtocolError
from namesrv.protocol.frame import FrameDecoder
from namesrv.remoting.codecs import TCP_TRANSPORT, ZMQ_TRANSPORT, Decode, decode_all
from namesrv.remoting.sockets import abort_connection, peer_address
from namesrv.remoting.tls import HANDSHAKE_RECORD, TlsMode, TlsServer, TlsSession
from namesrv.remoting.zmq_intake import IntakeWatch

log = logging.getLogger(__name__)

#: A request to dispatch, with its connection and when the reactor took its frame (time.monotonic()).
Job = tuple[Channel, RemotingCommand, float]
#: Why we close a connection (Endpoint.cut): the peer sent what cannot be decoded or is too large; it
#: held too many of the in-flight bytes (maxInFlightRequestBytes); it does not read its replies
#: (maxConnectionOutputBytes); a send failed; it was idle (serverChannelMaxIdleTimeSeconds); or the
#: server asked (a broker's connection on its expiry).
CUT_CAUSES = ("bad_input", "budget", "slow_reader", "send_failed", "idle", "requested")
#: Connections refused for maxConnections are logged at most this often (with a running count).
REFUSED_LOG_PERIOD = 1.0
#: Replies leave in ZeroMQ messages of at most this many bytes (a single larger reply on the ZeroMQ
#: endpoint excepted), so the send high-water mark, counted in messages, also bounds bytes.
MAX_MESSAGE_BYTES = 64 * 1024
#: Connections closed from our side remembered until ZeroMQ announces their end (oldest forgotten first).
CLOSED_REMEMBERED = 65536
#: Send flags as ints: pyzmq's are enum.Flag members, whose `|` is a Python call each time.
_NOBLOCK = int(zmq.NOBLOCK)
_MORE_NOBLOCK = int(zmq.SNDMORE | zmq.NOBLOCK)
#: pyzmq's own send (zmq.Socket's base class): `zmq.Socket.send` adds only the routing_id and group
#: arguments, which a STREAM socket's replies never use, in a Python call per message part.
_send = zmq.backend.Socket.send
#: Connection.tls of a TCP connection whose first bytes have not arrived (TLS or plain: they tell).
UNDECIDED = object()
#: What a TLS handshake in progress holds beyond a plain connection (OpenSSL's connection state and
#: buffers, measured by `python -m bench attacks --only tls-states`), besides the bytes it has not
#: taken yet: counted in the in-flight budget like an incomplete frame until the handshake is done.
TLS_HANDSHAKE_BYTES = 48 * 1024


def peer_of(frame: zmq.Frame) -> tuple[str, int | None]:
    """("ip:port" of the connection a frame arrived on, its socket's descriptor in ZeroMQ; None for
    a peer already gone or an ipc one, which has no port).

    ZeroMQ's Peer-Address metadata carries the IP only; the port is read from the connection's
    own socket (the frame's source fd) while it is still open.
    """
    try:
        ip = frame.get("Peer-Address")
    except zmq.ZMQError:
        return "", None
    try:
        fd = frame.get(zmq.SRCFD)
    except zmq.ZMQError:
        return ip, None
    address = peer_address(fd)
    if address is None:
        return ip, None
    return f"{ip}:{address.rsplit(':', 1)[1]}", fd


def _peer(conn: Connection) -> str:
    return conn.channel.remote_addr or f"(peer gone before its address was read, id {conn.channel.ident.hex()})"


class Connection:
    """One peer: its Channel, frame decoder and socket descriptor (TCP only), last activity, and unsent replies."""

    __slots__ = ("channel", "decoder", "fd", "tls", "last_active", "backlog", "backlog_bytes", "handed", "incomplete")

    def __init__(self, channel: Channel, decoder: FrameDecoder | None, now: float, fd: int | None = None,
                 tls: TlsSession | object | None = None) -> None:
        self.channel = channel
        self.decoder = decoder
        self.fd = fd
        #: None for a plain connection; its TlsSession; UNDECIDED until its first bytes say which.
        self.tls = tls
        self.last_active = now
        self.backlog: deque[tuple[object, int]] = deque()
        self.backlog_bytes = 0
        #: Reply bytes handed to ZeroMQ so far (what its pipe holds is this less what reached the socket).
        self.handed = 0
        #: Bytes of an incomplete frame its decoder holds (as last counted in `Endpoint.incomplete_bytes`).
        self.incomplete = 0


class Endpoint:
    """What both endpoints share: the connection table, bounded output, idle sweep, close."""

    transport = ""

    def __init__(self, sock: zmq.Socket, max_backlog_bytes: int, on_closed: Callable[[Channel], None], *,
                 max_connections: int = 0, decode: Decode = decode_all) -> None:
        self.socket = sock
        self._decode = decode
        self.connections: OrderedDict[bytes, Connection] = OrderedDict()
        self.blocked: set[bytes] = set()
        self._max_backlog_bytes = max_backlog_bytes
        self._on_closed = on_closed
        self._max_connections = max_connections
        #: Newcomers turned away for maxConnections, since start.
        self.refused = 0
        #: Connections closed from our side since start, by cause (CUT_CAUSES).
        self.cut = dict.fromkeys(CUT_CAUSES, 0)
        self._refused_logged = -REFUSED_LOG_PERIOD
        #: Unsent reply bytes queued here across the connections (what ZeroMQ's pipes hold aside).
        self.backlog_bytes = 0
        #: Connections holding an incomplete frame, the one whose frame started longest ago first.
        self.incomplete: dict[bytes, Connection] = {}
        self.incomplete_bytes = 0
        #: Connections to reset at the socket once it has nothing left to read, with the read they were
        #: asked for in (StreamEndpoint; the reactor reads while any wait).
        self.resets: dict[bytes, tuple[int, Connection]] = {}

    # ---- transport-specific
    def read(self, budget: int, now: float, jobs: list[Job]) -> None:
        """Receive up to `budget` messages; append the requests they complete to `jobs`. The replies
        the `Decode` answered itself leave at once, each message's in one send: a closed-loop
        peer's next request must not wait for the rest of the round."""
        raise NotImplementedError

    def _frames(self, conn: Connection, message: object) -> list[bytes]:
        """The frames a received message completes; ProtocolError for bad input."""
        raise NotImplementedError

    def _pack(self, payloads: list[bytes]) -> list[tuple[object, int]]:
        """Replies for one connection as (message, bytes) pairs, each message at most MAX_MESSAGE_BYTES."""
        raise NotImplementedError

    def _transmit(self, ident: bytes, message: object) -> None:
        """Send without blocking; zmq.Again when the peer's pipe is full."""
        raise NotImplementedError

    def _disconnect(self, ident: bytes, conn: Connection | None = None, reset: bool = False) -> None:
        """Close the peer `ident` (`conn`, once it had a table entry); `reset`: at the socket, dropping
        unsent output (for a peer that does not read, whose output would never drain): at once, or for a
        TCP connection once the socket has nothing left to read (`StreamEndpoint._reset_due`)."""
        raise NotImplementedError

    # ---- shared
    def route_all_to_executors(self) -> None:
        """No more inline answers: every request goes to the dispatcher (shutting down: GO_AWAY)."""
        self._decode = decode_all

    def _refuse_newcomer(self, peer: str, now: float) -> bool:
        """True (and logged, at most once per REFUSED_LOG_PERIOD) if the table is full: the newcomer is refused."""
        limit = self._max_connections
        if not limit or len(self.connections) < limit:
            return False
        self.refused += 1
        if now - self._refused_logged >= REFUSED_LOG_PERIOD:
            self._refused_logged = now
            log.warning("refused %s connection %s: maxConnections (%d) are open (%d refused so far)",
                        self.transport, peer or "(peer already gone)", limit, self.refused)
        return True

    def _touch(self, conn: Connection, now: float) -> None:
        conn.last_active = now
        self.connections.move_to_end(conn.channel.ident)

    def send(self, ident: bytes, payloads: list[bytes], now: float, encrypt: bool = True) -> None:
        """Send replies to one connection in as few messages as the size cap allows; queue what does not fit.
        On a TLS connection they leave encrypted (`encrypt=False`: they are TLS's own records already)."""
        conn = self.connections.get(ident)
        if conn is None:
            return  # closed while its requests were running
        if conn.tls is not None and encrypt:
            payloads = [conn.tls.encrypt(payloads)]
        if conn.last_active != now:  # else touched this round already (its reading)
            self._touch(conn, now)
        messages = self._pack(payloads)
        if not conn.backlog:
            for sent, (message, size) in enumerate(messages):
                try:
                    self._transmit(ident, message)
                except zmq.Again:
                    messages = messages[sent:]
                    break
                except zmq.ZMQError as exc:
                    self.close(conn, "send_failed", f"send failed: {exc}")
                    return
                conn.handed += size
            else:
                return
        conn.backlog.extend(messages)
        queued = sum(size for _, size in messages)
        conn.backlog_bytes += queued
        self.backlog_bytes += queued
        if conn.backlog_bytes - max(map(len, payloads)) > self._max_backlog_bytes:
            self.close(conn, "slow_reader", f"{conn.backlog_bytes} unsent reply bytes exceed "
                       "maxConnectionOutputBytes (the peer does not read)", logging.WARNING, reset=True)
        else:
            self.blocked.add(ident)

    def flush_blocked(self) -> None:
        """Retry the backlog of every connection whose pipe was full."""
        for ident in list(self.blocked):
            conn = self.connections.get(ident)
            while conn is not None and conn.backlog:
                message, size = conn.backlog[0]
                try:
                    self._transmit(ident, message)
                except zmq.Again:
                    break
                except zmq.ZMQError as exc:
                    self.close(conn, "send_failed", f"send failed: {exc}")
                    break
                conn.backlog.popleft()
                conn.backlog_bytes -= size
                conn.handed += size
                self.backlog_bytes -= size
            else:
                self.blocked.discard(ident)

    def expire_idle(self, oldest_allowed: float, idle_seconds: int) -> None:
        """Close connections with no traffic either way since `oldest_allowed` (LRU order: oldest first)."""
        connections = self.connections
        while connections:
            conn = connections[next(iter(connections))]
            if conn.last_active >= oldest_allowed:
                return
            self.close(conn, "idle", f"idle for {idle_seconds} s")

    def close(self, conn: Connection, cause: str, reason: str, level: int = logging.INFO, reset: bool = False) -> None:
        """Close one connection from our side (`cause`: one of CUT_CAUSES, counted; `reason`: logged;
        `reset`: see `_disconnect`) and report its Channel as destroyed."""
        self.cut[cause] += 1
        self._forget(conn)
        self._disconnect(conn.channel.ident, conn, reset)
        log.log(level, "closed %s connection %s: %s", self.transport, _peer(conn), reason)
        self._on_closed(conn.channel)

    def _peer_closed(self, conn: Connection) -> None:
        self._forget(conn)
        log.debug("%s connection %s closed by the peer", self.transport, _peer(conn))
        self._on_closed(conn.channel)

    def _forget(self, conn: Connection) -> None:
        ident = conn.channel.ident
        del self.connections[ident]
        self.blocked.discard(ident)
        conn.backlog.clear()
        self.backlog_bytes -= conn.backlog_bytes
        conn.backlog_bytes = 0
        if conn.incomplete:
            self._hold_incomplete(conn, 0)

    def _hold_incomplete(self, conn: Connection, size: int) -> None:
        """`conn`'s decoder now holds `size` bytes of an incomplete frame."""
        self.incomplete_bytes += size - conn.incomplete
        if not size:
            del self.incomplete[conn.channel.ident]
        elif not conn.incomplete:
            self.incomplete[conn.channel.ident] = conn
        conn.incomplete = size

    def close_incomplete(self, excess: int, limit: int) -> int:
        """Close the connections whose incomplete frame started longest ago until `excess` bytes are
        freed (or none is left); returns how many were closed."""
        closed = 0
        while excess > 0 and self.incomplete:
            conn = next(iter(self.incomplete.values()))
            excess -= conn.incomplete
            closed += 1
            held = "TLS handshake" if isinstance(conn.tls, TlsSession) and not conn.tls.established else "frame"
            self.close(conn, "budget", f"its incomplete {held} ({conn.incomplete} bytes counted) is the oldest held "
                       f"while in-flight request bytes are at maxInFlightRequestBytes ({limit})", logging.WARNING)
        return closed

    def _take(self, conn: Connection, message: object, now: float, jobs: list[Job]) -> None:
        """Decode what `message` completes; bad input closes the connection and takes none of it."""
        channel = conn.channel
        try:
            frames = self._frames(conn, message)
            if not frames:
                return  # the middle of a large frame
            arrived = time.monotonic()
            replies, commands = self._decode(frames, channel, arrived)
        except ProtocolError as exc:
            self.close(conn, "bad_input", f"bad frame: {exc}", logging.WARNING)
            return
        except Exception as exc:  # noqa: BLE001 - a decoder bug must cost one connection, not the reactor
            log.error("decoding input from %s failed", _peer(conn), exc_info=exc)
            self.close(conn, "bad_input", f"undecodable input: {type(exc).__name__}: {exc}", logging.WARNING)
            return
        if replies:
            self.send(channel.ident, replies, now)
        if commands:
            jobs.extend((channel, command, arrived) for command in commands)


class StreamEndpoint(Endpoint):
    """RocketMQ remoting over raw TCP through a ZeroMQ STREAM socket."""

    transport = TCP_TRANSPORT

    def __init__(self, sock: zmq.Socket, max_backlog_bytes: int, on_closed: Callable[[Channel], None],
                 max_frame_length: int, *, max_connections: int = 0, decode: Decode = decode_all,
                 tls: TlsServer | None = None) -> None:
        """`tls`: the server's TLS mode and context; None: plain connections only, not even told apart."""
        super().__init__(sock, max_backlog_bytes, on_closed, max_connections=max_connections, decode=decode)
        self._max_frame_length = max_frame_length
        self._tls = tls
        #: TLS connections whose handshake is not done, with when it started (oldest first).
        self._handshakes: OrderedDict[bytes, float] = OrderedDict()
        #: TLS handshakes since start, by result (done, failed, timed_out).
        self.handshakes = dict.fromkeys(("done", "failed", "timed_out"), 0)
        #: Connections we closed whose end ZeroMQ has not announced yet: that empty frame must not
        #: read as a newcomer's (which would then take the old connection's late replies).
        self._closed: OrderedDict[bytes, None] = OrderedDict()
        #: Calls of `read` so far: a reset waits for a read begun after it was asked for (`_reset_due`).
        self._reads = 0

    def read(self, budget: int, now: float, jobs: list[Job]) -> None:
        self._reads += 1
        recv = self.socket.recv
        connections = self.connections
        for _ in range(budget):
            try:
                ident = recv(zmq.NOBLOCK)
            except zmq.Again:
                if self.resets:
                    self._reset_due()
                return
            conn = connections.get(ident)
            if conn is None:
                frame = recv(copy=False)  # a newcomer's peer address is in its message's metadata
                if len(frame) == 0:
                    if ident in self._closed:
                        del self._closed[ident]
                        if self.resets:
                            self.resets.pop(ident, None)  # it ended by itself: its descriptor is not its own now
                    else:
                        self._accept(ident, frame, now)
                continue  # else: the end of, or bytes still in flight from, a connection we closed
            data = recv()  # a known connection's bytes: no Frame object, one copy
            if not data:
                self._peer_closed(conn)
                continue
            if conn.last_active != now:  # once per poll round: a large frame arrives in several messages
                self._touch(conn, now)
            if conn.tls is None:
                self._take(conn, data, now, jobs)
            else:
                self._take_tls(conn, data, now, jobs)

    def _take_tls(self, conn: Connection, data: bytes, now: float, jobs: list[Job]) -> None:
        """Bytes of a TLS connection, or the first bytes of one that may be (they decide, as RocketMQ's
        TlsModeHandler: a handshake record is TLS, anything else plain)."""
        session = conn.tls
        mode = self._tls.mode
        if session is UNDECIDED:
            if data[0] != HANDSHAKE_RECORD:
                if mode is TlsMode.ENFORCING:
                    self.close(conn, "bad_input", "a plain (non-TLS) connection while tlsMode is enforcing: the "
                               "client must use TLS (RocketMQ clients: -Dtls.enable=true)", logging.WARNING)
                    return
                conn.tls = None
                self._take(conn, data, now, jobs)
                return
            if mode is TlsMode.DISABLED:
                self.close(conn, "bad_input", "a TLS handshake while tlsMode is disabled: the client must not use "
                           "TLS, or the server must run with tlsMode=permissive or enforcing", logging.WARNING)
                return
            session = conn.tls = self._tls.session()
            self._handshakes[conn.channel.ident] = now
        try:
            plain, records = session.receive(data)
        except ssl.SSLZeroReturnError:
            self.send(conn.channel.ident, [session.close_notify()], now, encrypt=False)
            self._disconnect(conn.channel.ident, conn)  # the TCP connection outlives a TLS close: end it
            self._peer_closed(conn)
            return
        except ssl.SSLError as exc:
            if not session.established:
                self.handshakes["failed"] += 1
            self.close(conn, "bad_input", f"TLS {'handshake' if not session.established else 'record'} failed: "
                       f"{exc.reason or exc}", logging.WARNING)
            return
        if records:
            self.send(conn.channel.ident, [records], now, encrypt=False)
        if not session.established:
            self._hold_incomplete(conn, TLS_HANDSHAKE_BYTES + session.pending)  # counted like an incomplete frame
        elif self._handshakes.pop(conn.channel.ident, None) is not None:
            self.handshakes["done"] += 1
            self._hold_incomplete(conn, conn.decoder.buffered)
            log.debug("tls connection %s: %s established", _peer(conn), session.version)
        if plain:
            self._take(conn, plain, now, jobs)

    def expire_handshakes(self, now: float) -> None:
        """Close TLS connections whose handshake took longer than the timeout (a peer that stalls it)."""
        handshakes = self._handshakes
        if not handshakes:
            return
        oldest_allowed = now - self._tls.handshake_timeout
        while handshakes:
            ident, started = next(iter(handshakes.items()))
            if started >= oldest_allowed:
                return
            conn = self.connections.get(ident)
            if conn is None:
                del handshakes[ident]
                continue
            self.handshakes["timed_out"] += 1
            self.close(conn, "idle", f"TLS handshake not done after {self._tls.handshake_timeout:g} s")

    def _forget(self, conn: Connection) -> None:
        super()._forget(conn)
        if self._handshakes:
            self._handshakes.pop(conn.channel.ident, None)

    def _frames(self, conn: Connection, message: bytes) -> list[bytes]:
        decoder = conn.decoder
        frames = decoder.feed(message)
        held = decoder.buffered
        if frames and conn.incomplete:
            self._hold_incomplete(conn, 0)  # that frame is whole; what is held now is a new one
        if held != conn.incomplete:
            self._hold_incomplete(conn, held)
        return frames

    def _accept(self, ident: bytes, frame: zmq.Frame, now: float) -> None:
        peer, fd = peer_of(frame)
        channel = Channel(self.transport, ident, peer)
        if self._refuse_newcomer(channel.remote_addr, now):
            self._disconnect(ident)
            return
        self.connections[ident] = Connection(channel, FrameDecoder(self._max_frame_length), now, fd,
                                             None if self._tls is None else UNDECIDED)
        log.debug("tcp connection from %s", channel.remote_addr or "a peer already gone")

    def _pack(self, payloads: list[bytes]) -> list[tuple[object, int]]:
        """Small replies joined up to MAX_MESSAGE_BYTES, a larger one cut into slices of itself: a
        message never pins more than its own reply (a join of a hundred large replies would
        double them, and each slice in ZeroMQ's pipe would pin the whole join)."""
        if len(payloads) == 1 and len(payloads[0]) <= MAX_MESSAGE_BYTES:
            return [(payloads[0], len(payloads[0]))]
        messages: list[tuple[object, int]] = []
        small: list[bytes] = []
        size = 0
        for payload in payloads:
            length = len(payload)
            if small and size + length > MAX_MESSAGE_BYTES:
                messages.append((b"".join(small), size))
                small, size = [], 0
            if length <= MAX_MESSAGE_BYTES:
                small.append(payload)
                size += length
                continue
            # A byte stream may be cut anywhere. Every slice shares the payload (a push goes to every
            # subscriber alike: copied, the last slice of each would cost each of them its own).
            view = memoryview(payload)
            messages += [(zmq.Frame(view[start:start + MAX_MESSAGE_BYTES], copy=False),
                          min(MAX_MESSAGE_BYTES, length - start)) for start in range(0, length, MAX_MESSAGE_BYTES)]
        if small:
            messages.append((b"".join(small), size))
        return messages

    def _transmit(self, ident: bytes, message: bytes | zmq.Frame) -> None:
        # The routing-id part fails with EAGAIN when the pipe is full, before anything is queued. A
        # joined reply (bytes, at most MAX_MESSAGE_BYTES) is copied into its message, cheaper than a
        # zero-copy one for its size; a slice of a large payload is a zmq.Frame, sent as it is.
        sock = self.socket
        _send(sock, ident, _MORE_NOBLOCK)
        _send(sock, message, _NOBLOCK)

    def _disconnect(self, ident: bytes, conn: Connection | None = None, reset: bool = False) -> None:
        self._closed[ident] = None
        if len(self._closed) > CLOSED_REMEMBERED:
            self._closed.popitem(last=False)
        if not reset:
            try:  # a routing id followed by an empty frame closes the TCP connection, once its output is sent
                self.socket.send_multipart((ident, b""), zmq.NOBLOCK)
                return
            except zmq.Again:
                pass  # the peer's pipe is full (it does not read) or ending: the close cannot be queued
            except zmq.ZMQError:
                return  # already gone
        if conn is not None and conn.fd is not None:
            self.resets[ident] = (self._reads, conn)

    def _reset_due(self) -> None:
        """Reset the connections asked for before this read began: it has found nothing left to read.

        A peer gone before its arrival was read had its descriptor reused by the next connection,
        whose address `peer_of` then read for it. libzmq queues a connection's end before it frees
        the descriptor, so such a connection has announced its end (and left `resets`) by the time
        the socket has nothing left to read; what is still here holds its own descriptor."""
        reads = self._reads
        for ident in [ident for ident, (asked, _) in self.resets.items() if asked < reads]:
            conn = self.resets.pop(ident)[1]
            if abort_connection(conn.fd, conn.channel.remote_addr):
                log.debug("reset tcp connection %s", _peer(conn))


class RouterEndpoint(Endpoint):
    """msgpack commands from DEALER peers: one command per frame, one reply frame per answer.

    A message of more than `max_message_bytes` (all its frames) is dropped undecoded and its
    connection reset; what libzmq holds for a peer before the message is whole is bounded by
    `intake` (namesrv.remoting.zmq_intake), None for an ipc or inproc endpoint.
    """

    transport = ZMQ_TRANSPORT

    def __init__(self, sock: zmq.Socket, max_backlog_bytes: int, on_closed: Callable[[Channel], None],
                 max_message_bytes: int, intake: IntakeWatch | None, *, max_connections: int = 0) -> None:
        super().__init__(sock, max_backlog_bytes, on_closed, max_connections=max_connections)
        self._max_message_bytes = max_message_bytes
        self.intake = intake

    def read(self, budget: int, now: float, jobs: list[Job]) -> None:
        sock = self.socket
        connections = self.connections
        intake = self.intake
        for _ in range(budget):
            try:
                parts = sock.recv_multipart(zmq.NOBLOCK, copy=False)
            except zmq.Again:
                return
            size = sum(map(len, parts)) - len(parts[0])
            if intake is not None:
                intake.delivered(parts[-1].get(zmq.SRCFD), size, len(parts) - 1)
            ident = parts[0].bytes
            conn = connections.get(ident)
            if size > self._max_message_bytes:
                self._refuse_message(ident, conn, parts[-1], size)
                continue
            if conn is None:
                conn = self._accept(ident, parts[-1], now)
                if conn is None:
                    continue  # over maxConnections: dropped unanswered
            else:
                self._touch(conn, now)
            self._take(conn, parts, now, jobs)

    def _refuse_message(self, ident: bytes, conn: Connection | None, frame: zmq.Frame, size: int) -> None:
        peer, fd = peer_of(frame)
        reason = f"a message of {size} bytes, more than maxFrameLength ({self._max_message_bytes}) in all its frames"
        if conn is not None:
            self.close(conn, "bad_input", reason, logging.WARNING, reset=True)
            return
        log.warning("dropped zmq message from %s: %s", peer or "(peer already gone)", reason)
        if fd is not None:
            abort_connection(fd, peer)

    def check_intake(self, now: float) -> None:
        """Measure what libzmq holds for the next peers; reset those holding too much."""
        self._forget_reset(self.intake.check(now))

    def close_incomplete(self, excess: int, limit: int) -> int:
        if self.intake is None:
            return 0
        return self._forget_reset(self.intake.reset_largest(excess, limit))

    def _forget_reset(self, fds: list[int]) -> int:
        """The connections on `fds` were reset: their peers' channels are closed. Returns how many."""
        self.incomplete_bytes = self.intake.held
        if fds:
            reset = set(fds)
            for conn in [conn for conn in self.connections.values() if conn.fd in reset]:
                self.close(conn, "budget", "reset for what it held inside ZeroMQ", logging.WARNING)
        return len(fds)

    def _frames(self, conn: Connection, message: list[zmq.Frame]) -> list[bytes]:
        if len(message) < 2:
            raise ProtocolError("message without a command frame")
        return [part.bytes for part in message[1:]]

    def _accept(self, ident: bytes, frame: zmq.Frame, now: float) -> Connection | None:
        peer, fd = peer_of(frame)
        channel = Channel(self.transport, ident, peer)
        if self._refuse_newcomer(channel.remote_addr, now):
            return None
        conn = Connection(channel, None, now, fd)
        self.connections[ident] = conn
        log.debug("zmq peer %s", _peer(conn))
        return conn

    def _pack(self, payloads: list[bytes]) -> list[tuple[object, int]]:
        messages: list[tuple[object, int]] = []
        frames: list[bytes] = []
        size = 0
        for payload in payloads:
            if frames and size + len(payload) > MAX_MESSAGE_BYTES:
                messages.append((frames, size))
                frames, size = [], 0
            frames.append(payload)
            size += len(payload)
        messages.append((frames, size))
        return messages

    def _transmit(self, ident: bytes, message: list[bytes]) -> None:
        # A payload larger than a message travels alone, shared rather than copied (pushes, see
        # StreamEndpoint._pack); smaller ones are copied, which is cheaper for them.
        self.socket.send_multipart([ident, *message], zmq.NOBLOCK, copy=len(message[0]) <= MAX_MESSAGE_BYTES)

    def _disconnect(self, ident: bytes, conn: Connection | None = None, reset: bool = False) -> None:
        """A ROUTER cannot drop one DEALER: the peer is forgotten and its next message starts anew;
        reset, its connection is reset at the socket."""
        if reset and conn is not None and conn.fd is not None:
            abort_connection(conn.fd, conn.channel.remote_addr)
