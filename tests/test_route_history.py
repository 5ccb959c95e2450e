"""The route history (namesrv.routeinfo.history) and EXPLAIN_ROUTE's answer (namesrv.routeinfo.explain),
driven through the route table and the request processor: what each write records, the bounds, and
the explanation of every cause the issue names."""
from __future__ import annotations

import gc
import tracemalloc

import msgpack
import orjson
import pytest
from test_processor import BROKER, CLIENT, Namesrv
from test_routeinfo import Clock, channel, register

from namesrv.config import NamesrvConfig
from namesrv.protocol import RequestCode, ResponseCode
from namesrv.protocol.route import QueueData
from namesrv.routeinfo import RouteInfoManager, explain
from namesrv.routeinfo import history as h

ADMIN = "10.9.9.9:5555"


@pytest.fixture
def clock() -> Clock:
    return Clock()


def watched(clock: Clock, **bounds) -> tuple[RouteInfoManager, h.RouteHistory]:
    routes = RouteInfoManager(NamesrvConfig(), clock=clock)
    history = h.RouteHistory(**bounds)
    routes.watch_routes(history)
    return routes, history


def kinds(history: h.RouteHistory, topic: str) -> list[tuple[str, str | None, int | None]]:
    """(kind, group, perm after it or None) of each event the topic's record holds."""
    return [(event.kind, event.broker_name, None if queue is None else queue.perm)
            for event, queue in history.topic(topic).entries]


def test_each_write_records_its_cause_per_topic_and_a_refresh_records_nothing(clock) -> None:
    routes, history = watched(clock)
    register(routes, topics=("T1", "T2"), via=channel(1))
    register(routes, name="broker-b", addr="10.0.0.2:10911", topics=("T2", "T3"), via=channel(2))
    clock.advance(1000)
    before = history.usage()["lastSeq"]
    register(routes, topics=("T1", "T2"), via=channel(1))  # the same table again: nothing changed
    assert history.usage()["lastSeq"] == before
    routes.wipe_write_perm_of_broker("broker-a", ADMIN)
    routes.delete_topic("T3", requester=ADMIN)
    clock.advance(130_000)
    assert len(routes.scan_not_active_brokers()) == 2
    assert kinds(history, "T1") == [("registered", "broker-a", 6), ("write perm wiped", "broker-a", 4),
                                     ("expired", "broker-a", None)]
    assert kinds(history, "T2")[1] == ("registered", "broker-b", 6)
    assert kinds(history, "T3") == [("registered", "broker-b", 6), ("topic deleted", None, None)]
    expired = history.topic("T1").entries[-1][0]
    assert (expired.peer, expired.last_refresh_ms, expired.timeout_ms) == ("127.0.0.1:40001", clock.now - 130_000,
                                                                           120_000)
    wiped = history.topic("T1").entries[1][0]
    assert (wiped.peer, wiped.topics, wiped.sample) == (ADMIN, 2, ["T1", "T2"])
    assert [e.kind for e in history.stream()] == ["registered", "registered", "write perm wiped", "topic deleted",
                                                  "expired", "expired"]


def test_a_slave_leaving_is_in_the_stream_though_no_topic_changed(clock) -> None:
    routes, history = watched(clock)
    register(routes, topics=("T1", "T2"), via=channel(1))
    register(routes, addr="10.0.0.1:10921", broker_id=1, topics=("T1", "T2"), via=channel(2))
    routes.on_channel_destroy(channel(2))
    last = history.stream()[-1]
    assert (last.kind, last.broker_id, last.topics) == ("channel closed", 1, 0)
    assert kinds(history, "T1") == [("registered", "broker-a", 6)]


def test_a_topic_keeps_its_share_and_counts_what_it_dropped(clock) -> None:
    routes, history = watched(clock, topic_events=3)
    for counter in range(1, 6):
        register(routes, topics=("T1", "T3") if counter % 2 else ("T1", "T2"), counter=counter, via=channel(1))
        routes.wipe_write_perm_of_broker("broker-a", ADMIN)
        routes.add_write_perm_of_broker("broker-a", ADMIN)
    record = history.topic("T1")
    assert len(record.entries) == 3 and record.dropped == 2 * 5 + 1 - 3


def test_the_budget_forgets_the_topics_changed_least_recently_and_says_since_when(clock) -> None:
    routes, history = watched(clock, max_bytes=20_000)
    for batch in range(10):
        register(routes, name=f"broker-{batch}", addr=f"10.0.0.{batch}:10911",
                 topics=tuple(f"B{batch}T{i}" for i in range(20)), via=channel(batch))
        clock.advance(1000)
    usage = history.usage()
    assert usage["bytes"] <= 20_000 and usage["evictedTopics"] > 0
    assert history.topic("B9T0").entries and not history.topic("B0T0").entries
    answer = explain.explain_route(routes, "Nowhere", None, clock.now)
    assert "no record since" in answer["verdict"] and f"forgot {usage['evictedTopics']} topics" in answer["verdict"]


def test_what_the_budget_charges_is_at_least_what_the_history_allocates() -> None:
    """The charges are upper bounds (CPython 3.11): held to what tracemalloc sees the records take."""
    by_topic: dict[str, dict[str, QueueData]] = {}
    history = h.RouteHistory(max_bytes=1 << 30, topic_events=4)
    history.bind(by_topic, lambda: 1)
    names = [f"Topic-{i:06d}-padding" for i in range(5000)]
    queue = QueueData("broker-a", 8, 8, 6, 0)
    for name in names:
        by_topic[name] = {"broker-a": queue}
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.take_snapshot()
    for round_ in range(6):
        for start in range(0, len(names), 100):
            history.cause(h.REGISTERED, "C", f"10.0.0.{round_}:10911", "broker-a", 0, None, None,
                          f"10.0.1.{start % 250}:{40000 + round_}")
            history.changed(names[start:start + 100])
    after = tracemalloc.take_snapshot()
    tracemalloc.stop()
    allocated = sum(stat.size_diff for stat in after.compare_to(before, "filename"))
    assert 0 < allocated <= history.usage()["bytes"] < 2 * allocated, (allocated, history.usage())


def test_the_stream_is_a_ring(clock) -> None:
    routes, history = watched(clock, stream_events=4)
    for n in range(10):
        register(routes, name=f"broker-{n}", addr=f"10.0.0.{n}:10911", topics=(f"T{n}", f"U{n}"), via=channel(n))
    assert [e.seq for e in history.stream()] == [7, 8, 9, 10] and [e.seq for e in history.stream(8)] == [9, 10]


def test_an_export_restores_the_same_history_and_marks_the_restart(clock) -> None:
    routes, history = watched(clock)
    register(routes, topics=("T1", "T2"), via=channel(1))
    routes.on_channel_destroy(channel(1))
    copy = h.RouteHistory()
    copy.restore(msgpack.unpackb(msgpack.packb(history.export())), restarted_at_ms=clock.now + 5000)
    assert kinds(copy, "T1") == kinds(history, "T1") and copy.usage()["bytes"] == history.usage()["bytes"]
    assert [e.kind for e in copy.stream()] == ["registered", "channel closed", "restarted"]
    with pytest.raises(ValueError, match="not a route history"):
        copy.restore({"format": 1, "events": [[1]]})


# ---------------------------------------------------------------- EXPLAIN_ROUTE


def explained(ns: Namesrv, topic: str) -> dict:
    response = ns.call(RequestCode.EXPLAIN_ROUTE, {"topic": topic})
    assert response.code == ResponseCode.SUCCESS, response.remark
    return orjson.loads(response.body)


def test_explain_route_answers_every_cause_the_issue_names(tmp_path) -> None:
    ns = Namesrv(tmp_path)
    assert explained(ns, "T1")["verdict"].startswith("T1 was never registered here")
    ns.register(topics=("T1", "T2"))
    ns.clock.now += 1000
    answer = explained(ns, "T1")
    assert answer["route"] and answer["verdict"].startswith("T1 has a route here: served by broker-a since")
    assert answer["events"][0]["text"].startswith("served by broker broker-a[0] 10.0.0.1:10911 (registered from "
                                                  "10.0.0.1:50000): 4 read / 4 write queues, perm 6")
    ns.call(RequestCode.WIPE_WRITE_PERM_OF_BROKER, {"brokerName": "broker-a"})
    assert explained(ns, "T1")["verdict"].endswith("served by broker-a (read-only) since "
                                                   f"{explain.when(ns.clock.now - 1000)}")
    ns.call(RequestCode.DELETE_TOPIC_IN_NAMESRV, {"topic": "T2"})
    assert explained(ns, "T2")["verdict"].endswith("deleted by an admin at 10.0.0.100:50000 (DELETE_TOPIC_IN_NAMESRV)")
    ns.clock.now += 200_000
    ns.routes.scan_not_active_brokers()
    verdict = explained(ns, "T1")["verdict"]
    assert "broker broker-a[0] 10.0.0.1:10911 was silent for 201 s (heartbeat timeout 120 s; its last registration " \
           "came from 10.0.0.1:50000" in verdict and verdict.endswith("broker-a's queues of it removed")
    ns.register(topics=("T1", "T3"), counter=2)
    again = explained(ns, "T1")
    assert again["route"] and [e["kind"] for e in again["events"]] == ["registered", "write perm wiped", "expired",
                                                                       "registered"]
    ns.routes.on_channel_destroy(BROKER)
    assert "10.0.0.1:10911's connection from 10.0.0.1:50000 closed" in explained(ns, "T1")["verdict"]
    ns.register(topics=("T1", "T3"), counter=3)
    ns.call(RequestCode.UNREGISTER_BROKER, {"brokerName": "broker-a", "brokerAddr": "10.0.0.1:10911",
                                            "clusterName": "C", "brokerId": 0}, channel=BROKER)
    assert "broker broker-a[0] 10.0.0.1:10911 unregistered" in explained(ns, "T1")["verdict"]


def test_explain_route_is_an_admin_request(tmp_path) -> None:
    ns = Namesrv(tmp_path, admin_allowed_networks="10.9.0.0/16")
    response = ns.call(RequestCode.EXPLAIN_ROUTE, {"topic": "T1"}, channel=CLIENT)
    assert response.code == ResponseCode.NO_PERMISSION
    bad = Namesrv(tmp_path).call(RequestCode.EXPLAIN_ROUTE, {"topic": "bad topic"})
    assert bad.code == ResponseCode.SYSTEM_ERROR


def test_no_history_is_said_so(tmp_path) -> None:
    ns = Namesrv(tmp_path, route_history_max_bytes=0)
    ns.register(topics=("T1", "T2"))
    assert ns.routes.route_events is None
    assert "keeps no route history" in explained(ns, "T9")["verdict"]
