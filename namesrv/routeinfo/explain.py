"""Why has this topic no route (or the route it has)? The answer of EXPLAIN_ROUTE and the status page (sans-IO).

It puts together what the route table holds now (read under its read lock) and what the route
history (namesrv.routeinfo.history) remembers of the topic: when each broker group registered it,
when and why it lost it, who wiped its write permission or deleted it, and when it came back.
The answer is plain data (JSON on the wire) with one sentence on top, `verdict`, and a sentence
per event, so that `namesrv-admin explainRoute` and the page print the same words.
"""
from __future__ import annotations

import time
from typing import Any

from namesrv.protocol.codes import PERM_WRITE
from namesrv.protocol.route import QueueData
from namesrv.routeinfo import history as h
from namesrv.routeinfo.manager import RouteInfoManager
from namesrv.routeinfo.model import RouteTables


def when(ms: int | None) -> str:
    """A wall-clock time in ms as UTC text (what the admin tool and the page print)."""
    if ms is None:
        return "an unknown time"
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(ms / 1000)) + f".{ms % 1000:03d} UTC"


def broker_text(event: h.RouteEvent) -> str:
    name = event.broker_name or "?"
    ident = "" if event.broker_id is None else f"[{event.broker_id}]"
    addr = f" {event.broker_addr}" if event.broker_addr else ""
    return f"broker {name}{ident}{addr}"


def removal_text(event: h.RouteEvent) -> str:
    """Why a broker was removed (a removal event), in one clause."""
    last = f"its last registration or heartbeat was at {when(event.last_refresh_ms)}"
    if event.kind == h.CHANNEL_CLOSED:
        return f"{broker_text(event)}'s connection from {event.peer or '?'} closed ({last})"
    if event.kind == h.EXPIRED:
        silent = "?" if event.last_refresh_ms is None else f"{(event.at_ms - event.last_refresh_ms) / 1000:.0f}"
        timeout = "?" if event.timeout_ms is None else f"{event.timeout_ms / 1000:g}"
        return (f"{broker_text(event)} was silent for {silent} s (heartbeat timeout {timeout} s; its last "
                f"registration came from {event.peer or '?'} at {when(event.last_refresh_ms)})")
    return f"{broker_text(event)} unregistered (over its connection from {event.peer or '?'}; {last})"


def event_text(event: h.RouteEvent, present: bool) -> str:
    """One event as it concerns one topic (`present`: whether the topic kept the entry it changed)."""
    kind = event.kind
    if kind == h.REGISTERED:
        if not present:
            return f"{broker_text(event)} registered without it (deleteTopicWithBrokerRegistration)"
        return f"served by {broker_text(event)} (registered from {event.peer or '?'})"
    if kind in h.REMOVALS:
        return f"{removal_text(event)}: " + (f"{event.broker_name}'s queues of it removed" if not present
                                             else f"{event.broker_name}'s queues kept, read-only (acting master)")
    if kind == h.TOPIC_DELETED:
        scope = f" from cluster {event.cluster}'s brokers" if event.cluster else ""
        return f"deleted{scope} by an admin at {event.peer or '?'} (DELETE_TOPIC_IN_NAMESRV)"
    if kind == h.TOPIC_REGISTERED:
        return f"registered by an admin at {event.peer or '?'} (REGISTER_TOPIC_IN_NAMESRV)"
    if kind == h.WRITE_PERM_WIPED:
        return f"write permission of broker {event.broker_name} wiped by an admin at {event.peer or '?'}"
    if kind == h.WRITE_PERM_ADDED:
        return f"write permission of broker {event.broker_name} restored by an admin at {event.peer or '?'}"
    return kind


def current_route(tables: RouteTables, topic: str) -> list[dict[str, Any]]:
    """The topic's groups as routes name them now, with each broker's liveness (caller holds the read lock)."""
    groups = []
    for name, entry in (tables.topic_queue_table.get(topic) or {}).items():  # RouteInfoManager.reading's entries
        group = tables.broker_addr_table.get(name)
        if group is None:
            continue
        brokers = []
        for broker_id, addr in sorted(group.broker_addrs.items()):
            live = tables.broker_live_table.get((group.cluster, addr))
            brokers.append({"brokerId": broker_id, "addr": addr,
                            "lastRefresh": None if live is None else live.last_update_timestamp,
                            "timeoutMillis": None if live is None else live.heartbeat_timeout_millis,
                            "connection": None if live is None or live.channel is None else str(live.channel)})
        groups.append({"brokerName": name, "cluster": group.cluster, "queueData": QueueData(name, *entry).to_dict(),
                       "brokers": brokers})
    return groups


def explain(topic: str, groups: list[dict[str, Any]], past: h.TopicHistory | None, now_ms: int,
            order_topic_conf: str | None = None) -> dict[str, Any]:
    """The answer: `groups` as `current_route` gave them, `past` the topic's history (None: no history kept)."""
    entries = [] if past is None else past.entries
    events = [{**event.to_json(), "kept": present, "text": event_text(event, present)} for event, present in entries]
    answer: dict[str, Any] = {"topic": topic, "at": now_ms, "route": bool(groups), "groups": groups,
                              "orderTopicConf": order_topic_conf, "events": events,
                              "history": None if past is None else {
                                  "more": past.more, "eventsSince": past.events_since_ms,
                                  "forgottenLosses": past.forgotten_losses, "lossesSince": past.losses_since_ms,
                                  "since": past.started_ms}}
    answer["verdict"] = verdict(topic, groups, entries, past)
    return answer


def verdict(topic: str, groups: list[dict[str, Any]], entries: list[tuple[h.RouteEvent, bool]],
            past: h.TopicHistory | None) -> str:
    if groups:
        served = []
        for group in groups:
            since = next((event for event, present in reversed(entries)
                          if event.kind == h.REGISTERED and event.broker_name == group["brokerName"] and present),
                         None)
            master = any(b["brokerId"] == 0 for b in group["brokers"])
            writable = bool(group["queueData"]["perm"] & PERM_WRITE)
            note = "" if master and writable else " (no master)" if not master else " (read-only)"
            served.append(f"{group['brokerName']}{note}" + ("" if since is None else f" since {when(since.at_ms)}"))
        return f"{topic} has a route here: served by " + ", ".join(served)
    if entries:
        event, present = entries[-1]
        return f"{topic} has no route here since {when(event.at_ms)}: {event_text(event, present)}"
    if past is None:
        return f"{topic} has no route here, and this server keeps no route history (routeHistoryMaxBytes=0)"
    if past.forgotten_losses:
        # Every topic that had a route and lost it keeps its last loss, unless the budget forgot it.
        return (f"{topic} has no route here and no record of it (the history forgot the last loss of "
                f"{past.forgotten_losses} topics, up to {when(past.losses_since_ms)}, to stay within "
                f"routeHistoryMaxBytes)")
    return f"{topic} was never registered here (the history is complete since {when(past.started_ms)})"


def explain_route(routes: RouteInfoManager, topic: str, order_topic_conf: str | None, now_ms: int) -> dict[str, Any]:
    """`explain` of what `routes` holds now and remembers (EXPLAIN_ROUTE, the status page)."""
    with routes.reading() as tables:
        groups = current_route(tables, topic)
    past = None if routes.route_events is None else routes.route_events.topic(topic)
    return explain(topic, groups, past, now_ms, order_topic_conf)
