"""JSON as RocketMQ bodies use it: fastjson's two output flavours and its tolerant input.

Legacy flavour writes integer map keys bare (`{0:"addr"}`, not JSON); the standard flavour
quotes and sorts them and escapes like fastjson's BrowserCompatible feature. Input accepts
both. The models in `topic` and `route` compose their output from the pieces here.
"""
from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import orjson

from namesrv import fastpath
from namesrv.errors import ProtocolError

#: A JSON string, or an unterminated one running to the end: every quote starts a match, so
#: splitting is linear even on hostile input such as `"\"\"\"...` with no closing quote.
_JSON_STRING = re.compile(rb'("[^"\\]*(?:\\.[^"\\]*)*(?:"|\\?\Z))', re.DOTALL)
_BARE_INT_KEY = re.compile(rb"([{,]\s*)(-?\d+)(\s*:)")
_BROWSER_UNSAFE = re.compile(r"[^\x00-\x7e]")  # fastjson escapes every char >= 0x7F
_CONTROL_ESCAPE = re.compile(rb"\\(?:\\|u00([0-9a-f]{2}))")  # orjson's `\u001f` (and `\\` to skip)
_DECIMAL = re.compile(r"[+-]?[0-9]+")

dumps = orjson.dumps
#: A body larger than this may hold at most one JSON array or object per CONTAINER_SPACING bytes.
#: Each costs 56-64 bytes once built, so `[[],[],...]` would build 21 bytes per byte received
#: (16 MiB: 377 MiB and a second of CPU); a real body has one per 40-200 bytes. What remains,
#: scalars, builds at most about 12 bytes per byte (`["ab","ab",...]`). Bodies up to 64 KiB (the
#: most the reactor decodes inline) are not counted: they build at most about 1.4 MB, and the count
#: cost a changed registration 9 % more instructions (`python -m bench request-instructions`).
PARSE_COST_FREE_BYTES = 64 * 1024
CONTAINER_SPACING = 16


def check_parse_cost(data: bytes | bytearray, what: str) -> None:
    """ProtocolError, before anything is built, if `data` holds more arrays and objects than its
    size allows (counted with the brackets inside strings: an upper bound, at C speed)."""
    if len(data) > PARSE_COST_FREE_BYTES:
        containers = fastpath.count_containers(data)
        if containers > len(data) // CONTAINER_SPACING:
            raise ProtocolError(f"{what} holds {containers} JSON arrays and objects in {len(data)} bytes, more "
                                f"than one per {CONTAINER_SPACING} bytes")


def quote_bare_keys(data: bytes) -> bytes:
    """Quote bare integer object keys outside strings (`{0:"a"}` -> `{"0":"a"}`)."""
    parts = _JSON_STRING.split(data)
    for index in range(0, len(parts), 2):  # even indexes are outside strings
        parts[index] = _BARE_INT_KEY.sub(rb'\1"\2"\3', parts[index])
    return b"".join(parts)


def loads(data: bytes | bytearray, what: str) -> Any:
    """Parse a body, tolerating fastjson's bare integer keys; errors name `what`."""
    check_parse_cost(data, what)
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


def as_int(value: object, bits: int = 64) -> int | None:
    """`value` as Java reads an int (bits=32) or long field: a JSON integer or a decimal string
    (optional sign, ASCII digits, as `Long.parseLong`) within range; None for anything else."""
    if type(value) is int:
        limit = 1 << (bits - 1)
        return value if -limit <= value < limit else None
    if isinstance(value, str):
        if len(value) > 24 or not _DECIMAL.fullmatch(value):
            return None
        value = int(value)
    elif not isinstance(value, int) or isinstance(value, bool):
        return None
    limit = 1 << (bits - 1)
    return value if -limit <= value < limit else None


def _escape_char(match: re.Match[str]) -> str:
    code = ord(match.group())
    if code > 0xFFFF:  # Java strings are UTF-16: one escape per surrogate
        code -= 0x10000
        return "\\u%04X\\u%04X" % (0xD800 + (code >> 10), 0xDC00 + (code & 0x3FF))
    return "\\u%04X" % code


def _upper_hex(match: re.Match[bytes]) -> bytes:
    return match.group() if match.group(1) is None else b"\\u00" + match.group(1).upper()


def browser_compatible(data: bytes) -> bytes:
    """fastjson's BrowserCompatible escaping of orjson output: `/` -> `\\/`, chars >= 0x7F ->
    `\\uXXXX`, and control escapes in fastjson's upper-case hex (`\\u001F`).

    Safe on a whole JSON text: `/`, DEL and non-ASCII characters can only occur inside strings.
    """
    data = data.replace(b"/", b"\\/")
    if b"\\u00" in data:
        data = _CONTROL_ESCAPE.sub(_upper_hex, data)
    if data.isascii() and b"\x7f" not in data:
        return data
    return _BROWSER_UNSAFE.sub(_escape_char, data.decode("utf-8")).encode("ascii")


def sorted_maps(value: Any) -> Any:
    """`value` with every object's keys sorted as the standard flavour writes them (fastjson's
    MapSortField; bean properties are alphabetical anyway): integer keys numerically, others as text."""
    if isinstance(value, dict):
        numbers = [as_int(key) for key in value]
        if None in numbers:
            order = sorted(value)
        else:
            order = [key for _, key in sorted(zip(numbers, value))]
        return {key: sorted_maps(value[key]) for key in order}
    if isinstance(value, list):
        return [sorted_maps(item) for item in value]
    return value


def int_key_map(mapping: Mapping[int, Any], standard: bool) -> bytes:
    """An integer-keyed map: bare keys (legacy) or quoted keys (standard), sorted by key."""
    key_format = b'"%d":' if standard else b"%d:"
    return b"{" + b",".join(key_format % key + orjson.dumps(value) for key, value in sorted(mapping.items())
                            if value is not None) + b"}"


def expect(value: Any, kind: type | tuple[type, ...], what: str, *more: object) -> Any:
    """`value` if it is of `kind` (bool is never an int here), else a ProtocolError naming it: `what`
    and then `more` (joined only for the error: a decode checks thousands of values that pass)."""
    if type(value) is kind or (isinstance(value, kind) and (kind is not int or not isinstance(value, bool))):
        return value
    name = "".join(map(str, (what, *more)))
    raise ProtocolError(f"{name} must be {getattr(kind, '__name__', kind)}, got {type(value).__name__}")


def get_int(obj: dict, key: str, default: int, what: str, bits: int = 64) -> int:
    """An int (bits=32) or long field; like fastjson, a decimal string is accepted too."""
    value = obj.get(key)
    if value is None:
        return default
    if type(value) is int and -(1 << (bits - 1)) <= value < 1 << (bits - 1):
        return value
    number = as_int(value, bits)
    if number is None:
        raise ProtocolError(f"{what}.{key} must be a {bits}-bit integer, got {value!r:.60}")
    return number


def get_str(obj: dict, key: str, what: str) -> str | None:
    value = obj.get(key)
    return value if value is None or type(value) is str else expect(value, str, what, ".", key)


def get_bool(obj: dict, key: str, what: str) -> bool:
    value = obj.get(key)
    if value is None:
        return False
    if isinstance(value, str):
        return value.lower() == "true"
    return expect(value, bool, what, ".", key)


def get_dict(obj: dict, key: str, what: str) -> dict:
    value = obj.get(key)
    if type(value) is dict:
        return value
    return {} if value is None else expect(value, dict, what, ".", key)


def get_list(obj: dict, key: str, what: str) -> list:
    value = obj.get(key)
    if type(value) is list:
        return value
    return [] if value is None else expect(value, list, what, ".", key)


def string_list(value: Any, what: str) -> list[str]:
    """A JSON array of strings (broker names, server addresses), else a ProtocolError naming `what`."""
    return [item if type(item) is str else expect(item, str, what, "[]") for item in expect(value, list, what)]
