"""topicQueueTable: each topic's queue entry per broker group, and the indexes the route table walks.

Every write here reports the topics it changed to `RouteChanges` itself, in the same call: no
caller can change a queue entry and forget to drop its cached route.

Memory matters at RocketMQ issue #4245's scale and beyond (10 million entries): an entry is stored
as its group's one `Entry` tuple of those fields (thousands of topics share a few values, so equal
is identical and an unchanged entry is found by identity), a topic's name is held once however many
groups list it (interned), and each group's own topics are listed (namesrv.routeinfo.group_topics)
so a broker-wide operation walks them, not every topic.

And so does the garbage collector: a tuple of ints, and a dict holding only such tuples, cost a
full collection nothing once untracked (a dict of QueueData objects is tracked, and each full
collection walked the whole table: a pause that grew with the fleet). Each topic's dict is a
`TopicEntries`, a dict that also holds the topic's stored name, so a registration finds a known
topic's entries and its one string in one lookup (each registration decodes its own copy of every
name; looking each up in `sys.intern`'s table as well cost a cache miss per entry, a large share of
a fleet's first registration). The collector only untracks exact dicts by itself, so the table
untracks each `TopicEntries` it makes, and each new entry tuple before it is stored (a tracked
value would track the dict again, for good): nothing in either can form a cycle. Readers get
QueueData objects, one per distinct entry of a group, made on first demand (`queue_data`,
`queues_of`).
"""
from __future__ import annotations

import ctypes
import logging
import sys
from collections.abc import Iterable, Mapping

from namesrv.protocol.codes import PERM_WRITE
from namesrv.protocol.route import QueueData
from namesrv.protocol.topic import QueueFields
from namesrv.routeinfo.group_topics import GroupTopics
from namesrv.routeinfo.tables.changes import RouteChanges

log = logging.getLogger(__name__)


#: A stored queue entry: (readQueueNums, writeQueueNums, perm, topicSysFlag).
Entry = tuple[int, int, int, int]

#: The C API's untrack: what the collector does to an exact dict or tuple it finds holding nothing
#: it could cycle through, done at once, to the objects of a type it does not do it for by itself.
_untrack = ctypes.pythonapi.PyObject_GC_UnTrack
_untrack.argtypes = (ctypes.py_object,)
_untrack.restype = None


class TopicEntries(dict[str, Entry]):
    """A topic's entries by group, and `topic`, the name the table stores it under (interned): a
    registration's copy of the name finds both in one lookup. Made only by `entries_of`."""

    __slots__ = ("topic",)


def entries_of(topic: str) -> TopicEntries:
    """An empty, untracked TopicEntries for `topic` (its stored, interned name). It holds only str
    keys and untracked entry tuples; a tracked value put in it would track it again (CPython's
    dict does so on insertion), so it can never hide a cycle from the collector."""
    entries = TopicEntries()
    entries.topic = topic
    _untrack(entries)
    return entries


def _pool_entry(pool: dict[Entry, Entry], fields: Entry) -> Entry:
    """`fields` made its group's entry of those values (not found in `pool`), untracked before any
    TopicEntries holds it: four ints, validated by every decoder."""
    pool[fields] = fields
    _untrack(fields)
    return fields


class QueueTable:
    """topic -> group -> Entry. `by_topic` is read directly; every write goes through the methods."""

    __slots__ = ("by_topic", "count", "_pool", "_queue_data", "_group_topics", "_group_changes", "_changes")

    def __init__(self, changes: RouteChanges) -> None:
        self.by_topic: dict[str, TopicEntries] = {}
        #: Queue entries held: one per topic per group (maxQueueDatas).
        self.count = 0
        #: Per group, its distinct entries, each the one tuple every topic with those fields holds.
        self._pool: dict[str, dict[Entry, Entry]] = {}
        #: Per group, the QueueData of each distinct entry (made when first read).
        self._queue_data: dict[str, dict[Entry, QueueData]] = {}
        self._group_topics = GroupTopics(self.by_topic)
        #: Per group: entries ever put or removed (a registration's shortcuts hold while it has not moved).
        self._group_changes: dict[str, int] = {}
        self._changes = changes

    # ---------------------------------------------------------------- reads

    def topics_of(self, group: str) -> list[str]:
        """The topics `group` has an entry for (a copy)."""
        return self._group_topics.topics_of(group)

    def changes_of(self, group: str) -> int:
        """How many entries of `group` were put or removed so far."""
        return self._group_changes.get(group, 0)

    def group_changes(self) -> dict[str, int]:
        return dict(self._group_changes)

    def pools(self) -> set[str]:
        """The groups with pooled entries (for consistency checks)."""
        return set(self._pool)

    def queue_data(self, group: str, entry: Entry) -> QueueData:
        """`group`'s QueueData of `entry` (one object per distinct entry of the group)."""
        made = self._queue_data.get(group)
        if made is None:
            made = self._queue_data[group] = {}
        queue = made.get(entry)
        if queue is None:
            queue = made[entry] = QueueData(group, *entry)
        return queue

    def queues_of(self, topic: str) -> dict[str, QueueData] | None:
        """The topic's entries as QueueData by group (a new dict), None if it has none."""
        queues = self.by_topic.get(topic)
        if not queues:
            return None
        queue_data = self.queue_data
        return {group: queue_data(group, entry) for group, entry in queues.items()}

    def new_entries(self, group: str, topics: Iterable[str]) -> int:
        """How many of `topics` `group` has no entry for yet."""
        by_topic = self.by_topic
        return sum(1 for topic in topics if group not in by_topic.get(topic, ()))

    # ---------------------------------------------------------------- writes (reported to RouteChanges)

    def put(self, topic: str, queue: QueueData) -> bool:
        """Create or replace one entry; False (nothing reported) if it is unchanged."""
        fields = (topic, queue.read_queue_nums, queue.write_queue_nums, queue.perm, queue.topic_sys_flag)
        return self.put_all(queue.broker_name, (fields,), True, False)[0] > 0

    def put_all(self, group: str, table: Iterable[QueueFields], replace: bool, wipe_write: bool) -> tuple[int, int]:
        """A broker's topic table (queue fields) into `group`'s entries: each new topic, and with
        `replace` each changed one (without it existing entries stay as they are); `wipe_write`
        clears the write bit of every entry put. Returns (entries changed, of them created),
        reported in one call (the created first), as stored (`RouteChanges.topics`). The one place
        entries are stored, each under the topic's stored name (`TopicEntries.topic`; a new topic's
        interned): each registration decodes its own copy of the string, and 10 million entries of
        30 groups would otherwise hold 10 million strings in the group index. The report names it so."""
        by_topic = self.by_topic
        pool = self._pool.get(group)
        if pool is None:
            pool = {}  # held once an entry is stored
        created: list[str] = []
        replaced: list[str] = []
        intern = sys.intern
        for topic, read, write, perm, sys_flag in table:
            queues = by_topic.get(topic)
            if queues is None:
                topic = intern(topic)  # a new topic: this copy becomes the stored name
                current = None
            else:
                topic = queues.topic  # the stored name, not this registration's copy
                current = queues.get(group)
            if current is not None and not replace:
                continue
            if wipe_write:
                perm &= ~PERM_WRITE
            fields = (read, write, perm, sys_flag)
            queue = pool.get(fields)
            if queue is None:
                queue = _pool_entry(pool, fields)
            elif queue is current:
                continue  # unchanged (most topics of a new data version)
            if current is not None:
                replaced.append(topic)
            else:
                if queues is None:
                    queues = by_topic[topic] = entries_of(topic)
                created.append(topic)
            queues[group] = queue
        if created:
            self.count += len(created)
            self._group_topics.added(group, created)
        changed = replaced if not created else created if not replaced else created + replaced
        if changed:
            self._pool[group] = pool
            self._group_changes[group] = self._group_changes.get(group, 0) + len(changed)
            self._changes.topics(changed, stored=True)
        return len(changed), len(created)

    def remove(self, topic: str, group: str) -> None:
        if self._unstore(topic, group):
            self._changes.topics((topic,))

    def remove_topics(self, group: str, topics: Iterable[str]) -> None:
        """Remove `group`'s entries of `topics` (those it has), reported in one call."""
        removed = [topic for topic in topics if self._unstore(topic, group)]
        if removed:
            self._changes.topics(removed)

    def remove_group(self, group: str) -> None:
        """Every entry of `group` (its last broker left), and its pool and index."""
        self.remove_topics(group, self.topics_of(group))
        self._pool.pop(group, None)
        self._queue_data.pop(group, None)
        self._group_topics.forget(group)

    def group_changed(self, group: str) -> None:
        """`group`'s addresses or flags changed: report every topic it serves."""
        by_topic = self.by_topic
        self._changes.group(lambda topic: group in by_topic.get(topic, ()), lambda: self.topics_of(group))

    def replace(self, by_topic: Mapping[str, Mapping[str, QueueData]], group_changes: Mapping[str, int]) -> None:
        """Every entry replaced (a restored or copied table); every topic cached or tracked is reported."""
        old = set(self.by_topic)
        self.by_topic.clear()
        self._pool.clear()
        self._queue_data.clear()
        self._group_changes.clear()
        self._group_changes.update(group_changes)
        pools = self._pool
        for topic, queues in by_topic.items():
            topic = sys.intern(topic)
            entries = self.by_topic[topic] = entries_of(topic)
            for group, q in queues.items():
                pool = pools.get(group)
                if pool is None:
                    pool = pools[group] = {}
                fields = (q.read_queue_nums, q.write_queue_nums, q.perm, q.topic_sys_flag)
                entries[group] = pool.get(fields) or _pool_entry(pool, fields)
        self.count = sum(map(len, self.by_topic.values()))
        self._group_topics.rebuild()
        changes = self._changes
        changes.topics(changes.cache.topics() | ((old | set(self.by_topic)) if changes.tracking else set()))

    # ---------------------------------------------------------------- removal

    def _unstore(self, topic: str, group: str) -> bool:
        queues = self.by_topic.get(topic)
        if queues is None or queues.pop(group, None) is None:
            return False
        self.count -= 1
        self._group_topics.removed(group)
        self._group_changes[group] = self._group_changes.get(group, 0) + 1
        if not queues:
            del self.by_topic[topic]
            log.debug("topic removed: %s", topic)
        return True
