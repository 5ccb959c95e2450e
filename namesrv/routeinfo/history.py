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

What is kept, within `routeHistoryMaxBytes` (README: "Why has this topic no route?"):
- the ring: the latest events, each with the topics it changed as it reported them (8 bytes a
  topic, which costs the write a tuple copy); the oldest go first;
- per topic, its last loss (its route or write permission lost: a broker's removal, an admin's
  deletion or wipe), kept after the ring forgot the event: a topic's share that other topics'
  churn cannot push out. Losses may take at most half the budget; past it the topics that lost
  their route longest ago are forgotten first (a dict update a topic, paid only by losses).
Each answer says from when on what it holds is complete.

The ring holds one tuple per report (`Record`: its event's fields, shared by the event's reports,
the report's own, and its topics), not an object per event: a tuple of strings, numbers and such
tuples is untracked by the garbage collector once a collection has seen it, where an event object
and its list of reports stay tracked for as long as the ring holds them, so every collection
walked tens of thousands of them while a fleet churned. Readers get `RouteEvent` objects made from
the records when they ask.
"""
from __future__ import annotations

import logging
import sys
import threading
from collections import OrderedDict, deque
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import msgpack

from namesrv.channel import Channel
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
#: The server started with the history saved at a graceful stop.
RESTARTED = "restarted"

REMOVALS = frozenset({UNREGISTERED, EXPIRED, CHANNEL_CLOSED})
#: Kinds whose reports are about one broker group (the event's broker name).
GROUP_KINDS = frozenset({REGISTERED, UNREGISTERED, EXPIRED, CHANNEL_CLOSED, WRITE_PERM_WIPED, WRITE_PERM_ADDED})
#: Kinds an admin request causes (`peer` is the admin's address).
ADMIN_KINDS = frozenset({TOPIC_DELETED, TOPIC_REGISTERED, WRITE_PERM_WIPED, WRITE_PERM_ADDED})

# What the budget charges (bytes; upper bounds of what CPython 3.11 allocates, checked by a test):
#: an event: the object (13 slots), its peer and address strings, its list of reports.
EVENT_BYTES = 512
#: a report: its tuple and list slot, plus 8 a topic; and when it lost the topics, their names (`NAME_BYTES`
#: plus the name's length: the table no longer holds them). Names are interned: a report's names are the
#: route table's own strings.
PART_BYTES = 96
NAME_BYTES = 56
#: a topic's last loss: its slot in the ordered dict, plus its name (`NAME_BYTES` and its length).
LOSS_BYTES = 128
#: A full history forgets down to (1 - 1/FIT_SLACK) of its budget at once.
FIT_SLACK = 64
#: Most events `topic` returns (the newest).
TOPIC_EVENTS = 32
DEFAULT_MAX_BYTES = 16 * 1024 * 1024
#: The format of `encode`.
FORMAT = 2
#: A name in a history being decoded is at most this long (a topic 127 characters, a broker 255).
MAX_NAME = 1024


#: A report as the ring holds it: its event's fields (a `Head`, the one object of each of the event's
#: records), whether the report's topics kept their entry, what the budget charges for the report, how
#: many topics it reported, and the topics kept (a tuple). An event is its consecutive records of one
#: `Head`; an event that changed no topic (a slave leaving) is one record of none.
Record = tuple
HEAD, PRESENT, CHARGED, REPORTED, TOPICS = 0, 1, 2, 3, 4
#: An event's fields, `RouteEvent`'s first ten in its order: seq, at_ms, kind, cluster, broker_name,
#: broker_id, broker_addr, peer, last_refresh_ms, timeout_ms.
Head = tuple
SEQ, AT, KIND, BROKER_NAME = 0, 1, 2, 4


@dataclass(slots=True, eq=False)
class RouteEvent:
    """One write that changed routes, as a reader sees it (made from the ring's records)."""

    seq: int
    at_ms: int
    kind: str
    cluster: str | None = None
    broker_name: str | None = None
    broker_id: int | None = None
    broker_addr: str | None = None
    #: The address the broker's connection came from, or the admin's (ADMIN_KINDS).
    peer: str | None = None
    #: A removed broker's last registration or heartbeat, and its heartbeat timeout; for RESTARTED,
    #: when the history was saved.
    last_refresh_ms: int | None = None
    timeout_ms: int | None = None
    #: The topics it changed, as reported: (topics, whether they still have the group's entry, or
    #: for other kinds still exist, what the budget charges for it). None once the ring forgot it (a
    #: topic's last loss may outlive it).
    parts: list[tuple[tuple[str, ...], bool, int]] | None = field(default_factory=list)
    #: Topics whose route it changed.
    topics: int = 0

    @classmethod
    def of(cls, records: list[Record]) -> RouteEvent:
        """The event of its records in the ring."""
        return cls(*records[0][HEAD], parts=[(record[TOPICS], record[PRESENT], record[CHARGED])
                                             for record in records if record[TOPICS]],
                   topics=sum(record[REPORTED] for record in records))

    def sample(self, count: int = 5) -> list[str]:
        names: list[str] = []
        for topics, _, _ in self.parts or ():
            names.extend(topics[:count - len(names)])
            if len(names) >= count:
                break
        return names

    def to_json(self) -> dict[str, Any]:
        return {"seq": self.seq, "at": self.at_ms, "kind": self.kind, "cluster": self.cluster,
                "brokerName": self.broker_name, "brokerId": self.broker_id, "brokerAddr": self.broker_addr,
                "peer": self.peer, "lastRefresh": self.last_refresh_ms, "timeoutMillis": self.timeout_ms,
                "topics": self.topics, "sample": self.sample()}

    def _row(self, index: Callable[[str], int]) -> list[Any]:
        return [self.seq, self.at_ms, self.kind, self.cluster, self.broker_name, self.broker_id, self.broker_addr,
                self.peer, self.last_refresh_ms, self.timeout_ms, self.topics,
                None if self.parts is None else [[list(map(index, topics)), present] for topics, present, _ in self.parts]]


#: Kinds whose every report loses the topics their route or their write permission (any report that
#: leaves a topic without the entry does too).
LOSS_KINDS = REMOVALS | {WRITE_PERM_WIPED}


def part_bytes(topics: tuple[str, ...], present: bool) -> int:
    """What the budget charges for a report (a topic that lost its entry is no longer the table's to hold)."""
    charged = PART_BYTES + 8 * len(topics)
    return charged if present else charged + NAME_BYTES * len(topics) + sum(map(len, topics))


@dataclass(frozen=True)
class TopicHistory:
    """What the history holds about one topic (for a reader)."""

    topic: str
    #: (event, whether the topic kept the entry it changed), oldest first.
    entries: list[tuple[RouteEvent, bool]]
    #: More events of the topic are in the ring than `entries` shows.
    more: bool
    #: The ring holds every event since this time (0: since it started).
    events_since_ms: int
    #: Topics whose last loss was forgotten for the budget, and the newest such loss's time.
    forgotten_losses: int
    losses_since_ms: int
    started_ms: int


class RouteHistory:
    """The route table's listener (`cause`, `changed`: called under its write lock) and the readers'
    view (`topic`, `stream`, `usage`: any thread)."""

    def __init__(self, max_bytes: int = DEFAULT_MAX_BYTES, clock: Callable[[], int] | None = None) -> None:
        self.max_bytes = max_bytes
        self._clock = clock
        self._by_topic: Mapping[str, Mapping[str, object]] = {}
        self._lock = threading.Lock()
        #: The write under way: `cause`'s arguments, and its event's fields once it has a record.
        self._pending: tuple | None = None
        self._head: Head | None = None
        self._ring: deque[Record] = deque()
        #: Events in the ring, and the lowest `seq` it may still hold (every lower one it forgot).
        self._events = 0
        self._kept_from = 1
        #: topic -> (its last loss's event fields, whether it kept the entry), the oldest loss first.
        self._losses: OrderedDict[str, tuple[Head, bool]] = OrderedDict()
        #: seq -> topics whose last loss that event is; and, once the ring forgot it, how many topics it changed.
        self._loss_refs: dict[int, int] = {}
        self._forgotten_topics: dict[int, int] = {}
        self._seq = 0
        self._ring_bytes = 0
        self._loss_bytes = 0
        self.started_ms = 0
        self.events_since_ms = 0
        self.losses_since_ms = 0
        self.forgotten_losses = 0
        #: Changes it failed to record (logged once): the route table's write went on regardless.
        self.failures = 0

    @classmethod
    def from_config(cls, config: Any) -> RouteHistory:
        return cls(config.route_history_max_bytes)

    def bind(self, by_topic: Mapping[str, Mapping[str, object]], clock: Callable[[], int]) -> None:
        """Read the topic table (whether a report's topics kept their entry), and time from its clock."""
        self._by_topic = by_topic
        self._clock = clock
        self.started_ms = self.started_ms or clock()

    # ------------------------------------------------------------------ the hook (route table's write lock held)

    def cause(self, kind: str, cluster: str | None = None, broker_addr: str | None = None,
              broker_name: str | None = None, broker_id: int | None = None, channel: Channel | None = None,
              live: BrokerLiveInfo | None = None, peer: str | None = None, at_ms: int | None = None) -> None:
        """A write that may change routes starts (a registration: called on each, so it only notes
        its arguments), at `at_ms` (None: the clock's time when it changes a route; a write that read
        the clock already passes its reading). A broker's removal is news even when it changes no
        topic (a slave leaving): its event is made at once; any other only once a route changed."""
        self._pending = (kind, cluster, broker_addr, broker_name, broker_id, channel, live, peer, at_ms)
        self._head = None
        if kind in REMOVALS:
            try:
                with self._lock:
                    self._record(())
            except Exception:  # noqa: BLE001 - called inside the route table's writes: never raise into them
                self._failed()

    def changed(self, topics: Collection[str], stored: bool = False) -> None:
        """The write under way changed these topics' routes (none named: a broker group's addresses
        or flags changed, so every topic it serves); `stored`: each was just given the entry, and
        is named by the table's own string (namesrv.routeinfo.tables.queues.QueueTable.put_all)."""
        pending = self._pending
        if pending is None or pending[0] == TABLES_REPLACED or not topics and self._head is not None:
            return  # (no topic named, and the event has its record already)
        lock = self._lock
        lock.acquire()  # not `with`: see namesrv.routeinfo.rwlock
        try:
            self._record(topics, stored)
        except Exception:  # noqa: BLE001 - called inside the route table's writes: never raise into them
            self._failed()
        finally:
            lock.release()

    def _failed(self) -> None:
        self.failures += 1
        if self.failures == 1:
            log.exception("the route history failed to record a change (this one logged, the next only counted)")

    # ------------------------------------------------------------------ internals (self._lock held)

    def _record(self, topics: Collection[str], stored: bool = False) -> None:
        """A record of the pending write's event at the ring's end: `topics` reported (some), or none
        (the event's first record); `stored` as `changed` says. The event's first record makes its
        fields (`Head`), under the next number, and charges it; a report fits the budget."""
        head = self._head
        first = head is None
        if first:
            kind, cluster, broker_addr, broker_name, broker_id, channel, live, peer, at_ms = self._pending
            if peer is None:
                via = channel if channel is not None else None if live is None else live.channel
                peer = None if via is None else via.remote_addr or str(via)
            if at_ms is None:
                at_ms = self._clock() if self._clock is not None else 0
            self._seq += 1
            head = (self._seq, at_ms, kind, cluster, broker_name, broker_id, broker_addr, peer,
                    None if live is None else live.last_update_timestamp,
                    None if live is None else live.heartbeat_timeout_millis)
        if topics:
            if stored:  # what the table would answer below, said by the write that made it so
                reported = tuple(topics)
                present = True
            else:
                reported = tuple(map(sys.intern, topics))  # the table's own strings, not the request's copies
                entries = self._by_topic.get(reported[0])
                present = entries is not None and (head[KIND] not in GROUP_KINDS or head[BROKER_NAME] in entries)
            if not present or head[KIND] in LOSS_KINDS:
                self._lose(head, reported, present)
            kept = reported
            charged = part_bytes(kept, present)
            while len(kept) > 1 and 2 * charged > self.max_bytes:
                kept = kept[:len(kept) // 2]  # one write's report keeps at most half the budget; its losses keep the rest
                charged = part_bytes(kept, present)
            self._ring.append((head, present, charged, len(reported), kept))
        else:
            charged = 0
            self._ring.append((head, True, 0, 0, ()))
        if first:
            self._head = head
            self._events += 1
            charged += EVENT_BYTES
        self._ring_bytes += charged
        if topics and self._ring_bytes + self._loss_bytes > self.max_bytes:
            self._fit()  # (an event alone is fitted with its first report, or with the next write's)

    def _lose(self, head: Head, topics: tuple[str, ...], present: bool) -> None:
        losses = self._losses
        refs = self._loss_refs
        seq = head[SEQ]
        refs[seq] = refs.get(seq, 0) + len(topics)
        pair = (head, present)
        added = 0
        for topic in topics:
            old = losses.pop(topic, None)
            losses[topic] = pair
            if old is None:
                added += LOSS_BYTES + NAME_BYTES + len(topic)
            else:
                self._unref(old[0][SEQ])
        self._loss_bytes += added

    def _unref(self, seq: int) -> None:
        left = self._loss_refs[seq] - 1
        if left:
            self._loss_refs[seq] = left
            return
        del self._loss_refs[seq]
        if seq < self._kept_from:  # out of the ring: held for its losses only
            self._forgotten_topics.pop(seq, None)
            self._loss_bytes -= EVENT_BYTES

    def _fit(self) -> None:
        """Forget until the budget holds, with `FIT_SLACK` of it to spare (the next writes then fit
        without a call): losses while they take more than half of it, else the ring's oldest."""
        ring = self._ring
        limit = self.max_bytes
        goal = limit - limit // FIT_SLACK
        while self._ring_bytes + self._loss_bytes > goal:
            head = self._head
            if self._loss_bytes > limit // 2 or not ring or ring[0][HEAD] is head:
                if not self._losses:
                    return  # the write under way alone: forgotten from the next one on
                topic, (head, _) = self._losses.popitem(last=False)
                self._loss_bytes -= LOSS_BYTES + NAME_BYTES + len(topic)
                self._unref(head[SEQ])
                self.forgotten_losses += 1
                self.losses_since_ms = max(self.losses_since_ms, head[AT])
                continue
            record = ring.popleft()
            oldest = record[HEAD]
            seq = oldest[SEQ]
            charged, topics = EVENT_BYTES + record[CHARGED], record[REPORTED]
            while ring and ring[0][HEAD] is oldest:  # the event's other reports
                more = ring.popleft()
                charged += more[CHARGED]
                topics += more[REPORTED]
            self._ring_bytes -= charged
            self._events -= 1
            self._kept_from = seq + 1
            if seq in self._loss_refs:
                self._forgotten_topics[seq] = topics
                self._loss_bytes += EVENT_BYTES
            if oldest[AT] > self.events_since_ms:
                self.events_since_ms = oldest[AT]

    def _loss_event(self, head: Head) -> RouteEvent:
        """The event of a topic's last loss: from the ring while it holds it, else its fields alone."""
        seq = head[SEQ]
        if seq >= self._kept_from:
            for records in _events_of(reversed(self._ring)):
                if records[0][HEAD][SEQ] == seq:
                    return RouteEvent.of(records[::-1])
        return RouteEvent(*head, parts=None, topics=self._forgotten_topics.get(seq, 0))

    # ------------------------------------------------------------------ readers (any thread)

    def topic(self, topic: str) -> TopicHistory:
        with self._lock:
            found: list[tuple[RouteEvent, bool]] = []
            more = False
            for records in _events_of(reversed(self._ring)):  # newest first, each event's records too
                # whether the topic kept its entry after the event: its newest report naming it says
                present = next((record[PRESENT] for record in records if topic in record[TOPICS]), None)
                if present is not None:
                    if len(found) == TOPIC_EVENTS:
                        more = True
                        break
                    found.append((RouteEvent.of(records[::-1]), present))
            loss = self._losses.get(topic)
            if loss is not None and all(event.seq != loss[0][SEQ] for event, _ in found):  # the ring forgot it
                found.append((self._loss_event(loss[0]), loss[1]))
            found.sort(key=lambda entry: entry[0].seq)
            return TopicHistory(topic, found, more, self.events_since_ms, self.forgotten_losses,
                                self.losses_since_ms, self.started_ms)

    def stream(self, after_seq: int = 0, limit: int | None = None) -> list[RouteEvent]:
        """The ring's events after `after_seq`, oldest first (the last `limit` of them). Their records
        are taken under the lock, the events made after it (the route table's writes wait for it)."""
        taken: list[Record] = []
        with self._lock:
            events = 0
            for record in reversed(self._ring):
                if record[HEAD][SEQ] <= after_seq:
                    break
                if not taken or taken[-1][HEAD] is not record[HEAD]:
                    if events == limit:
                        break
                    events += 1
                taken.append(record)
        taken.reverse()
        return [RouteEvent.of(records) for records in _events_of(taken)]

    def usage(self) -> dict[str, int]:
        with self._lock:
            return {"bytes": self._ring_bytes + self._loss_bytes, "maxBytes": self.max_bytes,
                    "events": self._events, "lossBytes": self._loss_bytes, "losses": len(self._losses),
                    "eventsSince": self.events_since_ms, "forgottenLosses": self.forgotten_losses,
                    "lossesSince": self.losses_since_ms, "startedAt": self.started_ms, "lastSeq": self._seq}

    # ------------------------------------------------------------------ copies (a restarted worker, a warm restart)

    def encode(self) -> bytes:
        """Everything, as msgpack (`decode` reads it back): a header, each topic name once, each event
        (those out of the ring without their topics), each topic's last loss."""
        with self._lock:
            held = {records[0][HEAD][SEQ]: RouteEvent.of(records) for records in _events_of(self._ring)}
            for head, _ in self._losses.values():
                if head[SEQ] not in held:
                    held[head[SEQ]] = self._loss_event(head)
            names: dict[str, int] = {}
            index = lambda name: names.setdefault(name, len(names))  # noqa: E731
            rows = [held[seq]._row(index) for seq in sorted(held)]
            losses = [[index(topic), head[SEQ], present] for topic, (head, present) in self._losses.items()]
            header = [FORMAT, self._seq, self.started_ms, self.events_since_ms, self.losses_since_ms,
                      self.forgotten_losses, len(names), len(held), len(losses)]
        return b"".join(msgpack.packb(row) for row in (header, *names, *rows, *losses))

    def decode(self, data: bytes | memoryview, restarted_at_ms: int | None = None,
               saved_at_ms: int | None = None) -> None:
        """Replace everything by an `encode`'s bytes. They are read a value at a time and charged as
        they come (a name the route table does not hold already at its size): past this history's
        budget, or not what `encode` writes, it raises ValueError and nothing changes, before any more
        is built, whatever the header claims. With `restarted_at_ms`, a RESTARTED event (saved at
        `saved_at_ms`) marks the restart."""
        reader = _Reader(data)
        limit = self.max_bytes
        charged = 0

        def charge(amount: int) -> None:
            nonlocal charged
            charged += amount
            if charged > limit:
                raise ValueError(f"more than the budget of {limit} bytes")

        try:
            version, seq, started, events_since, losses_since, forgotten, *counts = reader.row(9)
            if version != FORMAT:
                raise ValueError(f"format {version!r}")
            name_count, event_count, loss_count = map(reader.count, counts)
            names: list[str] = []
            for _ in range(name_count):
                name = reader.text()
                interned = sys.intern(name)
                charge(8 + (NAME_BYTES + len(name) if interned is name else 0))  # new, or the table's own
                names.append(interned)
            ring: list[Record] = []
            heads: dict[int, Head] = {}
            last = 0
            topic_counts: dict[int, int] = {}
            for _ in range(event_count):
                *fields, topics, parts_count = reader.row(12, last_is_array=True)
                number, at, kind = fields[:3]
                if not (isinstance(number, int) and isinstance(at, int) and isinstance(kind, str)):
                    raise ValueError("an event without its number, time or kind")
                if number <= last:
                    raise ValueError("events out of order")
                last = number
                head = heads[number] = tuple(fields)
                topic_counts[number] = reader.count(topics)
                charge(EVENT_BYTES)
                if parts_count is None:
                    if ring:
                        raise ValueError("an event forgotten after one the ring holds")
                    continue
                records = []
                for _ in range(parts_count):
                    reader.header(2)
                    reported = tuple(names[reader.index(name_count)] for _ in range(reader.header()))
                    present = reader.boolean()
                    records.append((head, present, part_bytes(reported, present), len(reported), reported))
                    charge(PART_BYTES + 8 * len(reported))
                if not records:
                    records.append((head, True, 0, 0, ()))
                first = records[0]  # the reports' count as saved (a report may have kept part of its topics)
                records[0] = (*first[:REPORTED], max(0, topic_counts[number] - sum(r[REPORTED] for r in records[1:])),
                              first[TOPICS])
                ring.extend(records)
            losses: OrderedDict[str, tuple[Head, bool]] = OrderedDict()
            for _ in range(loss_count):
                topic, number, present = reader.row(3)
                losses[names[reader.index(name_count, topic)]] = (heads[number], bool(present))
                charge(LOSS_BYTES)
        except (KeyError, TypeError, ValueError, msgpack.UnpackException) as exc:
            raise ValueError(f"not a route history: {type(exc).__name__}: {exc}") from None
        with self._lock:
            self._ring, self._losses = deque(ring), losses
            self._head = None
            self._seq, self.started_ms = int(seq), int(started)
            self.events_since_ms, self.losses_since_ms = int(events_since), int(losses_since)
            self.forgotten_losses = int(forgotten)
            self._kept_from = ring[0][HEAD][SEQ] if ring else max(heads, default=0) + 1
            refs = self._loss_refs = {}
            for head, _ in losses.values():
                refs[head[SEQ]] = refs.get(head[SEQ], 0) + 1
            self._forgotten_topics = {number: topic_counts[number] for number in refs if number < self._kept_from}
            self._events = len({record[HEAD][SEQ] for record in ring})
            self._ring_bytes = EVENT_BYTES * self._events + sum(record[CHARGED] for record in ring)
            self._loss_bytes = sum(LOSS_BYTES + NAME_BYTES + len(topic) for topic in losses) + \
                EVENT_BYTES * len(self._forgotten_topics)
            if restarted_at_ms is not None:
                self._seq += 1
                self._ring.append(((self._seq, restarted_at_ms, RESTARTED, None, None, None, None, None, saved_at_ms,
                                    None), True, 0, 0, ()))
                self._events += 1
                self._ring_bytes += EVENT_BYTES
            self._fit()


def _events_of(records: Iterable[Record]) -> Iterator[list[Record]]:
    """Consecutive records of one event, as lists, in the order given."""
    group: list[Record] = []
    for record in records:
        if group and group[0][HEAD] is not record[HEAD]:
            yield group
            group = []
        group.append(record)
    if group:
        yield group


class _Reader:
    """msgpack values one at a time, only scalars built by the unpacker: every array's length is
    read from its header and each element checked as it comes, so nothing is built that the caller
    has not asked for (a file of nested empty arrays builds nothing)."""

    def __init__(self, data: bytes | memoryview) -> None:
        self._unpacker = msgpack.Unpacker(None, max_buffer_size=max(len(data), 1), max_str_len=MAX_NAME,
                                          max_bin_len=0, max_array_len=0, max_map_len=0, max_ext_len=0)
        self._unpacker.feed(data)

    def header(self, expected: int | None = None) -> int:
        length = self._unpacker.read_array_header()
        if expected is not None and length != expected:
            raise ValueError(f"an array of {length}, expected {expected}")
        return length

    def value(self) -> Any:
        return self._unpacker.unpack()

    def text(self) -> str:
        value = self.value()
        if not isinstance(value, str):
            raise ValueError(f"expected a string, got {type(value).__name__}")
        return value

    def boolean(self) -> bool:
        value = self.value()
        if not isinstance(value, bool):
            raise ValueError(f"expected true or false, got {type(value).__name__}")
        return value

    def count(self, value: object) -> int:
        if not isinstance(value, int) or value < 0:
            raise ValueError(f"expected a count, got {value!r}")
        return value

    def index(self, size: int, value: object = None) -> int:
        """An index below `size` (the next value, unless given)."""
        value = self.value() if value is None else value
        if not isinstance(value, int) or not 0 <= value < size:
            raise ValueError(f"expected an index below {size}, got {value!r}")
        return value

    def row(self, length: int, last_is_array: bool = False) -> list[Any]:
        """A row of scalars (strings, numbers, nil); with `last_is_array`, its last element is an array
        whose length is returned in its place (None when it is nil)."""
        self.header(length)
        values = [self.value() for _ in range(length - 1 if last_is_array else length)]
        if last_is_array:
            try:
                values.append(self.header())
            except ValueError:
                if self.value() is not None:
                    raise
                values.append(None)
        if any(not isinstance(v, (str, int, type(None))) for v in values):
            raise ValueError("expected scalars")
        return values

