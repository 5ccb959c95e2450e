"""Property: any sequence of route-table operations leaves the tables mutually consistent.

Thousands of random sequences of register / re-register / unregister / expire / channel close /
heartbeat / perm / topic operations over a small universe of clusters, groups, addresses and
topics (so they collide a lot). After every step: the five tables agree with each other, the
internal indexes agree with the tables, and every cached route body equals a fresh encoding of
the route (a missed invalidation would show up as a stale body).

Every operation runs on two managers: one registering as the processor does (the
decode-free `refresh_registration` first; when it declines, `register_broker` with the JSON body
decoded to a queue-fields-only `TopicQueueTable`, against the broker's previous topic entries, so
the fast path leaves out the unchanged ones) and one always taking the full `register_broker`
path with TopicConfig objects. Their tables must stay identical: the shortcuts are only
ever taken when they change exactly what the full registration would.
"""
from __future__ import annotations

from dataclasses import replace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from namesrv.channel import Channel
from namesrv.config import NamesrvConfig
from namesrv.protocol.codes import PERM_READ, PERM_WRITE
from namesrv.protocol.route import QueueData
from namesrv.protocol.topic import DataVersion, RegisterBrokerBody, TopicConfig, TopicConfigSerializeWrapper, \
    decode_registration
from namesrv.routeinfo import Registrant, RouteInfoManager, StaleTopicEntries

CLUSTERS = ("C1", "C2")
NAMES = ("b1", "b2", "b3")
ADDRS = tuple(f"10.0.0.{i}:10911" for i in range(1, 5))
TOPICS = ("T1", "T2", "T3", "T4")
ORDER_CONFS = (None, "b1:4;b2:2")

topic_configs = st.lists(
    st.builds(TopicConfig, st.sampled_from(TOPICS), st.integers(1, 4), st.integers(1, 4),
              st.sampled_from((PERM_READ, PERM_READ | PERM_WRITE, 7)), st.just("SINGLE_TAG"), st.integers(0, 3)),
    max_size=4, unique_by=lambda c: c.topic_name)

operations = st.one_of(
    st.tuples(st.just("register"), st.sampled_from(CLUSTERS), st.sampled_from(NAMES), st.sampled_from(ADDRS),
              st.integers(0, 2), topic_configs, st.integers(0, 2), st.integers(0, 2),
              st.sampled_from((None, False, True)), st.sampled_from(([], ["f1:1"], None)), st.integers(1, 3),
              st.sampled_from((None, 5_000, 120_000)), st.sampled_from((None, "z1"))),
    st.tuples(st.just("unregister"), st.sampled_from(CLUSTERS), st.sampled_from(ADDRS), st.sampled_from(NAMES),
              st.integers(0, 2)),
    st.tuples(st.just("expire"), st.sampled_from((1_000, 6_000, 130_000))),
    st.tuples(st.just("close"), st.integers(1, 3)),
    st.tuples(st.just("heartbeat"), st.sampled_from(CLUSTERS), st.sampled_from(ADDRS)),
    st.tuples(st.just("wipe"), st.sampled_from(NAMES)),
    st.tuples(st.just("add"), st.sampled_from(NAMES)),
    st.tuples(st.just("delete_topic"), st.sampled_from(TOPICS), st.sampled_from((None, "C1", "C2"))),
    st.tuples(st.just("register_topic"), st.sampled_from(TOPICS),
              st.lists(st.builds(QueueData, st.sampled_from(NAMES), st.integers(1, 3), st.integers(1, 3),
                                 st.just(6), st.just(0)), min_size=1, max_size=2)),
    st.tuples(st.just("query"), st.sampled_from(TOPICS), st.booleans(), st.sampled_from(ORDER_CONFS)),
    st.tuples(st.just("toggle"), st.sampled_from(("support_acting_master", "delete_topic_with_broker_registration"))),
    st.tuples(st.just("repeat"), st.integers(0, 1000)),  # a periodic re-registration: an earlier one, verbatim
    # An earlier registration with a new DataVersion, and perhaps its first topic's perm changed.
    st.tuples(st.just("bump"), st.integers(0, 1000), st.booleans()),
)


class Clock:
    def __init__(self) -> None:
        self.now = 1_700_000_000_000

    def __call__(self) -> int:
        return self.now


def register(routes: RouteInfoManager, op: tuple, shortcut: bool):
    (_, cluster, name, addr, broker_id, configs, counter, state, acting, filters, ch, timeout, zone) = op
    registrant = Registrant(cluster, addr, name, broker_id, addr, timeout, acting, zone)
    via = Channel("tcp", bytes([ch]))
    body = TopicConfigSerializeWrapper({c.topic_name: c for c in configs}, DataVersion(counter, 0, state))
    if not shortcut:
        return routes.register(registrant, body, filters, via)
    fingerprint = repr((configs, counter, state, filters))  # what the body's bytes determine
    result = routes.refresh(registrant, fingerprint, via)
    if result is None:  # as the processor passes it: decoded to queue fields only
        data = RegisterBrokerBody(body, filters).encode()
        table, _ = decode_registration(data, previous=routes.registration_hints(registrant)[1])
        try:
            result = routes.register(registrant, table, filters, via, fingerprint)
        except StaleTopicEntries:
            raise AssertionError("a single thread never registers against entries the hint did not offer") from None
    return result


def apply(routes: RouteInfoManager, config: NamesrvConfig, clock: Clock, op: tuple, shortcut: bool):
    kind = op[0]
    if kind == "register":
        return register(routes, op, shortcut)
    elif kind == "unregister":
        _, cluster, addr, name, broker_id = op
        return routes.unregister_broker(cluster, addr, name, broker_id)
    elif kind == "expire":
        removed = routes.scan_not_active_brokers(clock.now)
        assert all(broker.reason == "expired" for broker in removed)
        assert not any(live.expired(clock.now) for live in routes.snapshot().broker_live_table.values())
        return removed
    elif kind == "close":
        gone = Channel("tcp", bytes([op[1]]))
        removed = routes.on_channel_destroy(gone)
        assert all(live.channel != gone for live in routes.snapshot().broker_live_table.values())
        return removed
    elif kind == "heartbeat":
        return routes.update_broker_timestamp(op[1], op[2])
    elif kind == "wipe":
        return routes.wipe_write_perm_of_broker(op[1])
    elif kind == "add":
        return routes.add_write_perm_of_broker(op[1])
    elif kind == "delete_topic":
        routes.delete_topic(op[1], op[2])
    elif kind == "register_topic":
        routes.register_topic(op[1], op[2])
    elif kind == "query":
        _, topic, standard, order = op
        body = routes.topic_route_body(topic, standard, order)
        fresh = routes.pickup_topic_route(topic)
        if fresh is None:
            assert body is None
        else:
            fresh.order_topic_conf = order
            assert body == fresh.encode(standard)
        return body


def check_consistent(routes: RouteInfoManager, config: NamesrvConfig) -> None:
    tables = routes.snapshot()
    brokers, clusters = tables.broker_addr_table, tables.cluster_addr_table
    for topic, queues in tables.topic_queue_table.items():
        assert queues, f"topic {topic} has an empty queue map"
        for name, queue in queues.items():
            assert queue.broker_name == name
            assert name in brokers, f"queue data of {topic} for broker {name} that has no broker data"
    for cluster, names in clusters.items():
        assert names, f"cluster {cluster} is empty"
        for name in names:
            assert name in brokers, f"cluster {cluster} lists missing broker {name}"
    for name, group in brokers.items():
        assert group.broker_name == name
        assert group.broker_addrs, f"broker group {name} has no address"
        assert name in clusters.get(group.cluster, ()), f"broker {name} missing from its cluster {group.cluster}"
        addrs = list(group.broker_addrs.values())
        assert len(addrs) == len(set(addrs)), f"an address of {name} is listed under two ids"
    assert set(tables.filter_server_table) <= set(tables.broker_live_table)
    for topic, infos in tables.topic_queue_mapping_info_table.items():
        assert infos and set(infos) <= set(brokers)

    # Internal indexes mirror the tables.
    by_channel: dict[Channel, set] = {}
    for key, live in tables.broker_live_table.items():
        if live.channel is not None:
            by_channel.setdefault(live.channel, set()).add(key)
    channel_index, pooled_groups, entries = routes.consistency_indexes()
    assert channel_index == by_channel
    assert pooled_groups <= set(brokers)
    assert entries == sum(map(len, tables.topic_queue_table.values())), "maxQueueDatas miscounts"

    # Every cached body is what encoding the current route gives (no missed invalidation).
    for topic, variants in routes._changes.cache._entries.items():
        for standard, ((order, acting), body) in variants.items():
            if acting != config.support_acting_master:
                continue  # unreachable: a lookup with the current switch misses it
            fresh = routes.pickup_topic_route(topic)
            assert fresh is not None, f"cached route of {topic}, which no longer exists"
            fresh.order_topic_conf = order
            assert body == fresh.encode(standard), f"stale cached route of {topic}"


def comparable(routes: RouteInfoManager) -> tuple:
    """The tables, without the bookkeeping only the shortcut path uses."""
    tables = routes.snapshot()
    live = {key: (v.last_update_timestamp, v.heartbeat_timeout_millis, v.data_version, v.channel, v.ha_server_addr)
            for key, v in tables.broker_live_table.items()}
    return (tables.topic_queue_table, tables.broker_addr_table, tables.cluster_addr_table, live,
            tables.filter_server_table, tables.topic_queue_mapping_info_table)


@settings(max_examples=2000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(operations, min_size=1, max_size=40))
def test_any_operation_sequence_keeps_the_tables_consistent(ops):
    config, clock = NamesrvConfig(), Clock()
    with_shortcut = RouteInfoManager(config, clock=clock)
    always_full = RouteInfoManager(config, clock=clock)
    registrations: list[tuple] = []
    for op in ops:
        if op[0] == "repeat":
            if not registrations:
                continue
            op = registrations[op[1] % len(registrations)]
        if op[0] == "bump":
            if not registrations:
                continue
            earlier, change = registrations[op[1] % len(registrations)], op[2]
            configs = list(earlier[5])
            if change and configs:
                configs[0] = replace(configs[0], perm=configs[0].perm ^ PERM_WRITE)
            op = earlier[:5] + (configs, earlier[6] + 1) + earlier[7:]
        if op[0] == "register":
            registrations.append(op)
        if op[0] == "expire":
            clock.now += op[1]
        if op[0] == "toggle":
            setattr(config, op[1], not getattr(config, op[1]))
            continue
        results = [apply(routes, config, clock, op, shortcut) for routes, shortcut in
                   ((with_shortcut, True), (always_full, False))]
        if isinstance(results[0], list):  # removals: the same brokers, in live-table order (which may differ)
            results = [sorted(result, key=repr) for result in results]
        assert results[0] == results[1]
        check_consistent(with_shortcut, config)
        check_consistent(always_full, config)
        assert comparable(with_shortcut) == comparable(always_full)
