"""The requests the reactor answers itself, straight from their frames, no executor involved.

Two kinds of request dominate a NameServer's traffic and almost always have an answer ready, or
one quickly made: route queries whose encoded route is cached (`RouteQueryFastPath`) and
brokers' writes: registrations of small topic tables, unchanged or not, heartbeats and
data-version queries (`WriteFastPath`). For them the hand-off to a worker thread and back, and
the header parse, cost more than the answer.
`InlineAnswers.answer` reads the header once per peer and request shape (`SeenHeaders`; a repeat
costs a lookup), then lets the matching fast path answer or step aside (None): everything else,
and every case those paths do not own, takes the regular path through the executors.

A broker's registration header also differs from its last one whenever its body does: in the
bodyCrc32 value only. Such a JSON header is not parsed again: the one first parsed of its shape
(`fastpath.body_crc_key`, `HeaderReader.shapes`) is taken with the new value
(`PreparedWrite.request_for`), once parsing has shown that those digits are where its bodyCrc32 is
read from. It is not remembered: a new DataVersion's header is seen once, and the shape's kept
replay is current for the next heartbeat that repeats it.
"""
from __future__ import annotations

import time
from namesrv import fastpath
from namesrv.caches import BoundedMemo
from namesrv.channel import Channel
from namesrv.processor.broker_handlers import RegistrationHeader
from namesrv.processor.context import HandlerContext
from namesrv.processor.header import BadRequest
from namesrv.processor.write_fast_path import PreparedWrite, Processor, WriteFastPath
from namesrv.processor.requests import BY_CODE
from namesrv.processor.requests import Inline as RequestInline
from namesrv.processor.route_query import NOT_PLAIN, RouteQuery, RouteQueryFastPath, route_query_of
from namesrv.processor.seen_headers import HEADER_LENGTH_MASK, INT32, JSON_FIELD, SeenHeaders, single_opaque
from namesrv.protocol.codes import RequestCode, ResponseCode
from namesrv.protocol.command import RemotingCommand
from namesrv.errors import ProtocolError
from namesrv.protocol.json_header import decode_json_header
from namesrv.request_stats import FAST_PATH, RequestTally

#: The route query's codes, as plain ints (an IntEnum member costs more to look up and hash).
_ROUTE_QUERY = int(RequestCode.GET_ROUTEINFO_BY_TOPIC)
_SUCCESS = int(ResponseCode.SUCCESS)
#: Bounds of the registration header shapes (brokers x header shapes; emptied when full).
SHAPES = 4096
SHAPE_BYTES = 8 * 1024 * 1024
_CRC_FIELD = b'"bodyCrc32":"'


#: What a header asks of the inline paths: a route query, a registration, or None (not theirs).
Inline = RouteQuery | PreparedWrite | None


class InlineAnswers:
    """`answer(frame, channel, arrived)`: the whole response frame, or the request to dispatch
    (decoded, or None: decode it). Reactor thread only. What it answers is counted in `tally`: a
    chunk's route queries at once by `answer_all` (one clock reading, whatever the number of
    frames), a write by `WriteFastPath` as it is answered (no per-chunk table)."""

    def __init__(self, ctx: HandlerContext, processor: Processor, registrations: bool = True) -> None:
        """`registrations=False`: registrations are only read here, never applied (worker processes
        apply every write in the write log's order, namesrv.writelog)."""
        #: The answers given here (namesrv.request_stats; the controller counts it in the server's totals).
        self.tally = RequestTally()
        self.route_queries = RouteQueryFastPath(ctx)
        self.writes = WriteFastPath(processor, self.tally, applies=registrations)
        self.reader = HeaderReader()
        self.seen: SeenHeaders[Inline] = SeenHeaders(self.reader)
        #: Route queries answered since the last count (a chunk's are counted at once).
        self._routes_answered = 0
        #: Kept: counting a chunk of cached route answers must cost no more than the clock reading.
        self._route_slot = self.tally.slot(_ROUTE_QUERY, _SUCCESS, FAST_PATH)

    def answer_all(self, frames: list[bytes], channel: Channel,
                   arrived: float) -> tuple[list[bytes], list[RemotingCommand]]:
        """The frames of one received chunk, taken off the socket at `arrived` (time.monotonic()):
        (answers, the requests to dispatch, decoded).

        Every frame's JSON header key and opaque are read in one scan and looked up at once. Route
        queries answered from the cache, most of the traffic, are answered for the whole chunk in
        one stamping call; so is a chunk of one replayed write (a broker pipelining its heartbeats:
        `WriteFastPath.answer_run`); a write whose header was seen before goes to its path with the
        header already read; the other frames go through `answer` one by one.
        """
        keys, opaques = fastpath.json_opaque_keys(frames)
        known = self.seen.json.table.get
        first = known(keys[0], self)
        crc = None
        if first is self:  # not seen: a registration of a new DataVersion is read from its shape
            first, crc = self.reader.shape(keys[0])
        if type(first) is PreparedWrite:
            if len(keys) == 1:  # a broker's write, alone in its chunk: no route path, no loop
                reply = self.writes.answer(frames[0], opaques[0], first, channel, arrived, crc)
                return ([reply], []) if type(reply) is bytes else ([], [reply])
            if keys.count(keys[0]) == len(keys):  # one header throughout: a run of one write
                replies = self.writes.answer_run(frames, opaques, first, channel, arrived, crc)
                if replies is not None:
                    return replies, []
        single = first if len(keys) == 1 else None
        routes = self.route_queries
        replies: list[bytes] = []
        bodies = None
        # A chunk of one frame that is not a known route query (a header not seen before: a changed
        # registration's bodyCrc32) cannot be answered from the cache: it skips the route path.
        if (single is not None or len(keys) != 1) and routes.serving():
            bodies = routes.cached_bodies(map(known, keys) if single is None else (single,))
            replies = fastpath.stamp_frames(routes.json.head, routes.json.tail, opaques, bodies)
            self._routes_answered += len(replies)
            if len(replies) == len(frames):
                self._count(arrived)
                return replies, []
            if not replies:
                bodies = None
        commands: list[RemotingCommand] = []
        for index, frame in enumerate(frames):
            if bodies is not None and bodies[index] is not None:
                continue  # answered above
            what = known(keys[index], self)
            crc = None
            if what is self:
                what, crc = self.reader.shape(keys[index])
            if type(what) is PreparedWrite:
                reply = self.writes.answer(frame, opaques[index], what, channel, arrived, crc)
            else:
                reply = self.answer(frame, channel, arrived)
            if reply is None:
                commands.append(RemotingCommand.decode(frame))
            elif type(reply) is bytes:
                replies.append(reply)
            else:
                commands.append(reply)  # decoded here, left to the regular path
        if self._routes_answered:
            self._count(arrived)
        return replies, commands

    def _count(self, arrived: float) -> None:
        """Count the route queries answered since the last count as queued now."""
        self._route_slot.add(time.monotonic() - arrived, self._routes_answered)
        self._routes_answered = 0

    def answer(self, frame: bytes, channel: Channel, arrived: float) -> bytes | RemotingCommand | None:
        """`frame` as split_frames yields it (no length prefix), taken off the socket at `arrived`.
        A registration that is not answered here is handed back decoded: the regular path need not
        decode it again. A route query answered here is counted with its chunk (`_count`)."""
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
        return self.writes.answer(frame, opaque, what, channel, arrived)


class HeaderReader:
    """`read_header` (`SeenHeaders`' parse), learning the shape of each JSON registration header it
    parses; `shape(key)` reads one differing from a learned one in its bodyCrc32 value only (the
    broker's next DataVersion) from its key. Reactor thread only."""

    def __init__(self) -> None:
        #: JSON registration headers by `fastpath.body_crc_key` key, each the first one parsed.
        self.shapes: BoundedMemo[bytes, PreparedWrite] = BoundedMemo(SHAPES, SHAPE_BYTES)

    def __call__(self, serialize_field: int, header: bytes,
                 json_split: tuple[bytes, int] | None) -> tuple[int, Inline] | None:
        read = read_header(serialize_field, header)
        shape = None if json_split is None else fastpath.body_crc_key(json_split[0])
        # Learned only where `SeenHeaders` remembers the parse too (`single_opaque`, read as the key
        # says), so a header read from its shape has the opaque its key was split at: a header's
        # count of `"opaque":` is its shape key's (digits are neither in that word nor can join into it).
        if (shape is not None and read is not None and read[0] == json_split[1]
                and single_opaque(header) and _rebinds(header, shape[1], read[1])):
            self.shapes.remember(shape[0], read[1], 2 * len(shape[0]))
        return read

    def shape(self, key: bytes | None) -> tuple[PreparedWrite | None, int | None]:
        """(the registration learned, the bodyCrc32 to read it with: `PreparedWrite.request_for`)
        when `key`, a JSON header's `json_opaque_key` key, differs from a learned shape's in its
        bodyCrc32 digits only; (None, None) otherwise."""
        shape = None if key is None else fastpath.body_crc_key(key)
        known = None if shape is None else self.shapes.table.get(shape[0])
        if known is None:
            return None, None
        crc = shape[1]
        return known, None if crc == known.header.body_crc32 else crc


def _rebinds(header: bytes, crc: int, what: Inline) -> bool:
    """Does the parser read `what`'s bodyCrc32 from exactly the digits of `crc` in `header`, and
    nothing else from them? Then another header differing in them only reads as `what` rebound to
    their value (`PreparedWrite.rebind`). Checked by parsing the header again with other digits (a
    duplicate key, say, would fail it)."""
    if type(what) is not PreparedWrite or type(what.header) is not RegistrationHeader or what.header.body_crc32 != crc:
        return False
    digits = b"%d" % crc
    other = int((b"2" if digits[:1] == b"1" else b"1") + b"0" * (len(digits) - 1))
    again = read_header(JSON_FIELD, header.replace(_CRC_FIELD + digits + b'"', _CRC_FIELD + b"%d" % other + b'"', 1))
    rebound = what.rebind(what.request.derive(0, None, 0), other)
    return again is not None and again[1] == PreparedWrite(what.header.with_crc(other), rebound)


def read_header(serialize_field: int, header: bytes, json_split: object = None) -> tuple[int, Inline] | None:
    """(opaque, what the inline paths make of it), or None if the header does not decode (a
    `SeenHeaders` parse: `json_split` is not needed here).

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
        return opaque, PreparedWrite.of(spec.header.read(request), request)
    except BadRequest:
        return opaque, None
