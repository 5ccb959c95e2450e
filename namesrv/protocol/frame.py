"""Sans-IO frame codec: bytes in, frames out, for any chunking of a TCP stream."""
from __future__ import annotations

from collections.abc import Iterable

from namesrv import fastpath
from namesrv.protocol.codes import DEFAULT_MAX_FRAME_LENGTH
from namesrv.protocol.command import RemotingCommand


class FrameDecoder:
    """Incremental splitter for one connection.

    `feed(chunk)` returns the frames completed by that chunk (possibly none, possibly many) and
    keeps at most one partial frame buffered. A bad length raises `ProtocolError` before the
    frame's bytes arrive, so a hostile length never makes us buffer 2 GiB.
    """

    __slots__ = ("max_frame_length", "_buffer", "_need")

    def __init__(self, max_frame_length: int = DEFAULT_MAX_FRAME_LENGTH) -> None:
        self.max_frame_length = max_frame_length
        self._buffer = bytearray()
        #: Bytes the buffer must hold before another frame can be whole (split_frames has checked the
        #: length prefix they follow from): a large frame arrives in many chunks, not split each time.
        self._need = 0

    def feed(self, chunk: bytes) -> list[bytes]:
        buffer = self._buffer
        if buffer:
            buffer += chunk
            if len(buffer) < self._need:
                return []
            frames, used = fastpath.split_frames(buffer, self.max_frame_length)
            if used:
                del buffer[:used]
        else:
            frames, used = fastpath.split_frames(chunk, self.max_frame_length)
            if used == len(chunk):
                return frames
            buffer += memoryview(chunk)[used:]
        self._need = 4 + int.from_bytes(buffer[:4], "big") if len(buffer) >= 4 else 4
        return frames

    @property
    def buffered(self) -> int:
        """Bytes of an incomplete frame held back."""
        return len(self._buffer)


def encode_frames(commands: Iterable[RemotingCommand]) -> bytes:
    """Many commands in one buffer, ready for a single send."""
    return b"".join(command.encode() for command in commands)
