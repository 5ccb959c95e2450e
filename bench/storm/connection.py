"""A storm worker's pipelined connection: template frames out, answers matched by opaque in.

Leaner than namesrv.client's connection on purpose: no future per call and no callback hop.
The arrival time is read once per received chunk, before decoding, so the generator's own decode
work is not charged to the server, and the answer is recorded right there.
"""
from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from bench.storm.recorder import IntervalRecorder
from bench.storm.template import FrameTemplate
from namesrv.protocol import FrameDecoder, ProtocolError, RemotingCommand

log = logging.getLogger(__name__)
_OPAQUE_MASK = 0x7FFFFFFF


class StormConnection(asyncio.Protocol):
    """`send` queues a frame and remembers (code, intended time) under its opaque; `flush` writes
    everything queued in one syscall. `on_answers(connection, n)` runs after each received chunk
    that answered n requests (the closed loop refills from there)."""

    def __init__(self, recorder: IntervalRecorder,
                 on_answers: Callable[[StormConnection, int], None] | None = None) -> None:
        self.recorder = recorder
        self.on_answers = on_answers
        self.pending: dict[int, tuple[int, int]] = {}
        self.lost = False
        self.transport: asyncio.Transport | None = None
        self._decoder = FrameDecoder()
        self._opaque = 0
        self._out: list[bytes] = []

    @classmethod
    async def open(cls, host: str, port: int, recorder: IntervalRecorder,
                   on_answers: Callable[[StormConnection, int], None] | None = None,
                   timeout: float = 5.0) -> StormConnection:
        loop = asyncio.get_running_loop()
        async with asyncio.timeout(timeout):
            _, connection = await loop.create_connection(lambda: cls(recorder, on_answers), host, port)
        return connection

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

    # ---- asyncio.Protocol ----
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        now = time.monotonic_ns()
        answered = 0
        try:
            for frame in self._decoder.feed(data):
                response = RemotingCommand.decode(frame)
                entry = self.pending.pop(response.opaque, None) if response.is_response else None
                if entry is not None:
                    self.recorder.answered(entry[0], entry[1], now, response.code)
                    answered += 1
        except ProtocolError as exc:
            log.error("bad frame from the server, closing the connection: %s", exc)
            if self.transport is not None:
                self.transport.abort()
        if answered and self.on_answers is not None:
            self.on_answers(self, answered)

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.lost:
            log.warning("connection to the server lost (%s); its %d pending requests count as unanswered",
                        exc or "closed", len(self.pending))
        self.lost = True
        self.abandon()
