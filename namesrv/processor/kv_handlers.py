"""PUT/GET/DELETE_KV_CONFIG and GET_KVLIST_BY_NAMESPACE (reference 2.3, 5)."""
from __future__ import annotations

from namesrv.channel import Channel
from namesrv.processor.context import Change, HandlerContext, Hints, WriteHandler
from namesrv.processor.header import RequestHeader
from namesrv.protocol.codes import ResponseCode
from namesrv.protocol.command import RemotingCommand
from namesrv.protocol.route import KVTable


def java_str(value: str | None) -> str:
    """How Java's string concatenation prints a possibly-null field (RocketMQ's remarks do)."""
    return "null" if value is None else value


def _prepare_put(ctx: HandlerContext, request: RemotingCommand, channel: Channel,
                 hints: Hints) -> Change | RemotingCommand:
    header = RequestHeader(request)
    namespace, key = header.text("namespace"), header.text("key")
    if namespace is None or key is None:
        return request.make_response(ResponseCode.SYSTEM_ERROR, "namespace or key is null")
    return namespace, key, header.text("value")


def _apply_put(ctx: HandlerContext, change: Change, channel: Channel) -> None:
    ctx.kv.put(*change)


put_kv_config = WriteHandler(_prepare_put, _apply_put)


def get_kv_config(ctx: HandlerContext, request: RemotingCommand, channel: Channel) -> RemotingCommand:
    header = RequestHeader(request)
    namespace, key = header.text("namespace"), header.text("key")
    value = ctx.kv.get(namespace, key)
    if value is None:
        return request.make_response(ResponseCode.QUERY_NOT_FOUND,
                                     f"No config item, Namespace: {java_str(namespace)} Key: {java_str(key)}")
    return request.make_response(ResponseCode.SUCCESS, ext_fields={"value": value})


def _prepare_delete(ctx: HandlerContext, request: RemotingCommand, channel: Channel, hints: Hints) -> Change:
    header = RequestHeader(request)
    return header.text("namespace"), header.text("key")


def _apply_delete(ctx: HandlerContext, change: Change, channel: Channel) -> None:
    ctx.kv.delete(*change)


delete_kv_config = WriteHandler(_prepare_delete, _apply_delete)


def get_kvlist_by_namespace(ctx: HandlerContext, request: RemotingCommand, channel: Channel) -> RemotingCommand:
    namespace = RequestHeader(request).text("namespace")
    table = ctx.kv.get_namespace(namespace)
    if table is None:
        return request.make_response(ResponseCode.QUERY_NOT_FOUND, f"No config item, Namespace: {java_str(namespace)}")
    return request.make_response(ResponseCode.SUCCESS, body=KVTable(table).encode())
