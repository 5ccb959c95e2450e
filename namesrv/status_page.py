"""The status page on the operator's HTTP port: the fleet as this NameServer sees it, live.

`GET /` and `/status` serve one self-contained HTML page (namesrv/static/status.html: its style
and script inline, no CDN, nothing fetched from anywhere but this server; readable on a phone),
which polls the JSON below every two seconds:

* `/status.json`: the server, clusters -> broker groups -> brokers (address, id, zone, data
  version, last registration or heartbeat, heartbeat timeout, the connection it came over and
  whether it is TLS), the table's sizes, route-change subscribers, the route history's use, and
  the divergence check's last pass. Built at most once per `CACHE_SECONDS` whoever asks.
* `/status/events.json?after=SEQ`: the stream of route changes after SEQ (registrations that
  changed something, expiries, unregistrations, closed connections, permission wipes, deletions),
  from the route history's ring (namesrv.routeinfo.history), at most `MAX_EVENTS` per answer.
* `/status/topics.json?q=TEXT&offset=N`: topics whose name contains TEXT, `TOPICS_PER_PAGE` at a
  time, each with its queue entries and order config.
* `/status/explain.json?topic=T`: why T has no route (namesrv.routeinfo.explain), as explainRoute.

The JSON names the addresses brokers, subscribers and admins connect from, so adminAllowedNetworks
and adminToken apply to it as to admin requests (the token in the `X-Admin-Token` header; the page
asks for it once and keeps it in the tab's sessionStorage); the HTML itself holds no data.
`statusPageEnable=false` turns all of it off (404).

With worker processes worker 0 serves the page: the route table and its history are the same in
every worker (they apply one write log); the connections' TLS and the subscribers are each
worker's own, and worker 0 asks its siblings for theirs (`local_facts`, over the metrics peers'
sockets: namesrv.metrics_peers), so the page is one view of the whole server.
"""
from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from importlib import resources
from typing import Any
from urllib.parse import parse_qs

import msgpack
import orjson

from namesrv.channel import Channel
from namesrv.config import NamesrvConfig
from namesrv.kvconfig import ORDER_TOPIC_CONFIG, KVConfigManager
from namesrv.protocol.route import QueueData
from namesrv.routeinfo.route_input import IllegalRoute, check_topic
from namesrv.processor.route_push import RouteSubscriptions
from namesrv.routeinfo import RouteInfoManager, explain
from namesrv.routeinfo.history import REMOVALS
from namesrv.security import ADMIN_TOKEN_FIELD, AdminGuard
from namesrv.writelog.log import SiblingChannel

#: Paths served (the operator's HTTP port routes them here).
PATHS = ("/", "/status", "/status.json", "/status/events.json", "/status/topics.json", "/status/explain.json")
#: The header the page sends the admin token in.
TOKEN_HEADER = "X-Admin-Token"
#: /status.json is built at most this often, however many pages poll it.
CACHE_SECONDS = 1.0
MAX_EVENTS = 200
TOPICS_PER_PAGE = 50
#: Subscribers listed per worker process (the rest are counted).
MAX_SUBSCRIBERS = 200
#: Removed brokers listed.
MAX_GONE = 100
#: Matching topics sorted by name up to this many (more are shown in the table's order).
SORT_TOPICS = 100_000

#: (status, content type, body)
Reply = tuple[int, str, bytes]
JSON = "application/json"


def _page() -> bytes:
    return resources.files("namesrv").joinpath("static/status.html").read_bytes()


def local_facts(routes: RouteInfoManager, security_of: Callable[[Channel], str | None],
                subscriptions: RouteSubscriptions, incarnation: tuple[int, int] | None = None) -> dict[str, Any]:
    """What only this process knows: the protection of the broker connections it holds, and its
    subscribers. `incarnation`: this worker's (index, generation), for worker 0 to match its stand-ins."""
    connections = {}
    for channel in routes.channels():
        if not isinstance(channel, SiblingChannel):
            connections[f"{channel.transport}:{channel.ident.hex()}"] = security_of(channel)
    return {"incarnation": None if incarnation is None else list(incarnation), "connections": connections,
            "subscribers": subscriptions.listing(MAX_SUBSCRIBERS), "subscriberCount": len(subscriptions),
            "pushed": subscriptions.pushed, "dropped": subscriptions.dropped}


@dataclass
class StatusSources:
    """Where the page reads from."""

    config: NamesrvConfig
    routes: RouteInfoManager
    kv: KVConfigManager
    #: This process's facts (`local_facts`), and each sibling worker's (packed), if any.
    facts: Callable[[], dict[str, Any]]
    siblings: Callable[[], list[bytes]] = list
    address: Callable[[], str] = str
    divergence: Callable[[], dict[str, Any] | None] = lambda: None
    workers: int = 1


class StatusPage:
    """`reply(path, query, headers, client_address)` answers the paths of `PATHS` (any thread)."""

    def __init__(self, sources: StatusSources, clock: Callable[[], float] = time.monotonic) -> None:
        self._sources = sources
        self._guard = AdminGuard.from_settings(sources.config.admin_allowed_networks, sources.config.admin_token)
        self._clock = clock
        self._lock = threading.Lock()
        self._overview: tuple[float, bytes] | None = None
        self._page = _page()
        self.started_ms = int(time.time() * 1000)

    def reply(self, path: str, query: str, headers: Mapping[str, str], client_address: str) -> Reply | None:
        """The answer to a GET of one of `PATHS`, else None."""
        if path not in PATHS:
            return None
        if path in ("/", "/status"):
            return 200, "text/html; charset=utf-8", self._page
        refusal = self._guard.refusal({ADMIN_TOKEN_FIELD: headers.get(TOKEN_HEADER)} if headers.get(TOKEN_HEADER)
                                      else {}, client_address) if self._guard.restricted else None
        if refusal is not None:
            return 403, JSON, orjson.dumps({"error": refusal, "tokenHeader": TOKEN_HEADER})
        try:
            params = {key: values[-1] for key, values in parse_qs(query, max_num_fields=8).items()}
        except ValueError as exc:  # more fields than any of these paths takes
            return 400, JSON, orjson.dumps({"error": str(exc)})
        if path == "/status.json":
            return 200, JSON, self.overview()
        if path == "/status/events.json":
            return 200, JSON, orjson.dumps(self.events(_int(params.get("after"), 0)))
        if path == "/status/topics.json":
            return 200, JSON, orjson.dumps(self.topics(params.get("q", ""), _int(params.get("offset"), 0)))
        if path == "/status/explain.json":
            topic = params.get("topic", "")
            try:
                check_topic(topic)
            except IllegalRoute as exc:
                return 400, JSON, orjson.dumps({"error": str(exc)})
            return 200, JSON, orjson.dumps(self.explain(topic))
        raise AssertionError(path)

    # ------------------------------------------------------------------ the answers

    def overview(self) -> bytes:
        """/status.json, rebuilt at most once per CACHE_SECONDS."""
        with self._lock:
            now = self._clock()
            if self._overview is None or now - self._overview[0] >= CACHE_SECONDS:
                self._overview = now, orjson.dumps(self._build_overview())
            return self._overview[1]

    def _build_overview(self) -> dict[str, Any]:
        sources = self._sources
        views = [sources.facts(), *(_unpack(packed) for packed in sources.siblings())]
        security: dict[tuple, str | None] = {}
        for index, view in enumerate(views):
            incarnation = tuple(view["incarnation"]) if view.get("incarnation") else None
            for key, value in view["connections"].items():
                security[(incarnation if index else None, key)] = value
        routes = sources.routes
        now_ms = int(time.time() * 1000)
        clusters = []
        with routes.reading() as tables:
            for cluster, names in sorted(tables.cluster_addr_table.items()):
                groups = []
                for name in sorted(names):
                    group = tables.broker_addr_table.get(name)
                    if group is None:
                        continue
                    brokers = []
                    for broker_id, addr in sorted(group.broker_addrs.items()):
                        live = tables.broker_live_table.get((cluster, addr))
                        brokers.append(_broker(broker_id, addr, live, security))
                    groups.append({"name": name, "zone": group.zone_name, "actingMaster": group.enable_acting_master,
                                   "brokers": brokers})
                clusters.append({"name": cluster, "groups": groups})
            live = set(tables.broker_live_table)
        history = routes.route_events
        gone: dict[tuple, dict[str, Any]] = {}
        for event in [] if history is None else history.stream():
            key = (event.cluster, event.broker_addr)
            if event.kind in REMOVALS:
                gone[key] = {**event.to_json(), "reason": explain.removal_text(event)}
            else:
                gone.pop(key, None)
        subscribers = [entry for view in views for entry in view["subscribers"]]
        return {
            "server": {"address": sources.address(), "workers": sources.workers, "workersReporting": len(views),
                       "startedAt": self.started_ms, "now": now_ms, "cacheSeconds": CACHE_SECONDS},
            "sizes": routes.sizes(), "clusters": clusters,
            #: Brokers the stream saw removed and not back since, the latest first, with the reason.
            "gone": sorted((entry for key, entry in gone.items() if key not in live), key=lambda e: -e["seq"])[:MAX_GONE],
            "subscribers": {"count": sum(view["subscriberCount"] for view in views), "listed": subscribers,
                            "pushed": sum(view["pushed"] for view in views),
                            "dropped": sum(view["dropped"] for view in views)},
            "history": None if history is None else history.usage(),
            "divergence": sources.divergence(),
        }

    def events(self, after: int) -> dict[str, Any]:
        history = self._sources.routes.route_events
        if history is None:
            return {"events": [], "lastSeq": 0}
        events = history.stream(after, MAX_EVENTS)
        return {"events": [event.to_json() for event in events], "lastSeq": history.usage()["lastSeq"]}

    def topics(self, text: str, offset: int) -> dict[str, Any]:
        routes = self._sources.routes
        with routes.reading() as tables:
            names = list(tables.topic_queue_table)
        if text:
            needle = text.lower()
            names = [name for name in names if needle in name.lower()]
        ordered = len(names) <= SORT_TOPICS
        if ordered:
            names.sort()
        page = names[offset:offset + TOPICS_PER_PAGE]
        kv = self._sources.kv
        rows = []
        with routes.reading() as tables:
            for topic in page:
                queues = tables.topic_queue_table.get(topic) or {}  # RouteInfoManager.reading's entries
                rows.append({"topic": topic, "queueDatas": [QueueData(group, *entry).to_dict()
                                                            for group, entry in queues.items()]})
        for row in rows:
            row["orderTopicConf"] = kv.get(ORDER_TOPIC_CONFIG, row["topic"])
        return {"total": len(names), "offset": offset, "sorted": ordered, "topics": rows}

    def explain(self, topic: str) -> dict[str, Any]:
        kv = self._sources.kv
        return explain.explain_route(self._sources.routes, topic, kv.get(ORDER_TOPIC_CONFIG, topic),
                                     int(time.time() * 1000))


def _broker(broker_id: int, addr: str, live: Any, security: Mapping[tuple, str | None]) -> dict[str, Any]:
    entry: dict[str, Any] = {"id": broker_id, "addr": addr, "live": live is not None}
    if live is None:
        return entry
    channel = live.channel
    incarnation = None
    if isinstance(channel, SiblingChannel):
        incarnation, channel = channel.incarnation, channel.origin_channel
    key = (incarnation, None if channel is None else f"{channel.transport}:{channel.ident.hex()}")
    transport = None if channel is None else channel.transport
    entry.update({"dataVersion": live.data_version.to_dict(), "lastRefresh": live.last_update_timestamp,
                  "timeoutMillis": live.heartbeat_timeout_millis, "haAddr": live.ha_server_addr,
                  "connection": None if channel is None else {"peer": channel.remote_addr, "transport": transport,
                                                              "security": security.get(key)}})
    return entry


def _unpack(packed: bytes) -> dict[str, Any]:
    return msgpack.unpackb(packed)


def _int(text: str | None, default: int) -> int:
    try:
        return max(0, int(text)) if text is not None else default
    except ValueError:
        return default
