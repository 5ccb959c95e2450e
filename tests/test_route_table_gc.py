"""What the route table leaves for Python's cyclic collector to walk: nothing per queue entry.

A full collection walks every tracked container. At 10 million entries, per-topic dicts or per-group
topic lists left tracked made each full collection a pause of 50-250 ms, and a fleet's first
registration set off dozens of them (`python -m bench scale --wire` measures it).
"""
from __future__ import annotations

import gc

from namesrv.routeinfo.cache import RouteBodyCache
from namesrv.routeinfo.group_topics import GroupTopics
from namesrv.routeinfo.tables.changes import RouteChanges
from namesrv.routeinfo.tables.queues import QueueTable, TopicEntries


def table_of(groups: int, topics: int, distinct: int = 1) -> QueueTable:
    table = QueueTable(RouteChanges(RouteBodyCache()))
    names = [f"topic-{t}" for t in range(topics)]
    for g in range(groups):
        table.put_all(f"group-{g}", [(name, 8 + t % distinct, 8, 6, 0) for t, name in enumerate(names)], True, False)
    return table


def test_a_new_groups_entries_leave_every_topic_dict_untracked_without_a_full_collection():
    gc.collect()
    gc.disable()  # only the table's own young collections may run
    try:
        table = table_of(groups=5, topics=200, distinct=3)
        assert table.count == 1000
        assert not any(gc.is_tracked(queues) for queues in table.by_topic.values())
        assert not any(gc.is_tracked(entry) for queues in table.by_topic.values() for entry in queues.values())
    finally:
        gc.enable()


def test_a_table_of_all_distinct_entries_leaves_every_dict_untracked_and_runs_no_collection():
    collections = []

    def count(phase, info):
        if phase == "start":
            collections.append(info["generation"])

    gc.collect()
    gc.disable()
    gc.callbacks.append(count)
    try:
        table = table_of(groups=2, topics=500, distinct=500)
    finally:
        gc.callbacks.remove(count)
        gc.enable()
    assert collections == []
    assert not any(gc.is_tracked(queues) for queues in table.by_topic.values())
    assert not any(gc.is_tracked(entry) for queues in table.by_topic.values() for entry in queues.values())


def test_a_full_collection_does_not_walk_the_topic_dicts():
    table = table_of(groups=3, topics=300, distinct=2)
    gc.collect()
    walked = {id(obj) for obj in gc.get_objects()}
    assert not any(id(queues) in walked for queues in table.by_topic.values())


def test_a_tracked_value_tracks_the_topic_dict_again_so_no_cycle_hides_from_the_collector():
    table = table_of(groups=1, topics=3)
    queues = table.by_topic["topic-0"]
    assert type(queues) is TopicEntries and not gc.is_tracked(queues)
    queues["cycle"] = [queues]  # no write of the table does this; CPython's dict tracks itself again
    assert gc.is_tracked(queues)
    del queues["cycle"]


def test_each_topic_dict_holds_the_name_it_is_stored_under_and_only_groups():
    table = table_of(groups=2, topics=50)
    for topic, queues in table.by_topic.items():
        assert queues.topic is topic
        assert sorted(queues) == ["group-0", "group-1"]
    # a later registration's own copies of the names: the table keeps, reports and indexes its own
    reported = []
    table._changes.listener = lambda topics, stored=False: reported.extend(topics)
    copies = ["".join(["topic-", str(t)]) for t in range(50)]
    table.put_all("group-2", [(name, 9, 9, 6, 0) for name in copies], True, False)
    stored = {id(topic) for topic in table.by_topic}
    assert len(reported) == 50 and all(id(topic) in stored for topic in reported)
    assert all(id(topic) in stored for topic in table.topics_of("group-2"))


def test_the_group_index_holds_tuples_the_collector_leaves_alone():
    by_topic = {f"t{i}": {"g": (1, 1, 6, 0)} for i in range(10)}
    index = GroupTopics(by_topic)
    index.added("g", [f"t{i}" for i in range(5)])
    index.added("g", [f"t{i}" for i in range(5, 10)])
    held = index._lists["g"]
    assert type(held) is tuple and held == tuple(f"t{i}" for i in range(10))
    gc.collect()
    assert not gc.is_tracked(held)
