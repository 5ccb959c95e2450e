"""Which topics each broker group has a queue entry for: what a broker-wide operation walks.

A broker group leaving, a perm wipe, or a deleting registration touches the group's own topics.
Found by scanning the whole topic table, each such operation costs time in proportion to every
topic of every group, on the thread holding the write lock, and a fleet of brokers closing their
connections at once holds the server that many times over (RocketMQ 5.x scans the same way, only
faster; `python -m bench scale` measures both). Here each group keeps a tuple of its topics: 8 bytes
an entry, where a set would cost 50-100 bytes and double the route table's memory. A removed entry is not taken out of the tuple
(that would be a linear search): reads filter against the table, and once a group's removals
since its tuple was last compacted pass half the tuple, plus `SLACK`, the next addition compacts
it. A tuple only holds a stale topic, or one twice, after a removal, so it stays within about
twice the group's entries.

Tuples, not lists: a tuple of strings is left untracked by the garbage collector once it has seen
it, where a list is walked by every full collection: with the lists, every full collection
visited a reference per queue entry, many times during a fleet's first registration.
An addition copies the group's tuple, once per registration that adds topics, not per topic.
"""
from __future__ import annotations

from collections.abc import Mapping

#: Removals a list may see beyond half its length before the next addition compacts it.
SLACK = 64


class GroupTopics:
    """The topics of each group, read against `topic_queues` (topic -> group -> queue entry), which the
    caller keeps current and reports to: `added` for every entry that did not exist before, `removed`
    for every entry taken out, `forget` for a group that left."""

    def __init__(self, topic_queues: Mapping[str, Mapping[str, object]]) -> None:
        self._topic_queues = topic_queues
        self._lists: dict[str, tuple[str, ...]] = {}
        self._removed: dict[str, int] = {}

    def added(self, group: str, topics: list[str]) -> None:
        """`group` got a queue entry for each of `topics` (it had none)."""
        held = self._lists.get(group, ())
        if held and self._removed.get(group, 0) > len(held) // 2 + SLACK:
            held = self._compact(group)
        self._lists[group] = held + tuple(topics)

    def removed(self, group: str) -> None:
        """`group`'s queue entry for some topic was removed."""
        self._removed[group] = self._removed.get(group, 0) + 1

    def topics_of(self, group: str) -> list[str]:
        """The topics `group` has a queue entry for, each once, in the order they were added; a copy."""
        return list(self._compact(group) if self._removed.get(group) else self._lists.get(group, ()))

    def _compact(self, group: str) -> tuple[str, ...]:
        topic_queues = self._topic_queues
        live = tuple(dict.fromkeys(topic for topic in self._lists.get(group, ())
                                   if group in topic_queues.get(topic, ())))
        self._removed.pop(group, None)
        if live:
            self._lists[group] = live
        else:
            self._lists.pop(group, None)
        return live

    def forget(self, group: str) -> None:
        """`group` holds no queue entry any more."""
        self._lists.pop(group, None)
        self._removed.pop(group, None)

    def rebuild(self) -> None:
        """Index the table afresh (it was replaced wholesale)."""
        self._lists.clear()
        self._removed.clear()
        lists: dict[str, list[str]] = {}
        for topic, queues in self._topic_queues.items():
            for group in queues:
                lists.setdefault(group, []).append(topic)
        self._lists.update((group, tuple(topics)) for group, topics in lists.items())

    def held(self) -> int:
        """Topic references held over all groups (stale ones included): what the index costs."""
        return sum(map(len, self._lists.values()))
