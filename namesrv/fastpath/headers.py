"""Headers: the binary (ROCKETMQ) header codec, and the key of a JSON header without its opaque.

Pure twin of `namesrv/fastpath/headers.pxi` (same functions, results and errors; see
namesrv.fastpath). The codec raises `ProtocolError` on bad input, never anything else, and never
reads past the buffer it was given.
"""
from __future__ import annotations

import struct

from namesrv.errors import ProtocolError

_INT32 = struct.Struct(">i")
_HEADER_FIXED = struct.Struct(">hBhiii")  # code, language, version, opaque, flag, remarkLength
_EXT_KEY_LEN = struct.Struct(">h")
_FIXED_LEN = 21  # 2+1+2+4+4+4 fixed fields + 4 bytes of extLength

_INT16_MIN, _INT16_MAX = -(1 << 15), (1 << 15) - 1
_INT32_MIN, _INT32_MAX = -(1 << 31), (1 << 31) - 1


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


_OPAQUE_KEY = b'"opaque":'


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


_BODY_CRC = b'"bodyCrc32":"'


def body_crc_key(key: bytes) -> tuple[bytes, int] | None:
    """(`key` without its bodyCrc32 value, that value) when `key` (a JSON header's, as
    `json_opaque_key` gives it) holds one `"bodyCrc32":"` followed by a non-negative int32 written
    as Java writes it and a closing quote; else None. Two registration headers with the same key
    differ in their opaque and bodyCrc32 only (namesrv.processor.inline rebinds the latter)."""
    head, found, rest = key.partition(_BODY_CRC)
    if not found or _BODY_CRC in rest:
        return None
    digits, quote, tail = rest.partition(b'"')
    if not quote or not digits.isdigit() or len(digits) > 10 or (digits[0] == 48 and len(digits) > 1):
        return None
    value = int(digits)
    return (head + found + quote + tail, value) if value <= _INT32_MAX else None


def json_opaque_keys(frames: list[bytes]) -> tuple[list[bytes | None], list[int]]:
    """(keys, opaques) of a received chunk's frames (as `split_frames` yields them), one each:
    `json_opaque_key`'s key and int32 opaque for a frame with a JSON header that has both, else
    None and 0. The reactor looks a whole chunk's keys up at once (namesrv.processor.inline)."""
    keys: list[bytes | None] = []
    opaques: list[int] = []
    for frame in frames:
        split = None
        if type(frame) is bytes and len(frame) >= 4:
            field = _INT32.unpack_from(frame)[0]
            if field >= 0 and 4 + (field & 0xFFFFFF) <= len(frame):
                split = json_opaque_key(frame[4:4 + (field & 0xFFFFFF)])
        if split is not None and split[1] is not None:
            keys.append(split[0])
            opaques.append(split[1])
        else:
            keys.append(None)
            opaques.append(0)
    return keys, opaques
