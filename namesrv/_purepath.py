"""Pure-Python implementation of the protocol hot path.

`namesrv/_fastpath.pyx` implements the same functions with the same results; `namesrv.fastpath`
picks whichever is importable. Every function raises `ProtocolError` (never anything else) on bad
input, except `scan_registration`, which answers None; neither ever reads past the buffer it was given.
"""
from __future__ import annotations

import struct
import zlib
from collections.abc import Callable

import orjson

_INT32 = struct.Struct(">i")
_HEADER_FIXED = struct.Struct(">hBhiii")  # code, language, version, opaque, flag, remarkLength
_EXT_KEY_LEN = struct.Struct(">h")
_FIXED_LEN = 21  # 2+1+2+4+4+4 fixed fields + 4 bytes of extLength

_INT16_MIN, _INT16_MAX = -(1 << 15), (1 << 15) - 1
_INT32_MIN, _INT32_MAX = -(1 << 31), (1 << 31) - 1


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


def _read_utf8(data: bytes | bytearray | memoryview, start: int, length: int, what: str) -> str:
    try:
        return str(data[start:start + length], "utf-8")  # str(), not .decode(): memoryview has none
    except UnicodeDecodeError as exc:
        raise ProtocolError(f"binary header: {what} is not valid UTF-8 ({exc.reason} at byte {exc.start})") from None


def _utf8_of(text: str, what: str) -> bytes:
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError as exc:  # a lone surrogate, e.g. from a JSON "\ud800" escape
        raise ProtocolError(
            f"binary header: {what} is not encodable as UTF-8 ({exc.reason} at index {exc.start})") from None


def decode_binary_header(
    data: bytes | bytearray | memoryview,
) -> tuple[int, int, int, int, int, str | None, dict[str, str] | None]:
    """Decode a ROCKETMQ (binary) header.

    Returns (code, language, version, opaque, flag, remark, extFields). As in Java, a string of
    length 0 decodes as null: a null remark is None, an ext entry with a null key or value is left
    out, and extFields is None when the ext section is empty.
    """
    size = len(data)
    if size < _FIXED_LEN:
        raise ProtocolError(f"binary header of {size} bytes is shorter than the 21-byte fixed part")
    code, language, version, opaque, flag, remark_len = _HEADER_FIXED.unpack_from(data, 0)
    pos = 17
    if remark_len < 0 or remark_len > size - pos - 4:
        raise ProtocolError(f"binary header: remark length {remark_len} exceeds the header")
    remark = _read_utf8(data, pos, remark_len, "remark") if remark_len else None
    pos += remark_len
    ext_len = _INT32.unpack_from(data, pos)[0]
    pos += 4
    if ext_len < 0 or ext_len > size - pos:
        raise ProtocolError(f"binary header: extFields length {ext_len} exceeds the header")
    if ext_len == 0:
        return code, language, version, opaque, flag, remark, None
    ext: dict[str, str] = {}
    end = pos + ext_len
    while pos < end:
        if end - pos < 2:
            raise ProtocolError("binary header: truncated extFields key length")
        key_len = _EXT_KEY_LEN.unpack_from(data, pos)[0]
        pos += 2
        if key_len < 0 or key_len > end - pos:
            raise ProtocolError(f"binary header: extFields key length {key_len} exceeds the ext section")
        key = _read_utf8(data, pos, key_len, "extFields key") if key_len else None
        pos += key_len
        if end - pos < 4:
            raise ProtocolError("binary header: truncated extFields value length")
        value_len = _INT32.unpack_from(data, pos)[0]
        pos += 4
        if value_len < 0 or value_len > end - pos:
            raise ProtocolError(f"binary header: extFields value length {value_len} exceeds the ext section")
        value = _read_utf8(data, pos, value_len, "extFields value") if value_len else None
        pos += value_len
        if key is not None and value is not None:
            ext[key] = value
    return code, language, version, opaque, flag, remark, ext


def encode_binary_header(
    code: int,
    language: int,
    version: int,
    opaque: int,
    flag: int,
    remark: str | None,
    ext_fields: dict[str, str] | None,
) -> bytes:
    """Encode a ROCKETMQ (binary) header; entries with a null or empty key or value are skipped."""
    if not (_INT16_MIN <= code <= _INT16_MAX and _INT16_MIN <= version <= _INT16_MAX and 0 <= language <= 255
            and _INT32_MIN <= opaque <= _INT32_MAX and _INT32_MIN <= flag <= _INT32_MAX):
        raise ProtocolError(f"binary header cannot carry code={code} language={language} version={version} "
                            f"opaque={opaque} flag={flag}")
    remark_bytes = _utf8_of(remark, "remark") if remark else b""
    parts = [_HEADER_FIXED.pack(code, language, version, opaque, flag, len(remark_bytes)), remark_bytes]
    ext_parts: list[bytes] = []
    if ext_fields:
        for key, value in ext_fields.items():
            if not key or not value:
                continue
            key_bytes = _utf8_of(key, "extFields key")
            value_bytes = _utf8_of(value, "extFields value")
            if len(key_bytes) > _INT16_MAX:
                raise ProtocolError(f"binary header: extFields key of {len(key_bytes)} bytes is too long")
            ext_parts.append(_EXT_KEY_LEN.pack(len(key_bytes)))
            ext_parts.append(key_bytes)
            ext_parts.append(_INT32.pack(len(value_bytes)))
            ext_parts.append(value_bytes)
    ext = b"".join(ext_parts)
    parts.append(_INT32.pack(len(ext)))
    parts.append(ext)
    return b"".join(parts)


def body_crc32(data: bytes | bytearray | memoryview | None) -> int:
    """The CRC32 RocketMQ puts in `bodyCrc32`: zlib's CRC masked to 31 bits (a null body is 0)."""
    if not data:
        return 0
    return zlib.crc32(data) & 0x7FFFFFFF


#: TopicFilterType's names (as `namesrv.protocol.topic.FILTER_TYPES`).
_FILTER_TYPES = ("SINGLE_TAG", "MULTI_TAG")


# Twin of `_plain_fields` in namesrv/_fastpath.pyx: the one definition of a "plain" topic entry.
def _plain_queue_fields(obj: object) -> tuple | None:
    """(topicName, readQueueNums, writeQueueNums, perm, topicSysFlag) of a topic entry as brokers
    send it (a dict with every field present, of its JSON type, ints within int32); None otherwise."""
    if type(obj) is not dict:
        return None
    get = obj.get
    topic, read, write, perm, sys_flag = (get("topicName"), get("readQueueNums"), get("writeQueueNums"),
                                          get("perm"), get("topicSysFlag"))
    filter_type, order, attributes = get("topicFilterType"), get("order"), get("attributes")
    if (type(topic) is str and topic and type(read) is int and type(write) is int and type(perm) is int
            and type(sys_flag) is int and type(order) is bool and type(filter_type) is str
            and filter_type in _FILTER_TYPES and (attributes is None or type(attributes) is dict)
            and _INT32_MIN <= read <= _INT32_MAX and _INT32_MIN <= write <= _INT32_MAX
            and _INT32_MIN <= perm <= _INT32_MAX and _INT32_MIN <= sys_flag <= _INT32_MAX):
        return topic, read, write, perm, sys_flag
    return None


def queue_fields(table: dict, fallback: Callable[[object, str], tuple]) -> dict[str, tuple]:
    """A parsed topicConfigTable as the route table reads it: key -> (topicName, readQueueNums,
    writeQueueNums, perm, topicSysFlag), without a TopicConfig per topic.

    A plain entry (see `_plain_queue_fields`) is read here, and one `scan_registration` read (a
    tuple, which JSON never yields) is kept; any other entry is `fallback(entry, key)`, which reads
    (or rejects) it field by field as `TopicConfig.from_dict` does.
    """
    out = table.copy()  # a clone of the hash table: cheaper than inserting key by key
    for key, obj in table.items():
        if type(obj) is not tuple:
            fields = _plain_queue_fields(obj)
            out[key] = fallback(obj, key) if fields is None else fields
    return out



def scan_registration(data: bytes | bytearray | memoryview, table_path: tuple[str, ...],
                      previous: bytes | None) -> tuple[object, bytes | None, int] | None:
    """(value, entries, omitted): `value` is `orjson.loads(data)`, except that in the object at
    `table_path` (keys from the top; `()` for none) every plain topic entry is replaced by its
    queue-fields tuple; None if `data` is not strict JSON (the caller then parses it leniently).

    The reference the Cython twin is tested against: it may return None where this does not
    (floats, integers beyond 64 bits, deep nesting), never another value. Only the twin
    digests each topic entry's bytes (which pays only in C): it returns them as `entries` and
    leaves out the entries unchanged since `previous`. This one has no entries (None), so it
    leaves nothing out (`omitted` is 0) and ignores `previous`.
    """
    if isinstance(data, str):  # orjson would take it; the Cython twin reads buffers only
        raise TypeError("scan_registration needs a bytes-like object, not 'str'")
    try:
        obj = orjson.loads(data)
    except orjson.JSONDecodeError:
        return None
    table = obj
    for step in table_path:
        if type(table) is not dict:
            return obj, None, 0
        table = table.get(step)
    if type(table) is dict:
        for key, entry in table.items():
            fields = _plain_queue_fields(entry)
            if fields is not None:
                table[key] = fields  # replacing values (not keys) while iterating is safe
    return obj, None, 0


def count_entries(data: bytes | bytearray | memoryview, table_path: tuple[str, ...]) -> int | None:
    """How many members the object at `table_path` (keys from the top) has in `orjson.loads(data)`,
    or None: not strict JSON, or no object there (the caller's lenient parser then decides).

    The reference the Cython twin is tested against: it may return None where this does not (a
    repeated key, a key with escapes, floats...), never another count.
    """
    try:
        obj = orjson.loads(data)
    except orjson.JSONDecodeError:
        return None
    for step in table_path:
        if type(obj) is not dict:
            return None
        obj = obj.get(step)
    return len(obj) if type(obj) is dict and table_path else None


_OPAQUE_KEY = b'"opaque":'
_PREFIX = struct.Struct(">ii")


def _canonical_int32(digits: bytes) -> int | None:
    """The value of a JSON integer as `b"%d"` writes it (no sign but '-', no leading zero), in int32 range."""
    if digits.isdigit() and len(digits) <= 10 and (digits[0] != 48 or len(digits) == 1):
        value = int(digits)
        return value if value <= _INT32_MAX else None
    if digits[:1] == b"-" and digits[1:].isdigit() and len(digits) <= 11 and digits[1] != 48:
        value = int(digits)
        return value if value >= _INT32_MIN else None
    return None


def json_opaque_key(header: bytes) -> tuple[bytes, int | None] | None:
    """(the header without the value of its first `"opaque":` key, that value if written as
    `b"%d"` writes an int32 else None); None when there is no such key or no comma ends its value.
    Two headers with one `"opaque":` each and the same key differ in their opaque only: the key a
    repeat is remembered by (namesrv.processor.seen_headers)."""
    head, found, rest = header.partition(_OPAQUE_KEY)
    if not found:
        return None
    digits, comma, tail = rest.partition(b",")
    if not comma:
        return None
    return head + found + comma + tail, _canonical_int32(digits)


def stamp_frame(head: bytes, tail: bytes, opaque: int, body: bytes | None, serialize_field: int,
                binary: bool) -> bytes:
    """A whole response frame, length prefix included, from its header's halves around the opaque
    (four bytes when `binary`, else its decimal digits) and its body; `serialize_field` is the
    serialize type already shifted into the header-length field's top byte."""
    stamp = _INT32.pack(opaque) if binary else b"%d" % opaque
    header_length = len(head) + len(stamp) + len(tail)
    body = body or b""
    return b"".join((_PREFIX.pack(4 + header_length + len(body), serialize_field | header_length),
                     head, stamp, tail, body))


def route_hits(frames: list[bytes], seen: dict, query_type: type, lookup: Callable[[object], bytes | None],
               head: bytes, tail: bytes) -> tuple[list[bytes], list[bytes]]:
    """The reactor's commonest answers in one call per received chunk: (answers, the other frames).

    A frame is answered when its header is JSON, `json_opaque_key` finds its key in `seen` with a
    `query_type` value and an int32 opaque, and `lookup(value)` has a body: the answer is that body
    behind the JSON header halves `head`/`tail` stamped with the opaque. Every other frame is
    returned, in order, for the one-frame-at-a-time path (namesrv.processor.inline).
    """
    replies, rest = [], []
    for frame in frames:
        if type(frame) is bytes and len(frame) >= 4:
            field = _INT32.unpack_from(frame)[0]
            if field >= 0 and 4 + (field & 0xFFFFFF) <= len(frame):
                split = json_opaque_key(frame[4:4 + (field & 0xFFFFFF)])
                if split is not None and split[1] is not None:
                    query = seen.get(split[0])
                    if type(query) is query_type:
                        body = lookup(query)
                        if type(body) is bytes:
                            replies.append(stamp_frame(head, tail, split[1], body, 0, False))
                            continue
        rest.append(frame)
    return replies, rest


# Imported last on purpose: namesrv.protocol's __init__ imports namesrv.fastpath, which imports
# this module; binding the functions first lets `import namesrv._purepath` come first too.
from namesrv.protocol.errors import ProtocolError  # noqa: E402
