"""Frames: split off a byte stream, stamped from pre-encoded header halves, and their body CRC32.

Pure twin of `namesrv/fastpath/frames.pxi` (same functions, results and errors; see
namesrv.fastpath). Every function raises `ProtocolError` on bad input, never anything else, and
never reads past the buffer it was given.
"""
from __future__ import annotations

import struct
import zlib

from xxhash import xxh3_64_intdigest

from namesrv.errors import ProtocolError

_INT32 = struct.Struct(">i")
_PREFIX = struct.Struct(">ii")


def split_frames(buf: bytes | bytearray | memoryview, max_frame_length: int) -> tuple[list[bytes], int]:
    """Split complete frames off the front of `buf`.

    Returns the frames (each without its 4-byte length prefix) and how many bytes of `buf`
    they used; the caller keeps the rest for the next chunk. A length that is negative,
    shorter than the header-length field, or (with its prefix) over `max_frame_length` raises
    at once, before the frame's bytes arrive, as Netty's decoder does.
    """
    view = memoryview(buf)
    size = len(view)
    frames: list[bytes] = []
    pos = 0
    while size - pos >= 4:
        total = _INT32.unpack_from(view, pos)[0]
        if total < 4:
            raise ProtocolError(f"bad frame length {total} at offset {pos}: shorter than the header-length field")
        if total + 4 > max_frame_length:
            raise ProtocolError(f"frame length {total} exceeds the maximum frame length {max_frame_length}")
        end = pos + 4 + total
        if end > size:
            break
        frames.append(view[pos + 4:end].tobytes())
        pos = end
    return frames, pos


def body_crc32(data: bytes | bytearray | memoryview | None) -> int:
    """The CRC32 RocketMQ puts in `bodyCrc32`: zlib's CRC masked to 31 bits (a null body is 0)."""
    if not data:
        return 0
    return zlib.crc32(data) & 0x7FFFFFFF


def body_digest(frame: bytes | bytearray | memoryview) -> int:
    """XXH3 (64 bits, seed 0) of the body of `frame` (as `split_frames` yields it: its header-length
    field first), 0 read as 1; 0 when it has none. What a kept replay recognises a repeated
    request's body by (namesrv.processor.write_fast_path). Not cryptographic: a broker can only
    ever collide with its own requests, and mislead itself."""
    view = memoryview(frame)
    if len(view) < 4:
        return 0
    body_at = 4 + (_INT32.unpack_from(view)[0] & 0xFFFFFF)
    return (xxh3_64_intdigest(view[body_at:]) or 1) if len(view) > body_at else 0


def stamp_frame(serialize_field: int, binary: bool, head: bytes, tail: bytes, opaque: int,
                body: bytes | None) -> bytes:
    """A whole response frame, length prefix included, from its header's halves around the opaque
    (four bytes when `binary`, else its decimal digits) and its body; `serialize_field` is the
    serialize type already shifted into the header-length field's top byte. The header's fields
    come first, so that a template binds them once (`functools.partial`) and is called with the
    opaque and body alone."""
    stamp = _INT32.pack(opaque) if binary else b"%d" % opaque
    header_length = len(head) + len(stamp) + len(tail)
    body = body or b""
    return b"".join((_PREFIX.pack(4 + header_length + len(body), serialize_field | header_length),
                     head, stamp, tail, body))


def stamp_frames(head: bytes, tail: bytes, opaques: list[int], bodies: list[bytes | None]) -> list[bytes]:
    """`stamp_frame` of a JSON header (no serialize type) for each body that is not None, in order:
    the answers of one received chunk from the bodies found for it."""
    if len(opaques) != len(bodies):
        raise ValueError("stamp_frames: one opaque per body")
    out = []
    for opaque, body in zip(opaques, bodies):
        if type(body) is bytes:
            out.append(stamp_frame(0, False, head, tail, opaque, body))
        elif body is not None:
            raise TypeError(f"stamp_frames: a body is bytes or None, not {type(body).__name__}")
    return out
