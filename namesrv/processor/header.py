"""Typed reading of a request's extFields, as RocketMQ's decodeCommandCustomHeader does, but loud.

RocketMQ silently leaves a field null when it is missing or does not parse (reference 1.7). Fields
a handler can do without stay tolerated that way here; a field it cannot do without, or a number
that does not parse, becomes a `BadRequest` whose message names the field, answered SYSTEM_ERROR.
"""
from __future__ import annotations

import re

from namesrv.protocol.codes import INT32_MAX, INT32_MIN
from namesrv.protocol.command import RemotingCommand

_INTEGER = re.compile(r"[+-]?[0-9]+")
_RANGES = {32: ("Integer", INT32_MIN, INT32_MAX), 64: ("Long", -(2 ** 63), 2 ** 63 - 1)}
_MAX_DIGITS = len(str(2 ** 63))  # significant digits of the widest value in any range


class BadRequest(Exception):
    """A request the handler cannot serve; its message is the SYSTEM_ERROR remark."""


class RequestHeader:
    """Read-only typed view of `request.ext_fields`."""

    __slots__ = ("_ext",)

    def __init__(self, request: RemotingCommand) -> None:
        self._ext = request.ext_fields or {}

    def text(self, name: str) -> str | None:
        return self._ext.get(name)

    def required_text(self, name: str) -> str:
        value = self._ext.get(name)
        if value is None:
            raise BadRequest(f"missing request header field: {name}")
        return value

    def integer(self, name: str, bits: int = 64) -> int | None:
        """A Java Integer (32) or Long (64): optional sign and ASCII digits, in range."""
        value = self._ext.get(name)
        if value is None:
            return None
        kind, low, high = _RANGES[bits]
        # Leading zeros are allowed (as Long.parseLong does) but never counted: past 19 significant
        # digits no value is in range, and int() refuses strings past 4300 digits anyway.
        significant = value.lstrip("+-").lstrip("0")
        if _INTEGER.fullmatch(value) is None or len(significant) > _MAX_DIGITS:
            raise BadRequest(f"request header field {name} is not a valid {kind}: {value[:64]!r}")
        number = -int(significant or "0") if value.startswith("-") else int(significant or "0")
        if not low <= number <= high:
            raise BadRequest(f"request header field {name} is not a valid {kind}: {value[:64]!r}")
        return number

    def required_integer(self, name: str, bits: int = 64) -> int:
        value = self.integer(name, bits)
        if value is None:
            raise BadRequest(f"missing request header field: {name}")
        return value

    def boolean(self, name: str) -> bool | None:
        """Java's Boolean.parseBoolean: "true" in any case is true, anything else false; absent is None."""
        value = self._ext.get(name)
        return None if value is None else value.lower() == "true"
