"""The per-group topic index (namesrv.routeinfo.group_topics) against the full scan it replaces,
directly and through the route table's operations."""
from __future__ import annotations

import random

from namesrv.config import NamesrvConfig
from namesrv.protocol import DataVersion, QueueData, TopicConfig, TopicConfigSerializeWrapper
from namesrv.routeinfo import Registrant, RouteInfoManager
from namesrv.routeinfo.group_topics import SLACK, GroupTopics
from namesrv.routeinfo.persist import decode, encode_routes, restore_routes


def scan(table: dict[str, dict[str, object]], group: str) -> list[str]:
    return [topic for topic, queues in table.items() if group in queues]


def test_a_group_lists_its_live_topics_once_in_the_order_added() -> None:
    table: dict[str, dict[str, object]] = {}
    index = GroupTopics(table)
    for topic in ("a", "b", "c"):
        table.setdefault(topic, {})["g"] = 1
        index.added("g", [topic])
    del table["b"]["g"]
    index.removed("g")
    table["b"]["g"] = 1
    index.added("g", ["b"])
    del table["a"]["g"]
    index.removed("g")
    assert index.topics_of("g") == ["b", "c"] and index.topics_of("other") == []
    index.forget("g")
    assert index.topics_of("g") == [] and index.held() == 0


def test_adding_and_removing_one_topic_forever_holds_a_bounded_list() -> None:
    table: dict[str, dict[str, object]] = {f"t{i}": {"g": 1} for i in range(100)}
    index = GroupTopics(table)
    index.rebuild()
    for _ in range(20_000):
        del table["t0"]["g"]
        index.removed("g")
        table["t0"]["g"] = 1
        index.added("g", ["t0"])
    assert index.held() <= 2 * 100 + 2 * SLACK
    assert sorted(index.topics_of("g")) == sorted(table)


def test_the_route_table_walks_a_groups_topics_as_the_full_scan_would() -> None:
    config = NamesrvConfig(kv_config_path="/nonexistent/kv.json")
    routes = RouteInfoManager(config, clock=lambda: 1_700_000_000_000)
    pick = random.Random(20)
    names = [f"broker-{i}" for i in range(4)]
    versions = dict.fromkeys(names, 0)

    def register(name: str) -> None:
        versions[name] += 1
        topics = pick.sample(range(300), pick.randint(0, 120))
        table = {f"T{t}": TopicConfig(f"T{t}", 4, 4) for t in topics}
        routes.register(Registrant("C", f"10.0.0.{names.index(name)}:10911", name, 0), TopicConfigSerializeWrapper(                                    table, DataVersion(versions[name], 0, 0)), None, None)

    for step in range(400):
        name = pick.choice(names)
        action = pick.random()
        if action < 0.5:
            register(name)
        elif action < 0.7:
            routes.delete_topic(f"T{pick.randrange(300)}")
        elif action < 0.8:
            routes.register_topic(f"T{pick.randrange(300)}", [QueueData(name, 2, 2)])
        elif action < 0.9:
            routes.wipe_write_perm_of_broker(name)
        else:
            routes.unregister_broker("C", f"10.0.0.{names.index(name)}:10911", name, 0)
        table = routes.snapshot().topic_queue_table
        for group in names:
            walked = routes._queues.topics_of(group)
            assert len(set(walked)) == len(walked) and sorted(walked) == sorted(scan(table, group)), (step, group)


def test_a_topic_listed_by_many_groups_is_held_as_one_string() -> None:
    routes = RouteInfoManager(NamesrvConfig(kv_config_path="/nonexistent/kv.json"), clock=lambda: 0)
    for b in range(2):
        names = ["".join(["Topic", "-", x]) for x in "xy"]  # distinct string objects per registration, as decoded
        routes.register(Registrant("C", f"10.0.0.{b}:10911", f"broker-{b}", 0), TopicConfigSerializeWrapper(                                    {name: TopicConfig(name, 4, 4) for name in names}, DataVersion(1, 0, 0)), None, None)
    first, second = routes._queues.topics_of("broker-0"), routes._queues.topics_of("broker-1")
    assert first == second == ["Topic-x", "Topic-y"] and all(a is b for a, b in zip(first, second))


def test_a_restored_topic_a_new_group_joins_is_still_held_as_one_string(tmp_path) -> None:
    config = NamesrvConfig(kv_config_path=str(tmp_path / "kv.json"))
    before = RouteInfoManager(config, clock=lambda: 0)

    def register(routes: RouteInfoManager, b: int) -> None:
        names = ["".join(["Topic", "-", x]) for x in "xy"]
        routes.register(Registrant("C", f"10.0.0.{b}:10911", f"broker-{b}", 0), TopicConfigSerializeWrapper(                                    {name: TopicConfig(name, 4, 4) for name in names}, DataVersion(1, 0, 0)), None, None)

    register(before, 0)
    after = RouteInfoManager(config, clock=lambda: 0)
    restore_routes(after, decode(b"".join(encode_routes(before, 0)))[1], 0)
    register(after, 1)
    first, second = after._queues.topics_of("broker-0"), after._queues.topics_of("broker-1")
    assert first == second == ["Topic-x", "Topic-y"] and all(a is b for a, b in zip(first, second))
