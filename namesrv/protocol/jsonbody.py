"""JSON as RocketMQ bodies use it: fastjson's two output flavours and its tolerant input.

Legacy flavour writes integer map keys bare (`{0:"addr"}`, not JSON); the standard flavour
quotes and sorts them and escapes like fastjson's BrowserCompatible feature. Input accepts
both. Models in `body` compose their output from the pieces here.
"""
from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import orjson

from namesrv.protocol.errors import ProtocolError

_JSON_STRING = re.compile(rb'("(?:[^"\\]|\\.)*")', re.DOTALL)
_BARE_INT_KEY = re.compile(rb"([{,]\s*)(-?\d+)(\s*:)")
_NON_ASCII = re.compile(r"[^\x00-\x7f]")

dumps = orjson.dumps


def quote_bare_keys(data: bytes) -> bytes:
    """Quote bare integer object keys outside strings (`{0:"a"}` -> `{"0":"a"}`)."""
    parts = _JSON_STRING.split(data)
    for index in range(0, len(parts), 2):  # even indexes are outside strings
        parts[index] = _BARE_INT_KEY.sub(rb'\1"\2"\3', parts[index])
    return b"".join(parts)


def loads(data: bytes | bytearray | memoryview, what: str) -> Any:
    """Parse a body, tolerating fastjson's bare integer keys; errors name `what`."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        error = exc
    raw = bytes(data)
    fixed = quote_bare_keys(raw)
    if fixed != raw:
        try:
            return orjson.loads(fixed)
        except orjson.JSONDecodeError:
            pass
    raise ProtocolError(f"{what} is not valid JSON: {error}")


def _escape_char(match: re.Match[str]) -> str:
    code = ord(match.group())
    if code > 0xFFFF:
        code -= 0x10000
        return "\\u%04x\\u%04x" % (0xD800 + (code >> 10), 0xDC00 + (code & 0x3FF))
    return "\\u%04x" % code


def browser_compatible(data: bytes) -> bytes:
    """fastjson's BrowserCompatible escaping: `/` -> `\\/`, non-ASCII -> `\\uXXXX`.

    Safe on a whole JSON text: `/` and non-ASCII characters can only occur inside strings.
    """
    data = data.replace(b"/", b"\\/")
    if data.isascii():
        return data
    return _NON_ASCII.sub(_escape_char, data.decode("utf-8")).encode("ascii")


def int_key_map(mapping: Mapping[int, Any], standard: bool) -> bytes:
    """An integer-keyed map: bare keys (legacy) or quoted keys (standard), sorted by key."""
    key_format = b'"%d":' if standard else b"%d:"
    return b"{" + b",".join(key_format % key + orjson.dumps(value) for key, value in sorted(mapping.items())
                            if value is not None) + b"}"


def expect(value: Any, kind: type | tuple[type, ...], what: str) -> Any:
    """`value` if it is of `kind` (bool is never an int here), else a ProtocolError naming `what`."""
    if isinstance(value, kind) and not (isinstance(value, bool) and kind is int):
        return value
    raise ProtocolError(f"{what} must be {getattr(kind, '__name__', kind)}, got {type(value).__name__}")


def get_int(obj: dict, key: str, default: int, what: str) -> int:
    value = obj.get(key)
    if value is None:
        return default
    if isinstance(value, str):
        try:
            return int(value)
        except ValueError:
            pass
    return expect(value, int, f"{what}.{key}")


def get_str(obj: dict, key: str, what: str) -> str | None:
    value = obj.get(key)
    return None if value is None else expect(value, str, f"{what}.{key}")


def get_bool(obj: dict, key: str, what: str) -> bool:
    value = obj.get(key)
    if value is None:
        return False
    if isinstance(value, str):
        return value.lower() == "true"
    return expect(value, bool, f"{what}.{key}")


def get_dict(obj: dict, key: str, what: str) -> dict:
    value = obj.get(key)
    return {} if value is None else expect(value, dict, f"{what}.{key}")


def get_list(obj: dict, key: str, what: str) -> list:
    value = obj.get(key)
    return [] if value is None else expect(value, list, f"{what}.{key}")
