"""Broker-side pieces without sockets: the registration period clamp, the topic table, and split
registration — checked by feeding the chunks to the real (sans-IO) RouteInfoManager."""
from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from namesrv.channel import Channel
from namesrv.client import BrokerTopicTable, clamp_register_period, parse_namesrv_addrs, publish_queues
from namesrv.client.broker import RegistrationPlan
from namesrv.client.namesrv_client import MessageQueue, route_from_default_topic
from namesrv.config import NamesrvConfig
from namesrv.protocol import (
    BrokerData,
    DataVersion,
    QueueData,
    RegisterBrokerBody,
    TopicConfig,
    TopicConfigSerializeWrapper,
    TopicRouteData,
    Version,
)
from namesrv.protocol.codes import PERM_READ, PERM_WRITE
from namesrv.routeinfo import Registrant, RouteInfoManager

RW = PERM_READ | PERM_WRITE


def test_register_period_is_clamped_like_rocketmq() -> None:
    assert clamp_register_period(30_000) == 30_000
    assert clamp_register_period(1_000) == 10_000
    assert clamp_register_period(600_000) == 60_000


def test_topic_table_bumps_its_data_version_on_every_change() -> None:
    table = BrokerTopicTable([TopicConfig("A")])
    first = table.data_version
    table.put(TopicConfig("B"))
    second = table.data_version
    table.remove("A")
    assert first.counter + 2 == table.data_version.counter and second != table.data_version
    assert set(table.snapshot().topic_config_table) == {"B"} and len(table) == 1


def _wrapper(count: int, perm: int = RW, counter: int = 1) -> TopicConfigSerializeWrapper:
    topics = {f"topic-{i:06d}": TopicConfig(f"topic-{i:06d}", 4, 4, perm) for i in range(count)}
    return TopicConfigSerializeWrapper(topics, DataVersion(counter, 1_700_000_000_000 + counter, 0))


def _decode(body: bytes, compressed: bool = False) -> TopicConfigSerializeWrapper:
    return RegisterBrokerBody.decode(body, compressed, Version.V5_3_3).wrapper


def test_small_table_goes_in_one_body_with_the_real_version() -> None:
    plan = RegistrationPlan(_wrapper(10), [], False, Version.V5_3_3, 1 << 20)
    assert len(plan.chunks) == 1
    assert plan.bodies(True) == plan.bodies(False)
    assert _decode(plan.bodies(True)[0]).data_version == plan.data_version


@pytest.mark.parametrize("compressed", [False, True])
def test_large_table_is_split_into_disjoint_chunks_under_the_limit(compressed: bool) -> None:
    wrapper = _wrapper(3000)
    limit = 2_000 if compressed else 60_000
    plan = RegistrationPlan(wrapper, [], compressed, Version.V5_3_3, limit)
    assert len(plan.chunks) > 2
    for chained in (False, True):
        bodies = plan.bodies(chained)
        assert all(len(body) <= limit for body in bodies)
        decoded = [_decode(body, compressed) for body in bodies]
        names = [name for d in decoded for name in d.topic_config_table]
        assert len(names) == len(set(names)) == 3000 and set(names) == set(wrapper.topic_config_table)
        versions = [d.data_version for d in decoded]
        assert versions[-1] == wrapper.data_version
        if chained:
            assert len(set(versions)) == len(versions)  # every chunk counts as "changed"
            assert all(v.counter == wrapper.data_version.counter for v in versions)
            assert all(v.state_version == wrapper.data_version.state_version for v in versions)
        else:
            assert set(versions) == {wrapper.data_version}


def _register(routes: RouteInfoManager, bodies: list[bytes], channel: Channel) -> None:
    for body in bodies:
        result = routes.register(Registrant("C", "127.0.0.1:10911", "b1", 0, "127.0.0.1:10912", None, False), _decode(body), [], channel)
        assert result is not None


def _perms(routes: RouteInfoManager, topics: list[str]) -> set[int]:
    perms = set()
    for topic in topics:
        route = routes.pickup_topic_route(topic)
        assert route is not None, topic
        perms |= {q.perm for q in route.queue_datas}
    return perms


def test_chained_chunks_apply_a_changed_config_in_every_chunk_and_plain_ones_would_not() -> None:
    channel = Channel("tcp", b"broker-1", "127.0.0.1:50000")
    limit = 30_000
    first = RegistrationPlan(_wrapper(2000, RW, counter=1), [], False, Version.V5_3_3, limit)
    assert len(first.chunks) > 2
    topics = list(first.wrapper.topic_config_table)

    routes = RouteInfoManager(NamesrvConfig())
    _register(routes, first.bodies(True), channel)
    assert len(routes.all_topics().topic_list) == 2000 and _perms(routes, topics) == {RW}

    changed = RegistrationPlan(_wrapper(2000, PERM_READ, counter=2), [], False, Version.V5_3_3, limit)
    _register(routes, changed.bodies(True), channel)
    assert _perms(routes, topics) == {PERM_READ}

    # What chaining avoids: the same change sent with one DataVersion reaches the first chunk only.
    plain_routes = RouteInfoManager(NamesrvConfig())
    _register(plain_routes, first.bodies(True), channel)
    _register(plain_routes, changed.bodies(False), channel)
    assert _perms(plain_routes, list(changed.chunks[0])) == {PERM_READ}
    assert _perms(plain_routes, list(changed.chunks[-1])) == {RW}


def test_steady_state_chunks_restore_missing_topics_but_keep_an_operators_wipe() -> None:
    channel = Channel("tcp", b"broker-1", "127.0.0.1:50000")
    plan = RegistrationPlan(_wrapper(2000), [], False, Version.V5_3_3, 30_000)
    routes = RouteInfoManager(NamesrvConfig())
    _register(routes, plan.bodies(True), channel)
    assert routes.wipe_write_perm_of_broker("b1") == 2000
    lost = list(plan.chunks[-1])[0]
    routes.delete_topic(lost)
    _register(routes, plan.bodies(False), channel)  # next period: the NameServer already has this version
    assert routes.pickup_topic_route(lost) is not None
    others = [t for t in plan.wrapper.topic_config_table if t != lost]
    assert _perms(routes, others) == {PERM_READ}


@settings(max_examples=25, deadline=None)
@given(count=st.integers(2, 400), limit=st.integers(2_000, 40_000), compressed=st.booleans())
def test_every_split_covers_the_table_exactly_once(count: int, limit: int, compressed: bool) -> None:
    plan = RegistrationPlan(_wrapper(count), ["127.0.0.1:7000"], compressed, Version.V5_3_3, limit)
    names = list(itertools.chain.from_iterable(plan.chunks))
    assert sorted(names) == sorted(plan.wrapper.topic_config_table)
    for body in plan.bodies(True):
        assert len(body) <= limit or len(_decode(body, compressed).topic_config_table) == 1


def test_namesrv_address_lists() -> None:
    assert parse_namesrv_addrs("a:1; b:2;a:1;") == ["a:1", "b:2"]
    assert parse_namesrv_addrs(["x:9"]) == ["x:9"]
    with pytest.raises(ValueError, match="no NameServer address"):
        parse_namesrv_addrs(" ; ")


def _route() -> TopicRouteData:
    return TopicRouteData(
        [QueueData("b2", 8, 8, RW), QueueData("b1", 2, 2, RW), QueueData("b3", 4, 4, PERM_READ),
         QueueData("b4", 4, 4, RW)],
        [BrokerData("C", "b1", {0: "h:1"}), BrokerData("C", "b2", {0: "h:2"}), BrokerData("C", "b3", {0: "h:3"}),
         BrokerData("C", "b4", {1: "h:4"})])


def test_publish_queues_skip_read_only_and_masterless_brokers() -> None:
    queues = publish_queues("T", _route())
    assert queues[:2] == [MessageQueue("T", "b1", 0), MessageQueue("T", "b1", 1)]
    assert [q.broker_name for q in queues] == ["b1"] * 2 + ["b2"] * 8


def test_publish_queues_follow_order_topic_conf() -> None:
    route = _route()
    route.order_topic_conf = "b2:2;b1:1"
    assert publish_queues("T", route) == [MessageQueue("T", "b2", 0), MessageQueue("T", "b2", 1),
                                          MessageQueue("T", "b1", 0)]


def test_default_topic_route_is_cut_to_the_default_queue_count() -> None:
    route = route_from_default_topic(_route(), 4)
    assert {q.broker_name: (q.read_queue_nums, q.write_queue_nums) for q in route.queue_datas} == {
        "b2": (4, 4), "b1": (2, 2), "b3": (4, 4), "b4": (4, 4)}
    assert _route().queue_datas[0].write_queue_nums == 8  # the source route is not modified
