"""Request headers read once per peer, and response headers written once per shape.

A peer repeats the same request header again and again with only the opaque changed (a client's
route poll, a broker's 30-second registration). `SeenHeaders` remembers what a header says keyed
by its bytes without the opaque, so the next one costs a dictionary lookup instead of a parse.
A broker's registration of a changed topic table differs from its previous one in the body's
CRC32 as well: a header with a `bodyCrc32` field is remembered by its bytes without either value,
and the value remembered is rebound to the new CRC32 (a new dictionary, not a new parse).
`OpaqueTemplate` is the converse for answers: a response header encoded once around a sentinel
opaque, later stamped with the real one.
"""
from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Generic, TypeVar

from namesrv import fastpath
from namesrv.protocol.codes import INT32_MAX, SerializeType
from namesrv.protocol.command import RemotingCommand

T = TypeVar("T")

INT32 = struct.Struct(">i")
JSON_FIELD = int(SerializeType.JSON) << 24
ROCKETMQ_FIELD = int(SerializeType.ROCKETMQ) << 24
HEADER_LENGTH_MASK = 0xFFFFFF
_SENTINEL = 2_059_198_193  # an opaque whose digits appear nowhere else in a header
_BINARY_OPAQUE_AT = 5  # code (2) + language (1) + version (2)
_OPAQUE_KEY = b'"opaque":'
_BODY_CRC_KEY = b'"bodyCrc32":"'
_BINARY_BODY_CRC_KEY = b"\x00\x09bodyCrc32"
#: Digits of the widest int32 (a bodyCrc32 written with more is left to the full parse).
_CRC_DIGITS = 10
#: Bound of the remembered headers (peers x distinct requests; cleared when full).
SEEN_HEADERS = 16384


class SeenHeaders(Generic[T]):
    """`read(serialize_field, header)` -> (opaque, what the header says), or None if it cannot be read.

    `parse(serialize_field, header)` reads a header the slow way, returning (opaque, value) or
    None. Its value is remembered when the opaque is the only thing a repeat can differ in: a
    binary header's fixed four bytes, or a JSON header's single `"opaque":` key written as
    `b"%d"` writes it and followed by another field. A header with one `bodyCrc32` field of
    int32 digits is remembered without those digits instead, with `with_body_crc(value, digits)`
    (what the same header with other digits says) to rebind its value; only when that holds of
    the parsed header's own digits and of one other parsed value, which shows those digits are
    the ones the parse reads. The latest header of each is also remembered whole, so the periodic
    repeat of a registration is found at once. Single-threaded (the reactor's).
    """

    def __init__(self, parse: Callable[[int, bytes], tuple[int, T] | None],
                 with_body_crc: Callable[[T, str], T], bound: int = SEEN_HEADERS) -> None:
        self._parse = parse
        self._with_body_crc = with_body_crc
        self._bound = bound
        #: JSON headers by `fastpath.json_opaque_key` (read by `fastpath.route_hits` too).
        self.json: dict[bytes, T] = {}
        self._binary: dict[bytes, T] = {}
        #: Headers with a bodyCrc32, by their key without its digits: (the digits last seen, their
        #: value, their key in `json`/`_binary`, where the latest of each is too: a repeat finds it there).
        self._by_body_crc: dict[bytes, tuple[str, T, bytes]] = {}

    def read(self, serialize_field: int, header: bytes) -> tuple[int, T] | None:
        if serialize_field == JSON_FIELD:
            split = fastpath.json_opaque_key(header)
            if split is None or split[1] is None:
                return self._parse(JSON_FIELD, header)
            key, opaque = split
            table, find_crc = self.json, _json_crc_digits
        elif serialize_field == ROCKETMQ_FIELD:
            if len(header) < _BINARY_OPAQUE_AT + 4:
                return None
            key = header[:_BINARY_OPAQUE_AT] + header[_BINARY_OPAQUE_AT + 4:]
            opaque = INT32.unpack_from(header, _BINARY_OPAQUE_AT)[0]
            table, find_crc = self._binary, _binary_crc_digits
        else:
            return None
        known = table.get(key, self)
        if known is not self:
            return opaque, known
        span = find_crc(key)
        if span is not None:
            cut, digits = key[:span[0]] + key[span[1]:], key[span[0]:span[1]].decode()
            memo = self._by_body_crc.get(cut)
            if memo is not None:
                value = memo[1] if memo[0] == digits else self._with_body_crc(memo[1], digits)
                table.pop(memo[2], None)
                self._remember(table, key, value)
                self._by_body_crc[cut] = (digits, value, key)
                return opaque, value
        parsed = self._parse(serialize_field, header)
        if (parsed is None or parsed[0] != opaque
                or (serialize_field == JSON_FIELD and header.count(_OPAQUE_KEY) != 1)):
            return parsed
        if span is None:
            self._remember(table, key, parsed[1])
        elif self._rebinds(serialize_field, header, find_crc(header), digits, parsed[1]):
            self._remember(table, key, parsed[1])
            self._remember(self._by_body_crc, cut, (digits, parsed[1], key))
        return parsed

    def _rebinds(self, serialize_field: int, header: bytes, span: tuple[int, int] | None, key_digits: str,
                 value: T) -> bool:
        """Does `with_body_crc` say what `header` says, with its own bodyCrc32 digits (found where
        its key had them) and with others?"""
        digits = None if span is None else header[span[0]:span[1]]
        if digits is None or digits.decode() != key_digits:
            return False  # cutting the binary opaque out made or broke a field name: not worth a memory
        if self._with_body_crc(value, key_digits) != value:
            return False
        other = digits[:-1] + (b"1" if digits.endswith(b"0") else b"0")  # int32 still, same length
        parsed = self._parse(serialize_field, header[:span[0]] + other + header[span[1]:])
        return parsed is not None and parsed[1] == self._with_body_crc(value, other.decode())

    def _remember(self, table: dict, key: object, value: object) -> None:
        if len(table) >= self._bound:
            table.clear()
        table[key] = value


def _int32_digits(digits: bytes) -> bool:
    """Plain decimal digits of a value in int32 range (leading zeros allowed, as Long.parseLong does)."""
    return 0 < len(digits) <= _CRC_DIGITS and digits.isdigit() and int(digits) <= INT32_MAX


def _json_crc_digits(data: bytes) -> tuple[int, int] | None:
    """Where the digits of `data`'s one `"bodyCrc32":"…"` are, or None: no such field, more than
    one, or a value that is not int32 digits."""
    start = data.find(_BODY_CRC_KEY) + len(_BODY_CRC_KEY)
    end = data.find(b'"', start)
    if start < len(_BODY_CRC_KEY) or end < 0 or not _int32_digits(data[start:end]) or _BODY_CRC_KEY in data[end:]:
        return None
    return start, end


def _binary_crc_digits(data: bytes) -> tuple[int, int] | None:
    """The same in a binary header, where the field is a 2-byte key length, the key, a 4-byte
    value length and the value."""
    at = data.find(_BINARY_BODY_CRC_KEY)
    if at < 0 or _BINARY_BODY_CRC_KEY in data[at + 1:]:
        return None
    start = at + len(_BINARY_BODY_CRC_KEY) + 4
    if start > len(data):
        return None
    end = start + INT32.unpack_from(data, start - 4)[0]
    if not start < end <= len(data) or not _int32_digits(data[start:end]):
        return None
    return start, end


class OpaqueTemplate:
    """A response's encoded header split around its opaque: `frame(opaque, body)` writes the whole frame."""

    __slots__ = ("_serialize_field", "head", "tail", "_binary")

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

    def frame(self, opaque: int, body: bytes | None) -> bytes:
        """The whole response frame (an int32 opaque), length prefix included, as
        `RemotingCommand.encode` writes it."""
        return fastpath.stamp_frame(self.head, self.tail, opaque, body, self._serialize_field, self._binary)
