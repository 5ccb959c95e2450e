"""The encoded-route cache: every change invalidates exactly the topics whose route it changes.

A cluster of 12 broker groups x 60 topics each (every topic on two groups) with every route
cached in both flavours; each operation below names the topics it must invalidate, and the test
checks the cache lost exactly those, and that every body still cached equals a fresh encoding.
The same logic is what keeps the cache affordable at 300 brokers x 10,000 topics
(`python -m bench scale` measures that size).
"""
from __future__ import annotations

import threading
import time

import pytest

from namesrv.channel import Channel
from namesrv.config import NamesrvConfig
from namesrv.protocol.codes import PERM_READ
from namesrv.protocol.topic import DataVersion, TopicConfig, TopicConfigSerializeWrapper
from namesrv.routeinfo import DEFAULT_BROKER_CHANNEL_EXPIRED_TIME, Registrant, RouteInfoManager
from namesrv.routeinfo.cache import ENTRY_OVERHEAD, RouteBodyCache
from namesrv.routeinfo.rwlock import ReadWriteLock

GROUPS = 12
TOPICS_PER_GROUP = 60
ALL_TOPICS = [f"topic-{i}" for i in range(GROUPS * TOPICS_PER_GROUP // 2)]


def topics_of(group: int) -> list[str]:
    """Topic i lives on groups i % GROUPS and (i + 1) % GROUPS."""
    return [t for i, t in enumerate(ALL_TOPICS) if group in (i % GROUPS, (i + 1) % GROUPS)]


class Clock:
    def __init__(self) -> None:
        self.now = 1_700_000_000_000

    def __call__(self) -> int:
        return self.now


class Cluster:
    def __init__(self) -> None:
        self.config = NamesrvConfig()
        self.clock = Clock()
        self.routes = RouteInfoManager(self.config, clock=self.clock)
        self.counters = [1] * GROUPS

    def register(self, group: int, broker_id: int = 0, queues: dict[str, int] | None = None,
                 filters: list[str] | None = None, ch: int | None = None) -> None:
        queues = queues or {}
        table = {t: TopicConfig(t, queues.get(t, 4), queues.get(t, 4)) for t in topics_of(group)}
        self.routes.register(Registrant("C", f"10.0.{group}.{broker_id}:10911", f"g{group}", broker_id), TopicConfigSerializeWrapper(table, DataVersion(self.counters[group], 0, 0)), [] if filters is None else filters, Channel("tcp", bytes([group, broker_id if ch is None else ch])))

    def query_everything(self) -> None:
        for topic in ALL_TOPICS:
            for standard in (True, False):
                assert self.routes.topic_route_body(topic, standard) is not None

    def assert_coherent(self) -> None:
        for topic in self.routes.cached_route_topics():
            fresh = self.routes.pickup_topic_route(topic)
            assert fresh is not None
            for standard in (True, False):
                assert self.routes.topic_route_body(topic, standard) == fresh.encode(standard)


@pytest.fixture
def cluster() -> Cluster:
    c = Cluster()
    for group in range(GROUPS):
        c.register(group)
    c.query_everything()
    assert c.routes.cached_route_topics() == set(ALL_TOPICS)
    return c


def expect_invalidated(cluster: Cluster, change, expected: set[str]) -> None:
    before = cluster.routes.cached_route_topics()
    change()
    assert before - cluster.routes.cached_route_topics() == expected
    cluster.assert_coherent()


def test_unchanged_reregistration_invalidates_nothing(cluster):
    expect_invalidated(cluster, lambda: cluster.register(3), set())


def test_new_data_version_with_identical_topics_invalidates_nothing(cluster):
    cluster.counters[3] += 1
    expect_invalidated(cluster, lambda: cluster.register(3), set())


def test_one_changed_topic_invalidates_that_topic(cluster):
    cluster.counters[3] += 1
    changed = topics_of(3)[5]
    expect_invalidated(cluster, lambda: cluster.register(3, queues={changed: 8}), {changed})


def test_a_slave_joining_changes_every_route_of_its_group(cluster):
    expect_invalidated(cluster, lambda: cluster.register(4, broker_id=1), set(topics_of(4)))


def test_wipe_write_perm_touches_that_groups_topics(cluster):
    expect_invalidated(cluster, lambda: cluster.routes.wipe_write_perm_of_broker("g5"), set(topics_of(5)))
    # Adding it back changes them again; adding to an already writable group changes nothing.
    cluster.query_everything()
    expect_invalidated(cluster, lambda: cluster.routes.add_write_perm_of_broker("g5"), set(topics_of(5)))
    cluster.query_everything()
    expect_invalidated(cluster, lambda: cluster.routes.add_write_perm_of_broker("g6"), set())


def test_deleting_a_topic_invalidates_it(cluster):
    expect_invalidated(cluster, lambda: cluster.routes.delete_topic("topic-7"), {"topic-7"})
    assert cluster.routes.topic_route_body("topic-7", True) is None


def test_expiry_of_a_group_invalidates_its_topics(cluster):
    cluster.clock.now += DEFAULT_BROKER_CHANNEL_EXPIRED_TIME // 2
    for group in range(GROUPS):
        if group != 8:
            cluster.register(group)
    cluster.clock.now += DEFAULT_BROKER_CHANNEL_EXPIRED_TIME // 2 + 1
    expect_invalidated(cluster, cluster.routes.scan_not_active_brokers, set(topics_of(8)))


def test_closing_a_slave_channel_invalidates_its_groups_topics(cluster):
    cluster.register(9, broker_id=1)
    cluster.query_everything()
    expect_invalidated(cluster, lambda: cluster.routes.on_channel_destroy(Channel("tcp", bytes([9, 1]))),
                       set(topics_of(9)))


def test_filter_server_change_invalidates_that_groups_topics(cluster):
    expect_invalidated(cluster, lambda: cluster.register(10, filters=["10.9.9.9:1"]), set(topics_of(10)))
    cluster.query_everything()
    expect_invalidated(cluster, lambda: cluster.register(10, filters=["10.9.9.9:1"]), set())


def test_order_topic_conf_and_acting_master_switch_need_no_invalidation(cluster):
    routes = cluster.routes
    with_conf = routes.topic_route_body("topic-1", True, "g1:4")
    assert b'"orderTopicConf":"g1:4"' in with_conf
    assert routes.topic_route_body("topic-1", True, "g1:2") != with_conf
    assert b"orderTopicConf" not in routes.topic_route_body("topic-1", True)
    cluster.register(11, broker_id=1)
    routes.unregister_broker("C", "10.0.11.0:10911", "g11", 0)
    cluster.routes.wipe_write_perm_of_broker("g11")
    topic = topics_of(11)[0]
    before = routes.topic_route_body(topic, True)
    cluster.config.support_acting_master = True
    assert routes.topic_route_body(topic, True) == before  # group g11 is not an acting-master group
    cluster.assert_coherent()


def test_cache_holds_one_entry_per_queried_topic():
    c = Cluster()
    for group in range(GROUPS):
        c.register(group)
    assert c.routes.route_cache_size() == (0, 0)
    c.routes.topic_route_body("topic-3", True)
    c.routes.topic_route_body("topic-3", False)
    c.routes.topic_route_body("no-such-topic", True)
    assert c.routes.cached_route_topics() == {"topic-3"}


def test_cache_byte_budget_evicts_least_recently_used():
    cache = RouteBodyCache(max_bytes=3 * (100 + ENTRY_OVERHEAD))
    for topic in "abc":
        cache.put(topic, True, None, b"x" * 100)
    assert cache.get("a", True, None) is not None  # a is now the most recently used
    cache.put("d", True, None, b"x" * 100)
    assert cache.topics() == {"a", "c", "d"}
    assert cache.size() == (3, 3 * (100 + ENTRY_OVERHEAD))
    cache.put("a", True, None, b"y" * 50)  # replacing a body re-counts its bytes
    assert cache.size() == (3, 2 * (100 + ENTRY_OVERHEAD) + 50 + ENTRY_OVERHEAD)
    cache.put("huge", True, None, b"z" * 10_000)  # larger than the whole budget: not stored
    assert "huge" not in cache.topics()
    assert cache.get("a", True, "other stamp") is None
    cache.invalidate({"a", "zzz"})
    assert cache.topics() == {"c", "d"}



def test_get_many_is_get_of_each_key_of_the_key_type():
    """A chunk's lookups in one call: each key as `get` answers it; a key of another type (a
    registration's entry in the reactor's header table, say) or None is answered None, even when
    it looks like a (topic, variant) pair; only hits count as read for the second chance."""
    class Query(tuple):
        pass

    cache = RouteBodyCache(max_bytes=10 * (100 + ENTRY_OVERHEAD))
    cache.put("a", True, "s", b"A")
    cache.put("b", False, "s", b"B")
    cache.put("c", True, "old", b"C")
    keys = [Query(("a", True)), None, ("a", True), Query(("b", True)), Query(("b", False)), Query(("c", True)),
            Query(("zzz", True))]
    assert cache.get_many(keys, "s", Query) == [b"A", None, None, None, b"B", None, None]
    assert [cache.get(*key, "s") if type(key) is Query else None for key in keys] == cache.get_many(keys, "s", Query)
    assert cache._referenced == {"a", "b"}


# ---------------------------------------------------------------- the readers-writer lock


def _wait_until(predicate, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.001)


def test_readers_share_the_lock():
    lock = ReadWriteLock()
    inside = threading.Barrier(3, timeout=10)

    def reader() -> None:
        with lock.read:
            inside.wait()  # all three readers are inside at the same time

    threads = [threading.Thread(target=reader) for _ in range(2)]
    for t in threads:
        t.start()
    reader()
    for t in threads:
        t.join(10)


def test_writer_excludes_readers_and_is_preferred():
    lock = ReadWriteLock()
    events: list[str] = []
    lock.acquire_read()
    writer = threading.Thread(target=lambda: (lock.acquire_write(), events.append("write"), lock.release_write()))
    writer.start()
    _wait_until(lambda: lock._writers_waiting == 1)
    late_reader = threading.Thread(target=lambda: (lock.acquire_read(), events.append("read"), lock.release_read()))
    late_reader.start()
    time.sleep(0.05)
    assert events == []  # the writer waits for the first reader; the late reader waits for the writer
    lock.release_read()
    writer.join(10)
    late_reader.join(10)
    assert events == ["write", "read"]


def test_route_queries_read_concurrently_with_a_registration_storm():
    """Many threads query while others register: every answer is a complete, decodable route."""
    c = Cluster()
    for group in range(GROUPS):
        c.register(group)
    errors: list[BaseException] = []
    stop = threading.Event()

    def query() -> None:
        try:
            while not stop.is_set():
                for topic in ALL_TOPICS[:50]:
                    body = c.routes.topic_route_body(topic, True)
                    assert body is not None and body.startswith(b'{"brokerDatas":[')
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    readers = [threading.Thread(target=query) for _ in range(4)]
    for t in readers:
        t.start()
    for round_ in range(30):
        group = round_ % GROUPS
        c.counters[group] += 1
        c.register(group, queues={topics_of(group)[0]: 1 + round_ % 5})
        c.routes.wipe_write_perm_of_broker(f"g{group}")
    stop.set()
    for t in readers:
        t.join(10)
    assert errors == []
    c.assert_coherent()
    assert all(q.perm == PERM_READ for q in c.routes.pickup_topic_route(topics_of(0)[1]).queue_datas
               if q.broker_name == "g0")
