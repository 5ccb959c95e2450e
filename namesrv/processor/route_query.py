"""GET_ROUTEINFO_BY_TOPIC answered straight from the frame's bytes when the encoded route is cached.

Route queries are most of a NameServer's traffic, and almost all of them hit the route-body cache.
For those, building a RemotingCommand, handing it to a worker thread, building a response object
and encoding its header cost many times the lookup itself. `RouteQueryFastPath.answer(frame)`
reads only what the answer depends on (code, flag, opaque, version, topic, acceptStandardJsonOnly),
looks the body up without the route table's lock, and writes the response as a pre-encoded header
with the opaque patched in — cheap enough to run on the reactor thread.

Everything else returns None and takes the regular path, which owns every other rule: a cache
miss, TOPIC_NOT_EXIST, the needWaitForService window, a oneway or response frame, and any header
this reader does not find plain (numbers as strings, non-string extFields, bad UTF-8...). The
bytes it writes are the ones the regular path would send (tests/test_route_query_fastpath.py).
"""
from __future__ import annotations

import struct

import orjson

from namesrv import fastpath
from namesrv.kvconfig import ORDER_TOPIC_CONFIG
from namesrv.processor.context import HandlerContext
from namesrv.processor.route_handlers import wants_standard_json
from namesrv.protocol.codes import FLAG_ONEWAY, FLAG_RESPONSE, RequestCode, ResponseCode, SerializeType
from namesrv.protocol.command import RemotingCommand
from namesrv.protocol.errors import ProtocolError

_PREFIX = struct.Struct(">ii")  # totalLength, serializeType << 24 | headerLength
_INT32 = struct.Struct(">i")
_JSON_FIELD = int(SerializeType.JSON) << 24
_ROCKETMQ_FIELD = int(SerializeType.ROCKETMQ) << 24
_HEADER_LENGTH_MASK = 0xFFFFFF
_SENTINEL = 2_059_198_193  # an opaque whose digits appear nowhere else in the header
_BINARY_OPAQUE_AT = 5  # code (2) + language (1) + version (2)
_ROUTE_QUERY = int(RequestCode.GET_ROUTEINFO_BY_TOPIC)
_NOT_PLAIN = FLAG_RESPONSE | FLAG_ONEWAY
_INT32_MIN, _INT32_MAX = -(2 ** 31), 2 ** 31 - 1
_OPAQUE_KEY = b'"opaque":'
#: Bound of the remembered JSON headers (clients x topics of those polling; cleared when full).
_SEEN_HEADERS = 16384


def _success_header(serialize_type: int) -> tuple[bytes, bytes]:
    """The SUCCESS response header of a route query, split around its opaque."""
    request = RemotingCommand.request(_ROUTE_QUERY, opaque=_SENTINEL, serialize_type=serialize_type)
    header = request.make_response(ResponseCode.SUCCESS).encode_header()
    if serialize_type == SerializeType.JSON:
        marker = b'"opaque":%d' % _SENTINEL
        at = header.index(marker) + len(b'"opaque":')
        return header[:at], header[at + len(str(_SENTINEL)):]
    assert header[_BINARY_OPAQUE_AT:_BINARY_OPAQUE_AT + 4] == _INT32.pack(_SENTINEL)
    return header[:_BINARY_OPAQUE_AT], header[_BINARY_OPAQUE_AT + 4:]


def _canonical_int32(digits: bytes) -> int | None:
    """The value of a JSON integer as `b"%d"` writes it (no sign but '-', no leading zero), in int32 range."""
    if digits.isdigit() and len(digits) <= 10 and (digits[0] != 48 or len(digits) == 1):
        value = int(digits)
        return value if value <= _INT32_MAX else None
    if digits[:1] == b"-" and digits[1:].isdigit() and len(digits) <= 11 and digits[1] != 48:
        value = int(digits)
        return value if value >= _INT32_MIN else None
    return None


def _parse_json(header: bytes) -> tuple[int, str, bool] | None:
    """(opaque, topic, standard flavour?) of a plain JSON route query, else None."""
    try:
        fields = orjson.loads(header)
    except orjson.JSONDecodeError:
        return None
    if type(fields) is not dict or fields.get("code") != _ROUTE_QUERY or type(fields["code"]) is not int:
        return None
    flag, opaque, version = fields.get("flag", 0), fields.get("opaque", 0), fields.get("version", 0)
    ext, remark = fields.get("extFields"), fields.get("remark")
    if (type(flag) is not int or type(opaque) is not int or type(version) is not int or type(ext) is not dict
            or flag & _NOT_PLAIN or not _INT32_MIN <= opaque <= _INT32_MAX
            or not _INT32_MIN <= flag <= _INT32_MAX or not _INT32_MIN <= version <= _INT32_MAX
            or (remark is not None and type(remark) is not str)):
        return None
    for value in ext.values():
        if type(value) is not str:
            return None
    topic = ext.get("topic")
    if topic is None:
        return None
    return opaque, topic, wants_standard_json(version, ext.get("acceptStandardJsonOnly"))


class RouteQueryFastPath:
    """`answer(frame)`: the whole response frame for a cached route query, else None. Thread-safe."""

    def __init__(self, ctx: HandlerContext) -> None:
        self._ctx = ctx
        self._cached_route = ctx.routes.cached_topic_route_body
        #: JSON headers seen, without their opaque's digits -> (topic, standard flavour?).
        self._seen: dict[tuple[bytes, bytes], tuple[str, bool]] = {}
        self._json_head, self._json_tail = _success_header(SerializeType.JSON)
        self._binary_head, self._binary_tail = _success_header(SerializeType.ROCKETMQ)

    def answer(self, frame: bytes) -> bytes | None:
        """`frame` as split_frames yields it (no length prefix)."""
        if len(frame) < 4:
            return None
        field = _INT32.unpack_from(frame)[0]
        serialize_field = field & ~_HEADER_LENGTH_MASK
        header = frame[4:4 + (field & _HEADER_LENGTH_MASK)]
        if serialize_field == _JSON_FIELD:
            query = self._read_json(header)
        elif serialize_field == _ROCKETMQ_FIELD:
            query = self._read_binary(header)
        else:
            return None
        if query is None:
            return None
        opaque, topic, standard = query
        ctx = self._ctx
        config = ctx.config
        if config.need_wait_for_service and ctx.clock() - ctx.started_ms < config.wait_seconds_for_service * 1000:
            return None  # the regular path answers "name server not ready"
        body = self._cached_route(topic, standard, ctx.kv.get(ORDER_TOPIC_CONFIG, topic)
                                  if config.order_message_enable else None)
        if body is None:
            return None
        if serialize_field == _JSON_FIELD:
            stamp = b"%d" % opaque
            head, tail = self._json_head, self._json_tail
        else:
            stamp = _INT32.pack(opaque)
            head, tail = self._binary_head, self._binary_tail
        header_length = len(head) + len(stamp) + len(tail)
        return b"".join((_PREFIX.pack(4 + header_length + len(body), serialize_field | header_length),
                         head, stamp, tail, body))

    def _read_json(self, header: bytes) -> tuple[int, str, bool] | None:
        """(opaque, topic, standard flavour?) of a plain JSON route query, else None.

        A client sends the same header again and again with only the opaque changed, so a header
        whose only `"opaque":` key is its top-level opaque, followed by another field, is
        remembered without its digits: the next one that differs only there needs no JSON parse.
        """
        head, _, rest = header.partition(_OPAQUE_KEY)
        digits, comma, tail = rest.partition(b",")
        if comma:
            known = self._seen.get((head, tail))
            if known is not None:
                opaque = _canonical_int32(digits)
                if opaque is not None:
                    return opaque, known[0], known[1]
        query = _parse_json(header)
        if query is not None and comma and digits == b"%d" % query[0] and header.count(_OPAQUE_KEY) == 1:
            if len(self._seen) >= _SEEN_HEADERS:
                self._seen.clear()
            self._seen[(head, tail)] = query[1:]
        return query

    @staticmethod
    def _read_binary(header: bytes) -> tuple[int, str, bool] | None:
        try:
            code, _language, version, opaque, flag, _remark, ext = fastpath.decode_binary_header(header)
        except ProtocolError:
            return None
        if code != _ROUTE_QUERY or flag & _NOT_PLAIN or not ext:
            return None
        topic = ext.get("topic")
        if topic is None:
            return None
        return opaque, topic, wants_standard_json(version, ext.get("acceptStandardJsonOnly"))
