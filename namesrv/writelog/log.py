"""The write log of worker processes: its messages and its one ordering rule (sans-IO).

Workers never apply a write on their own. They *propose* it to the supervisor's sequencer
(namesrv.writelog.sequencer), which numbers every proposal of every worker into one log, stamps
it with its own clock, and publishes it to all workers; each applies the log in order, and the
worker that took the request answers it once it has applied it. So every worker sees the same
writes in the same order and stamps the same liveness times: they cannot drift apart.

Kinds of entry: a write (`WRITE`: its request code and the `Change` its handler's `prepare` made
of it where it arrived, so that every worker only applies it), the close of a connection that
carried one (`CLOSE`), and a broker found expired by some worker's scan (`EXPIRE`, applied only
if the broker was not refreshed since). A `TICK` repeats the last
sequence number, so a subscriber notices a lost entry within a tick even when no write follows.
Messages are msgpack arrays; they only ever travel between one server's own processes.
"""
from __future__ import annotations

import enum
import struct
from dataclasses import dataclass, fields, is_dataclass

import msgpack

from namesrv.channel import Channel
from namesrv.errors import ProtocolError
from namesrv.remoting.codecs import TCP_TRANSPORT, ZMQ_TRANSPORT

WRITE, CLOSE, EXPIRE, TICK, GONE = 1, 2, 3, 4, 5
#: Origin indexes fit one byte (stand-in channel idents start with it).
MAX_WORKERS = 255
#: origin index, origin generation, transport code: the prefix of a stand-in channel's ident.
_STAND_IN = struct.Struct(">BIB")
_TRANSPORT_CODES = {TCP_TRANSPORT: 0, ZMQ_TRANSPORT: 1}


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

    @property
    def incarnation(self) -> tuple[int, int]:
        """(origin index, origin generation): the worker process the connection belonged to."""
        origin, generation, _ = _STAND_IN.unpack_from(self.ident)
        return origin, generation

    @property
    def origin_channel(self) -> Channel:
        """The connection as its own worker knows it."""
        code = _STAND_IN.unpack_from(self.ident)[2]
        transport = next(name for name, value in _TRANSPORT_CODES.items() if value == code)
        return Channel(transport, self.ident[_STAND_IN.size:], self.remote_addr)

    def __str__(self) -> str:
        return f"worker{self.origin}:{self.remote_addr or self.ident[_STAND_IN.size:].hex()}"


@dataclass(frozen=True, slots=True)
class Proposal:
    """What a worker asks the sequencer to put in the log."""

    kind: int
    origin: int
    generation: int
    #: The origin's own number for it: how the origin finds the request to answer.
    proposal_id: int
    channel: Channel
    #: WRITE: `pack_write(code, change)`; EXPIRE: msgpack [clusterName, brokerAddr, lastUpdateTimestamp]; CLOSE and
    #: GONE (from the supervisor: worker `origin` of `generation` exited, its connections with it): empty.
    payload: bytes

    def encode(self) -> bytes:
        channel = self.channel
        return msgpack.packb((self.kind, self.origin, self.generation, self.proposal_id, channel.transport,
                              channel.ident, channel.remote_addr, self.payload))

    @classmethod
    def decode(cls, data: bytes) -> Proposal:
        try:
            kind, origin, generation, proposal_id, transport, ident, addr, payload = msgpack.unpackb(data)
            return cls(kind, origin, generation, proposal_id, Channel(transport, ident, addr), payload)
        except (ValueError, TypeError, msgpack.UnpackException) as exc:
            raise ProtocolError(f"malformed proposal: {exc}") from None


@dataclass(frozen=True, slots=True)
class Entry:
    """One numbered log entry (or a TICK: `seq` is the last number given, nothing else is set)."""

    seq: int
    kind: int
    #: The sequencer's clock (ms) when it numbered the entry: the time every worker stamps it with.
    time_ms: int = 0
    proposal: Proposal | None = None
    #: A persisted write the sequencer refused (it is not applied anywhere): (response code, remark).
    refused: tuple[int, str | None] | None = None

    def encode(self) -> bytes:
        if self.kind == TICK:
            return msgpack.packb((TICK, self.seq))
        return msgpack.packb((self.kind, self.seq, self.time_ms, self.proposal.encode(), self.refused))

    @classmethod
    def decode(cls, data: bytes) -> Entry:
        try:
            fields = msgpack.unpackb(data)
            if fields[0] == TICK:
                return cls(fields[1], TICK)
            kind, seq, time_ms, proposal, refused = fields
            return cls(seq, kind, time_ms, Proposal.decode(proposal), None if refused is None else tuple(refused))
        except (ValueError, TypeError, IndexError, msgpack.UnpackException) as exc:
            raise ProtocolError(f"malformed log entry: {exc}") from None


def pack_write(code: int, change: object) -> bytes:
    """A WRITE proposal's payload: the request code and its prepared change (a dataclass in it as the
    list of its fields: its handler's `WriteHandler.revive` makes it again)."""
    return msgpack.packb((code, change), default=_fields_of)


def _fields_of(value: object) -> list:
    if is_dataclass(value) and not isinstance(value, type):
        return [getattr(value, field.name) for field in fields(value)]
    raise TypeError(f"a write's change cannot carry {type(value).__name__}")


def unpack_write(payload: bytes) -> tuple[int, object]:
    """(code, change) of a WRITE payload (arrays come back as lists); ProtocolError if it is not one."""
    try:
        code, change = msgpack.unpackb(payload)
    except (ValueError, TypeError, msgpack.UnpackException) as exc:
        raise ProtocolError(f"malformed write: {exc}") from None
    if type(code) is not int:
        raise ProtocolError(f"malformed write: request code {code!r}")
    return code, change


class Verdict(enum.Enum):
    APPLY = "apply"
    SKIP = "skip"
    GAP = "gap"


def admit(position: int, entry: Entry) -> Verdict:
    """What a worker that applied the log up to `position` does with `entry`."""
    if entry.kind == TICK:
        return Verdict.GAP if entry.seq > position else Verdict.SKIP
    if entry.seq <= position:
        return Verdict.SKIP
    return Verdict.APPLY if entry.seq == position + 1 else Verdict.GAP
