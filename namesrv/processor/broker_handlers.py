"""What brokers send: REGISTER_BROKER, UNREGISTER_BROKER, QUERY_DATA_VERSION, BROKER_HEARTBEAT."""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from xxhash import xxh3_64_intdigest

from namesrv.channel import Channel
from namesrv.kvconfig import ORDER_TOPIC_CONFIG
from namesrv.processor.context import RETRY, Change, HandlerContext, Refusal, WriteHandler
from namesrv.processor.header import RequestHeader
from namesrv.processor.limits import topic_count_beyond
from namesrv.protocol.codes import ResponseCode, Version
from namesrv.protocol.command import RemotingCommand, wire_string
from namesrv.protocol.route import KVTable, RegisterBrokerResult
from namesrv.protocol.topic import DataVersion, TopicQueueTable, decode_registration
from namesrv.routeinfo import RouteTableFull, StaleTopicEntries
from namesrv.routeinfo.route_input import IllegalRoute, check_names, check_queues
from namesrv.routeinfo.zones import ZONE_NAME

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class RegistrationHeader:
    """What REGISTER_BROKER's header says: the broker (`identity`, keyword arguments of the route
    table's register calls, channel aside), the body's announced CRC32 and codec, the sender's version."""

    identity: dict[str, Any]
    body_crc32: int
    compressed: bool
    version: int

    @classmethod
    def read(cls, request: RemotingCommand) -> RegistrationHeader:
        """BadRequest names a missing or malformed field."""
        header = RequestHeader(request)
        identity = {"cluster_name": header.required_text("clusterName"),
                    "broker_addr": header.required_text("brokerAddr"),
                    "broker_name": header.required_text("brokerName"),
                    "broker_id": header.required_integer("brokerId"),
                    "ha_server_addr": header.text("haServerAddr"),
                    "heartbeat_timeout_millis": header.integer("heartbeatTimeoutMillis"),
                    "enable_acting_master": header.boolean("enableActingMaster"),
                    "zone_name": header.text(ZONE_NAME)}
        return cls(identity, header.integer("bodyCrc32", bits=32) or 0, bool(header.boolean("compressed")),
                   request.version)

    def fingerprint(self, body: bytes, crc: int) -> tuple:
        """Everything the decoded body depends on: its bytes, the codec flag, the version thresholds.

        The body's length, its CRC32 (`crc`, computed for the bodyCrc32 check anyway) and its
        64-bit XXH3: independent checksums (XXH3 reads 20 KB in half a microsecond, a sixteenth of
        Adler-32's time). They only guard against accidental equality: a broker can only ever
        collide with its own previous registration, and whatever it sends is taken as its topic
        table anyway.
        """
        return (len(body), crc, xxh3_64_intdigest(body), self.compressed, self.version >= Version.V3_0_11,
                self.version >= Version.V5_0_0)

    def body_intact(self, crc: int) -> bool:
        """Is `crc` (the body's masked CRC32) the announced one? Announcing 0 skips the check."""
        return self.body_crc32 == 0 or crc == self.body_crc32


#: The two kinds of registration change: the liveness refresh of an unchanged body, a decoded body.
REFRESH, REGISTER = 0, 1


def repeats_last_body(ctx: HandlerContext, registration: RegistrationHeader, body: bytes, crc: int) -> bool:
    """Does `body` (with CRC32 `crc`) look like the broker's last one? A hint: the liveness refresh
    (`RouteInfoManager.refresh_registration`) checks the whole fingerprint and the rest."""
    identity = registration.identity
    stored = ctx.routes.registration_fingerprint(identity["cluster_name"], identity["broker_addr"])
    return stored is not None and stored[0] == len(body) and stored[1] == crc


def prepare_registration(ctx: HandlerContext, request: RemotingCommand, channel: Channel,
                         hints: bool) -> Change | RemotingCommand:
    """Reference 2.3: checksum, then either a liveness refresh or the decoded body (never under a lock).

    Most registrations are the 30-second repeat of an unchanged topic table: with `hints`, one
    that looks like the broker's last is a REFRESH change and its body is never decoded (a
    10,000-topic body costs tens of milliseconds to decode, its fingerprint a fraction of one).
    A body to decode is first held to maxTopicsPerRegistration (a repeat was held to it when it
    first came: the key is locked). A master's new DataVersion usually changes a few topics of its
    table: with `hints` only the topic entries changed since its previous registration are read.
    """
    registration = request.typed_header(RegistrationHeader)
    identity = registration.identity
    crc = request.body_crc32()
    if not registration.body_intact(crc):
        log.warning("REGISTER_BROKER of %s from %s: body crc32 does not match %d", identity["broker_addr"], channel,
                    registration.body_crc32)
        return request.make_response(ResponseCode.SYSTEM_ERROR, "crc32 not match")
    body = request.body or b""
    if hints and repeats_last_body(ctx, registration, body, crc):
        return REFRESH, identity, registration.fingerprint(body, crc)
    limit = ctx.config.max_topics_per_registration
    count = topic_count_beyond(limit, request.body, registration.compressed, request.version) if limit else None
    if count is not None:
        log.warning("REGISTER_BROKER of %s from %s refused: %d topics, maxTopicsPerRegistration is %d",
                    identity["broker_addr"], channel, count, limit)
        return request.make_response(ResponseCode.SYSTEM_ERROR,
                                     f"register broker failed: {count} topics exceed maxTopicsPerRegistration={limit}")
    previous = ctx.routes.topic_entries(identity["cluster_name"], identity["broker_addr"], identity["broker_name"],
                                        identity["broker_id"]) if hints else None
    table, filter_servers = decode_registration(request.body, registration.compressed, request.version, previous)
    try:  # the topic entries left out as unchanged were checked when they came
        check_names(identity)
        check_queues(table.topics.values(), ctx.config.max_queue_nums_per_topic)
    except IllegalRoute as exc:
        log.warning("REGISTER_BROKER of %s from %s refused: %s", identity["broker_addr"], channel, exc)
        return request.make_response(ResponseCode.SYSTEM_ERROR, f"register broker failed: {exc}")
    if request.body is None and request.version >= Version.V3_0_11:
        filter_servers = []  # RocketMQ's empty RegisterBrokerBody has an empty (not null) filter-server list
    version = table.data_version
    return (REGISTER, identity, registration.fingerprint(body, crc), table.topics,
            (version.counter, version.timestamp, version.state_version), table.topic_queue_mapping_info_map,
            table.entries, table.omitted, table.omitted_since, filter_servers)


def apply_registration(ctx: HandlerContext, change: Change, channel: Channel) -> RegisterBrokerResult | None | object:
    """The route table's registration; None when its single-topic guard refuses, RETRY when the
    hint the change was prepared with (an unchanged body, unchanged topic entries) does not hold."""
    identity = change[1]
    fingerprint = tuple(change[2])
    if change[0] == REFRESH:
        result = ctx.routes.refresh_registration(body_fingerprint=fingerprint, channel=channel, **identity)
        return RETRY if result is None else result
    _, _, _, topics, version, mappings, entries, omitted, omitted_since, filter_servers = change
    table = TopicQueueTable(topics, DataVersion(*version), mappings, entries, omitted, omitted_since)
    try:
        return ctx.routes.register_broker(wrapper=table, filter_server_list=None if filter_servers is None
                                          else list(filter_servers), body_fingerprint=fingerprint, channel=channel,
                                          **identity)
    except StaleTopicEntries:  # the route table changed since the decode: read the body in full
        return RETRY
    except RouteTableFull as exc:
        log.warning("REGISTER_BROKER of %s from %s refused: %s", identity["broker_addr"], channel, exc)
        return Refusal(ResponseCode.SYSTEM_ERROR, f"register broker failed: {exc}")


def answer_registration(ctx: HandlerContext, request: RemotingCommand, outcome: object) -> RemotingCommand:
    """The master's address and HA address, and the order topics; or "register broker failed"."""
    if not isinstance(outcome, RegisterBrokerResult):
        return request.make_response(ResponseCode.SYSTEM_ERROR, "register broker failed")
    ext_fields, body = registration_answer(ctx, outcome)
    return request.make_response(ResponseCode.SUCCESS, ext_fields=ext_fields, body=body)


def registration_answer(ctx: HandlerContext, result: RegisterBrokerResult) -> tuple[dict[str, str], bytes | None]:
    """A successful registration's response header fields and body."""
    return registration_ext_fields(result), order_topics_body(ctx)


register_broker = WriteHandler(prepare_registration, apply_registration, answer_registration)


def registration_ext_fields(result: RegisterBrokerResult) -> dict[str, str]:
    """REGISTER_BROKER's response header: the master's address and HA address, when known."""
    ext = {}
    if result.ha_server_addr is not None:
        ext["haServerAddr"] = result.ha_server_addr
    if result.master_addr is not None:
        ext["masterAddr"] = result.master_addr
    return ext


def order_topics_body(ctx: HandlerContext) -> bytes | None:
    """REGISTER_BROKER's response body: the ORDER_TOPIC_CONFIG namespace, if configured and present."""
    if not ctx.config.return_order_topic_config_to_broker:
        return None
    order_topics = ctx.kv.get_namespace(ORDER_TOPIC_CONFIG)
    return None if order_topics is None else KVTable(order_topics).encode()


def _prepare_unregistration(ctx: HandlerContext, request: RemotingCommand, channel: Channel, hints: bool) -> Change:
    header = RequestHeader(request)
    return (header.required_text("clusterName"), header.required_text("brokerAddr"),
            header.required_text("brokerName"), header.integer("brokerId"))


def _apply_unregistration(ctx: HandlerContext, change: Change, channel: Channel) -> None:
    ctx.routes.unregister_broker(*change)


#: Applied synchronously: the answer means the broker is gone (RocketMQ 5.x only queues it).
unregister_broker = WriteHandler(_prepare_unregistration, _apply_unregistration)


def _prepare_data_version_query(ctx: HandlerContext, request: RemotingCommand, channel: Channel,
                                hints: bool) -> Change:
    header = RequestHeader(request)
    version = DataVersion.decode(request.body) if request.body else None
    return (header.required_text("clusterName"), header.required_text("brokerAddr"),
            None if version is None else (version.counter, version.timestamp, version.state_version))


def _apply_data_version_query(ctx: HandlerContext, change: Change,
                              channel: Channel) -> tuple[bool, DataVersion | None]:
    cluster_name, broker_addr, version = change
    return ctx.routes.query_data_version(cluster_name, broker_addr, None if version is None else DataVersion(*version))


def _answer_data_version_query(ctx: HandlerContext, request: RemotingCommand,
                               outcome: tuple[bool, DataVersion | None]) -> RemotingCommand:
    changed, stored = outcome
    return request.make_response(ResponseCode.SUCCESS, ext_fields={"changed": wire_string(changed)},
                                 body=None if stored is None else stored.encode())


#: Has the broker's topic table changed since it registered? Also a liveness heartbeat.
query_data_version = WriteHandler(_prepare_data_version_query, _apply_data_version_query, _answer_data_version_query)


def _prepare_heartbeat(ctx: HandlerContext, request: RemotingCommand, channel: Channel, hints: bool) -> Change:
    header = RequestHeader(request)
    return header.required_text("clusterName"), header.required_text("brokerAddr")


def _apply_heartbeat(ctx: HandlerContext, change: Change, channel: Channel) -> None:
    ctx.routes.update_broker_timestamp(*change)


broker_heartbeat = WriteHandler(_prepare_heartbeat, _apply_heartbeat)
