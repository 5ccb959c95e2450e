"""What clients and admin tools ask about routes and topics (reference 2.3, 4.7-4.9)."""
from __future__ import annotations

import logging
from collections.abc import Callable

import orjson

from namesrv.channel import Channel
from namesrv.kvconfig import ORDER_TOPIC_CONFIG
from namesrv.processor.context import Change, HandlerContext, Hints, Refusal, WriteHandler
from namesrv.processor.header import RequestHeader
from namesrv.processor.route_push import SubscriptionRefused, route_entry
from namesrv.protocol.codes import ResponseCode, Version
from namesrv.protocol.command import RemotingCommand
from namesrv.protocol.route import QueueData, TopicList, TopicRouteData
from namesrv.routeinfo import RouteInfoManager, RouteTableFull, explain
from namesrv.routeinfo.route_input import IllegalRoute, check_queues, check_topic
from namesrv.routeinfo.zones import requested_zone

#: RocketMQ 5.x FAQUrl.DEFAULT_FAQ_URL, quoted in TOPIC_NOT_EXIST remarks.
FAQ_URL = "https://rocketmq.apache.org/docs/bestPractice/06FAQ"

log = logging.getLogger(__name__)


def wants_standard_json(version: int, accept_standard_json_only: str | None) -> bool:
    """Standard JSON from 4.9.4 on, or when the client asks for it; older (Go, C++) clients get legacy."""
    return version >= Version.V4_9_4 or (accept_standard_json_only is not None
                                         and accept_standard_json_only.lower() == "true")


def get_routeinfo_by_topic(ctx: HandlerContext, request: RemotingCommand, channel: Channel) -> RemotingCommand:
    """The route in the flavour the client parses: standard JSON from 4.9.4 on (or when asked), else
    legacy; a client in zone mode gets its zone's (namesrv.routeinfo.zones)."""
    if ctx.waiting_for_service():
        return request.make_response(ResponseCode.SYSTEM_ERROR, "name server not ready")
    header = RequestHeader(request)
    topic = header.required_text("topic")
    body = route_body(ctx, topic, wants_standard_json(request.version, header.text("acceptStandardJsonOnly")),
                      requested_zone(request.ext_fields))
    if body is None:
        return request.make_response(
            ResponseCode.TOPIC_NOT_EXIST,
            f"No topic route info in name server for the topic: {topic}\nSee {FAQ_URL} for further details.")
    return request.make_response(ResponseCode.SUCCESS, body=body)


def route_body(ctx: HandlerContext, topic: str, standard: bool, zone: str | None = None) -> bytes | None:
    """A topic's encoded route as GET_ROUTEINFO_BY_TOPIC answers it (orderTopicConf included when
    orderMessageEnable; only `zone`'s brokers for a client in zone mode), None if it has none: route
    queries, subscriptions and pushes alike."""
    order_topic_conf = ctx.kv.get(ORDER_TOPIC_CONFIG, topic) if ctx.config.order_message_enable else None
    return ctx.routes.topic_route_body(topic, standard, order_topic_conf, zone)


def subscribe_route_changes(ctx: HandlerContext, request: RemotingCommand, channel: Channel) -> RemotingCommand:
    """Push the route changes of `topics` (`;`-separated) or of every topic (`all=true`) on this
    connection from now on (namesrv.processor.route_push); answered with the named topics' current
    routes and versions (route null: no such topic yet)."""
    header = RequestHeader(request)
    everything = bool(header.boolean("all"))
    topics = sorted({topic for topic in (header.text("topics") or "").split(";") if topic})
    if not topics and not everything:
        return request.make_response(ResponseCode.SYSTEM_ERROR, "name some topics (topics=A;B) or all=true")
    zone = requested_zone(request.ext_fields)
    try:
        for topic in topics:
            check_topic(topic)
        standard = wants_standard_json(request.version, header.text("acceptStandardJsonOnly"))
        ctx.subscriptions.subscribe(channel, topics, everything, standard, zone, ctx.routes.has_topic)
    except (IllegalRoute, SubscriptionRefused) as exc:
        return request.make_response(ResponseCode.SYSTEM_ERROR, str(exc))
    ctx.routes.track_changes()
    parts = [route_entry(topic, ctx.subscriptions.version(topic), route_body(ctx, topic, standard, zone))
             for topic in topics]
    return request.make_response(ResponseCode.SUCCESS, body=b'{"routes":[' + b",".join(parts) + b"]}")


def unsubscribe_route_changes(ctx: HandlerContext, request: RemotingCommand, channel: Channel) -> RemotingCommand:
    ctx.subscriptions.unsubscribe(channel)
    return request.make_response(ResponseCode.SUCCESS)


def explain_route(ctx: HandlerContext, request: RemotingCommand, channel: Channel) -> RemotingCommand:
    """Why the topic has no route here, or the route it has, from the route history (JSON body)."""
    topic = RequestHeader(request).required_text("topic")
    try:
        check_topic(topic)
    except IllegalRoute as exc:
        return request.make_response(ResponseCode.SYSTEM_ERROR, str(exc))
    answer = explain.explain_route(ctx.routes, topic, ctx.kv.get(ORDER_TOPIC_CONFIG, topic), ctx.clock())
    return request.make_response(ResponseCode.SUCCESS, body=orjson.dumps(answer))


def get_broker_cluster_info(ctx: HandlerContext, request: RemotingCommand, channel: Channel) -> RemotingCommand:
    return request.make_response(ResponseCode.SUCCESS, body=ctx.routes.cluster_info().encode())


def get_broker_member_group(ctx: HandlerContext, request: RemotingCommand, channel: Channel) -> RemotingCommand:
    header = RequestHeader(request)
    group = ctx.routes.broker_member_group(header.text("clusterName"), header.text("brokerName"))
    return request.make_response(ResponseCode.SUCCESS, body=group.encode())


def _prepare_broker_name(ctx: HandlerContext, request: RemotingCommand, channel: Channel, hints: Hints) -> Change:
    return RequestHeader(request).text("brokerName")


def _apply_wipe_write_perm(ctx: HandlerContext, change: Change, channel: Channel) -> int:
    return ctx.routes.wipe_write_perm_of_broker(change, channel.remote_addr)


def _apply_add_write_perm(ctx: HandlerContext, change: Change, channel: Channel) -> int:
    return ctx.routes.add_write_perm_of_broker(change, channel.remote_addr)


def _answer_count(field: str) -> Callable[[HandlerContext, RemotingCommand, int], RemotingCommand]:
    def answer(ctx: HandlerContext, request: RemotingCommand, count: int) -> RemotingCommand:
        return request.make_response(ResponseCode.SUCCESS, ext_fields={field: str(count)})
    return answer


wipe_write_perm_of_broker = WriteHandler(_prepare_broker_name, _apply_wipe_write_perm, _answer_count("wipeTopicCount"))
add_write_perm_of_broker = WriteHandler(_prepare_broker_name, _apply_add_write_perm, _answer_count("addTopicCount"))


def _prepare_topic_deletion(ctx: HandlerContext, request: RemotingCommand, channel: Channel, hints: Hints) -> Change:
    header = RequestHeader(request)
    return header.required_text("topic"), header.text("clusterName")


def _apply_topic_deletion(ctx: HandlerContext, change: Change, channel: Channel) -> None:
    ctx.routes.delete_topic(*change, requester=channel.remote_addr)


delete_topic_in_namesrv = WriteHandler(_prepare_topic_deletion, _apply_topic_deletion)


def _prepare_topic_registration(ctx: HandlerContext, request: RemotingCommand, channel: Channel,
                                hints: Hints) -> Change | RemotingCommand:
    """Only the body's queueDatas are used; brokers that are not registered stop the call (as RocketMQ)."""
    topic = RequestHeader(request).required_text("topic")
    route = TopicRouteData.decode(request.body) if request.body else None
    if route is None or not route.queue_datas:
        return request.make_response(ResponseCode.SUCCESS)
    queues = [(q.broker_name, q.read_queue_nums, q.write_queue_nums, q.perm, q.topic_sys_flag) for q in route.queue_datas]
    try:
        check_queues([(topic, *fields[1:]) for fields in queues], ctx.config.max_queue_nums_per_topic)
    except IllegalRoute as exc:
        return request.make_response(ResponseCode.SYSTEM_ERROR, str(exc))
    return topic, queues


def _apply_topic_registration(ctx: HandlerContext, change: Change, channel: Channel) -> Refusal | None:
    topic, queues = change
    try:
        ctx.routes.register_topic(topic, [QueueData(*fields) for fields in queues], channel.remote_addr)
    except RouteTableFull as exc:
        log.warning("REGISTER_TOPIC_IN_NAMESRV of %s from %s refused: %s", topic, channel, exc)
        return Refusal(ResponseCode.SYSTEM_ERROR, str(exc))
    return None


register_topic_in_namesrv = WriteHandler(_prepare_topic_registration, _apply_topic_registration)


def get_all_topic_list(ctx: HandlerContext, request: RemotingCommand, channel: Channel) -> RemotingCommand:
    if not ctx.config.enable_all_topic_list:
        return request.make_response(ResponseCode.SYSTEM_ERROR, "disable")
    return request.make_response(ResponseCode.SUCCESS, body=ctx.routes.all_topics().encode())


def get_topics_by_cluster(ctx: HandlerContext, request: RemotingCommand, channel: Channel) -> RemotingCommand:
    if not ctx.config.enable_topic_list:
        return request.make_response(ResponseCode.SYSTEM_ERROR, "disable")
    topics = ctx.routes.topics_by_cluster(RequestHeader(request).text("cluster"))
    return request.make_response(ResponseCode.SUCCESS, body=topics.encode())


def get_system_topic_list(ctx: HandlerContext, request: RemotingCommand, channel: Channel) -> RemotingCommand:
    return request.make_response(ResponseCode.SUCCESS, body=ctx.routes.system_topics().encode())


def _gated_topic_list(query: Callable[[RouteInfoManager], TopicList]):
    """A unit-topic list handler, refused with "disable" unless enableTopicList."""
    def handler(ctx: HandlerContext, request: RemotingCommand, channel: Channel) -> RemotingCommand:
        if not ctx.config.enable_topic_list:
            return request.make_response(ResponseCode.SYSTEM_ERROR, "disable")
        return request.make_response(ResponseCode.SUCCESS, body=query(ctx.routes).encode())
    return handler


get_unit_topic_list = _gated_topic_list(RouteInfoManager.unit_topics)
get_has_unit_sub_topic_list = _gated_topic_list(RouteInfoManager.has_unit_sub_topics)
get_has_unit_sub_ununit_topic_list = _gated_topic_list(RouteInfoManager.has_unit_sub_ununit_topics)
