"""A master's new DataVersion renews its live entry, and puts only the topic entries that changed.

`RouteInfoManager._renews_only_locked` lets such a registration skip RocketMQ's steps 1-9, 12
and 13 when each would leave its table alone. Here every sequence runs on two route tables fed
the same decoded bodies (decoded against the broker's previous entries, as the server decodes
them): one may take the renewal, the other never does (its `_renews_only_locked` always says no),
so it takes every step. After each step everything an observer can see must be equal: the
answer, every table with its bookkeeping and the live table's order (the expiry scan's),
the counters, the changed topics, the route history, the min-broker-id notices and each
topic's route body.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from namesrv.channel import Channel
from namesrv.config import NamesrvConfig
from namesrv.protocol.codes import PERM_READ
from namesrv.protocol.route import QueueData
from namesrv.protocol.topic import DataVersion, RegisterBrokerBody, TopicConfig, TopicConfigSerializeWrapper, \
    decode_registration
from namesrv.routeinfo import Registrant, RouteInfoManager, StaleTopicEntries
from namesrv.routeinfo.history import RouteHistory
from namesrv.routeinfo.model import MinBrokerIdChange

MASTER = Registrant("c1", "10.0.0.1:10911", "b1", 0, "10.0.0.1:10912", None, True, None)
SLAVE = Registrant("c1", "10.0.0.2:10911", "b1", 1, "10.0.0.2:10912", None, True, None)
#: Another process taking the master's id (a failover), and a master of another group.
RIVAL = Registrant("c1", "10.0.0.3:10911", "b1", 0, "10.0.0.3:10912", None, True, None)
OTHER = Registrant("c1", "10.0.0.4:10911", "b2", 0, "10.0.0.4:10912", None, True, None)
FIRST, SECOND = Channel("tcp", b"first", "10.0.0.1:50000"), Channel("tcp", b"second", "10.0.0.1:50001")
TOPICS = ("A", "B", "C")
MAPPING = {"A": {"bname": "b1", "currIdMap": {"0": 0}, "dirty": False, "epoch": 1, "scope": "__global__",
                 "topic": "A", "totalQueues": 4}}


class Side:
    """One route table with every observer attached; `renews` says whether it may take the renewal."""

    def __init__(self, config: NamesrvConfig, clock: Callable[[], int], renews: bool) -> None:
        self.routes = RouteInfoManager(config, clock=clock)
        self.history = RouteHistory()
        self.routes.watch_routes(self.history)
        self.routes.track_changes()
        self.notices: list[MinBrokerIdChange] = []
        self.routes.min_broker_id_listener = self.notices.append
        self.renewals = 0
        if renews:
            check = self.routes._renews_only_locked

            def counted(*args: Any) -> bool:
                taken = check(*args)
                self.renewals += taken
                return taken
            self.routes._renews_only_locked = counted
        else:
            self.routes._renews_only_locked = lambda *args: False

    def register(self, registrant: Registrant, data: bytes, filters: list[str] | None, channel: Channel) -> Any:
        """As the processor: decoded against the broker's previous entries, in full when they went stale."""
        table, _ = decode_registration(data, previous=self.routes.registration_hints(registrant)[1])
        try:
            return self.routes.register(registrant, table, filters, channel, hash(data))
        except StaleTopicEntries:
            table, _ = decode_registration(data)
            return self.routes.register(registrant, table, filters, channel, hash(data))

    def seen(self) -> tuple:
        """Everything an observer can see (taking the changed topics, as the route push does)."""
        routes = self.routes
        tables = routes.snapshot()
        bodies = {topic: routes.topic_route_body(topic, standard=True) for topic in TOPICS}
        return (tables, list(tables.broker_live_table), dict(routes.registrations), dict(routes.removals),
                routes.route_changes, routes.take_changes(), routes.consistency_indexes(), routes.sizes(),
                self.history.encode(), list(self.notices), bodies, routes.cached_route_topics())


class Pair:
    """The same operations on a table that may renew and on one that never does."""

    def __init__(self, **config: Any) -> None:
        self.now = 1_700_000_000_000
        self.config = NamesrvConfig(notify_min_broker_id_changed=True, **config)
        self.renewing, self.full = (Side(self.config, lambda: self.now, renews) for renews in (True, False))
        self.counter = 0

    def register(self, registrant: Registrant, topics: tuple[str, ...] = TOPICS, filters: list[str] | None = None,
                 channel: Channel = FIRST, mappings: dict | None = None, state_version: int = 0,
                 new_version: bool = True, renewed: bool | None = None, read_only: tuple[str, ...] = ()) -> None:
        """A registration (with a new DataVersion unless told) of `topics`, those in `read_only` without
        the write permission; `renewed`, when given, says whether it is a renewal."""
        self.counter += new_version
        wrapper = TopicConfigSerializeWrapper({name: TopicConfig(name, 4, 4, PERM_READ if name in read_only else 6)
                                               for name in topics},
                                              DataVersion(self.counter, 1, state_version),
                                              topic_queue_mapping_info_map=mappings or {})
        data = RegisterBrokerBody(wrapper, [] if filters is None else filters).encode()
        before = self.renewing.renewals
        self.step(lambda side: side.register(registrant, data, filters, channel))
        if renewed is not None:
            assert (self.renewing.renewals > before) == renewed

    def step(self, operation: Callable[[Side], Any]) -> None:
        self.now += 1_000
        answers = [operation(side) for side in (self.renewing, self.full)]
        assert answers[0] == answers[1]
        assert self.renewing.seen() == self.full.seen()


def test_a_renewal_leaves_every_table_as_the_full_registration_leaves_it():
    pair = Pair()
    pair.register(MASTER, renewed=False)  # the first registration
    pair.register(MASTER, renewed=True)  # a new DataVersion, every entry as before
    pair.register(MASTER, new_version=False, renewed=False)  # the same DataVersion (not a refresh: no entries kept)
    pair.register(MASTER, renewed=False)
    pair.register(MASTER, renewed=True)
    pair.register(MASTER, filters=["10.0.0.1:1"], renewed=False)  # the filter servers changed
    pair.register(MASTER, filters=["10.0.0.1:1"], renewed=True)
    pair.register(MASTER, filters=[], renewed=False)  # and went
    pair.register(MASTER, renewed=True)  # None: the filter servers are left as they are
    pair.register(replace(MASTER, ha_server_addr="10.0.0.1:10999"), renewed=False)  # the HA address
    pair.register(MASTER, renewed=False)  # and back
    pair.register(MASTER, channel=SECOND, renewed=False)  # a new connection
    pair.register(MASTER, channel=SECOND, renewed=True)
    pair.register(MASTER, channel=Channel("tcp", b"second", "10.0.0.1:50001"), renewed=False)  # equal, not it
    pair.register(MASTER, renewed=False)
    pair.register(replace(MASTER, zone_name="z1"), renewed=False)  # the zone
    pair.register(replace(MASTER, zone_name="z1"), renewed=True)
    pair.register(replace(MASTER, zone_name="z1", enable_acting_master=False), renewed=False)  # acting flag
    pair.register(replace(MASTER, zone_name="z1", enable_acting_master=None), renewed=False)  # an old broker
    pair.register(replace(MASTER, heartbeat_timeout_millis=5_000), renewed=False)  # the heartbeat timeout
    pair.register(MASTER, renewed=False)
    pair.register(MASTER, renewed=True)


def test_other_writes_between_renewals_are_never_skipped():
    pair = Pair()
    pair.register(MASTER, renewed=False)
    pair.register(SLAVE, renewed=False)  # the group gains a slave: the master's entries still stand
    pair.register(MASTER, renewed=True)
    pair.register(SLAVE, renewed=False)  # a slave's entries are never kept: never a renewal
    pair.register(replace(SLAVE, zone_name="z1"), renewed=False)  # a slave moves the group to another zone
    pair.register(MASTER, renewed=False)  # and the master's registration moves it back
    pair.register(MASTER, renewed=True)
    pair.register(replace(SLAVE, enable_acting_master=False), renewed=False)  # the group's acting flag
    pair.register(MASTER, renewed=False)
    pair.register(SLAVE, renewed=False)
    pair.register(OTHER, topics=("A", "D"), renewed=False)  # another group's topics
    pair.register(MASTER, renewed=True)
    pair.step(lambda side: side.routes.delete_topic("B"))  # an admin deletes a topic: the body restores it
    pair.register(MASTER, renewed=False)
    pair.register(MASTER, renewed=True)
    pair.step(lambda side: side.routes.wipe_write_perm_of_broker("b1"))
    pair.register(MASTER, renewed=False)
    pair.register(MASTER, renewed=True)
    pair.step(lambda side: side.routes.register_topic("A", [QueueData("b1", 8, 8, 6, 0)]))  # an admin's queues
    pair.register(MASTER, renewed=False)
    pair.register(MASTER, renewed=True)
    pair.register(replace(MASTER, cluster_name="c2"), renewed=False)  # the same group in another cluster
    pair.register(MASTER, renewed=True)  # a live entry of its own each: the group is as this one left it
    pair.step(lambda side: side.routes.unregister_broker("c2", MASTER.broker_addr, "b1", 0))  # the group goes
    pair.step(lambda side: side.routes.unregister_broker("c1", SLAVE.broker_addr, "b1", 1))
    pair.register(replace(MASTER, cluster_name="c2"), renewed=False)  # and comes back in the other cluster only
    pair.register(MASTER, renewed=False)
    pair.register(SLAVE, renewed=False)
    pair.register(RIVAL, state_version=1, renewed=False)  # another process takes the master's id
    pair.register(MASTER, renewed=False)  # the address is no longer the group's master: refused
    pair.step(lambda side: side.routes.unregister_broker(RIVAL.cluster_name, RIVAL.broker_addr, "b1", 0))
    pair.register(MASTER, renewed=False)
    pair.register(MASTER, renewed=True)
    pair.step(lambda side: side.routes.unregister_broker(SLAVE.cluster_name, SLAVE.broker_addr, "b1", 1))
    pair.register(MASTER, renewed=True)
    pair.register(MASTER, topics=("A", "B"), renewed=True)  # a topic left out of the table is kept (RocketMQ)
    pair.register(MASTER, renewed=True)  # and it comes back as an entry to read (and put: the same entry)
    pair.register(MASTER, mappings=MAPPING, renewed=False)  # static-topic mappings are stored again each time
    pair.register(MASTER, mappings=MAPPING, renewed=False)
    pair.register(MASTER, renewed=True)
    pair.now += 200_000  # every broker silent past its timeout: removed in the live table's order
    pair.step(lambda side: side.routes.scan_not_active_brokers())
    pair.register(MASTER, renewed=False)


def test_a_renewal_puts_the_entries_that_changed_as_the_full_registration_puts_them():
    pair = Pair()
    pair.register(MASTER, renewed=False)
    pair.register(MASTER, read_only=("B",), renewed=True)  # one topic loses its write permission
    pair.register(MASTER, read_only=("C",), renewed=True)  # it gets it back, another loses it
    pair.register(MASTER, topics=TOPICS + ("D",), read_only=("C",), renewed=True)  # a new topic
    pair.register(MASTER, topics=TOPICS + ("D",), renewed=True)
    pair.register(MASTER, topics=("A", "D"), renewed=True)  # topics left out of the table are kept (RocketMQ)
    pair.register(MASTER, read_only=TOPICS, renewed=False)  # every entry changed: none left out to read against
    pair.register(MASTER, read_only=("A",), channel=SECOND, renewed=False)  # a new connection
    pair.register(MASTER, read_only=("B",), channel=SECOND, renewed=True)
    pair.register(SLAVE, read_only=("A",), renewed=False)  # a slave's entries are never kept
    pair.register(MASTER, read_only=("A",), filters=["10.0.0.1:1"], channel=SECOND, renewed=False)
    pair.register(MASTER, read_only=("A", "B"), mappings=MAPPING, channel=SECOND, renewed=False)
    pair.register(replace(MASTER, zone_name="z1"), read_only=("B",), channel=SECOND, renewed=False)
    pair.register(replace(MASTER, zone_name="z1"), read_only=("C",), channel=SECOND, renewed=True)
    pair.step(lambda side: side.routes.wipe_write_perm_of_broker("b1"))  # the table changed under the entries
    pair.register(replace(MASTER, zone_name="z1"), read_only=("A",), channel=SECOND, renewed=False)


def test_the_deleting_mode_never_renews():
    pair = Pair(delete_topic_with_broker_registration=True)
    pair.register(MASTER, renewed=False)
    pair.register(MASTER, renewed=False)
    pair.register(MASTER, topics=("A",), renewed=False)
    pair.register(MASTER, topics=("A",), renewed=False)


def test_a_renewal_keeps_the_broker_alive_and_its_next_registration_reads_only_what_changed():
    pair = Pair()
    pair.register(MASTER)
    pair.register(MASTER, renewed=True)
    routes = pair.renewing.routes
    live = routes.snapshot().broker_live_table[(MASTER.cluster_name, MASTER.broker_addr)]
    assert live.last_update_timestamp == pair.now and live.data_version.counter == pair.counter
    assert routes.registration_hints(MASTER)[1] is not None  # the next body is again read against these entries
    pair.register(MASTER, topics=("A", "B", "C", "D"), renewed=True)  # a new topic: put as the full path puts it
    assert routes.pickup_topic_route("D") is not None


registrants = st.sampled_from([MASTER, SLAVE, RIVAL, OTHER, replace(MASTER, ha_server_addr="10.0.0.1:10999"),
                               replace(MASTER, zone_name="z1"), replace(MASTER, enable_acting_master=None),
                               replace(MASTER, cluster_name="c2"), replace(SLAVE, zone_name="z1"),
                               replace(SLAVE, enable_acting_master=False)])
registrations = st.tuples(st.just("register"), registrants, st.sampled_from([TOPICS, ("A", "B"), ("A", "D")]),
                          st.sampled_from([None, [], ["10.0.0.1:1"]]), st.sampled_from([FIRST, SECOND]),
                          st.sampled_from([None, MAPPING]), st.integers(0, 1), st.booleans(),
                          st.sampled_from([(), (), ("A",), ("B",), ("A", "D")]))
others = st.one_of(
    st.tuples(st.just("delete_topic"), st.sampled_from(TOPICS + ("D",))),
    st.tuples(st.just("wipe"), st.sampled_from(["b1", "b2"])),
    st.tuples(st.just("unregister"), registrants),
    st.tuples(st.just("close"), st.sampled_from([FIRST, SECOND])),
    st.tuples(st.just("expire"), st.sampled_from([1_000, 130_000])),
)


def other(side: Side, op: tuple) -> Any:
    kind = op[0]
    routes = side.routes
    if kind == "delete_topic":
        return routes.delete_topic(op[1])
    if kind == "wipe":
        return routes.wipe_write_perm_of_broker(op[1])
    if kind == "unregister":
        registrant = op[1]
        return routes.unregister_broker(registrant.cluster_name, registrant.broker_addr, registrant.broker_name,
                                        registrant.broker_id)
    if kind == "close":
        return routes.on_channel_destroy(op[1])
    return routes.scan_not_active_brokers()


#: The last registration again with a new DataVersion (most of them renewals), perhaps with other
#: topics read-only (a renewal that puts the entries that changed).
again = st.tuples(st.just("again"), st.sampled_from([None, (), ("B",), ("C", "D")]))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from([registrations, again, again, others]).flatmap(lambda ops: ops), min_size=1,
                max_size=25), st.booleans())
def test_any_sequence_renews_as_the_full_registration_registers(ops, deleting):
    pair = Pair(delete_topic_with_broker_registration=deleting)
    last = None
    for op in ops:
        if op[0] == "again":
            if last is None:
                continue
            op = last[:-2] + (True, last[-1] if op[1] is None else op[1])
        if op[0] == "register":
            last = op
            _, registrant, topics, filters, channel, mappings, state_version, new_version, read_only = op
            pair.register(registrant, topics, filters, channel, mappings, state_version, new_version,
                          read_only=read_only)
        else:
            if op[0] == "expire":
                pair.now += op[1]
            pair.step(lambda side: other(side, op))
