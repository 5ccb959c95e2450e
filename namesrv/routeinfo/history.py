"""Route events: what changed each topic's route, when and why, remembered within a byte budget (sans-IO).

"No route info of this topic" is RocketMQ's most common client error, and the NameServer is the
one place that saw why: a broker's connection closed, it went silent, it unregistered, an admin
deleted the topic or wiped its write permission. RocketMQ forgets all of it the moment it happens.
`RouteHistory` remembers, for `namesrv-admin explainRoute` (namesrv.routeinfo.explain) and the
status page's stream of changes (namesrv.status_page).

It is told by the route table, under its write lock, through one narrow hook: `cause(...)` when a
write that may change routes starts (a registration, a broker's removal and its reason, an admin
operation and who asked), then `changed(topics)` for the topics whose route that write changed
(namesrv.routeinfo.tables.changes reports every change, so nothing is missed). An event is only
made once something changed: a periodic re-registration that changes nothing costs one call.
With worker processes every write is applied in every worker in the write log's order with the
log's clock, so every worker keeps the same history.

Bounded three ways (README: "Why has this topic no route?"):
- per topic, its last `routeHistoryTopicEvents` events (older ones are counted as dropped);
- in total, `routeHistoryMaxBytes` as charged below (an upper bound of what the objects take,
  pinned by tests/test_route_history.py); past it the topics changed least recently are forgotten
  first, and the history says from when on it is complete;
- the stream of changes is a ring of the last `routeHistoryStreamEvents` events.
"""
from __future__ import annotations

import logging
import threading
from collections import OrderedDict, deque
from collections.abc import Callable, Collection, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from namesrv.channel import Channel
from namesrv.protocol.route import QueueData
from namesrv.routeinfo.model import BrokerLiveInfo

log = logging.getLogger(__name__)

# What changed a route. A broker's removal keeps the route table's own reason words.
REGISTERED = "registered"
UNREGISTERED = "unregistered"
EXPIRED = "expired"
CHANNEL_CLOSED = "channel closed"
TOPIC_DELETED = "topic deleted"
TOPIC_REGISTERED = "topic registered"
WRITE_PERM_WIPED = "write perm wiped"
WRITE_PERM_ADDED = "write perm added"
#: The whole table was replaced (a warm restart's restore, a restarted worker's copy): not an event.
TABLES_REPLACED = "tables replaced"
#: The server started with a history saved at a graceful stop: what happened in between is unknown.
RESTARTED = "restarted"

REMOVALS = frozenset({UNREGISTERED, EXPIRED, CHANNEL_CLOSED})
#: Kinds whose per-topic entries are about one broker group (the event's broker name).
GROUP_KINDS = frozenset({REGISTERED, UNREGISTERED, EXPIRED, CHANNEL_CLOSED, WRITE_PERM_WIPED, WRITE_PERM_ADDED})
#: Kinds an admin request causes (`peer` is the admin's address).
ADMIN_KINDS = frozenset({TOPIC_DELETED, TOPIC_REGISTERED, WRITE_PERM_WIPED, WRITE_PERM_ADDED})

# What the budget charges (bytes; each an upper bound of what CPython 3.11 allocates, checked by a test):
#: an event: the object (13 slots), its peer and address strings, its sample list.
EVENT_BYTES = 640
#: a topic's record: its key in the ordered dict (node and slot), the record and its list, plus its name.
TOPIC_BYTES = 320
#: one entry of a topic's record: a 2-tuple and its list slot.
ENTRY_BYTES = 80
#: Topic names an event keeps for the stream (the rest are counted).
SAMPLE_TOPICS = 5

DEFAULT_MAX_BYTES = 16 * 1024 * 1024
DEFAULT_TOPIC_EVENTS = 16
DEFAULT_STREAM_EVENTS = 1000


@dataclass(slots=True, eq=False)
class RouteEvent:
    """One write that changed routes. Shared by every topic it changed (those keep a reference)."""

    seq: int
    at_ms: int
    kind: str
    cluster: str | None = None
    broker_name: str | None = None
    broker_id: int | None = None
    broker_addr: str | None = None
    #: The address the broker's connection came from, or the admin's (ADMIN_KINDS).
    peer: str | None = None
    #: A removed broker's last registration or heartbeat, and its heartbeat timeout.
    last_refresh_ms: int | None = None
    timeout_ms: int | None = None
    #: A topic deletion's topic and cluster (None: every cluster).
    scope: str | None = None
    #: Topics whose route it changed, and the first few of them.
    topics: int = 0
    sample: list[str] = field(default_factory=list)
    #: Topic entries holding it (the budget charges it while any does).
    refs: int = 0

    def to_json(self) -> dict[str, Any]:
        return {"seq": self.seq, "at": self.at_ms, "kind": self.kind, "cluster": self.cluster,
                "brokerName": self.broker_name, "brokerId": self.broker_id, "brokerAddr": self.broker_addr,
                "peer": self.peer, "lastRefresh": self.last_refresh_ms, "timeoutMillis": self.timeout_ms,
                "scope": self.scope, "topics": self.topics, "sample": list(self.sample)}

    def to_row(self) -> list[Any]:
        return [self.seq, self.at_ms, self.kind, self.cluster, self.broker_name, self.broker_id, self.broker_addr,
                self.peer, self.last_refresh_ms, self.timeout_ms, self.scope, self.topics, list(self.sample)]

    @classmethod
    def from_row(cls, row: list[Any]) -> RouteEvent:
        seq, at, kind, cluster, name, broker_id, addr, peer, refresh, timeout, scope, topics, sample = row
        return cls(int(seq), int(at), str(kind), cluster, name, broker_id, addr, peer, refresh, timeout, scope,
                   int(topics), [str(t) for t in sample][:SAMPLE_TOPICS])


class _TopicRecord:
    __slots__ = ("entries", "dropped")

    def __init__(self) -> None:
        #: (event, the group's queue entry right after it, None when the event removed it), oldest first.
        self.entries: list[tuple[RouteEvent, QueueData | None]] = []
        #: Older entries forgotten for the per-topic share.
        self.dropped = 0


@dataclass(frozen=True)
class TopicHistory:
    """What the history holds about one topic (copies, for a reader)."""

    topic: str
    entries: list[tuple[RouteEvent, QueueData | None]]
    dropped: int
    #: Events before this time may be missing for any topic (the budget forgot older topics).
    complete_since_ms: int
    #: Topics forgotten for the budget since start.
    evicted_topics: int
    started_ms: int


class RouteHistory:
    """The route table's listener (`cause`, `changed`: called under its write lock) and the readers'
    view (`topic`, `stream`, `usage`: any thread)."""

    def __init__(self, max_bytes: int = DEFAULT_MAX_BYTES, topic_events: int = DEFAULT_TOPIC_EVENTS,
                 stream_events: int = DEFAULT_STREAM_EVENTS, clock: Callable[[], int] | None = None) -> None:
        self.max_bytes = max_bytes
        self.topic_events = max(1, topic_events)
        self._clock = clock
        self._by_topic: Mapping[str, Mapping[str, QueueData]] = {}
        self._lock = threading.Lock()
        #: The write under way: `cause`'s arguments, and its event once made.
        self._pending: tuple | None = None
        self._current: RouteEvent | None = None
        self._records: OrderedDict[str, _TopicRecord] = OrderedDict()
        self._stream: deque[RouteEvent] = deque(maxlen=max(1, stream_events))
        self._seq = 0
        self._bytes = 0
        self.started_ms = 0
        self.complete_since_ms = 0
        self.evicted_topics = 0

    @classmethod
    def from_config(cls, config: Any) -> RouteHistory:
        return cls(config.route_history_max_bytes, config.route_history_topic_events,
                   config.route_history_stream_events)

    def bind(self, by_topic: Mapping[str, Mapping[str, QueueData]], clock: Callable[[], int]) -> None:
        """Read queue entries from the route table's topic table, and time from its clock."""
        self._by_topic = by_topic
        self._clock = clock
        self.started_ms = self.started_ms or clock()

    # ------------------------------------------------------------------ the hook (route table's write lock held)

    def cause(self, kind: str, cluster: str | None = None, broker_addr: str | None = None,
              broker_name: str | None = None, broker_id: int | None = None, channel: Channel | None = None,
              live: BrokerLiveInfo | None = None, peer: str | None = None, scope: str | None = None) -> None:
        """A write that may change routes starts (a registration: called on each, so it only notes
        its arguments). A broker's removal is news even when it changes no topic (a slave leaving):
        its event is made at once; any other only once a route changed."""
        self._pending = (kind, cluster, broker_addr, broker_name, broker_id, channel, live, peer, scope)
        self._current = None
        if kind in REMOVALS:
            with self._lock:
                self._event()

    def changed(self, topics: Collection[str]) -> None:
        """The write under way changed these topics' routes (none named: a broker group's addresses
        or flags changed, so every topic it serves)."""
        pending = self._pending
        if pending is None or pending[0] == TABLES_REPLACED:
            return
        with self._lock:
            event = self._current or self._event()
            if not topics:
                return
            event.topics += len(topics)
            if len(event.sample) < SAMPLE_TOPICS:
                event.sample.extend(list(topics)[:SAMPLE_TOPICS - len(event.sample)])
            self._record(event, topics)

    # ------------------------------------------------------------------ internals (self._lock held)

    def _event(self) -> RouteEvent:
        """The pending cause made an event, in the stream from now on."""
        kind, cluster, broker_addr, broker_name, broker_id, channel, live, peer, scope = self._pending
        if peer is None:
            via = channel if channel is not None else None if live is None else live.channel
            peer = None if via is None else via.remote_addr or str(via)
        self._seq += 1
        event = self._current = RouteEvent(
            self._seq, self._clock() if self._clock is not None else 0, kind, cluster, broker_name, broker_id,
            broker_addr, peer, None if live is None else live.last_update_timestamp,
            None if live is None else live.heartbeat_timeout_millis, scope)
        self._stream.append(event)
        return event

    def _record(self, event: RouteEvent, topics: Collection[str]) -> None:
        group = event.broker_name if event.kind in GROUP_KINDS else None
        by_topic = self._by_topic
        records = self._records
        cap = self.topic_events
        charged = 0
        if event.refs == 0:
            charged += EVENT_BYTES
        for topic in topics:
            queues = by_topic.get(topic)
            queue = None if queues is None or group is None else queues.get(group)
            record = records.get(topic)
            if record is None:
                record = records[topic] = _TopicRecord()
                charged += TOPIC_BYTES + len(topic)
            else:
                records.move_to_end(topic)
                entries = record.entries
                if entries and entries[-1][0] is event:  # reported twice by one write
                    entries[-1] = (event, queue)
                    continue
            entries = record.entries
            entries.append((event, queue))
            event.refs += 1
            charged += ENTRY_BYTES
            if len(entries) > cap:
                old, _ = entries.pop(0)
                record.dropped += 1
                charged -= ENTRY_BYTES + self._release(old)
        self._bytes += charged
        while self._bytes > self.max_bytes and records:
            self._evict()

    def _release(self, event: RouteEvent) -> int:
        """One entry less holds `event`: the bytes freed."""
        event.refs -= 1
        return EVENT_BYTES if event.refs == 0 else 0

    def _evict(self) -> None:
        """Forget the topic changed least recently."""
        topic, record = self._records.popitem(last=False)
        freed = TOPIC_BYTES + len(topic)
        for event, _ in record.entries:
            freed += ENTRY_BYTES + self._release(event)
        self._bytes -= freed
        self.evicted_topics += 1
        if record.entries:
            self.complete_since_ms = max(self.complete_since_ms, record.entries[-1][0].at_ms)

    # ------------------------------------------------------------------ readers (any thread)

    def topic(self, topic: str) -> TopicHistory:
        with self._lock:
            record = self._records.get(topic)
            entries = list(record.entries) if record is not None else []
            dropped = record.dropped if record is not None else 0
            return TopicHistory(topic, entries, dropped, self.complete_since_ms, self.evicted_topics, self.started_ms)

    def stream(self, after_seq: int = 0, limit: int | None = None) -> list[RouteEvent]:
        """The ring's events after `after_seq`, oldest first (the last `limit` of them)."""
        with self._lock:
            events = [event for event in self._stream if event.seq > after_seq]
        return events if limit is None else events[-limit:]

    def usage(self) -> dict[str, int]:
        with self._lock:
            return {"bytes": self._bytes, "maxBytes": self.max_bytes, "topics": len(self._records),
                    "topicEvents": self.topic_events, "streamEvents": len(self._stream),
                    "streamCapacity": self._stream.maxlen or 0, "evictedTopics": self.evicted_topics,
                    "completeSince": self.complete_since_ms, "startedAt": self.started_ms, "lastSeq": self._seq}

    # ------------------------------------------------------------------ copies (a restarted worker, a warm restart)

    def export(self) -> dict[str, Any]:
        """Everything, as plain data (msgpack and pickle alike)."""
        with self._lock:
            events: dict[int, RouteEvent] = {event.seq: event for event in self._stream}
            topics = []
            for topic, record in self._records.items():
                for event, _ in record.entries:
                    events.setdefault(event.seq, event)
                topics.append([topic, record.dropped,
                               [[event.seq, None if queue is None else _queue_row(queue)]
                                for event, queue in record.entries]])
            return {"format": 1, "seq": self._seq, "startedMs": self.started_ms,
                    "completeSinceMs": self.complete_since_ms, "evictedTopics": self.evicted_topics,
                    "events": [event.to_row() for event in sorted(events.values(), key=lambda e: e.seq)],
                    "stream": [event.seq for event in self._stream], "topics": topics}

    def restore(self, exported: Mapping[str, Any], restarted_at_ms: int | None = None) -> None:
        """Replace everything by an `export` (this history's bounds apply). With `restarted_at_ms`,
        a RESTARTED event marks the gap since it was exported. ValueError for anything else."""
        try:
            if exported["format"] != 1:
                raise ValueError(f"format {exported['format']!r}")
            events = {int(row[0]): RouteEvent.from_row(row) for row in exported["events"]}
            stream = [events[int(seq)] for seq in exported["stream"]]
            topics = [(str(topic), int(dropped), [(events[int(seq)], _queue_of(row)) for seq, row in entries])
                      for topic, dropped, entries in exported["topics"]]
            seq, started = int(exported["seq"]), int(exported["startedMs"])
            complete_since, evicted = int(exported["completeSinceMs"]), int(exported["evictedTopics"])
        except (KeyError, TypeError, ValueError, IndexError) as exc:
            raise ValueError(f"not a route history: {type(exc).__name__}: {exc}") from None
        with self._lock:
            self._records.clear()
            self._stream.clear()
            self._bytes = 0
            self._seq, self.started_ms = seq, started
            self.complete_since_ms, self.evicted_topics = complete_since, evicted
            for event in stream:
                self._stream.append(event)
            for event in events.values():
                event.refs = 0
            for topic, dropped, entries in topics:
                record = self._records[topic] = _TopicRecord()
                record.dropped = dropped
                kept = entries[-self.topic_events:]
                record.dropped += len(entries) - len(kept)
                record.entries = kept
                self._bytes += TOPIC_BYTES + len(topic)
                for event, _ in kept:
                    if event.refs == 0:
                        self._bytes += EVENT_BYTES
                    event.refs += 1
                    self._bytes += ENTRY_BYTES
            while self._bytes > self.max_bytes and self._records:
                self._evict()
            if restarted_at_ms is not None:
                self._seq += 1
                self._stream.append(RouteEvent(self._seq, restarted_at_ms, RESTARTED,
                                               last_refresh_ms=max((e.at_ms for e in events.values()), default=None)))

    def __iter__(self) -> Iterator[str]:
        """The topics with a record, changed least recently first (a copy)."""
        with self._lock:
            return iter(list(self._records))


def _queue_row(queue: QueueData) -> list[Any]:
    return [queue.broker_name, queue.read_queue_nums, queue.write_queue_nums, queue.perm, queue.topic_sys_flag]


def _queue_of(row: list[Any] | None) -> QueueData | None:
    if row is None:
        return None
    name, read, write, perm, flag = row
    return QueueData(str(name), int(read), int(write), int(perm), int(flag))
