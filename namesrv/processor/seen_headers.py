"""Request headers read once per peer, and response headers written once per shape.

A peer repeats the same request header again and again with only the opaque changed (a client's
route poll, a broker's 30-second registration). `SeenHeaders` remembers what a header says keyed
by its bytes without the opaque, so the next one costs a dictionary lookup instead of a parse.
`OpaqueTemplate` is the converse for answers: a response header encoded once around a sentinel
opaque, later stamped with the real one.
"""
from __future__ import annotations

import struct
from collections.abc import Callable
from functools import partial
from typing import Generic, TypeVar

from namesrv import fastpath
from namesrv.caches import BoundedMemo
from namesrv.protocol.codes import SerializeType
from namesrv.protocol.command import RemotingCommand

T = TypeVar("T")

INT32 = struct.Struct(">i")
JSON_FIELD = int(SerializeType.JSON) << 24
ROCKETMQ_FIELD = int(SerializeType.ROCKETMQ) << 24
HEADER_LENGTH_MASK = 0xFFFFFF
_SENTINEL = 2_059_198_193  # an opaque whose digits appear nowhere else in a header
_BINARY_OPAQUE_AT = 5  # code (2) + language (1) + version (2)
_OPAQUE_KEY = b'"opaque":'
#: Bounds of each table of remembered headers (peers x distinct requests; emptied when full).
SEEN_HEADERS = 16384
SEEN_HEADER_BYTES = 32 * 1024 * 1024


def single_opaque(header: bytes) -> bool:
    """Does the JSON `header` hold one `"opaque":` only, so that two headers with its
    `json_opaque_key` key differ in their opaque alone? What `SeenHeaders` remembers, and so what
    a reader may learn from a parse (namesrv.processor.inline.HeaderReader), is held to it."""
    return header.count(_OPAQUE_KEY) == 1


class SeenHeaders(Generic[T]):
    """`read(serialize_field, header)` -> (opaque, what the header says), or None if it cannot be read.

    `parse(serialize_field, header, json_split)` reads a header the slow way, returning (opaque,
    value) or None; `json_split` is what `fastpath.json_opaque_key` made of a JSON header with an
    int32 opaque, (key, opaque) (None for any other header). Its value is remembered when the opaque
    is the only thing a repeat can differ in: a binary header's fixed four bytes, or a JSON header's
    single `"opaque":` key written as `b"%d"` writes it and followed by another field.
    Single-threaded (the reactor's).
    """

    def __init__(self, parse: Callable[[int, bytes, tuple[bytes, int] | None], tuple[int, T] | None],
                 bound: int = SEEN_HEADERS,
                 max_bytes: int = SEEN_HEADER_BYTES) -> None:
        self._parse = parse
        #: JSON headers by `fastpath.json_opaque_key` (`.table` is read by `InlineAnswers.answer_all` too).
        self.json: BoundedMemo[bytes, T] = BoundedMemo(bound, max_bytes)
        self.binary: BoundedMemo[bytes, T] = BoundedMemo(bound, max_bytes)

    def read(self, serialize_field: int, header: bytes) -> tuple[int, T] | None:
        if serialize_field == JSON_FIELD:
            split = fastpath.json_opaque_key(header)
            if split is None or split[1] is None:
                return self._parse(JSON_FIELD, header, None)
            key, opaque = split
            memo = self.json
        elif serialize_field == ROCKETMQ_FIELD:
            if len(header) < _BINARY_OPAQUE_AT + 4:
                return None
            split = None
            key = header[:_BINARY_OPAQUE_AT] + header[_BINARY_OPAQUE_AT + 4:]
            opaque = INT32.unpack_from(header, _BINARY_OPAQUE_AT)[0]
            memo = self.binary
        else:
            return None
        known = memo.table.get(key, self)
        if known is not self:
            return opaque, known
        parsed = self._parse(serialize_field, header, split)
        if (parsed is not None and parsed[0] == opaque
                and (serialize_field != JSON_FIELD or single_opaque(header))):
            # A registration's value holds the header's fields: charged twice the key.
            memo.remember(key, parsed[1], 2 * len(key))
        return parsed


class OpaqueTemplate:
    """A response's encoded header split around its opaque: `frame(opaque, body)` writes the whole
    frame (as `RemotingCommand.encode` writes it, an int32 opaque, length prefix included). `frame`
    is `fastpath.stamp_frame` with the header's fields bound: every answer from a template is
    stamped without a Python call in between."""

    __slots__ = ("_serialize_field", "head", "tail", "_binary", "frame")

    def __init__(self, response: RemotingCommand) -> None:
        """`response`: the answer as the regular path would build it, with any opaque."""
        saved = response.opaque
        response.opaque = _SENTINEL
        try:
            header = response.encode_header()
        finally:
            response.opaque = saved
        self._serialize_field = int(response.serialize_type) << 24
        self._binary = response.serialize_type == SerializeType.ROCKETMQ
        if self._binary:
            at = _BINARY_OPAQUE_AT
            assert header[at:at + 4] == INT32.pack(_SENTINEL)
            self.head, self.tail = header[:at], header[at + 4:]
        else:
            marker = b'"opaque":%d' % _SENTINEL
            at = header.index(marker) + len(_OPAQUE_KEY)
            self.head, self.tail = header[:at], header[at + len(str(_SENTINEL)):]
        self.frame: Callable[[int, bytes | None], bytes] = partial(
            fastpath.stamp_frame, self._serialize_field, self._binary, self.head, self.tail)

    def frames(self, opaques: list[int], body: bytes | None) -> list[bytes]:
        """`frame(opaque, body)` for each of `opaques`: a JSON header's in one stamping call."""
        if self._binary or self._serialize_field:
            return [self.frame(opaque, body) for opaque in opaques]
        return fastpath.stamp_frames(self.head, self.tail, opaques, [body or b""] * len(opaques))
