"""The replication bus's messages and ordering rules (sans-IO).

Each worker publishes one log: every write it applied (the request frame as its connection's
transport carries it, and the connection), every close of a connection that carried one, and a
tick every TICK_SECONDS. Messages carry their origin's index, incarnation (`generation`: the
supervisor's spawn count, so a restarted worker's log is told apart from its predecessor's) and
sequence number; a log starts at 1 in every incarnation. A tick repeats the origin's last
sequence number, so a lost message is noticed within a tick even when no write follows, and lists
the incarnations the origin hears, which is how a starting worker knows its siblings hear it.

`Positions` decides, per message, whether to apply it, skip it (already applied, or an old
incarnation's) or report a gap (something before it never arrived).
"""
from __future__ import annotations

import enum
import struct
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from namesrv.channel import Channel
from namesrv.protocol.errors import ProtocolError
from namesrv.remoting.endpoints import TCP_TRANSPORT, ZMQ_TRANSPORT

WRITE, CLOSE, TICK = 1, 2, 3
#: kind, origin index, origin generation, sequence number, transport of the origin's connection.
_HEADER = struct.Struct(">BBIQB")
#: WRITE and CLOSE: after the header, the connection's ident and peer address, each length-prefixed.
_IDENT_LENGTH = struct.Struct(">B")
_ADDR_LENGTH = struct.Struct(">H")
_HEARD = struct.Struct(">BI")
_TRANSPORTS = (TCP_TRANSPORT, ZMQ_TRANSPORT)
_TRANSPORT_CODES = {transport: code for code, transport in enumerate(_TRANSPORTS)}
#: origin index, origin generation, transport code: the prefix of a stand-in channel's ident.
_STAND_IN = struct.Struct(">BIB")
#: Origin indexes are one byte.
MAX_WORKERS = 255


class SiblingChannel(Channel):
    """A connection of another worker process, as this worker's route table records it.

    Its ident is the origin's index, generation and transport followed by the origin's ident, so
    it never equals a connection of this process (ZeroMQ's STREAM routing ids are 5 bytes) nor
    another incarnation's; its transport is "tcp" so that closing it (expiry does) is a lookup
    miss in the reactor, a no-op. The peer address is the origin's, for the admin guard and logs.
    """

    __slots__ = ()

    @classmethod
    def stand_in(cls, origin: int, generation: int, channel: Channel) -> SiblingChannel:
        ident = _STAND_IN.pack(origin, generation, _TRANSPORT_CODES[channel.transport]) + channel.ident
        return cls(TCP_TRANSPORT, ident, channel.remote_addr)

    @property
    def origin(self) -> int:
        return self.ident[0]

    def __str__(self) -> str:
        return f"worker{self.origin}:{self.remote_addr or self.ident[_STAND_IN.size:].hex()}"


@dataclass(frozen=True, slots=True)
class BusMessage:
    kind: int
    origin: int
    generation: int
    seq: int
    #: WRITE and CLOSE: the origin's connection.
    channel: Channel | None = None
    #: WRITE: the request, one frame of the connection's transport (remoting: no length prefix).
    frame: bytes | None = None
    #: TICK: the (index, generation) of every worker the origin hears.
    heard: frozenset[tuple[int, int]] = frozenset()


def encode_write(origin: int, generation: int, seq: int, frame: bytes, channel: Channel) -> bytes:
    """One ZeroMQ frame (a message of several costs several times as much to send and receive)."""
    return b"".join((_HEADER.pack(WRITE, origin, generation, seq, _TRANSPORT_CODES[channel.transport]),
                     _connection(channel), frame))


def encode_close(origin: int, generation: int, seq: int, channel: Channel) -> bytes:
    return _HEADER.pack(CLOSE, origin, generation, seq, _TRANSPORT_CODES[channel.transport]) + _connection(channel)


def encode_tick(origin: int, generation: int, seq: int, heard: Iterable[tuple[int, int]]) -> bytes:
    return _HEADER.pack(TICK, origin, generation, seq, 0) + b"".join(_HEARD.pack(*entry) for entry in heard)


def _connection(channel: Channel) -> bytes:
    addr = channel.remote_addr.encode()
    return b"".join((_IDENT_LENGTH.pack(len(channel.ident)), channel.ident, _ADDR_LENGTH.pack(len(addr)), addr))


def decode(data: bytes) -> BusMessage:
    """One bus message; ProtocolError if it is not one."""
    try:
        kind, origin, generation, seq, transport = _HEADER.unpack_from(data)
        at = _HEADER.size
        if kind == TICK:
            return BusMessage(kind, origin, generation, seq, heard=frozenset(_HEARD.iter_unpack(data[at:])))
        if kind in (WRITE, CLOSE):
            (ident_length,) = _IDENT_LENGTH.unpack_from(data, at)
            at += _IDENT_LENGTH.size
            ident = data[at:at + ident_length]
            at += ident_length
            (addr_length,) = _ADDR_LENGTH.unpack_from(data, at)
            at += _ADDR_LENGTH.size
            addr = data[at:at + addr_length].decode()
            at += addr_length
            if len(ident) == ident_length and len(data) >= at and (kind == WRITE or len(data) == at):
                channel = Channel(_TRANSPORTS[transport], ident, addr)
                return BusMessage(kind, origin, generation, seq, channel, data[at:] if kind == WRITE else None)
    except (struct.error, IndexError, UnicodeDecodeError) as exc:
        raise ProtocolError(f"malformed bus message: {exc}") from None
    raise ProtocolError(f"malformed bus message of kind {data[:1].hex()} and {len(data)} bytes")


class Verdict(enum.Enum):
    APPLY = "apply"
    SKIP = "skip"
    GAP = "gap"


class Positions:
    """Per origin, the incarnation and last sequence number applied: what to do with the next message."""

    def __init__(self, marks: Mapping[int, tuple[int, int]] | None = None) -> None:
        self._at: dict[int, tuple[int, int]] = dict(marks or {})

    def admit(self, message: BusMessage) -> Verdict:
        """APPLY (and move past it), SKIP or GAP (`message` is not the next of its log)."""
        origin, generation, seq = message.origin, message.generation, message.seq
        position = self._at.get(origin)
        if position is None or generation > position[0]:
            last = 0  # a new incarnation: its log starts at 1
        elif generation < position[0]:
            return Verdict.SKIP  # a previous incarnation's leftovers
        else:
            last = position[1]
        if message.kind == TICK:
            if seq > last:
                return Verdict.GAP
            self._at[origin] = (generation, last)
            return Verdict.SKIP
        if seq <= last:
            return Verdict.SKIP
        if seq > last + 1:
            return Verdict.GAP
        self._at[origin] = (generation, seq)
        return Verdict.APPLY

    def marks(self) -> dict[int, tuple[int, int]]:
        """origin -> (generation, last sequence number applied)."""
        return dict(self._at)

    def last(self, origin: int) -> tuple[int, int] | None:
        return self._at.get(origin)
