"""One remoting connection: many calls in flight, matched to their responses by opaque.

The hot path (`send` / `data_received`) does no logging and allocates one future per call;
`invoke_many` pipelines a whole batch under one timer, which is what load generators use.
Writes issued in the same event-loop turn leave in one `transport.write`.
"""
from __future__ import annotations

import asyncio
import logging
import socket
import ssl
from collections.abc import Callable, Iterable

from namesrv.client.errors import RemotingConnectError, RemotingError, RemotingTimeoutError, ServerClosedError
from namesrv.protocol.codes import DEFAULT_MAX_FRAME_LENGTH, FLAG_ONEWAY, SerializeType
from namesrv.protocol.command import RemotingCommand
from namesrv.errors import ProtocolError
from namesrv.protocol.frame import FrameDecoder

log = logging.getLogger(__name__)

_OPAQUE_MASK = 0x7FFFFFFF  # opaques stay positive int32, as the cpp client does
#: The first byte a ZeroMQ peer sends (ZMTP's signature); a RocketMQ frame length never starts with it.
ZMTP_FIRST_BYTE = b"\xff"
ZMQ_HINT = ("this looks like namesrv's ZeroMQ endpoint (zmqListenAddress, 9877 by default), not a RocketMQ "
            "remoting port (listenPort, 9876 by default)")


def speaks_zeromq(address: str, timeout: float = 0.5) -> bool:
    """Whether the server at `address` greets a new connection as a ZeroMQ endpoint does (a RocketMQ
    server never speaks first): what to tell a user whose connection it closed unanswered."""
    try:
        with socket.create_connection(split_address(address), timeout=timeout) as sock:
            return sock.recv(1) == ZMTP_FIRST_BYTE
    except OSError:
        return False


def split_address(address: str) -> tuple[str, int]:
    """Split "host:port" into (host, port); anything else is an address nobody can connect to."""
    host, sep, port = address.strip().rpartition(":")
    if not sep or not host or not port.isdigit():
        raise RemotingConnectError(f"bad address {address!r}: expected host:port")
    return host.strip("[]"), int(port)


class BaseConnection:
    """Opaque counter, pending-call table and timeouts; subclasses only move bytes.

    Responses are matched by opaque, so they may arrive in any order. When the transport
    drops, every pending call fails with the same `RemotingConnectError` and the connection
    stays closed (the owning client opens a new one on the next call).
    """

    def __init__(self, address: str, serialize_type: int) -> None:
        self.address = address
        self.serialize_type = serialize_type
        self._loop = asyncio.get_running_loop()
        self._pending: dict[int, asyncio.Future[RemotingCommand]] = {}
        self._opaque = 0
        self._closed_error: RemotingError | None = None
        self._out: list[bytes] = []
        self._flush_scheduled = False
        #: Where requests from the server go (ROUTE_CHANGED pushes); None: they are ignored.
        self.on_request: Callable[[RemotingCommand], None] | None = None

    # ---- what subclasses provide ----
    def _encode(self, request: RemotingCommand) -> bytes:
        raise NotImplementedError

    def _send(self, out: list[bytes]) -> None:
        """Hand one loop turn's encoded requests to the transport."""
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    async def drain(self) -> None:
        """Wait until the transport accepts more data (only oneway floods need this)."""

    # ---- writing: everything queued in one loop turn goes out in one send ----
    def _write_command(self, request: RemotingCommand) -> None:
        self._out.append(self._encode(request))
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self._loop.call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_scheduled = False
        out, self._out = self._out, []
        if out and self._closed_error is None:
            self._send(out)

    # ---- calls ----
    @property
    def closed(self) -> bool:
        return self._closed_error is not None

    @property
    def in_flight(self) -> int:
        return len(self._pending)

    def send(self, request: RemotingCommand) -> asyncio.Future[RemotingCommand]:
        """Queue `request` (its opaque and codec are set here) and return the future of its response.

        No timeout: the caller owns the future (`invoke` and `invoke_many` add one).
        """
        if self._closed_error is not None:
            raise self._closed_error
        self._opaque = opaque = (self._opaque + 1) & _OPAQUE_MASK
        request.opaque = opaque
        request.serialize_type = self.serialize_type
        future = self._loop.create_future()
        self._pending[opaque] = future
        try:
            self._write_command(request)
        except BaseException:  # e.g. a header the binary codec cannot carry: nothing was sent
            del self._pending[opaque]
            raise
        return future

    async def invoke(self, request: RemotingCommand, timeout: float) -> RemotingCommand:
        """Send and wait for the response, at most `timeout` seconds."""
        future = self.send(request)
        opaque = request.opaque
        timer = self._loop.call_later(timeout, self._expire, opaque, timeout)
        try:
            return await future
        finally:
            timer.cancel()
            self._pending.pop(opaque, None)

    async def invoke_many(self, requests: Iterable[RemotingCommand],
                          timeout: float) -> list[RemotingCommand | RemotingError]:
        """Pipeline `requests` and wait for all; each slot is the response or the error of that call.

        One timer covers the whole batch: whatever has not been answered `timeout` seconds after
        sending fails with `RemotingTimeoutError`.
        """
        futures = []
        opaques = []
        for request in requests:
            futures.append(self.send(request))
            opaques.append(request.opaque)
        timer = self._loop.call_later(timeout, self._expire_many, opaques, timeout)
        try:
            return await asyncio.gather(*futures, return_exceptions=True)
        finally:
            timer.cancel()
            for opaque in opaques:
                self._pending.pop(opaque, None)

    def send_oneway(self, request: RemotingCommand) -> None:
        """Write a oneway request; the server never answers it."""
        if self._closed_error is not None:
            raise self._closed_error
        self._opaque = (self._opaque + 1) & _OPAQUE_MASK
        request.opaque = self._opaque
        request.flag |= FLAG_ONEWAY
        request.serialize_type = self.serialize_type
        self._write_command(request)

    async def invoke_oneway(self, request: RemotingCommand) -> None:
        """`send_oneway`, then wait if the transport's buffer is full."""
        self.send_oneway(request)
        await self.drain()

    def _server_request(self, command: RemotingCommand) -> None:
        """A request from the server: a route-change push, or one nobody here handles."""
        if self.on_request is not None:
            self.on_request(command)
        else:
            log.debug("ignoring request code %s from %s", command.code, self.address)

    # ---- completion ----
    def _complete(self, response: RemotingCommand) -> None:
        future = self._pending.pop(response.opaque, None)
        if future is not None and not future.done():
            future.set_result(response)

    def _expire(self, opaque: int, timeout: float) -> None:
        future = self._pending.pop(opaque, None)
        if future is not None and not future.done():
            future.set_exception(RemotingTimeoutError(
                f"no response from {self.address} within {timeout:g} s (opaque {opaque})"))

    def _expire_many(self, opaques: list[int], timeout: float) -> None:
        for opaque in opaques:
            self._expire(opaque, timeout)

    def _fail_all(self, error: RemotingError) -> None:
        if self._closed_error is None:
            self._closed_error = error
        pending, self._pending = self._pending, {}
        for future in pending.values():
            if not future.done():
                future.set_exception(error)


class RemotingConnection(BaseConnection, asyncio.Protocol):
    """A TCP connection speaking RocketMQ's length-prefixed remoting frames."""

    def __init__(self, address: str, serialize_type: int = SerializeType.JSON,
                 max_frame_length: int = DEFAULT_MAX_FRAME_LENGTH) -> None:
        super().__init__(address, serialize_type)
        self._decoder = FrameDecoder(max_frame_length)
        self._transport: asyncio.Transport | None = None
        self._writable: asyncio.Future[None] | None = None
        self._tls = False
        self._received = False

    @classmethod
    async def open(cls, address: str, *, serialize_type: int = SerializeType.JSON, connect_timeout: float = 3.0,
                   max_frame_length: int = DEFAULT_MAX_FRAME_LENGTH,
                   tls: ssl.SSLContext | None = None) -> RemotingConnection:
        """`tls`: speak TLS with this context (the handshake is part of the connect timeout)."""
        host, port = split_address(address)
        connection = cls(address, serialize_type, max_frame_length)
        connection._tls = tls is not None
        try:
            async with asyncio.timeout(connect_timeout):
                await connection._loop.create_connection(lambda: connection, host, port, ssl=tls,
                                                         server_hostname=None if tls is None else host)
        except TimeoutError:
            raise RemotingConnectError(f"connect to {address} timed out after {connect_timeout:g} s") from None
        except ssl.SSLError as exc:
            raise RemotingConnectError(f"TLS handshake with {address} failed: {exc.reason or exc}") from None
        except OSError as exc:
            raise RemotingConnectError(f"cannot connect to {address}: {exc.strerror or exc}") from None
        return connection

    # ---- asyncio.Protocol ----
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        first, self._received = not self._received, True
        try:
            for frame in self._decoder.feed(data):
                command = RemotingCommand.decode(frame)
                if command.is_response:
                    self._complete(command)
                else:
                    self._server_request(command)
        except ProtocolError as exc:
            what = ZMQ_HINT if first and data.startswith(ZMTP_FIRST_BYTE) else exc  # a greeting: say what it is
            self._fail(RemotingConnectError(f"bad frame from {self.address}: {what}"))
            if self._transport is not None:
                self._transport.abort()

    def connection_lost(self, exc: Exception | None) -> None:
        if not self._received and self._pending and (exc is None or isinstance(exc, ConnectionResetError)):
            how = "closed" if exc is None else "reset"
            self._fail(ServerClosedError(f"connection to {self.address} {how} by the server before any answer",
                                         self.address, plain=not self._tls))
        self._fail_all(RemotingConnectError(f"connection to {self.address} closed{f': {exc}' if exc else ''}"))
        self._wake_writers()

    def _fail(self, error: RemotingConnectError) -> None:
        """Fail the calls in flight with `error`: they report it; with none in flight it is logged
        (said once, either way)."""
        if not self._pending and self._closed_error is None:
            log.warning("closing connection to %s: %s", self.address, error)
        self._fail_all(error)

    def pause_writing(self) -> None:
        if self._writable is None:
            self._writable = self._loop.create_future()

    def resume_writing(self) -> None:
        self._wake_writers()

    # ---- writing ----
    def _encode(self, request: RemotingCommand) -> bytes:
        return request.encode()

    def _send(self, out: list[bytes]) -> None:
        if self._transport is None or self._transport.is_closing():
            return
        self._transport.write(out[0] if len(out) == 1 else b"".join(out))

    async def drain(self) -> None:
        if self._writable is not None:
            await asyncio.shield(self._writable)
        if self._closed_error is not None:
            raise self._closed_error

    def _wake_writers(self) -> None:
        waiter, self._writable = self._writable, None
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def close(self) -> None:
        """Close after queued writes; pending calls fail with RemotingConnectError."""
        if self._out:
            self._flush()
        if self._transport is not None:
            self._transport.close()
        self._fail_all(RemotingConnectError(f"connection to {self.address} closed by the client"))
