"""The requests the reactor answers itself, straight from their frames, no executor involved.

Two kinds of request dominate a NameServer's traffic and almost always have an answer ready, or
one quickly made: route queries whose encoded route is cached (`RouteQueryFastPath`) and
brokers' registrations of small topic tables, unchanged or not (`RegistrationFastPath`). For
them the hand-off to a worker thread and back, and the header parse, cost more than the answer.
`InlineAnswers.answer` reads the header once per peer and request shape (`SeenHeaders`; a repeat
costs a lookup), then lets the matching fast path answer or step aside (None): everything else,
and every case those paths do not own, takes the regular path through the executors.
"""
from __future__ import annotations

from typing import NamedTuple

from namesrv import fastpath
from namesrv.channel import Channel
from namesrv.processor.broker_handlers import RegistrationHeader
from namesrv.processor.context import HandlerContext
from namesrv.processor.header import BadRequest
from namesrv.processor.register_fast_path import Process, RegistrationFastPath
from namesrv.processor.requests import BY_CODE
from namesrv.processor.requests import Inline as RequestInline
from namesrv.processor.route_query import NOT_PLAIN, RouteQuery, RouteQueryFastPath, route_query_of
from namesrv.processor.seen_headers import HEADER_LENGTH_MASK, INT32, JSON_FIELD, SeenHeaders
from namesrv.protocol.command import RemotingCommand
from namesrv.errors import ProtocolError
from namesrv.protocol.json_header import decode_json_header


class PreparedRegistration(NamedTuple):
    """A REGISTER_BROKER header read once: its fields for the route table, and the request minus opaque and body."""

    header: RegistrationHeader
    request: RemotingCommand

    def with_(self, opaque: int, body: bytes | None) -> RemotingCommand:
        """The request these header bytes and `body` decode to (RemotingCommand.decode without the
        parse), its header read."""
        r = self.request
        request = RemotingCommand(r.code, language=r.language, version=r.version, opaque=opaque, flag=r.flag,
                                  remark=r.remark, ext_fields=r.ext_fields, body=body, serialize_type=r.serialize_type)
        request.keep_typed_header(self.header)
        return request


#: What a header asks of the inline paths: a route query, a registration, or None (not theirs).
Inline = RouteQuery | PreparedRegistration | None


class InlineAnswers:
    """`answer(frame, channel)`: the whole response frame, or the request to dispatch (decoded, or None:
    decode it). Reactor thread only."""

    def __init__(self, ctx: HandlerContext, process: Process, registrations: bool = True) -> None:
        """`registrations=False`: registrations are only read here, never applied (worker processes
        apply every write in the write log's order, namesrv.writelog)."""
        self.route_queries = RouteQueryFastPath(ctx)
        self.registrations = RegistrationFastPath(ctx, process) if registrations else None
        self.seen: SeenHeaders[Inline] = SeenHeaders(_read_header)

    def answer_all(self, frames: list[bytes], channel: Channel) -> tuple[list[bytes], list[RemotingCommand]]:
        """The frames of one received chunk: (answers, the requests to dispatch, decoded).

        Route queries answered from the cache with JSON headers seen before, most of the traffic,
        are answered for the whole chunk at once: every frame's key and opaque in one scan, the
        cached bodies looked up, the answers stamped in one call. The other frames go through
        `answer` one by one.
        """
        routes = self.route_queries
        replies: list[bytes] = []
        if routes.serving():
            keys, opaques = fastpath.json_opaque_keys(frames)
            bodies = list(map(routes.cached_body, map(self.seen.json.table.get, keys)))
            replies = fastpath.stamp_frames(routes.json.head, routes.json.tail, opaques, bodies)
            if len(replies) == len(frames):
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
        return replies, commands

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
            return self.route_queries.answer(serialize_field, opaque, what)
        request = what.with_(opaque, frame[body_at:] or None)
        if self.registrations is None:
            return request
        reply = self.registrations.answer(what.header, request, channel)
        return request if reply is None else reply


def _read_header(serialize_field: int, header: bytes) -> tuple[int, Inline] | None:
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
