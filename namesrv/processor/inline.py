"""The requests the reactor answers itself, straight from their frames, no executor involved.

Two kinds of request dominate a NameServer's traffic and almost always have an answer ready, or
one quickly made: route queries whose encoded route is cached (`RouteQueryFastPath`) and
brokers' registrations of small topic tables, unchanged or not (`RegistrationFastPath`). For
them the hand-off to a worker thread and back, and the header parse, cost more than the answer.
`InlineAnswers.answer` reads the header once per peer and request shape (`SeenHeaders`; a repeat
costs a lookup), then lets the matching fast path answer or step aside (None): everything else,
and every case those paths do not own, takes the regular path through the executors.

A broker's registration header also differs from its last one whenever its body does: in the
bodyCrc32 value only. Such a JSON header is not parsed again but rebound (`crc_free`,
`HeaderReader.shapes`), once parsing has shown that those digits are where its bodyCrc32 is read from.
"""
from __future__ import annotations

import time
from dataclasses import replace
from typing import NamedTuple

from namesrv import fastpath
from namesrv.caches import BoundedMemo
from namesrv.channel import Channel
from namesrv.processor.broker_handlers import RegistrationHeader
from namesrv.processor.context import HandlerContext
from namesrv.processor.header import BadRequest
from namesrv.processor.register_fast_path import Process, RegistrationFastPath
from namesrv.processor.requests import BY_CODE
from namesrv.processor.requests import Inline as RequestInline
from namesrv.processor.route_query import NOT_PLAIN, RouteQuery, RouteQueryFastPath, route_query_of
from namesrv.processor.seen_headers import HEADER_LENGTH_MASK, INT32, JSON_FIELD, SeenHeaders
from namesrv.protocol.codes import INT32_MAX, RequestCode, ResponseCode
from namesrv.protocol.command import RemotingCommand
from namesrv.errors import ProtocolError
from namesrv.protocol.json_header import decode_json_header
from namesrv.request_stats import FAST_PATH, RequestTally

#: The codes the inline paths answer, as plain ints (an IntEnum member costs more to look up and hash).
_ROUTE_QUERY = int(RequestCode.GET_ROUTEINFO_BY_TOPIC)
_REGISTRATION = int(RequestCode.REGISTER_BROKER)
_SUCCESS = int(ResponseCode.SUCCESS)
#: Bounds of the registration header shapes (brokers x header shapes; emptied when full).
SHAPES = 4096
SHAPE_BYTES = 8 * 1024 * 1024
_CRC_FIELD = b'"bodyCrc32":"'


class PreparedRegistration(NamedTuple):
    """A REGISTER_BROKER header read once: its fields for the route table, and the request minus opaque and body."""

    header: RegistrationHeader
    request: RemotingCommand

    def with_(self, opaque: int, body: bytes | None, wire_size: int) -> RemotingCommand:
        """The request these header bytes and `body` decode to (RemotingCommand.decode of a frame of
        `wire_size` bytes without the parse), its header read."""
        r = self.request
        request = RemotingCommand(r.code, language=r.language, version=r.version, opaque=opaque, flag=r.flag,
                                  remark=r.remark, ext_fields=r.ext_fields, body=body, serialize_type=r.serialize_type,
                                  wire_size=wire_size)
        request.keep_typed_header(self.header)
        return request

    def with_crc(self, digits: bytes) -> PreparedRegistration:
        """The same header with bodyCrc32 `digits` (a non-negative int32 as Java writes it)."""
        text = digits.decode("ascii")
        r, h = self.request, self.header
        request = RemotingCommand(r.code, language=r.language, version=r.version, flag=r.flag, remark=r.remark,
                                  ext_fields={**r.ext_fields, "bodyCrc32": text}, serialize_type=r.serialize_type)
        return PreparedRegistration(replace(h, body_crc32=int(text)), request)


def crc_free(key: bytes) -> tuple[bytes, bytes] | None:
    """(`key` without its bodyCrc32 value, that value's digits) when `key` holds one `"bodyCrc32":"`
    followed by a non-negative int32 written as Java writes it and a closing quote; else None."""
    head, found, rest = key.partition(_CRC_FIELD)
    if not found or _CRC_FIELD in rest:
        return None
    digits, quote, tail = rest.partition(b'"')
    if (not quote or not digits.isdigit() or len(digits) > 10 or (digits[0] == 48 and len(digits) > 1)
            or int(digits) > INT32_MAX):
        return None
    return head + found + quote + tail, digits


#: What a header asks of the inline paths: a route query, a registration, or None (not theirs).
Inline = RouteQuery | PreparedRegistration | None


class InlineAnswers:
    """`answer(frame, channel)`: the whole response frame, or the request to dispatch (decoded, or None:
    decode it). Reactor thread only. What it answers is counted in `tally` by `answer_all`, once
    per chunk: one clock reading, whatever the number of frames."""

    def __init__(self, ctx: HandlerContext, process: Process, registrations: bool = True) -> None:
        """`registrations=False`: registrations are only read here, never applied (worker processes
        apply every write in the write log's order, namesrv.writelog)."""
        self.route_queries = RouteQueryFastPath(ctx)
        self.registrations = RegistrationFastPath(process) if registrations else None
        self.seen: SeenHeaders[Inline] = SeenHeaders(HeaderReader())
        #: The answers given here (namesrv.request_stats; the controller counts it in the server's totals).
        self.tally = RequestTally()
        #: Answers given since the last count: route queries, and registrations by response code.
        self._routes_answered = 0
        self._registrations_answered: dict[int, int] = {}
        #: Kept: counting a chunk of cached route answers must cost no more than the clock reading.
        self._route_slot = self.tally.slot(_ROUTE_QUERY, _SUCCESS, FAST_PATH)

    def answer_all(self, frames: list[bytes], channel: Channel,
                   arrived: float) -> tuple[list[bytes], list[RemotingCommand]]:
        """The frames of one received chunk, taken off the socket at `arrived` (time.monotonic()):
        (answers, the requests to dispatch, decoded).

        Route queries answered from the cache with JSON headers seen before, most of the traffic,
        are answered for the whole chunk at once: every frame's key and opaque in one scan, the
        cached bodies looked up, the answers stamped in one call. The other frames go through
        `answer` one by one.
        """
        routes = self.route_queries
        replies: list[bytes] = []
        if routes.serving():
            keys, opaques = fastpath.json_opaque_keys(frames)
            bodies = routes.cached_bodies(map(self.seen.json.table.get, keys))
            replies = fastpath.stamp_frames(routes.json.head, routes.json.tail, opaques, bodies)
            self._routes_answered += len(replies)
            if len(replies) == len(frames):
                self._count(arrived)
                return replies, []
            if replies:
                frames = [frame for frame, body in zip(frames, bodies) if body is None]
        commands: list[RemotingCommand] = []
        for frame in frames:
            reply = self.answer(frame, channel)
            if reply is None:
                commands.append(RemotingCommand.decode(frame))
            elif type(reply) is bytes:
                replies.append(reply)
            else:
                commands.append(reply)  # decoded here, left to the regular path
        if replies:
            self._count(arrived)
        return replies, commands

    def _count(self, arrived: float) -> None:
        """Count the answers given since the last count as queued now."""
        seconds = time.monotonic() - arrived
        if self._routes_answered:
            self._route_slot.add(seconds, self._routes_answered)
            self._routes_answered = 0
        if self._registrations_answered:
            for response, count in self._registrations_answered.items():
                self.tally.add(_REGISTRATION, response, FAST_PATH, seconds, count)
            self._registrations_answered.clear()

    def answer(self, frame: bytes, channel: Channel) -> bytes | RemotingCommand | None:
        """`frame` as split_frames yields it (no length prefix). A registration that is not answered
        here is handed back decoded, its body's CRC32 computed: the regular path needs neither again."""
        if len(frame) < 4:
            return None
        field = INT32.unpack_from(frame)[0]
        body_at = 4 + (field & HEADER_LENGTH_MASK)
        if body_at > len(frame):
            return None
        serialize_field = field & ~HEADER_LENGTH_MASK
        read = self.seen.read(serialize_field, frame[4:body_at])
        if read is None or read[1] is None:
            return None
        opaque, what = read
        if type(what) is RouteQuery:
            reply = self.route_queries.answer(serialize_field, opaque, what)
            if reply is not None:
                self._routes_answered += 1
            return reply
        request = what.with_(opaque, frame[body_at:] or None, len(frame))
        if self.registrations is None:
            return request
        answered = self.registrations.answer(request, channel)
        if answered is None:
            return request
        reply, response = answered
        self._registrations_answered[response] = self._registrations_answered.get(response, 0) + 1
        return reply


class HeaderReader:
    """`read_header`, except that a JSON registration header differing from one read before in its
    bodyCrc32 value only (the broker's next DataVersion) is rebound, not parsed. Reactor thread only."""

    def __init__(self) -> None:
        #: JSON registration headers by `crc_free` key, each the first one parsed.
        self.shapes: BoundedMemo[bytes, PreparedRegistration] = BoundedMemo(SHAPES, SHAPE_BYTES)

    def __call__(self, serialize_field: int, header: bytes) -> tuple[int, Inline] | None:
        shape = split = None
        if serialize_field == JSON_FIELD:
            split = fastpath.json_opaque_key(header)
            if split is not None and split[1] is not None:
                shape = crc_free(split[0])
        if shape is not None:
            known = self.shapes.table.get(shape[0])
            if known is not None:
                return split[1], known.with_crc(shape[1])
        read = read_header(serialize_field, header)
        if shape is not None and read is not None and read[0] == split[1] and _rebinds(header, shape[1], read[1]):
            self.shapes.remember(shape[0], read[1], 2 * len(shape[0]))
        return read


def _rebinds(header: bytes, digits: bytes, what: Inline) -> bool:
    """Does the parser read `what`'s bodyCrc32 from exactly these `digits` of `header`, and nothing
    else from them? Then another header differing in them only reads as `what.with_crc(...)`.
    Checked by parsing the header again with other digits (a duplicate key, say, would fail it)."""
    if type(what) is not PreparedRegistration or what.header.body_crc32 != int(digits):
        return False
    other = (b"2" if digits[:1] == b"1" else b"1") + b"0" * (len(digits) - 1)
    again = read_header(JSON_FIELD, header.replace(_CRC_FIELD + digits + b'"', _CRC_FIELD + other + b'"', 1))
    return again is not None and again[1] == what.with_crc(other)


def read_header(serialize_field: int, header: bytes) -> tuple[int, Inline] | None:
    """(opaque, what the inline paths make of it), or None if the header does not decode.

    The header is read by its codec's one parser, the regular path's own, and the request table's
    `inline` column says which inline path (if any) may answer the code.
    """
    decode = decode_json_header if serialize_field == JSON_FIELD else fastpath.decode_binary_header
    try:
        code, language, version, opaque, flag, remark, ext = decode(header)
    except ProtocolError:
        return None
    spec = BY_CODE.get(code)
    if spec is None or spec.inline is None or flag & NOT_PLAIN:
        return opaque, None
    if spec.inline is RequestInline.ROUTE_QUERY:
        return opaque, route_query_of(version, ext)
    request = RemotingCommand(code, language=language, version=version, flag=flag, remark=remark, ext_fields=ext,
                              serialize_type=serialize_field >> 24)
    try:
        return opaque, PreparedRegistration(RegistrationHeader.read(request), request)
    except BadRequest:
        return opaque, None
