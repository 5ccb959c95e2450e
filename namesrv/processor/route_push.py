"""Route-change push: who subscribed to which topics, and the batches a round of changes sends them (sans-IO).

RocketMQ clients learn of a dead broker on their next poll, up to 30 s later (and 120 s more when
the broker vanished without closing its connection). Here a client may subscribe on the
connection it already has (SUBSCRIBE_ROUTE_CHANGES: named topics, or all of them) and is answered
with the named topics' current routes and versions; from then on every change of a subscribed
topic's route reaches it as a oneway ROUTE_CHANGED command: the topic, its new version, and the
new route (or null: deleted).

* Versions count the changes of one topic while anybody subscribed (1, 2, ...): a subscriber that
  knew version 3 and is told 5 missed one and fetches the route again. A deleted topic keeps its
  count (it goes on if the topic comes back) until the counts of topics no longer in the table are
  dropped: whenever the counts kept have doubled (plus VERSIONS_SLACK) since the last such sweep.
* Coalescing: everything that changed since the last round goes out as one batch per subscriber
  (a broker leaving changes thousands of topics at once: one batch, not thousands of messages),
  split into bodies of at most PUSH_BODY_BYTES. Subscribers with the same topics, codec and zone
  share the encoded frames.
* A subscriber in zone mode (namesrv.routeinfo.zones) is pushed its zone's routes, as it polls them.
* Bounded: named topics count against three shares, so that no peer can take the others' (one
  connection at most `maxRouteSubscriptionTopicsPerConnection`, the connections of one peer host
  at most `maxRouteSubscriptionTopicsPerHost`, all of them at most `maxRouteSubscriptionTopics`),
  and a connection may name at most MAX_UNKNOWN_TOPICS topics the route table does not hold (a
  known topic's name is the table's own string; an unknown one costs its own). What subscribers
  hold unsent is bounded by the route publisher (namesrv.route_publisher): past its share a
  subscriber is told it was dropped to polling (`drop`: ROUTE_CHANGED with `dropped`) and
  unsubscribed.
* A round is built off the reactor, on the publisher's thread, which hands the interpreter lock
  to the other threads every YIELD_EVERY topics it encodes: a round of thousands of topics would
  otherwise hold it for tens of milliseconds at a time, and the reactor's answers wait for it.
"""
from __future__ import annotations

import itertools
import json
import sys
import threading
import time
from bisect import bisect_left
from collections.abc import Callable, Collection
from dataclasses import dataclass, field

from namesrv.channel import Channel
from namesrv.protocol.codes import RequestCode
from namesrv.protocol.command import RemotingCommand
from namesrv.request_stats import LATENCY_BOUNDS

#: The encoded body of one ROUTE_CHANGED command holds changes up to about this many bytes.
PUSH_BODY_BYTES = 1 << 20
#: Counts of deleted topics kept beyond the table's topics before they are dropped.
VERSIONS_SLACK = 100_000
#: Topics encoded between two hand-overs of the interpreter lock (a few milliseconds of work).
YIELD_EVERY = 256
#: Topics one connection may name that the route table does not hold when it subscribes.
MAX_UNKNOWN_TOPICS = 1000
#: What ROUTE_CHANGED's `dropped` field says.
DROPPED_REMARK = "dropped to polling: the connection does not read its pushes fast enough"

#: One connection's encoded command, for its transport (namesrv.remoting.codecs.encode_reply).
Encode = Callable[[Channel, RemotingCommand], bytes]
#: The route body of a topic in the JSON flavour asked for (standard or legacy) and for a client in the
#: zone given (None: any client), None if it has none.
RouteBody = Callable[[str, bool, "str | None"], "bytes | None"]


class SubscriptionRefused(Exception):
    """A subscription past the bounds."""


@dataclass
class Subscription:
    channel: Channel
    standard: bool
    zone: str | None = None
    everything: bool = False
    topics: set[str] = field(default_factory=set)
    #: Of `topics`, those the route table did not hold when they were subscribed.
    unknown: int = 0


def peer_host(channel: Channel) -> str:
    """The host part of a connection's "ip:port" (IPv6 included): what the per-host share counts by."""
    return channel.remote_addr.rpartition(":")[0]


class RouteSubscriptions:
    """The subscribers of one process. Thread-safe: executors subscribe, the publisher thread publishes."""

    def __init__(self, max_topics: int, max_per_connection: int | None = None, max_per_host: int | None = None) -> None:
        """maxRouteSubscriptionTopics, ...PerConnection and ...PerHost (None: no share of its own)."""
        self._max_topics = max_topics
        self._max_per_connection = max_topics if max_per_connection is None else max_per_connection
        self._max_per_host = max_topics if max_per_host is None else max_per_host
        self._lock = threading.Lock()
        self._subscriptions: dict[Channel, Subscription] = {}
        #: Named topics over all subscriptions (maxRouteSubscriptionTopics), and per peer host.
        self._topic_count = 0
        self._host_counts: dict[str, int] = {}
        #: topic -> its changes since start (only topics changed at least once).
        self._versions: dict[str, int] = {}
        self._sweep_at = VERSIONS_SLACK
        #: Pushes sent and subscribers dropped to polling since start.
        self.pushed = 0
        self.dropped = 0
        #: The publisher's rounds that pushed something, by duration (request_stats.LATENCY_BOUNDS, +Inf,
        #: then the seconds summed): from taking the route table's changes to the last push posted.
        self.round_buckets = [0.0] * (len(LATENCY_BOUNDS) + 2)

    def record_round(self, seconds: float) -> None:
        """A round of pushes posted `seconds` after its changes were taken (the publisher thread only)."""
        self.round_buckets[bisect_left(LATENCY_BOUNDS, seconds)] += 1
        self.round_buckets[-1] += seconds

    def __len__(self) -> int:
        return len(self._subscriptions)

    def version(self, topic: str) -> int:
        return self._versions.get(topic, 0)

    def subscribe(self, channel: Channel, topics: Collection[str], everything: bool, standard: bool,
                  zone: str | None = None, exists: Callable[[str], bool] = lambda topic: True) -> None:
        """Add `topics` (or every topic) to `channel`'s subscription; SubscriptionRefused past a share,
        naming it. `exists`: does the route table hold a topic. The last subscription's JSON flavour
        and zone are the connection's."""
        with self._lock:
            subscription = self._subscriptions.get(channel)
            if subscription is None:
                subscription = Subscription(channel, standard, zone)
            new = set(topics) - subscription.topics
            known = {sys.intern(topic) for topic in new if exists(topic)}  # the table's own string
            unknown = len(new) - len(known)
            host = peer_host(channel)
            held = self._host_counts.get(host, 0)
            for count, limit, key in ((len(subscription.topics), self._max_per_connection,
                                       "maxRouteSubscriptionTopicsPerConnection"),
                                      (held, self._max_per_host, f"maxRouteSubscriptionTopicsPerHost of {host}"),
                                      (self._topic_count, self._max_topics, "maxRouteSubscriptionTopics")):
                if count + len(new) > limit:
                    raise SubscriptionRefused(f"{len(new)} more topics would pass {key} ({limit}; {count} "
                                              "subscribed)")
            if subscription.unknown + unknown > MAX_UNKNOWN_TOPICS:
                raise SubscriptionRefused(f"{unknown} more topics the route table does not hold would pass "
                                          f"{MAX_UNKNOWN_TOPICS} for one connection ({subscription.unknown} subscribed)")
            subscription.topics |= known
            subscription.topics |= new - known
            subscription.unknown += unknown
            subscription.everything |= everything
            subscription.standard = standard
            subscription.zone = zone
            self._topic_count += len(new)
            if new:
                self._host_counts[host] = held + len(new)
            self._subscriptions[channel] = subscription

    def listing(self, limit: int, sample: int = 5) -> list[dict[str, object]]:
        """The first `limit` subscriptions: connection, all topics or how many, and a few of them."""
        with self._lock:
            subscriptions = [(s.channel, s.everything, s.zone, len(s.topics), list(itertools.islice(s.topics, sample)))
                             for s in itertools.islice(self._subscriptions.values(), limit)]
        return [{"connection": str(channel), "everything": everything, "zone": zone, "topics": count,
                 "sample": sorted(first)} for channel, everything, zone, count, first in subscriptions]

    def unsubscribe(self, channel: Channel) -> bool:
        with self._lock:
            subscription = self._subscriptions.pop(channel, None)
            if subscription is None:
                return False
            self._topic_count -= len(subscription.topics)
            if subscription.topics:
                host = peer_host(channel)
                left = self._host_counts[host] - len(subscription.topics)
                if left:
                    self._host_counts[host] = left
                else:
                    del self._host_counts[host]
            return True

    def is_subscribed(self, channel: Channel) -> bool:
        return channel in self._subscriptions

    def drop(self, channel: Channel, encode: Encode) -> tuple[Channel, bytes] | None:
        """Unsubscribe `channel` for not taking its pushes: the notice telling it so (ROUTE_CHANGED
        with `dropped`) to send it; None if it was not subscribed."""
        if not self.unsubscribe(channel):
            return None
        self.dropped += 1
        return channel, encode(channel, _command({"dropped": DROPPED_REMARK}, None))

    def publish(self, changed: set[str], route_body: RouteBody, exists: Callable[[str], bool],
                encode: Encode) -> list[tuple[Channel, bytes]]:
        """The pushes of one round: `changed` topics get their next version; each subscriber gets
        the changes of its topics (frames shared between subscribers alike: one bytes object).
        `exists`: is a topic in the route table (the counts of those that are not are swept now
        and then)."""
        with self._lock:
            versions = {}
            for topic in changed:
                versions[topic] = self._versions.get(topic, 0) + 1
                self._versions[topic] = versions[topic]
            subscriptions = list(self._subscriptions.values())
        routes: dict[tuple[str, bool, str | None], bytes | None] = {}
        #: Encoded once per topics, JSON flavour, zone and transport; every subscriber alike sends the same bytes.
        frames: dict[tuple[object, bool, str | None, str], list[bytes]] = {}
        deliveries: list[tuple[Channel, bytes]] = []
        for subscription in subscriptions:
            matched = changed if subscription.everything else (
                subscription.topics & changed if len(subscription.topics) < len(changed)
                else {t for t in changed if t in subscription.topics})
            if not matched:
                continue
            channel = subscription.channel
            key = ("*" if subscription.everything else tuple(sorted(matched)), subscription.standard,
                   subscription.zone, channel.transport)
            encoded = frames.get(key)
            if encoded is None:
                encoded = frames[key] = [encode(channel, command) for command in
                                         _commands(sorted(matched), versions, subscription.standard, subscription.zone,
                                                   routes, route_body)]
            deliveries.extend((channel, frame) for frame in encoded)
            self.pushed += len(encoded)
        if len(self._versions) > self._sweep_at:
            with self._lock:
                for topic in [topic for topic in self._versions if not exists(topic)]:
                    del self._versions[topic]
                self._sweep_at = 2 * len(self._versions) + VERSIONS_SLACK
        return deliveries


def _commands(topics: list[str], versions: dict[str, int], standard: bool, zone: str | None,
              routes: dict[tuple[str, bool, str | None], bytes | None], route_body: RouteBody) -> list[RemotingCommand]:
    """ROUTE_CHANGED commands holding these topics' changes, each body up to about PUSH_BODY_BYTES."""
    commands: list[RemotingCommand] = []
    parts: list[bytes] = []
    size = 0
    for count, topic in enumerate(topics, 1):
        if not count % YIELD_EVERY:
            time.sleep(0)  # the reactor's turn (see the module's docstring)
        key = (topic, standard, zone)
        if key not in routes:
            routes[key] = route_body(topic, standard, zone)
        part = route_entry(topic, versions[topic], routes[key])
        if parts and size + len(part) > PUSH_BODY_BYTES:
            commands.append(_command({"count": len(parts)}, b'{"changes":[' + b",".join(parts) + b"]}"))
            parts, size = [], 0
        parts.append(part)
        size += len(part) + 1
    if parts:
        commands.append(_command({"count": len(parts)}, b'{"changes":[' + b",".join(parts) + b"]}"))
    return commands


def route_entry(topic: str, version: int, body: bytes | None) -> bytes:
    """One topic's entry in a subscription's answer and in ROUTE_CHANGED: its version and route (null: none)."""
    return b'{"topic":%s,"version":%d,"route":%s}' % (json.dumps(topic).encode(), version,
                                                       b"null" if body is None else body)


def _command(ext: dict[str, object], body: bytes | None) -> RemotingCommand:
    return RemotingCommand.request(RequestCode.ROUTE_CHANGED, {k: str(v) for k, v in ext.items()}, body, oneway=True)
