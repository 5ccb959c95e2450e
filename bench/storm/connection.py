"""The storm's connections: commands in as they arrive, template frames out, answers matched by opaque.

Leaner than namesrv.client's connection on purpose: no future per call and no callback hop.
The arrival time is read once per received chunk, before decoding, so the generator's own decode
work is not charged to the server, and each command is handled right there.
"""
from __future__ import annotations

import asyncio
import logging
import socket
import time
from collections.abc import Callable
from typing import TypeVar

from bench.storm.recorder import IntervalRecorder
from bench.storm.template import FrameTemplate
from namesrv.protocol import FrameDecoder, ProtocolError, RemotingCommand

log = logging.getLogger(__name__)
_OPAQUE_MASK = 0x7FFFFFFF
_Connection = TypeVar("_Connection", bound="FramedConnection")


class FramedConnection(asyncio.Protocol):
    """An asyncio protocol that hands each received command to `received(command, arrived_ns)` and
    calls `chunk_done()` after each chunk; a bad frame aborts the connection. Chunks are decoded as
    they arrive unless a subclass stamps them and calls `feed` later."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self._decoder = FrameDecoder()

    @classmethod
    async def open(cls: type[_Connection], host: str, port: int, *args: object,
                   timeout: float = 5.0) -> _Connection:
        """Connect; `args` go to the constructor."""
        loop = asyncio.get_running_loop()
        async with asyncio.timeout(timeout):
            _, connection = await loop.create_connection(lambda: cls(*args), host, port)
        return connection

    def received(self, command: RemotingCommand, arrived_ns: int) -> None:
        raise NotImplementedError

    def chunk_done(self) -> None:
        """After the commands of one received chunk (nothing by default)."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.feed(data, time.monotonic_ns())

    def feed(self, data: bytes, arrived_ns: int) -> None:
        """Decode a chunk that arrived at `arrived_ns`."""
        try:
            for frame in self._decoder.feed(data):
                self.received(RemotingCommand.decode(frame), arrived_ns)
        except ProtocolError as exc:
            log.error("bad frame from the server, closing the connection: %s", exc)
            if self.transport is not None:
                self.transport.abort()
        self.chunk_done()


class StormConnection(FramedConnection):
    """`send` queues a frame and remembers (code, intended time) under its opaque; `flush` writes
    everything queued in one syscall. `on_answers(connection, n)` runs after each received chunk
    that answered n requests (the closed loop refills from there)."""

    def __init__(self, recorder: IntervalRecorder,
                 on_answers: Callable[[StormConnection, int], None] | None = None) -> None:
        super().__init__()
        self.recorder = recorder
        self.on_answers = on_answers
        self.pending: dict[int, tuple[int, int]] = {}
        self.lost = False
        self._opaque = 0
        self._out: list[bytes] = []
        self._answered = 0

    def send(self, template: FrameTemplate, intended_ns: int, sent_ns: int) -> None:
        self._opaque = opaque = (self._opaque + 1) & _OPAQUE_MASK
        self.recorder.sent(template.code, intended_ns, sent_ns)
        if self.lost:
            self.recorder.unanswered(template.code, intended_ns)
            return
        self.pending[opaque] = (template.code, intended_ns)
        self._out.append(template.render(opaque))

    def flush(self) -> None:
        if self._out and self.transport is not None and not self.lost:
            self.transport.write(b"".join(self._out))
        self._out.clear()

    def abandon(self) -> None:
        """The run is over: whatever is still pending was never answered."""
        for code, intended_ns in self.pending.values():
            self.recorder.unanswered(code, intended_ns)
        self.pending.clear()

    def close(self) -> None:
        self.lost = True  # our own close: nothing to warn about
        if self.transport is not None:
            self.transport.close()

    def hang_up(self) -> None:
        """Close now, as a broker going down does: the peer sees the end of the stream at once, not
        at the event loop's next turn (when `transport.close` would close the socket)."""
        if self.transport is not None:
            sock = self.transport.get_extra_info("socket")
            if sock is not None:
                sock.shutdown(socket.SHUT_RDWR)
        self.close()
        self.abandon()

    # ---- FramedConnection ----
    def received(self, command: RemotingCommand, arrived_ns: int) -> None:
        entry = self.pending.pop(command.opaque, None) if command.is_response else None
        if entry is not None:
            self.recorder.answered(entry[0], entry[1], arrived_ns, command.code)
            self._answered += 1

    def chunk_done(self) -> None:
        answered, self._answered = self._answered, 0
        if answered and self.on_answers is not None:
            self.on_answers(self, answered)

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.lost:
            log.warning("connection to the server lost (%s); its %d pending requests count as unanswered",
                        exc or "closed", len(self.pending))
        self.lost = True
        self.abandon()
