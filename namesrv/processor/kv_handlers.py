"""PUT/GET/DELETE_KV_CONFIG and GET_KVLIST_BY_NAMESPACE (reference 2.3, 5)."""
from __future__ import annotations

from namesrv.channel import Channel
from namesrv.processor.context import HandlerContext
from namesrv.processor.header import RequestHeader
from namesrv.protocol.codes import ResponseCode
from namesrv.protocol.command import RemotingCommand
from namesrv.protocol.route import KVTable


def java_str(value: str | None) -> str:
    """How Java's string concatenation prints a possibly-null field (RocketMQ's remarks do)."""
    return "null" if value is None else value


def put_kv_config(ctx: HandlerContext, request: RemotingCommand, channel: Channel) -> RemotingCommand:
    header = RequestHeader(request)
    namespace, key = header.text("namespace"), header.text("key")
    if namespace is None or key is None:
        return request.make_response(ResponseCode.SYSTEM_ERROR, "namespace or key is null")
    ctx.kv.put(namespace, key, header.text("value"))
    return request.make_response(ResponseCode.SUCCESS)


def get_kv_config(ctx: HandlerContext, request: RemotingCommand, channel: Channel) -> RemotingCommand:
    header = RequestHeader(request)
    namespace, key = header.text("namespace"), header.text("key")
    value = ctx.kv.get(namespace, key)
    if value is None:
        return request.make_response(ResponseCode.QUERY_NOT_FOUND,
                                     f"No config item, Namespace: {java_str(namespace)} Key: {java_str(key)}")
    return request.make_response(ResponseCode.SUCCESS, ext_fields={"value": value})


def delete_kv_config(ctx: HandlerContext, request: RemotingCommand, channel: Channel) -> RemotingCommand:
    header = RequestHeader(request)
    ctx.kv.delete(header.text("namespace"), header.text("key"))
    return request.make_response(ResponseCode.SUCCESS)


def get_kvlist_by_namespace(ctx: HandlerContext, request: RemotingCommand, channel: Channel) -> RemotingCommand:
    namespace = RequestHeader(request).text("namespace")
    table = ctx.kv.get_namespace(namespace)
    if table is None:
        return request.make_response(ResponseCode.QUERY_NOT_FOUND, f"No config item, Namespace: {java_str(namespace)}")
    return request.make_response(ResponseCode.SUCCESS, body=KVTable(table).encode())
