"""What brokers send: REGISTER_BROKER, UNREGISTER_BROKER, QUERY_DATA_VERSION, BROKER_HEARTBEAT."""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from xxhash import xxh3_64_intdigest

from namesrv.channel import Channel
from namesrv.kvconfig import ORDER_TOPIC_CONFIG
from namesrv.processor.context import HandlerContext
from namesrv.processor.header import RequestHeader
from namesrv.processor.limits import topic_count_beyond
from namesrv.protocol.codes import ResponseCode, Version
from namesrv.protocol.command import RemotingCommand, wire_string
from namesrv.protocol.route import KVTable, RegisterBrokerResult
from namesrv.protocol.topic import DataVersion, decode_registration
from namesrv.routeinfo import StaleTopicEntries

log = logging.getLogger(__name__)

#: Raw extFields key a 5.x broker in a zone adds to every request (DynamicalExtFieldRPCHook).
ZONE_NAME = "__ZONE_NAME"


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


def refresh_if_unchanged(ctx: HandlerContext, registration: RegistrationHeader, request: RemotingCommand,
                         channel: Channel) -> RegisterBrokerResult | None:
    """The liveness refresh of a re-registration whose body is the broker's last one, or None.

    Most changed bodies differ from the last one in length or CRC32, so those are compared before
    the full fingerprint is computed; `RouteInfoManager.refresh_registration` decides the rest.
    """
    body = request.body or b""
    crc = request.body_crc32()
    identity = registration.identity
    stored = ctx.routes.registration_fingerprint(identity["cluster_name"], identity["broker_addr"])
    if stored is None or stored[0] != len(body) or stored[1] != crc:
        return None
    return ctx.routes.refresh_registration(body_fingerprint=registration.fingerprint(body, crc), channel=channel,
                                           **identity)


def register_broker(ctx: HandlerContext, request: RemotingCommand, channel: Channel) -> RemotingCommand:
    """Reference 2.3: checksum, decode (before any lock is taken), register, answer master + order topics.

    Most registrations are the 30-second repeat of an unchanged topic table: those are
    recognised by a fingerprint of the raw body and never decoded (a 10,000-topic body costs
    tens of milliseconds to decode, its fingerprint a fraction of one); the reactor answers
    most of them itself (`RegistrationFastPath`). A body to decode is first held to
    maxTopicsPerRegistration (a repeat was held to it when it first came: the key is locked).
    A master's new DataVersion usually changes a few topics of its table: the fast path then
    reads only the topic entries that changed since its previous registration.
    """
    registration = request.typed_header(RegistrationHeader)
    identity = registration.identity
    if not registration.body_intact(request.body_crc32()):
        log.warning("REGISTER_BROKER of %s from %s: body crc32 does not match %d", identity["broker_addr"], channel,
                    registration.body_crc32)
        return request.make_response(ResponseCode.SYSTEM_ERROR, "crc32 not match")
    result = refresh_if_unchanged(ctx, registration, request, channel)
    if result is None:
        limit = ctx.config.max_topics_per_registration
        compressed = registration.compressed
        count = topic_count_beyond(limit, request.body, compressed, request.version) if limit else None
        if count is not None:
            log.warning("REGISTER_BROKER of %s from %s refused: %d topics, maxTopicsPerRegistration is %d",
                        identity["broker_addr"], channel, count, limit)
            return request.make_response(ResponseCode.SYSTEM_ERROR,
                                         f"register broker failed: {count} topics exceed "
                                         f"maxTopicsPerRegistration={limit}")
        fingerprint = registration.fingerprint(request.body or b"", request.body_crc32())
        previous = ctx.routes.topic_entries(identity["cluster_name"], identity["broker_addr"], identity["broker_name"],
                                            identity["broker_id"])
        try:
            result = _decode_and_register(ctx, registration, request, channel, fingerprint, previous)
        except StaleTopicEntries:  # the route table changed between the decode and its lock
            result = _decode_and_register(ctx, registration, request, channel, fingerprint, None)
    if result is None:
        return request.make_response(ResponseCode.SYSTEM_ERROR, "register broker failed")
    return request.make_response(ResponseCode.SUCCESS, ext_fields=registration_ext_fields(result),
                                 body=order_topics_body(ctx))


def _decode_and_register(ctx: HandlerContext, registration: RegistrationHeader, request: RemotingCommand,
                         channel: Channel, fingerprint: tuple, previous: bytes | None) -> RegisterBrokerResult | None:
    """Decode the body (only its topic entries changed since `previous`, if given) and register it."""
    topics, filter_servers = decode_registration(request.body, registration.compressed, request.version, previous)
    if request.body is None and request.version >= Version.V3_0_11:
        filter_servers = []  # RocketMQ's empty RegisterBrokerBody has an empty (not null) filter-server list
    return ctx.routes.register_broker(wrapper=topics, filter_server_list=filter_servers,
                                      body_fingerprint=fingerprint, channel=channel, **registration.identity)


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


def unregister_broker(ctx: HandlerContext, request: RemotingCommand, channel: Channel) -> RemotingCommand:
    """Applied synchronously: the answer means the broker is gone (RocketMQ 5.x only queues it)."""
    header = RequestHeader(request)
    ctx.routes.unregister_broker(header.required_text("clusterName"), header.required_text("brokerAddr"),
                                 header.required_text("brokerName"), header.integer("brokerId"))
    return request.make_response(ResponseCode.SUCCESS)


def query_data_version(ctx: HandlerContext, request: RemotingCommand, channel: Channel) -> RemotingCommand:
    """Has the broker's topic table changed since it registered? Also a liveness heartbeat."""
    header = RequestHeader(request)
    cluster_name, broker_addr = header.required_text("clusterName"), header.required_text("brokerAddr")
    data_version = DataVersion.decode(request.body) if request.body else None
    changed, stored = ctx.routes.query_data_version(cluster_name, broker_addr, data_version)
    return request.make_response(ResponseCode.SUCCESS, ext_fields={"changed": wire_string(changed)},
                                 body=None if stored is None else stored.encode())


def broker_heartbeat(ctx: HandlerContext, request: RemotingCommand, channel: Channel) -> RemotingCommand:
    header = RequestHeader(request)
    ctx.routes.update_broker_timestamp(header.required_text("clusterName"), header.required_text("brokerAddr"))
    return request.make_response(ResponseCode.SUCCESS)
