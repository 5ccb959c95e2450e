"""Zone routes (RocketMQ 5.x ZoneRouteRPCHook): a client in zone mode is answered with its own zone's brokers.

A 5.x process started with `rocketmq.zone` / ROCKETMQ_ZONE and `rocketmq.zone.mode` / ROCKETMQ_ZONE_MODE adds
`__ZONE_NAME` and `__ZONE_MODE` to the extFields of every request it sends (DynamicalExtFieldRPCHook). A broker's
`__ZONE_NAME` is recorded with its group's registration and travels as BrokerData's `zoneName`; a client's asks
for a filtered route: `requested_zone` is the one reading of those fields, `zone_route` the one filter, for
route queries (whichever path answers them) and route-change subscriptions alike.

The rule is 5.x's: a group stays when its zone name equals the client's ignoring case (Java's
String.equalsIgnoreCase, character by character: `zone_key`), or when it has no master ("master down,
consume from slave": a zone never loses a group's messages because its master is away); the queue entries
and filter servers of the other groups are left out. Unlike 5.x, the answer keeps the JSON flavour the
client asked for (5.x re-encodes the filtered route with fastjson's defaults, the legacy flavour, whatever
the client reads), and the static-topic mappings of the groups left out go with them.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from namesrv.protocol.route import MASTER_ID, TopicRouteData

#: RocketMQ's MixAll.ZONE_NAME and MixAll.ZONE_MODE: raw extFields keys, not typed header fields.
ZONE_NAME = "__ZONE_NAME"
ZONE_MODE = "__ZONE_MODE"


def requested_zone(ext_fields: Mapping[str, str] | None) -> str | None:
    """The zone a request asks its route filtered to: `__ZONE_MODE` true (Boolean.parseBoolean: any case)
    and a `__ZONE_NAME` that is not blank; None for every other request (answered unfiltered)."""
    if not ext_fields:
        return None
    mode = ext_fields.get(ZONE_MODE)
    if mode is None or mode.lower() != "true":
        return None
    zone = ext_fields.get(ZONE_NAME)
    if zone is None or not zone or zone.isspace():
        return None
    return zone


def zone_key(zone: str) -> str:
    """`zone` folded so that two names have the same key exactly when Java's equalsIgnoreCase calls them
    equal: each character's simple upper case, then its simple lower case (a character whose full
    mapping is several characters keeps itself, as Character.toUpperCase does)."""
    if zone.isascii():
        return zone.lower()
    return "".join(map(_fold, zone))


def _fold(char: str) -> str:
    upper = char.upper()
    if len(upper) != 1:
        upper = char
    lower = upper.lower()
    return lower if len(lower) == 1 else upper


def zone_route(route: TopicRouteData, zone: str) -> tuple[TopicRouteData, bool]:
    """(`route` as a client in `zone` is answered, whether a group of `route` is in that zone).

    `route` itself when every group stays; otherwise a new route sharing the kept parts."""
    key = zone_key(zone)
    in_zone = False
    kept, left_out = [], []
    for group in route.broker_datas:
        same_zone = group.zone_name is not None and zone_key(group.zone_name) == key
        in_zone = in_zone or same_zone
        (kept if same_zone or MASTER_ID not in group.broker_addrs else left_out).append(group)
    if not left_out:
        return route, in_zone
    names = {group.broker_name for group in left_out}
    addrs = {addr for group in left_out for addr in group.broker_addrs.values()}
    mapping = route.topic_queue_mapping_by_broker
    return replace(route, broker_datas=kept,
                   queue_datas=[queue for queue in route.queue_datas if queue.broker_name not in names],
                   filter_server_table={addr: servers for addr, servers in route.filter_server_table.items()
                                        if addr not in addrs},
                   topic_queue_mapping_by_broker=None if mapping is None else
                   {name: info for name, info in mapping.items() if name not in names}), in_zone
