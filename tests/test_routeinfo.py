"""RouteInfoManager scenarios: the flows brokers and admin tools drive (reference 4.1-4.9).

Sans-IO: an injected millisecond clock replaces time, so expiry is tested without sleeping.
"""
from __future__ import annotations

import logging
from dataclasses import replace
import sys
import threading
import time

import orjson
import pytest

from namesrv.channel import Channel
from namesrv.config import NamesrvConfig
from namesrv.protocol.codes import FLAG_UNIT, FLAG_UNIT_SUB, PERM_PRIORITY, PERM_READ, PERM_WRITE
from namesrv.protocol.route import QueueData, TopicRouteData
from namesrv.protocol.topic import DataVersion, TopicConfig, TopicConfigSerializeWrapper
from namesrv.routeinfo import DEFAULT_BROKER_CHANNEL_EXPIRED_TIME, Registrant, RouteInfoManager
from namesrv.routeinfo.history import REGISTERED, RouteHistory
from namesrv.routeinfo.rwlock import ReadWriteLock

START = 1_700_000_000_000


class Clock:
    def __init__(self) -> None:
        self.now = START

    def __call__(self) -> int:
        return self.now

    def advance(self, ms: int) -> None:
        self.now += ms


def channel(n: int) -> Channel:
    return Channel("tcp", n.to_bytes(4, "big"), f"127.0.0.1:{40000 + n}")


def wrapper(*topics: str | TopicConfig, counter: int = 1, state: int = 0,
            mappings: dict | None = None) -> TopicConfigSerializeWrapper:
    configs = [t if isinstance(t, TopicConfig) else TopicConfig(t, 4, 4) for t in topics]
    return TopicConfigSerializeWrapper({c.topic_name: c for c in configs}, DataVersion(counter, START, state),
                                       topic_queue_mapping_info_map=mappings or {})


def register(routes: RouteInfoManager, name: str = "broker-a", addr: str = "10.0.0.1:10911", broker_id: int = 0,
             topics: tuple = ("T1", "T2"), cluster: str = "DefaultCluster", counter: int = 1, state: int = 0,
             via: Channel | None = None, ha: str | None = None, filters: list[str] | None = None,
             **extra):
    table = wrapper(*topics, counter=counter, state=state, mappings=extra.pop("mappings", None))
    fingerprint = extra.pop("body_fingerprint", None)
    return routes.register(Registrant(cluster, addr, name, broker_id, ha or addr.replace("10911", "10912"), **extra),
                           table, [] if filters is None else filters, via or channel(hash(addr) & 0xFFFF), fingerprint)


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def config() -> NamesrvConfig:
    return NamesrvConfig()


@pytest.fixture
def routes(config: NamesrvConfig, clock: Clock) -> RouteInfoManager:
    return RouteInfoManager(config, clock=clock)


def route(routes: RouteInfoManager, topic: str) -> TopicRouteData:
    found = routes.pickup_topic_route(topic)
    assert found is not None, f"no route for {topic}"
    return found


# ---------------------------------------------------------------- registration


def test_master_and_slave_register_and_the_slave_learns_its_master(routes):
    first = register(routes, addr="10.0.0.1:10911", ha="10.0.0.1:10912")
    assert first.master_addr is None and first.ha_server_addr is None
    slave = register(routes, addr="10.0.0.2:10911", broker_id=1, ha="10.0.0.2:10912")
    assert slave.master_addr == "10.0.0.1:10911"
    assert slave.ha_server_addr == "10.0.0.1:10912"  # the master's HA address, not the slave's own
    data = route(routes, "T1")
    assert data.broker_datas[0].broker_addrs == {0: "10.0.0.1:10911", 1: "10.0.0.2:10911"}
    assert [q.broker_name for q in data.queue_datas] == ["broker-a"]


def test_slave_gets_no_master_info_while_the_master_is_not_live(routes, clock):
    assert register(routes, addr="10.0.0.2:10911", broker_id=1).master_addr is None
    register(routes, addr="10.0.0.1:10911")
    clock.advance(DEFAULT_BROKER_CHANNEL_EXPIRED_TIME + 1)
    register(routes, addr="10.0.0.2:10911", broker_id=1)  # keeps the slave alive
    routes.scan_not_active_brokers()  # the master expires
    assert register(routes, addr="10.0.0.2:10911", broker_id=1).master_addr is None


def test_slave_topic_configs_do_not_touch_the_route(routes):
    register(routes, topics=("T1",  "T2"))
    register(routes, addr="10.0.0.2:10911", broker_id=1, topics=(TopicConfig("T1", 1, 1, PERM_READ), "T2", "T3"))
    assert route(routes, "T1").queue_datas == [QueueData("broker-a", 4, 4, PERM_READ | PERM_WRITE, 0)]
    assert routes.pickup_topic_route("T3") is None


def test_two_brokers_serve_one_topic(routes):
    register(routes, name="broker-a", addr="10.0.0.1:10911", topics=("Shared", "OnlyA"))
    register(routes, name="broker-b", addr="10.0.0.3:10911", topics=("Shared", "OnlyB"))
    data = route(routes, "Shared")
    assert sorted(q.broker_name for q in data.queue_datas) == ["broker-a", "broker-b"]
    assert sorted(b.broker_name for b in data.broker_datas) == ["broker-a", "broker-b"]
    assert [b.broker_name for b in route(routes, "OnlyB").broker_datas] == ["broker-b"]


def test_unchanged_data_version_does_not_reapply_topics(routes):
    register(routes, counter=1)
    assert routes.wipe_write_perm_of_broker("broker-a") == 2
    register(routes, counter=1)  # periodic re-registration, same DataVersion
    assert route(routes, "T1").queue_datas[0].perm == PERM_READ
    register(routes, counter=2)  # the broker's table changed: its config wins again
    assert route(routes, "T1").queue_datas[0].perm == PERM_READ | PERM_WRITE


def test_topic_missing_from_the_table_is_restored_even_with_unchanged_version(routes):
    """5.x per-topic check (reference 4.2 step 10): a deleted topic comes back on the next registration."""
    register(routes, topics=("T1", "T2"))
    routes.delete_topic("T2")
    assert routes.pickup_topic_route("T2") is None
    register(routes, topics=("T1", "T2"))
    assert route(routes, "T2").queue_datas[0].broker_name == "broker-a"


def test_topics_gone_from_the_broker_stay_unless_configured(routes, config):
    register(routes, topics=("T1", "T2"), counter=1)
    register(routes, topics=("T1", "T3"), counter=2)
    assert routes.pickup_topic_route("T2") is not None
    config.delete_topic_with_broker_registration = True
    register(routes, topics=("T1", "T3"), counter=3)
    assert routes.pickup_topic_route("T2") is None
    assert routes.pickup_topic_route("T3") is not None


def test_same_address_with_a_new_id_replaces_the_old_id(routes):
    """A slave promoted to master re-registers its address under id 0."""
    register(routes, addr="10.0.0.2:10911", broker_id=1, topics=("T1", "T2"))
    register(routes, addr="10.0.0.2:10911", broker_id=0, topics=("T1", "T2"))
    assert route(routes, "T1").broker_datas[0].broker_addrs == {0: "10.0.0.2:10911"}


def test_single_topic_registration_before_a_full_one_is_refused_without_side_effects(routes):
    assert register(routes, topics=("OnlyOne",)) is None
    tables = routes.snapshot()
    assert tables.cluster_addr_table == {} and tables.broker_addr_table == {} and tables.broker_live_table == {}
    register(routes, topics=("T1", "T2"), counter=1)
    assert register(routes, topics=("T3",), counter=2) is not None  # incremental, after the full one
    assert route(routes, "T3").queue_datas[0].broker_name == "broker-a"


def test_stale_registration_for_an_id_held_by_a_newer_broker_is_ignored(routes):
    register(routes, addr="10.0.0.1:10911", state=5)
    result = register(routes, addr="10.0.0.9:10911", state=4, topics=("T1", "T2", "X"))
    assert result is not None and result.master_addr is None
    tables = routes.snapshot()
    assert tables.broker_addr_table["broker-a"].broker_addrs == {0: "10.0.0.1:10911"}
    assert ("DefaultCluster", "10.0.0.9:10911") not in tables.broker_live_table
    assert routes.pickup_topic_route("X") is None
    register(routes, addr="10.0.0.9:10911", state=6)  # a newer stateVersion takes the id over
    assert routes.snapshot().broker_addr_table["broker-a"].broker_addrs == {0: "10.0.0.9:10911"}


def test_live_info_records_channel_version_timeout_and_ha_address(routes, clock):
    via = channel(7)
    register(routes, via=via, counter=3, heartbeat_timeout_millis=10_000)
    live = routes.snapshot().broker_live_table[("DefaultCluster", "10.0.0.1:10911")]
    assert (live.channel, live.data_version.counter, live.heartbeat_timeout_millis) == (via, 3, 10_000)
    assert live.last_update_timestamp == clock.now and live.ha_server_addr == "10.0.0.1:10912"


def test_filter_servers_are_set_cleared_and_shown_in_routes(routes):
    register(routes, filters=["10.0.0.1:30000"])
    assert route(routes, "T1").filter_server_table == {"10.0.0.1:10911": ["10.0.0.1:30000"]}
    routes.register(Registrant("DefaultCluster", "10.0.0.1:10911", "broker-a", 0), wrapper("T1", "T2"), None,
                    channel(1))
    assert route(routes, "T1").filter_server_table == {"10.0.0.1:10911": ["10.0.0.1:30000"]}  # None: unchanged
    register(routes, filters=[])
    assert route(routes, "T1").filter_server_table == {}


def test_acting_master_flags_and_zone_are_recorded_per_group(routes):
    register(routes, enable_acting_master=True, zone_name="zone-1")
    group = route(routes, "T1").broker_datas[0]
    assert group.enable_acting_master is True and group.zone_name == "zone-1"
    register(routes)  # an old-version broker (no header) clears both, as RocketMQ does
    group = route(routes, "T1").broker_datas[0]
    assert group.enable_acting_master is False and group.zone_name is None


def test_prime_slave_of_an_acting_master_group_registers_read_only_topics(routes, config):
    register(routes, addr="10.0.0.2:10911", broker_id=1, topics=("T1", "T2"), enable_acting_master=True)
    assert route(routes, "T1").queue_datas[0].perm == PERM_READ
    config.support_acting_master = True
    assert route(routes, "T1").broker_datas[0].broker_addrs == {0: "10.0.0.2:10911"}  # shown as acting master
    config.support_acting_master = False
    assert route(routes, "T1").broker_datas[0].broker_addrs == {1: "10.0.0.2:10911"}


def test_master_loss_in_an_acting_master_group_wipes_write_perm(routes):
    register(routes, addr="10.0.0.1:10911", enable_acting_master=True)
    register(routes, addr="10.0.0.2:10911", broker_id=1, enable_acting_master=True)
    routes.unregister_broker("DefaultCluster", "10.0.0.1:10911", "broker-a", 0)
    assert route(routes, "T1").queue_datas[0].perm == PERM_READ


def test_static_topic_mappings_are_merged_and_returned(routes):
    info = {"bname": "broker-a", "currIdMap": {"0": 0}, "epoch": 1, "scope": "__global__", "topic": "T1",
            "totalQueues": 1, "dirty": False}
    register(routes, mappings={"T1": info})
    assert route(routes, "T1").topic_queue_mapping_by_broker == {"broker-a": info}
    assert route(routes, "T2").topic_queue_mapping_by_broker is None


# ---------------------------------------------------------------- liveness and removal


def test_broker_silent_past_expiry_disappears_with_everything_it_owned(routes, clock):
    register(routes, name="broker-a", addr="10.0.0.1:10911", topics=("Shared", "OnlyA"), cluster="C1")
    clock.advance(60_000)
    register(routes, name="broker-b", addr="10.0.0.3:10911", topics=("Shared", "OnlyB"), cluster="C2")
    clock.advance(DEFAULT_BROKER_CHANNEL_EXPIRED_TIME - 60_000)
    assert routes.scan_not_active_brokers() == []  # exactly at the limit: still alive
    clock.advance(1)
    removed = routes.scan_not_active_brokers()
    assert [(r.reason, r.broker_name, r.broker_id, r.broker_addr) for r in removed] == \
        [("expired", "broker-a", 0, "10.0.0.1:10911")]
    assert routes.pickup_topic_route("OnlyA") is None  # its last broker is gone: the topic vanished
    assert [q.broker_name for q in route(routes, "Shared").queue_datas] == ["broker-b"]
    tables = routes.snapshot()
    assert set(tables.cluster_addr_table) == {"C2"}  # the empty cluster vanished
    assert set(tables.broker_addr_table) == {"broker-b"}


def test_heartbeats_and_data_version_queries_keep_a_broker_alive(routes, clock):
    register(routes, heartbeat_timeout_millis=10_000)
    for _ in range(5):
        clock.advance(8_000)
        assert routes.update_broker_timestamp("DefaultCluster", "10.0.0.1:10911")
        assert routes.scan_not_active_brokers() == []
    clock.advance(8_000)
    stored = routes.query_data_version("DefaultCluster", "10.0.0.1:10911")
    assert stored.counter == 1  # refreshed whatever the version queried (RocketMQ 5.x)
    clock.advance(8_000)
    assert routes.scan_not_active_brokers() == []
    clock.advance(2_001)
    assert len(routes.scan_not_active_brokers()) == 1
    assert not routes.update_broker_timestamp("DefaultCluster", "10.0.0.1:10911")


def test_query_data_version(routes):
    assert routes.query_data_version("DefaultCluster", "10.0.0.1:10911") is None
    register(routes, counter=1)
    assert routes.query_data_version("DefaultCluster", "10.0.0.1:10911") == DataVersion(1, START, 0)
    assert routes.query_data_version("OtherCluster", "10.0.0.1:10911") is None


def test_closed_channel_removes_its_broker_at_once(routes):
    register(routes, addr="10.0.0.1:10911", via=channel(1))
    register(routes, addr="10.0.0.2:10911", broker_id=1, via=channel(2))
    assert routes.on_channel_destroy(channel(99)) == []  # a client connection: nothing
    removed = routes.on_channel_destroy(channel(1))
    assert [(r.reason, r.broker_addr, r.broker_id) for r in removed] == [("channel closed", "10.0.0.1:10911", 0)]
    assert route(routes, "T1").broker_datas[0].broker_addrs == {1: "10.0.0.2:10911"}
    routes.on_channel_destroy(channel(2))
    assert routes.pickup_topic_route("T1") is None
    assert routes.snapshot().cluster_addr_table == {}


def test_old_channel_closing_after_a_reconnect_leaves_the_broker(routes):
    register(routes, via=channel(1))
    register(routes, via=channel(2))  # the broker reconnected and re-registered
    assert routes.on_channel_destroy(channel(1)) == []
    assert routes.pickup_topic_route("T1") is not None


def test_unregister_removes_only_that_address(routes):
    register(routes, addr="10.0.0.1:10911")
    register(routes, addr="10.0.0.2:10911", broker_id=1)
    routes.unregister_broker("DefaultCluster", "10.0.0.2:10911", "broker-a", 1)
    assert route(routes, "T1").broker_datas[0].broker_addrs == {0: "10.0.0.1:10911"}
    routes.unregister_broker("DefaultCluster", "10.0.0.1:10911", "broker-a", 0)
    assert routes.snapshot().topic_queue_table == {}


def test_expiry_rechecks_under_the_write_lock(routes, clock):
    """A heartbeat that lands between the scan's candidate search and its removal keeps the broker."""
    register(routes)
    clock.advance(DEFAULT_BROKER_CHANNEL_EXPIRED_TIME + 1)
    lock = routes._lock
    lock.acquire_read()  # an in-flight reader, so the scan's removal phase must wait
    result: list = []
    scan = threading.Thread(target=lambda: result.extend(routes.scan_not_active_brokers()))
    scan.start()
    deadline = time.monotonic() + 10
    while lock._writers_waiting == 0:  # the scan found its candidate and waits for the write lock
        assert time.monotonic() < deadline
        time.sleep(0.001)
    routes._live.by_key[("DefaultCluster", "10.0.0.1:10911")].last_update_timestamp = clock.now  # the heartbeat
    lock.release_read()
    scan.join(10)
    assert result == [] and routes.pickup_topic_route("T1") is not None


def test_broker_address_no_group_lists_is_still_expired(routes, clock):
    """RocketMQ never removes such a live entry (setupUnRegisterRequest finds no group); we do."""
    register(routes, addr="10.0.0.1:10911", state=5)
    register(routes, addr="10.0.0.9:10911", state=6)  # takes id 0 over; 10.0.0.1 stays in the live table
    assert ("DefaultCluster", "10.0.0.1:10911") in routes.snapshot().broker_live_table
    clock.advance(DEFAULT_BROKER_CHANNEL_EXPIRED_TIME + 1)
    register(routes, addr="10.0.0.9:10911", state=6)
    removed = routes.scan_not_active_brokers()
    assert [(r.broker_addr, r.broker_name) for r in removed] == [("10.0.0.1:10911", None)]
    assert routes.snapshot().broker_addr_table["broker-a"].broker_addrs == {0: "10.0.0.9:10911"}


# ---------------------------------------------------------------- admin operations


def test_wipe_and_add_write_perm(routes):
    register(routes, topics=(TopicConfig("T1", 4, 4, PERM_READ | PERM_WRITE | PERM_PRIORITY), "T2"))
    register(routes, name="broker-b", addr="10.0.0.3:10911", topics=("T1",  "T3"))
    assert routes.wipe_write_perm_of_broker("broker-a") == 2
    perms = {q.broker_name: q.perm for q in route(routes, "T1").queue_datas}
    assert perms == {"broker-a": PERM_READ | PERM_PRIORITY, "broker-b": PERM_READ | PERM_WRITE}
    assert routes.add_write_perm_of_broker("broker-a") == 2
    assert {q.broker_name: q.perm for q in route(routes, "T1").queue_datas}["broker-a"] == PERM_READ | PERM_WRITE
    assert routes.wipe_write_perm_of_broker("nobody") == 0
    assert routes.wipe_write_perm_of_broker(None) == 0


def test_delete_topic_everywhere_or_in_one_cluster(routes):
    register(routes, name="broker-a", addr="10.0.0.1:10911", topics=("T1", "T2"), cluster="C1")
    register(routes, name="broker-b", addr="10.0.0.3:10911", topics=("T1", "T2"), cluster="C2")
    routes.delete_topic("T1", "C1")
    assert [q.broker_name for q in route(routes, "T1").queue_datas] == ["broker-b"]
    routes.delete_topic("T1", "C2")
    assert routes.pickup_topic_route("T1") is None
    routes.delete_topic("T2", "NoSuchCluster")
    routes.delete_topic("T2")
    assert routes.pickup_topic_route("T2") is None


def test_register_topic_needs_registered_brokers(routes):
    register(routes, name="broker-a", topics=("T1", "T2"))
    routes.register_topic("New", [QueueData("broker-a", 2, 2, 6, 0), QueueData("ghost", 2, 2, 6, 0)])
    assert routes.pickup_topic_route("New") is None  # a new topic is all or nothing
    routes.register_topic("New", [QueueData("broker-a", 2, 2, 6, 0)])
    assert route(routes, "New").queue_datas == [QueueData("broker-a", 2, 2, 6, 0)]
    register(routes, name="broker-b", addr="10.0.0.3:10911", topics=("T1", "T2"))
    routes.register_topic("New", [QueueData("broker-b", 3, 3, 6, 0), QueueData("ghost", 1, 1, 6, 0),
                                  QueueData("broker-a", 9, 9, 6, 0)])
    queues = {q.broker_name: q.read_queue_nums for q in route(routes, "New").queue_datas}
    assert queues == {"broker-a": 2, "broker-b": 3}  # applied up to the unknown broker, as RocketMQ


def test_topic_lists(routes):
    register(routes, name="broker-a", addr="10.0.0.1:10911", cluster="C1",
             topics=("Plain", TopicConfig("Unit", topic_sys_flag=FLAG_UNIT),
                     TopicConfig("UnitSub", topic_sys_flag=FLAG_UNIT_SUB),
                     TopicConfig("Both", topic_sys_flag=FLAG_UNIT | FLAG_UNIT_SUB)))
    register(routes, name="broker-b", addr="10.0.0.3:10911", cluster="C2", topics=("Plain", "OnlyB"))
    assert sorted(routes.all_topics().topic_list) == ["Both", "OnlyB", "Plain", "Unit", "UnitSub"]
    assert sorted(routes.topics_by_cluster("C1").topic_list) == ["Both", "Plain", "Unit", "UnitSub"]
    assert sorted(routes.topics_by_cluster("C2").topic_list) == ["OnlyB", "Plain"]
    assert routes.topics_by_cluster("Nope").topic_list == []
    assert sorted(routes.unit_topics().topic_list) == ["Both", "Unit"]
    assert sorted(routes.has_unit_sub_topics().topic_list) == ["Both", "UnitSub"]
    assert routes.has_unit_sub_ununit_topics().topic_list == ["UnitSub"]
    system = routes.system_topics()
    assert sorted(system.topic_list) == ["C1", "C2", "broker-a", "broker-b"]
    assert system.broker_addr in ("10.0.0.1:10911", "10.0.0.3:10911")


def test_cluster_info_and_member_group(routes):
    register(routes, addr="10.0.0.1:10911", cluster="C1")
    register(routes, addr="10.0.0.2:10911", broker_id=1, cluster="C1")
    info = routes.cluster_info()
    assert info.cluster_addr_table == {"C1": ["broker-a"]}
    assert info.broker_addr_table["broker-a"].broker_addrs == {0: "10.0.0.1:10911", 1: "10.0.0.2:10911"}
    assert orjson.loads(info.encode().replace(b"{0:", b'{"0":').replace(b",1:", b',"1":'))["clusterAddrTable"] == \
        {"C1": ["broker-a"]}
    group = routes.broker_member_group("C1", "broker-a")
    assert (group.cluster, group.broker_name, group.broker_addrs) == \
        ("C1", "broker-a", {0: "10.0.0.1:10911", 1: "10.0.0.2:10911"})
    assert routes.broker_member_group("C1", "nobody").broker_addrs == {}


def test_snapshot_is_a_copy(routes):
    register(routes)
    tables = routes.snapshot()
    tables.broker_addr_table["broker-a"].broker_addrs[5] = "x"
    tables.topic_queue_table["T1"].clear()
    assert route(routes, "T1").broker_datas[0].broker_addrs == {0: "10.0.0.1:10911"}


# ---------------------------------------------------------------- the decode-free re-registration


def refresh(routes: RouteInfoManager, fingerprint: str = "body-1", name: str = "broker-a",
            addr: str = "10.0.0.1:10911", broker_id: int = 0, via: Channel | None = None, **extra):
    return routes.refresh(Registrant("DefaultCluster", addr, name, broker_id, addr.replace("10911", "10912"), **extra),
                          fingerprint, via or channel(1))


def test_identical_reregistration_only_refreshes_liveness_and_channel(routes, clock):
    register(routes, via=channel(1), body_fingerprint="body-1")
    before = routes.snapshot()
    clock.advance(30_000)
    assert refresh(routes, via=channel(2)) is not None
    after = routes.snapshot()
    live = after.broker_live_table[("DefaultCluster", "10.0.0.1:10911")]
    assert live.last_update_timestamp == clock.now and live.channel == channel(2)
    assert after.topic_queue_table == before.topic_queue_table
    assert after.broker_addr_table == before.broker_addr_table
    assert routes.on_channel_destroy(channel(1)) == []  # the broker now lives on its new connection
    assert len(routes.on_channel_destroy(channel(2))) == 1


def test_slave_refresh_returns_its_master(routes):
    register(routes, addr="10.0.0.1:10911")
    register(routes, addr="10.0.0.2:10911", broker_id=1, body_fingerprint="slave-body")
    result = refresh(routes, "slave-body", addr="10.0.0.2:10911", broker_id=1)
    assert (result.master_addr, result.ha_server_addr) == ("10.0.0.1:10911", "10.0.0.1:10912")


@pytest.mark.parametrize("change", [
    {"fingerprint": "body-2"},
    {"heartbeat_timeout_millis": 10_000},
    {"zone_name": "zone-1"},
    {"enable_acting_master": False},
    {"broker_id": 1},
])
def test_refresh_declines_anything_but_an_identical_registration(routes, change):
    register(routes, body_fingerprint="body-1")
    assert refresh(routes, **change) is None
    assert refresh(routes, "body-1", addr="10.0.0.9:10911") is None  # never registered
    register(routes)  # registered without a fingerprint: the next one cannot be skipped either
    assert refresh(routes) is None


def test_refresh_declines_once_a_topic_of_the_group_was_removed(routes):
    register(routes, body_fingerprint="body-1")
    routes.delete_topic("T2")
    assert refresh(routes) is None  # the full registration restores T2
    register(routes, body_fingerprint="body-1")
    assert route(routes, "T2").queue_datas[0].broker_name == "broker-a"
    assert refresh(routes) is not None


def test_refresh_declines_when_the_registrant_becomes_the_prime_slave(routes):
    register(routes, addr="10.0.0.1:10911", topics=("T1", "T2"), enable_acting_master=True)
    register(routes, addr="10.0.0.2:10911", broker_id=1, topics=("T1", "T2", "SlaveOnly"),
             enable_acting_master=True, body_fingerprint="slave-body")
    assert routes.pickup_topic_route("SlaveOnly") is None  # a slave under a master applies nothing
    routes.unregister_broker("DefaultCluster", "10.0.0.1:10911", "broker-a", 0)
    assert refresh(routes, "slave-body", addr="10.0.0.2:10911", broker_id=1, enable_acting_master=True) is None


def test_refresh_declines_while_registrations_delete_topics(routes, config):
    register(routes, body_fingerprint="body-1")
    config.delete_topic_with_broker_registration = True
    assert refresh(routes) is None


# ---------------------------------------------------------------- the refresh without the lock


def test_the_lock_epoch_is_odd_exactly_while_a_writer_holds_it():
    lock = ReadWriteLock()
    assert lock.epoch == 0
    with lock.write:
        assert lock.epoch == 1
    with lock.read:
        assert lock.epoch == 2
    with lock.write:
        assert lock.epoch == 3
    assert lock.epoch == 4


def test_a_repeated_refresh_skips_its_checks_until_a_writer_runs(routes, monkeypatch):
    via = channel(1)
    register(routes, body_fingerprint="body-1", via=via)
    registrant = Registrant("DefaultCluster", "10.0.0.1:10911", "broker-a", 0, "10.0.0.1:10912")
    checks = []
    checked = routes._refreshable
    monkeypatch.setattr(routes, "_refreshable", lambda *args: checks.append(args) or checked(*args))
    assert routes.refresh(registrant, "body-1", via) is not None
    assert routes.refresh(registrant, "body-1", via) is not None
    assert len(checks) == 1  # the second knew its checks pass: no writer ran
    assert routes.refresh(replace(registrant), "body-1", via) is not None
    assert len(checks) == 2  # an equal registrant, not the one checked: checked again
    assert routes.refresh(registrant, "body-1", via) is not None
    assert len(checks) == 3
    register(routes, name="broker-b", addr="10.0.0.2:10911")  # a writer, changing nothing of broker-a
    assert routes.refresh(registrant, "body-1", via) is not None
    assert routes.refresh(registrant, "body-1", via) is not None
    assert len(checks) == 4
    moved = channel(2)
    assert routes.refresh(registrant, "body-1", moved) is not None  # under the lock, which moves the channel
    assert len(checks) == 5 and routes.on_channel_destroy(via) == []
    assert routes.refresh(registrant, "body-1", moved) is not None
    assert len(checks) == 5
    routes.delete_topic("T2")  # a writer changing what the checks read: the full registration restores T2
    assert routes.refresh(registrant, "body-1", moved) is None
    assert routes.registrations["unchanged"] == 8


def test_a_writer_between_the_checks_and_the_store_sends_the_refresh_under_the_lock(config):
    def clock() -> int:
        if writes:
            writes.pop()()
        return 1_000

    writes: list = []
    via = channel(1)
    routes = RouteInfoManager(config, clock=clock)
    register(routes, body_fingerprint="body-1", via=via)
    registrant = Registrant("DefaultCluster", "10.0.0.1:10911", "broker-a", 0, "10.0.0.1:10912")
    assert routes.refresh(registrant, "body-1", via) is not None
    writes.append(lambda: routes.unregister_broker("DefaultCluster", "10.0.0.1:10911", "broker-a", 0))
    assert routes.refresh(registrant, "body-1", via) is None  # as if it came just after the writer
    assert routes.snapshot().broker_live_table == {}
    register(routes, body_fingerprint="body-1", via=via)
    writes.append(lambda: register(routes, name="broker-b", addr="10.0.0.2:10911"))
    assert routes.refresh(registrant, "body-1", via) is not None  # checked again under the lock
    assert routes.registrations["unchanged"] == 2


def test_a_refresh_waits_for_a_writer_holding_the_lock(routes):
    register(routes, body_fingerprint="body-1", via=channel(1))
    registrant = Registrant("DefaultCluster", "10.0.0.1:10911", "broker-a", 0, "10.0.0.1:10912")
    answers: list = []
    routes._lock.acquire_write()
    refresher = threading.Thread(target=lambda: answers.append(routes.refresh(registrant, "body-1", channel(1))))
    refresher.start()
    refresher.join(0.2)
    assert refresher.is_alive() and answers == []
    routes._unregister_locked("unregistered", "DefaultCluster", "10.0.0.1:10911", "broker-a", 0, channel(1))
    routes._lock.release_write()
    refresher.join(5)
    assert answers == [None]


def test_refreshes_racing_writers_leave_the_tables_as_the_writers_did(routes):
    """Two threads switching as often as the interpreter allows: one refreshing, one deleting and
    restoring a topic of the group. Each refresh answered while T2 was gone would leave the broker
    without T2 and its repeats refreshed: after the last write, the refresh must decline until the
    full registration restores it."""
    register(routes, body_fingerprint="body-1", via=channel(1))
    registrant = Registrant("DefaultCluster", "10.0.0.1:10911", "broker-a", 0, "10.0.0.1:10912")
    stop = threading.Event()
    errors: list = []

    def refresher() -> None:
        try:
            while not stop.is_set():
                routes.refresh(registrant, "body-1", channel(1))
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    switch = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    thread = threading.Thread(target=refresher)
    thread.start()
    try:
        for _ in range(300):
            routes.delete_topic("T2")
            register(routes, body_fingerprint="body-1", via=channel(1))
        routes.delete_topic("T2")
        time.sleep(0.01)
    finally:
        stop.set()
        thread.join(10)
        sys.setswitchinterval(switch)
    assert errors == []
    assert routes.refresh(registrant, "body-1", channel(1)) is None
    assert routes.pickup_topic_route("T2") is None


def test_a_refresh_over_an_equal_channel_object_takes_no_lock(routes):
    """A worker process gets each write's channel from the write log as a new, equal object."""
    register(routes, body_fingerprint="body-1", via=channel(1))
    registrant = Registrant("DefaultCluster", "10.0.0.1:10911", "broker-a", 0, "10.0.0.1:10912")
    epoch = routes._lock.epoch
    assert routes.refresh(registrant, "body-1", channel(1)) is not None
    assert routes.refresh(registrant, "body-1", channel(1)) is not None
    assert routes._lock.epoch == epoch  # no writer ran: both were answered without the lock
    assert routes.refresh(registrant, "body-1", channel(2)) is not None
    assert routes._lock.epoch == epoch + 2  # a moved channel: under the lock


def test_created_topics_are_logged_at_info_and_changed_ones_are_recorded_in_the_route_history(routes, caplog) -> None:
    """A broker changing a topic with every DataVersion must not log each time, at any level (even
    asking whether to cost it more than its change): the route history records the change."""
    history = RouteHistory()
    routes.watch_routes(history)
    caplog.set_level(logging.DEBUG, logger="namesrv.routeinfo.manager")
    register(routes, topics=("T1", "T2"), counter=1)
    assert [(r.levelno, r.getMessage()) for r in caplog.records if "topics created" in r.getMessage()] == [
        (logging.INFO, "broker broker-a: 2 of 2 topics created, 0 changed")]
    caplog.clear()
    register(routes, topics=(TopicConfig("T1", 2, 2), "T2"), counter=2)
    assert not [m for m in caplog.messages if "topics created" in m]
    changes = history.topic("T1").entries
    assert [(event.kind, event.broker_name, kept) for event, kept in changes] == [
        (REGISTERED, "broker-a", True), (REGISTERED, "broker-a", True)]
    assert len(history.topic("T2").entries) == 1  # unchanged: recorded when created only
