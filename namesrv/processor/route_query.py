"""GET_ROUTEINFO_BY_TOPIC answered straight from the frame's bytes when the encoded route is cached.

Route queries are most of a NameServer's traffic, and almost all of them hit the route-body cache.
For those, building a RemotingCommand, handing it to a worker thread, building a response object
and encoding its header cost many times the lookup itself. The reactor
(`namesrv.processor.inline`) reads the header with the regular path's own parser, keeps what the
answer depends on (opaque, topic, JSON flavour) as a `RouteQuery`, and `RouteQueryFastPath.answer`
looks the body up without the route table's lock and writes the response as a pre-encoded header
with the opaque patched in.

Everything else returns None and takes the regular path, which owns every other rule: a cache
miss, TOPIC_NOT_EXIST, the needWaitForService window, a oneway or response frame, a client in zone
mode (its answer is filtered: namesrv.routeinfo.zones). The bytes it writes are the ones the
regular path would send (tests/test_route_query_fastpath.py).
"""
from __future__ import annotations

from collections.abc import Iterable
from functools import partial
from typing import NamedTuple

from namesrv.kvconfig import ORDER_TOPIC_CONFIG
from namesrv.processor.context import HandlerContext
from namesrv.processor.route_handlers import wants_standard_json
from namesrv.processor.seen_headers import JSON_FIELD, OpaqueTemplate
from namesrv.protocol.codes import FLAG_ONEWAY, FLAG_RESPONSE, RequestCode, ResponseCode, \
    SerializeType
from namesrv.protocol.command import RemotingCommand
from namesrv.routeinfo.zones import requested_zone

_ROUTE_QUERY = int(RequestCode.GET_ROUTEINFO_BY_TOPIC)
NOT_PLAIN = FLAG_RESPONSE | FLAG_ONEWAY


class RouteQuery(NamedTuple):
    """What a plain route query asks: a topic, in one of the two JSON flavours."""

    topic: str
    standard: bool


def route_query_of(version: int, ext: dict[str, str] | None) -> RouteQuery | None:
    """The query of a plain route query's decoded header fields (None without a topic, or from a
    client in zone mode: its filtered answer is the regular path's)."""
    topic = None if ext is None else ext.get("topic")
    if topic is None or requested_zone(ext) is not None:
        return None
    return RouteQuery(topic, wants_standard_json(version, ext.get("acceptStandardJsonOnly")))


class RouteQueryFastPath:
    """`answer(...)`: the whole response frame for a cached route query, else None. Thread-safe."""

    def __init__(self, ctx: HandlerContext) -> None:
        self._ctx = ctx
        self._cached_routes = ctx.routes.cached_topic_route_bodies
        self._order_topic_conf = partial(ctx.kv.get, ORDER_TOPIC_CONFIG)
        #: The JSON answer's header template (its halves stamp `InlineAnswers.answer_all`'s answers too).
        self.json = _success(SerializeType.JSON)
        self._binary = _success(SerializeType.ROCKETMQ)

    def answer(self, serialize_field: int, opaque: int, query: RouteQuery) -> bytes | None:
        if not self.serving():
            return None
        body = self.cached_bodies((query,))[0]
        if body is None:
            return None
        return (self.json if serialize_field == JSON_FIELD else self._binary).frame(opaque, body)

    def serving(self) -> bool:
        """False inside the needWaitForService window (the regular path answers "name server not ready")."""
        return not self._ctx.waiting_for_service()

    def cached_bodies(self, queries: Iterable[object]) -> list[bytes | None]:
        """The route body each of `queries` is answered with where it is a route query whose route
        is cached, else None: a received chunk's in one call."""
        return self._cached_routes(queries, RouteQuery,
                                   self._order_topic_conf if self._ctx.config.order_message_enable else None)


def _success(serialize_type: int) -> OpaqueTemplate:
    """The SUCCESS response header of a route query."""
    request = RemotingCommand.request(_ROUTE_QUERY, serialize_type=serialize_type)
    return OpaqueTemplate(request.make_response(ResponseCode.SUCCESS))
