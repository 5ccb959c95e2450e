"""What brokers send: REGISTER_BROKER, UNREGISTER_BROKER, QUERY_DATA_VERSION, BROKER_HEARTBEAT."""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, NamedTuple

from namesrv.channel import Channel
from namesrv.kvconfig import ORDER_TOPIC_CONFIG
from namesrv.processor.context import (EXECUTOR, HINTS_INLINE, RETRY, Change, HandlerContext, Hints, Refusal,
                                       WriteHandler, every_change)
from namesrv.processor.header import RequestHeader
from namesrv.processor.limits import topic_count_beyond
from namesrv.protocol.codes import V3_0_11, ResponseCode, Version
from namesrv.protocol.command import RemotingCommand, wire_string
from namesrv.protocol.route import KVTable, RegisterBrokerResult
from namesrv.protocol.topic import DataVersion, TopicQueueTable, data_version_of, decode_registration
from namesrv.routeinfo import Registrant, RouteTableFull, StaleTopicEntries
from namesrv.routeinfo.route_input import IllegalRoute, check_names, check_queues_summed
from namesrv.routeinfo.zones import ZONE_NAME

log = logging.getLogger(__name__)


@dataclass(slots=True)
class RegistrationHeader:
    """What REGISTER_BROKER's header says: who registers (`registrant`), the body's announced CRC32,
    and what the decoded body depends on besides its bytes (`body_form`: the codec flag and the
    sender's version thresholds). Never changed once made (`with_crc` makes another). Slots, not a
    NamedTuple: a changed registration reads its fields a dozen times, and Python 3.11 reads a
    slot with a specialised instruction but a NamedTuple's field through the generic attribute
    lookup (not frozen either: the reactor makes one per new DataVersion it reads, and a frozen
    dataclass sets each field through `object.__setattr__`).

    `illegal_names` is why `route_input.check_names` refuses the registrant (None: it does not),
    found when the header is read: the names are the header's, read once per broker and header
    shape, while each new DataVersion is decoded. A decoded registration is refused for it where
    the check ran before, after the body's own checks, so every answer stays the same."""

    registrant: Registrant
    body_crc32: int
    compressed: bool
    version: int
    body_form: tuple[bool, bool, bool]
    illegal_names: str | None = None

    @classmethod
    def read(cls, request: RemotingCommand) -> RegistrationHeader:
        """BadRequest names a missing or malformed field."""
        header = RequestHeader(request)
        registrant = Registrant(header.required_text("clusterName"), header.required_text("brokerAddr"),
                                header.required_text("brokerName"), header.required_integer("brokerId"),
                                header.text("haServerAddr"), header.integer("heartbeatTimeoutMillis"),
                                header.boolean("enableActingMaster"), header.text(ZONE_NAME))
        compressed = bool(header.boolean("compressed"))
        version = request.version
        try:
            check_names(registrant)
            illegal_names = None
        except IllegalRoute as exc:
            illegal_names = str(exc)
        return cls(registrant, header.integer("bodyCrc32", bits=32) or 0, compressed, version,
                   (compressed, version >= V3_0_11, version >= Version.V5_0_0), illegal_names)

    def with_crc(self, crc: int) -> RegistrationHeader:
        """The same header announcing `crc`."""
        return RegistrationHeader(self.registrant, crc, self.compressed, self.version, self.body_form,
                                  self.illegal_names)

    def repeats(self, length: int, crc: int, stored: Fingerprint | None) -> bool:
        """Is a body of `length` bytes and masked CRC32 `crc` (read as announced: `body_intact`) the
        one of `stored`, the fingerprint of the broker's last registration?"""
        return stored is not None and stored[0] == length and stored[1] == crc and stored[2:] == self.body_form

    def body_intact(self, crc: int) -> bool:
        """Is `crc` (the body's masked CRC32) the announced one? Announcing 0 skips the check."""
        return self.body_crc32 == 0 or crc == self.body_crc32


#: A registration body's fingerprint: everything its decode depends on, (length, CRC32, compressed,
#: >= 3.0.11, >= 5.0.0). The CRC32 is the one the protocol's check computes anyway. It only guards
#: against accidental equality: a broker can only ever collide with its own previous registration
#: (its body, DataVersion included, unchanged in length and CRC32 while it changed: CRC32 catches
#: every change within 32 bits, and others but one in 2^32), and whatever it sends is taken as its
#: topic table anyway. RocketMQ decides on the DataVersion alone.
Fingerprint = tuple[int, int, bool, bool, bool]


@dataclass(slots=True)
class RegistrationChange:
    """REGISTER_BROKER's change: who, the body's fingerprint, and its decoded table (as the decode
    made it) and filter servers; `table` None for the repeat of the broker's last body (a liveness
    refresh). Slots, as `RegistrationHeader` (and not frozen either: one is made per registration
    prepared); the write log carries the list of its fields. Never changed once made."""

    registrant: Registrant
    fingerprint: Fingerprint
    table: TopicQueueTable | None = None
    filter_servers: list[str] | None = None

    @classmethod
    def of(cls, change: Change) -> RegistrationChange:
        """The change as `prepare` made it, from the write log's form (`WriteHandler.revive`: lists for tuples)."""
        registrant, fingerprint, table, filter_servers = change
        return cls(Registrant(*registrant), tuple(fingerprint),
                   None if table is None else TopicQueueTable.from_fields(table), filter_servers)


def prepare_registration(ctx: HandlerContext, request: RemotingCommand, channel: Channel,
                         hints: Hints) -> RegistrationChange | RemotingCommand | object:
    """Reference 2.3: checksum, then either a liveness refresh or the decoded body (never under a lock).

    Most registrations are the 30-second repeat of an unchanged topic table: with `hints`, one
    that is the broker's last body is a refresh, its body not decoded (a 10,000-topic body costs
    tens of milliseconds to decode; the CRC32 the protocol's check computes anyway, a fraction of
    one, recognises it: `Fingerprint`).
    A body to decode is first held to maxTopicsPerRegistration (a repeat was held to it when it
    first came: the key is locked). A master's new DataVersion usually changes a few topics of its
    table: with `hints` only the topic entries changed since its previous registration are read.
    On the reactor (`Hints.INLINE`) a compressed body, or one larger than
    inlineRegistrationMaxBodyBytes, is left to an executor (EXECUTOR) unless it is a repeat.
    """
    registration = request.typed_header(RegistrationHeader)
    registrant, compressed = registration.registrant, registration.compressed
    length = 0 if request.body is None else len(request.body)  # bytes, or (from the reactor) a view of the frame
    crc = request.body_crc32()
    if not registration.body_intact(crc):
        log.warning("REGISTER_BROKER of %s from %s: body crc32 does not match %d", registrant.broker_addr, channel,
                    registration.body_crc32)
        return request.make_response(ResponseCode.SYSTEM_ERROR, "crc32 not match")
    previous = None
    if hints:
        stored, previous = ctx.routes.registration_hints(registrant)
        if registration.repeats(length, crc, stored):
            return RegistrationChange(registrant, stored)
    if hints is HINTS_INLINE and (compressed or length > ctx.config.inline_registration_max_body_bytes):
        return EXECUTOR
    limit = ctx.config.max_topics_per_registration
    count = topic_count_beyond(limit, request.body, compressed, request.version) if limit else None
    if count is not None:
        log.warning("REGISTER_BROKER of %s from %s refused: %d topics, maxTopicsPerRegistration is %d",
                    registrant.broker_addr, channel, count, limit)
        return request.make_response(ResponseCode.SYSTEM_ERROR,
                                     f"register broker failed: {count} topics exceed maxTopicsPerRegistration={limit}")
    table, filter_servers = decode_registration(request.body, compressed, request.version, previous)
    try:  # the topic entries left out as unchanged were checked when they came
        if registration.illegal_names is not None:
            raise IllegalRoute(registration.illegal_names)
        check_queues_summed(table.facts, table.topics.values(), ctx.config.max_queue_nums_per_topic)
    except IllegalRoute as exc:
        log.warning("REGISTER_BROKER of %s from %s refused: %s", registrant.broker_addr, channel, exc)
        return request.make_response(ResponseCode.SYSTEM_ERROR, f"register broker failed: {exc}")
    if request.body is None and request.version >= V3_0_11:
        filter_servers = []  # RocketMQ's empty RegisterBrokerBody has an empty (not null) filter-server list
    return RegistrationChange(registrant, (length, crc, *registration.body_form), table, filter_servers)


def apply_registration(ctx: HandlerContext, change: Change, channel: Channel) -> RegisterBrokerResult | None | object:
    """The route table's registration; None when its single-topic guard refuses, RETRY when the
    hint the change was prepared with (an unchanged body, unchanged topic entries) does not hold."""
    registrant, fingerprint, table = change.registrant, change.fingerprint, change.table
    if table is None:
        result = ctx.routes.refresh(registrant, fingerprint, channel)
        return RETRY if result is None else result
    try:
        return ctx.routes.register(registrant, table, change.filter_servers, channel, fingerprint)
    except StaleTopicEntries:  # the route table changed since the decode: read the body in full
        return RETRY
    except RouteTableFull as exc:
        log.warning("REGISTER_BROKER of %s from %s refused: %s", registrant.broker_addr, channel, exc)
        return Refusal(ResponseCode.SYSTEM_ERROR, f"register broker failed: {exc}")


def answer_registration(ctx: HandlerContext, request: RemotingCommand, outcome: object) -> RemotingCommand:
    """The master's address and HA address, and the order topics; or "register broker failed"."""
    if type(outcome) is not RegisterBrokerResult:
        return request.make_response(ResponseCode.SYSTEM_ERROR, "register broker failed")
    return request.make_response(ResponseCode.SUCCESS, ext_fields=registration_ext_fields(outcome),
                                 body=order_topics_body(ctx))


def _refreshes(change: RegistrationChange) -> bool:
    """A refresh (the broker's last body again) may be applied again for the same header and body:
    `refresh` checks under the lock that it is still the broker's last (RETRY when not). A decoded
    table is not kept: the next such request is a refresh."""
    return change.table is None


def _order_topics_read(ctx: HandlerContext) -> int | None:
    """What `order_topics_body` reads: the KV table (its revision) while the answer carries it."""
    return ctx.kv.revision if ctx.config.return_order_topic_config_to_broker else None


register_broker = WriteHandler(prepare_registration, apply_registration, answer_registration,
                               replayable=_refreshes, answer_reads=_order_topics_read, revive=RegistrationChange.of)


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


def _prepare_unregistration(ctx: HandlerContext, request: RemotingCommand, channel: Channel, hints: Hints) -> Change:
    header = RequestHeader(request)
    return (header.required_text("clusterName"), header.required_text("brokerAddr"),
            header.required_text("brokerName"), header.integer("brokerId"))


def _apply_unregistration(ctx: HandlerContext, change: Change, channel: Channel) -> None:
    ctx.routes.unregister_broker(*change)


#: Applied synchronously: the answer means the broker is gone (RocketMQ 5.x only queues it).
unregister_broker = WriteHandler(_prepare_unregistration, _apply_unregistration)


class BrokerKey(NamedTuple):
    """The broker a heartbeat or a data-version query is about (read once per header shape)."""

    cluster_name: str
    broker_addr: str

    @classmethod
    def read(cls, request: RemotingCommand) -> BrokerKey:
        header = RequestHeader(request)
        return cls(header.required_text("clusterName"), header.required_text("brokerAddr"))


def _prepare_data_version_query(ctx: HandlerContext, request: RemotingCommand, channel: Channel,
                                hints: Hints) -> Change:
    cluster_name, broker_addr = request.typed_header(BrokerKey)
    return cluster_name, broker_addr, DataVersion.decode(request.body) if request.body else None


def _revive_data_version_query(change: Change) -> Change:
    cluster_name, broker_addr, version = change
    return cluster_name, broker_addr, data_version_of(version)


@dataclass(frozen=True, slots=True)
class DataVersionChanged:
    """A data-version query's outcome when the broker's stored DataVersion (`stored`; None: the
    broker is not registered) is not the one queried."""

    stored: DataVersion | None


def _apply_data_version_query(ctx: HandlerContext, change: Change,
                              channel: Channel) -> DataVersion | DataVersionChanged:
    """The stored DataVersion itself when the query names it (what a broker asks every 30 seconds:
    a kept answer is then current by identity, `WriteFastPath.answer`), else `DataVersionChanged`;
    the broker's liveness is refreshed either way (RocketMQ 5.x)."""
    stored = ctx.routes.query_data_version(change[0], change[1])
    return stored if stored is not None and stored == change[2] else DataVersionChanged(stored)


def _answer_data_version_query(ctx: HandlerContext, request: RemotingCommand,
                               outcome: DataVersion | DataVersionChanged) -> RemotingCommand:
    changed = type(outcome) is DataVersionChanged
    stored = outcome.stored if changed else outcome
    return request.make_response(ResponseCode.SUCCESS, ext_fields={"changed": wire_string(changed)},
                                 body=None if stored is None else stored.encode())


#: Has the broker's topic table changed since it registered? Also a liveness heartbeat.
query_data_version = WriteHandler(_prepare_data_version_query, _apply_data_version_query, _answer_data_version_query,
                                  replayable=every_change, revive=_revive_data_version_query)


def _prepare_heartbeat(ctx: HandlerContext, request: RemotingCommand, channel: Channel, hints: Hints) -> Change:
    return request.typed_header(BrokerKey)


def _apply_heartbeat(ctx: HandlerContext, change: Change, channel: Channel) -> None:
    # Indexed, not `*change`: a call with unpacked arguments copies the key into a new tuple first.
    ctx.routes.update_broker_timestamp(change[0], change[1])


broker_heartbeat = WriteHandler(_prepare_heartbeat, _apply_heartbeat, replayable=every_change)
