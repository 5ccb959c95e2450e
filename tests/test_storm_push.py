"""The storm's route-change push parts without a server: the flap schedule, the subscribers' push
observer (versions, drops, sightings timed against the flaps' change times) and the run's summary."""
from __future__ import annotations

import json
from dataclasses import asdict

import pytest
from hdrh.histogram import HdrHistogram

from bench.heartbeat_storm import StormSettings, format_propagation, summarize_propagation
from bench.lib.fleet import ROUTE_CHANGED, FleetShape
from bench.storm.flaps import CLOSE, REGISTER_AGAIN, FlapSchedule, change_index
from bench.storm.recorder import IntervalRecorder
from bench.lib.output import RunRecorder
from bench.storm.subscriber import (
    PROPAGATION,
    PushCounts,
    PushObserver,
    Subscriber,
    choose_topics,
    expected_sightings,
)
from namesrv.protocol import RemotingCommand

SECOND = 1_000_000_000
MS = 1_000_000
#: Brokers 0, 1: group storm-broker-0 of cluster 0; brokers 2, 3: group storm-broker-1 of cluster 1.
FLEET = FleetShape(brokers=4, slaves_per_master=1, topics_per_broker=2, clusters=2)
T0, T1 = "storm-cluster-0-topic-0", "storm-cluster-1-topic-1"


def test_flap_schedule_times_brokers_and_latest_changes():
    schedule = FlapSchedule.over(0.5, 2.6, brokers=2)
    assert schedule.count == 5 and list(schedule.flapping_brokers()) == [0, 1]
    assert list(schedule.flaps_of(0)) == [0, 2, 4] and list(schedule.flaps_of(1)) == [1, 3]
    assert schedule.due_ns(0, CLOSE, 0) == 125 * MS and schedule.due_ns(0, REGISTER_AGAIN, 0) == 375 * MS
    assert schedule.due_ns(4, CLOSE, 7) == 7 + 2125 * MS  # flap k: (k + 1/4) and (k + 3/4) periods in
    assert FlapSchedule.over(1.0, 3.0, brokers=9).count == 3  # whole periods, float noise aside
    changed_at = [0] * 10
    assert schedule.latest_change(changed_at, 0) is None
    for number, (flap, kind) in enumerate([(0, CLOSE), (0, REGISTER_AGAIN), (2, CLOSE), (2, REGISTER_AGAIN),
                                           (4, CLOSE)], start=1):
        changed_at[change_index(flap, kind)] = number * 100
        assert schedule.latest_change(changed_at, 0) == (kind, number * 100)
        assert schedule.latest_change(changed_at, 1) is None  # another broker's changes are its own
    changed_at[change_index(1, CLOSE)] = 150
    assert schedule.latest_change(changed_at, 1) == (CLOSE, 150)
    assert schedule.changes_made(changed_at) == [(0, CLOSE), (0, REGISTER_AGAIN), (1, CLOSE), (0, CLOSE),
                                                 (0, REGISTER_AGAIN), (0, CLOSE)]


def test_subscribers_topics_are_drawn_with_the_seed():
    fleet = FleetShape(topics_per_broker=10, clusters=2)
    topics = choose_topics(fleet, 50, 4, seed=7)
    assert topics == choose_topics(fleet, 50, 4, seed=7) != choose_topics(fleet, 50, 4, seed=8)
    assert all(len(set(mine)) == 4 and set(mine) <= set(fleet.all_topics()) for mine in topics)
    assert len({topic for mine in topics for topic in mine}) > 15  # a mix, not the same few


def route(*brokers: int) -> dict:
    """A route as the server pushes it (standard JSON), listing these fleet brokers' addresses."""
    groups: dict[str, dict] = {}
    for broker in brokers:
        identity = FLEET.broker(broker)
        data = groups.setdefault(identity.name, {"cluster": identity.cluster, "brokerName": identity.name,
                                                 "brokerAddrs": {}})
        data["brokerAddrs"][str(identity.broker_id)] = identity.address
    return {"brokerDatas": list(groups.values()), "queueDatas": [{"brokerName": n, "perm": 6} for n in groups]}


def push(*changes: tuple[str, int, dict | None]) -> RemotingCommand:
    body = json.dumps({"changes": [{"topic": t, "version": v, "route": r} for t, v, r in changes]}).encode()
    return RemotingCommand.request(ROUTE_CHANGED, {"count": str(len(changes))}, body, oneway=True)


def test_observer_times_each_flap_it_sees_and_counts_versions_missed_and_drops():
    schedule = FlapSchedule(period_s=1.0, count=3, brokers=4)  # brokers 0, 1 (cluster 0) and 2 (cluster 1) flap
    changed_at = [0] * 6
    recorder = IntervalRecorder(0, measure_start_ns=0)
    observer = PushObserver(FLEET, schedule, changed_at, recorder)
    subscriber = Subscriber((T0, T1))
    answer = {"routes": [{"topic": T0, "version": 3, "route": route(0, 1)}, {"topic": T1, "version": 5,
                                                                           "route": route(2, 3)}]}
    observer.subscribed(subscriber, json.dumps(answer).encode())

    changed_at[change_index(0, CLOSE)] = 1 * MS  # broker 0 goes at 1 ms; seen at 3.5 ms
    observer.pushed(subscriber, push((T0, 4, route(1))), 3_500_000)
    observer.pushed(subscriber, push((T1, 7, route(2, 3))), 4 * MS)  # version 6 missed; no flap in it
    changed_at[change_index(0, REGISTER_AGAIN)] = 500 * MS  # broker 0 back; seen 0.2 ms later, with T1's
    observer.pushed(subscriber, push((T0, 5, route(0, 1)), (T1, 8, route(2, 3))), 500_200_000)
    changed_at[change_index(1, CLOSE)] = 1250 * MS  # broker 1 goes in the second interval; seen 10 ms later
    observer.pushed(subscriber, push((T0, 6, route(0))), 1260 * MS)
    observer.pushed(subscriber, push((T1, 9, route(3))), 1300 * MS)  # broker 2 gone, but not by a flap yet
    changed_at[change_index(1, REGISTER_AGAIN)] = 1750 * MS
    observer.pushed(subscriber, push((T0, 7, None)), 1800 * MS)  # broker 0 gone too, its latest change a return
    dropped = RemotingCommand.request(ROUTE_CHANGED, {"dropped": "too slow"}, None, oneway=True)
    observer.pushed(subscriber, dropped, 1900 * MS)
    observer.pushed(subscriber, dropped, 1901 * MS)

    assert observer.counts == PushCounts(subscribed=1, pushes=8, changes=7, versions_missed=1, dropped=1,
                                         sightings=3)
    assert subscriber.known == {T0: 7, T1: 9} and subscriber.absent == {T0: frozenset({0, 1}), T1: frozenset({2})}
    delta = recorder.ship()
    histograms = {(metric, interval, code): HdrHistogram.decode(encoded)
                  for metric, interval, code, encoded in delta.histograms}
    assert set(histograms) == {(PROPAGATION, 0, ROUTE_CHANGED), (PROPAGATION, 1, ROUTE_CHANGED)}
    first, second = histograms[(PROPAGATION, 0, ROUTE_CHANGED)], histograms[(PROPAGATION, 1, ROUTE_CHANGED)]
    assert (first.get_total_count(), first.get_min_value(), first.get_max_value()) == (2, 200, 2501)  # 2500 µs bucket
    assert (second.get_total_count(), second.get_max_value()) == (1, 10007)  # 10 ms: a bucket of 8 µs
    assert delta.responses == []  # pushes are no requests: nothing in responses.parquet


def test_expected_sightings_count_every_subscriber_of_the_brokers_cluster():
    schedule = FlapSchedule(period_s=1.0, count=3, brokers=4)
    changed_at = [5, 6, 7, 0, 0, 0]  # broker 0's close and return, broker 1's close
    topics = [(T0, T1), (T0,), ("storm-cluster-0-topic-1",)]  # cluster 0: 3 pairs; cluster 1: 1
    assert expected_sightings(FLEET, topics, schedule, changed_at) == 3 * 3


def storm_settings(subscribers: int, flap_period_s: float) -> StormSettings:
    return StormSettings(fleet=FLEET, duration_s=2.0, subscribers=subscribers, subscriber_topics=2,
                         flap_period_s=flap_period_s)


def test_summary_of_subscribers_and_flaps():
    settings = storm_settings(subscribers=2, flap_period_s=1.0)
    run = RunRecorder("r")
    recorder = IntervalRecorder(0, measure_start_ns=0)
    for microseconds in (1000, 1500, 3000):
        recorder.observe(PROPAGATION, ROUTE_CHANGED, SECOND // 2, SECOND // 2 + microseconds * 1000)
    recorder.ship().apply_to(run)
    flaps = settings.flap_schedule()
    changed_at = [1, 2, 3, 4]
    finished = [asdict(PushCounts(subscribed=1, pushes=3, changes=4, versions_missed=1, sightings=2)),
                asdict(PushCounts(subscribed=1, pushes=1, changes=1, dropped=1, sightings=1))]
    summary = summarize_propagation(run, settings, flaps, changed_at, [(T0, T1), (T0,)], finished, {"SUCCESS": 2})
    # 4 changes, all of cluster-0 brokers (flaps of brokers 0 and 1), each for 2 (subscriber, cluster-0 topic) pairs
    assert summary["count"] == 3 and summary["sightings_expected"] == 4 * 2
    assert (summary["p50_ms"], summary["p90_ms"], summary["max_ms"]) == (1.5, 3.001, 3.001)
    assert (summary["versions_missed"], summary["subscribers_dropped"], summary["pushes"]) == (1, 1, 4)
    assert (summary["flaps"], summary["changes"]) == (2, 4) and "note" not in summary
    line = format_propagation(summary)
    assert line == ("route-change propagation to 2 subscribers, 4 changes: 3 of 8 expected sightings, "
                    "p50 1.500 ms, p99 3.001 ms, max 3.001 ms; versions missed 1, subscribers dropped to polling 1")


@pytest.mark.parametrize("subscribers, flap_period_s, note", [
    (0, 1.0, "brokers flapped but nobody subscribed (--subscribers 0): no propagation recorded"),
    (3, 0.0, "no broker flapped (--flap-period 0): no route changed, no propagation recorded"),
])
def test_summary_says_why_nothing_was_recorded(subscribers, flap_period_s, note):
    settings = storm_settings(subscribers, flap_period_s)
    flaps = settings.flap_schedule()
    finished = [asdict(PushCounts(subscribed=subscribers))] if subscribers else []
    summary = summarize_propagation(RunRecorder("r"), settings, flaps, None if flaps is None else [0] * 4,
                                    [(T0,)] * subscribers, finished, {})
    assert summary["note"] == note and summary["subscribers"] == subscribers
    assert format_propagation(summary) == f"route-change propagation: {note}"
    assert summarize_propagation(RunRecorder("r"), storm_settings(0, 0.0), None, None, [], [], {}) is None
    assert format_propagation(None) == ""
