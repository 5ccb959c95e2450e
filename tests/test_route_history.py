"""The route history (namesrv.routeinfo.history) and EXPLAIN_ROUTE's answer (namesrv.routeinfo.explain),
driven through the route table and the request processor: what each write records, the bounds, and
the explanation of every cause the issue names."""
from __future__ import annotations

import gc
import random
import tracemalloc
import zlib

import msgpack
import orjson
import pytest
from test_broker_e2e import wait_until
from test_processor import BROKER, CLIENT, Namesrv
from test_routeinfo import Clock, channel, register
from test_warm_restart import restartable  # noqa: F401 - a fixture

from namesrv.config import NamesrvConfig
from namesrv.protocol import (DataVersion, RegisterBrokerBody, RequestCode, ResponseCode, TopicConfig,
                              TopicConfigSerializeWrapper)
from namesrv.protocol.route import QueueData
from namesrv.routeinfo import RouteInfoManager, explain, persist
from namesrv.routeinfo import history as h

ADMIN = "10.9.9.9:5555"


@pytest.fixture
def clock() -> Clock:
    return Clock()


def watched(clock: Clock, max_bytes: int = h.DEFAULT_MAX_BYTES) -> tuple[RouteInfoManager, h.RouteHistory]:
    routes = RouteInfoManager(NamesrvConfig(), clock=clock)
    history = h.RouteHistory(max_bytes)
    routes.watch_routes(history)
    return routes, history


def kinds(history: h.RouteHistory, topic: str) -> list[tuple[str, str | None, bool]]:
    """(kind, group, whether the topic kept the entry) of each event the history holds of the topic."""
    return [(event.kind, event.broker_name, present) for event, present in history.topic(topic).entries]


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
    assert kinds(history, "T1") == [("registered", "broker-a", True), ("write perm wiped", "broker-a", True),
                                     ("expired", "broker-a", False)]
    assert kinds(history, "T2")[1] == ("registered", "broker-b", True)
    assert kinds(history, "T3") == [("registered", "broker-b", True), ("topic deleted", None, False)]
    expired = history.topic("T1").entries[-1][0]
    assert (expired.peer, expired.last_refresh_ms, expired.timeout_ms) == ("127.0.0.1:40001", clock.now - 130_000,
                                                                           120_000)
    wiped = history.topic("T1").entries[1][0]
    assert (wiped.peer, wiped.topics, wiped.sample()) == (ADMIN, 2, ["T1", "T2"])
    assert [e.kind for e in history.stream()] == ["registered", "registered", "write perm wiped", "topic deleted",
                                                  "expired", "expired"]
    assert [e.seq for e in history.stream(4)] == [5, 6] and [e.seq for e in history.stream(0, 2)] == [5, 6]


class _TickingClock(Clock):
    """A clock a millisecond later at every reading."""

    def __call__(self) -> int:
        self.now += 1
        return self.now


def test_a_registrations_event_has_the_time_its_live_entry_has() -> None:
    """One clock reading a registration: its event's time is the broker's last refresh, however
    long the write took."""
    routes, history = watched(_TickingClock())
    register(routes, topics=("T1", "T2"), via=channel(1))
    register(routes, topics=("T1", "T3"), counter=2, via=channel(1))
    live = routes._live.by_key[("DefaultCluster", "10.0.0.1:10911")]
    first, second = history.stream()
    assert second.at_ms == live.last_update_timestamp and first.at_ms < second.at_ms


def copies(names) -> tuple[str, ...]:
    """Equal strings that are not `names`' objects (as a registration decodes its own)."""
    return tuple(name.encode().decode() for name in names)


def configs(names, queues: int) -> tuple[TopicConfig, ...]:
    """Topics of `queues` read queues, named by `copies` of `names`."""
    return tuple(TopicConfig(name, queues, 4) for name in copies(names))


def test_a_report_the_queue_table_stored_is_recorded_as_the_table_itself_would_say(clock) -> None:
    """The queue table's puts tell the history their topics hold the entry and are the table's own
    strings (`stored`), so it asks the table nothing: a twin told nothing of it, given copies of
    the names, asks, interns, and must hold the same records and losses."""
    routes, history = watched(clock, max_bytes=6000)  # small: the ring forgets and the losses are fitted too
    twin = h.RouteHistory(6000)
    twin.bind(routes._queues.by_topic, clock)
    told: list[bool] = []

    def cause(*args, **named) -> None:
        history.cause(*args, **named)
        twin.cause(*args, **named)

    def changed(topics, stored=False) -> None:
        told.append(stored)
        history.changed(topics, stored)
        twin.changed(copies(topics))  # equal strings, not the table's

    routes._cause, routes._changes.listener = cause, changed
    names = tuple(f"topic-{i}" for i in range(12))
    for counter in range(1, 9):  # each registration with its own copies of the names, as decoded
        queues = 4 + counter % 2  # every other one changes the topics the broker had
        register(routes, topics=configs(names[counter % 3:counter % 3 + 6], queues), counter=counter, via=channel(1))
        register(routes, name="broker-b", addr="10.0.0.2:10911", topics=configs(names[counter % 5:], queues),
                 counter=counter, via=channel(2))
        clock.advance(1000)
        assert_the_tables_names(routes, history, twin)
    routes.wipe_write_perm_of_broker("broker-a", ADMIN)
    routes.add_write_perm_of_broker("broker-a", ADMIN)
    routes.delete_topic(names[4], requester=ADMIN)
    routes.on_channel_destroy(channel(2))
    assert True in told and False in told and history.failures == twin.failures == 0
    assert list(history._ring) == list(twin._ring) and history._losses == twin._losses
    assert history.usage() == twin.usage() and history.encode() == twin.encode()
    assert_the_tables_names(routes, history, twin)


def assert_the_tables_names(routes: RouteInfoManager, *histories: h.RouteHistory) -> None:
    """The histories' rings name topics by the route table's own strings (or, lost, by names it no longer holds)."""
    table = {topic: topic for topic in routes._queues.by_topic}
    for held in histories:
        assert all(topic is table[topic] for record in held._ring for topic in record[h.TOPICS] if topic in table)


def test_a_slave_leaving_is_in_the_stream_though_no_topic_changed(clock) -> None:
    routes, history = watched(clock)
    register(routes, topics=("T1", "T2"), via=channel(1))
    register(routes, addr="10.0.0.1:10921", broker_id=1, topics=("T1", "T2"), via=channel(2))
    routes.on_channel_destroy(channel(2))
    last = history.stream()[-1]
    assert (last.kind, last.broker_id, last.topics) == ("channel closed", 1, 0)
    assert kinds(history, "T1") == [("registered", "broker-a", True)]


def test_a_topics_last_loss_outlives_the_ring_and_the_budget_says_what_it_forgot(clock) -> None:
    routes, history = watched(clock, max_bytes=40_000)
    register(routes, name="broker-gone", addr="10.0.0.9:10911", topics=("Gone1", "Gone2"), via=channel(9))
    routes.on_channel_destroy(channel(9))
    for batch in range(100):  # churn: far more than the budget holds
        register(routes, name=f"broker-{batch}", addr=f"10.0.0.{batch}:10911",
                 topics=tuple(f"B{batch}T{i}" for i in range(40)), via=channel(batch))
        clock.advance(1000)
    usage = history.usage()
    assert usage["bytes"] <= 40_000 and usage["eventsSince"] > 0 and usage["forgottenLosses"] == 0
    assert kinds(history, "Gone1") == [("channel closed", "broker-gone", False)]  # the ring forgot the rest
    assert history.topic("Gone1").entries[0][0].parts is None
    assert kinds(history, "B99T0") == [("registered", "broker-99", True)] and not kinds(history, "B0T0")
    assert explain.explain_route(routes, "Never", None, clock.now)["verdict"].startswith("Never was never registered")
    for batch in range(100):  # now losses past half the budget: the oldest are forgotten
        routes.delete_topic(f"B{batch}T0", requester=ADMIN)
        routes.on_channel_destroy(channel(batch))
    usage = history.usage()
    assert usage["lossBytes"] <= 20_000 and usage["forgottenLosses"] > 0 and not kinds(history, "Gone1")
    assert "no record of it (the history forgot the last loss of" in explain.explain_route(
        routes, "Gone1", None, clock.now)["verdict"]


def test_one_write_larger_than_the_budget_keeps_part_of_its_report_and_never_fails_the_write(clock) -> None:
    routes, history = watched(clock, max_bytes=64 * 1024)
    names = tuple(f"{i:05d}".ljust(120, "L") for i in range(3000))  # 3,000 x 120 characters: ~550 KiB lost at once
    register(routes, name="broker-big", addr="10.0.0.7:10911", topics=names, via=channel(7))
    routes.on_channel_destroy(channel(7))
    gone = history.stream()[-1]
    assert gone.kind == "channel closed" and gone.topics == 3000 and history.failures == 0
    assert sum(len(topics) for topics, _, _ in gone.parts) < 3000  # its report kept within half the budget
    register(routes, name="broker-next", addr="10.0.0.8:10911", topics=("N1", "N2"), via=channel(8))
    assert history.usage()["bytes"] <= 64 * 1024
    assert kinds(history, names[-1]) == [("channel closed", "broker-big", False)]  # its last loss
    assert kinds(history, names[0]) == [("channel closed", "broker-big", False)]  # in the report's part kept
    history.max_bytes = None  # a broken history (a budget that is no number): the route table's writes go on
    register(routes, name="broker-after", addr="10.0.0.9:10911", topics=("A1", "A2"), via=channel(9))
    assert history.failures == 1 and routes.pickup_topic_route("A1") is not None


def test_a_full_history_forgets_with_room_to_spare_so_the_next_writes_forget_nothing(clock) -> None:
    routes, history = watched(clock, max_bytes=256 * 1024)  # room for about six events past its fitting
    goal = history.max_bytes - history.max_bytes // h.FIT_SLACK
    counter = 0

    def churn() -> dict[str, int]:  # one topic's queues changed: one event, one report
        nonlocal counter
        counter += 1
        register(routes, topics=(TopicConfig("T1", 1 + counter % 2, 4), "T2"), counter=counter, via=channel(1))
        return history.usage()

    while churn()["events"] == counter:  # until the first write that made it forget
        assert counter < 2000
    fitted = history.usage()
    assert goal - 1024 < fitted["bytes"] <= goal
    spare = [churn() for _ in range(3)]  # room for a few more: nothing forgotten, each write one event more
    assert [u["events"] for u in spare] == [fitted["events"] + 1, fitted["events"] + 2, fitted["events"] + 3]
    assert spare[-1]["eventsSince"] == fitted["eventsSince"] and spare[-1]["bytes"] <= history.max_bytes


def test_what_the_budget_charges_is_at_least_what_the_history_allocates() -> None:
    """The charges are upper bounds (CPython 3.11): held to what tracemalloc sees the history take."""
    by_topic: dict[str, dict[str, QueueData]] = {}
    history = h.RouteHistory(max_bytes=1 << 30)
    history.bind(by_topic, lambda: 1)
    names = [f"Topic-{i:06d}-padding" for i in range(5000)]
    for name in names:
        by_topic[name] = {"broker-a": QueueData("broker-a", 8, 8, 6, 0)}
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.take_snapshot()
    for round_ in range(6):
        for start in range(0, len(names), 7):
            history.cause(h.REGISTERED if round_ % 2 else h.TOPIC_DELETED, "C", f"10.0.0.{round_}:10911",
                          "broker-a", 0, None, None, f"10.0.1.{start % 250}:{40000 + round_}")
            history.changed(names[start:start + 7])
        for name in names:  # the odd rounds lose every topic: a last loss each
            by_topic[name] = {} if round_ % 2 == 0 else {"broker-a": by_topic[name].get("broker-a")}
    after = tracemalloc.take_snapshot()
    tracemalloc.stop()
    allocated = sum(stat.size_diff for stat in after.compare_to(before, "filename")
                    if stat.traceback[0].filename.endswith("routeinfo/history.py"))
    # an upper bound, not a wild one (the names of lost topics are charged, though here the test holds them)
    assert 0 < allocated <= history.usage()["bytes"] < 3 * allocated, (allocated, history.usage())


def test_its_encoding_restores_the_same_history_and_marks_the_restart(clock) -> None:
    routes, history = watched(clock)
    register(routes, topics=("T1", "T2"), via=channel(1))
    routes.on_channel_destroy(channel(1))
    copy = h.RouteHistory()
    copy.decode(history.encode(), restarted_at_ms=clock.now + 5000, saved_at_ms=clock.now)
    assert kinds(copy, "T1") == kinds(history, "T1")
    assert copy.usage()["bytes"] == history.usage()["bytes"] + h.EVENT_BYTES
    assert [e.kind for e in copy.stream()] == ["registered", "channel closed", "restarted"]
    plain = h.RouteHistory()
    plain.decode(history.encode())
    assert plain.encode() == history.encode()
    for bad in (b"", msgpack.packb([1, 0, 0, 0, 0, 0, 0, 0, 0]), msgpack.packb([2, 0, 0, 0, 0, 0, 0, 1, 0]) + b"\x90",
                msgpack.packb([2, 0, 0, 0, 0, 0, 0, "1", 0]), msgpack.packb([2, 0, 0, 0, 0, 0, 0, 0, 1]) +
                msgpack.packb([5, 1, True])):
        with pytest.raises(ValueError, match="not a route history"):
            copy.decode(bad)
    assert kinds(copy, "T1") == kinds(history, "T1")  # a refused decoding changes nothing


def test_what_is_decoded_past_the_budget_is_refused_as_it_is_read() -> None:
    """Whatever a header claims, the bytes are charged as they are read: a million events stop at the
    budget, and an array of nested empty arrays where a name belongs builds nothing."""
    history = h.RouteHistory(max_bytes=64 * 1024)
    event = msgpack.packb([1, 0, h.REGISTERED, None, None, None, None, None, None, None, 0, []])
    claims = msgpack.packb([h.FORMAT, 1, 0, 0, 0, 0, 0, 1_000_000, 0])
    with pytest.raises(ValueError, match="more than the budget|not a route history"):
        history.decode(claims + event * 1_000_000)
    nested = msgpack.packb([h.FORMAT, 1, 0, 0, 0, 0, 1, 1, 0]) + msgpack.packb("T1") + msgpack.packb(
        [1, 0, h.REGISTERED, None, None, None, None, None, None, None, 0, [[[[[]] * 100_000], True]]])
    tracemalloc.start()
    with pytest.raises(ValueError, match="exceeds max_array_len"):
        history.decode(nested)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 1 << 20


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
    assert answer["events"][0]["text"] == "served by broker broker-a[0] 10.0.0.1:10911 (registered from 10.0.0.1:50000)"
    assert answer["groups"][0]["queueData"] == {"brokerName": "broker-a", "perm": 6, "readQueueNums": 4,
                                                "topicSysFlag": 0, "writeQueueNums": 4}
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


# ---------------------------------------------------------------- across restarts


def test_a_graceful_restart_keeps_the_history_and_a_crash_starts_it_afresh(restartable, raw_connect) -> None:
    first = restartable()
    gone = raw_connect(first.address)
    register_over(gone, "broker-gone", ("Gone1", "Gone2"))
    gone.close()  # its connection closes: Gone1 loses its route
    register_over(raw_connect(first.address), "broker-stays", ("Stays1", "Stays2"))
    wait_until(lambda: explain_over(raw_connect(first.address), "Gone1")["events"][-1]["kind"] == "channel closed",
               5, "the close recorded")
    first.stop()
    saved = first.workdir / "routes.snapshot.history"
    assert saved.exists()
    second = restartable()
    answer = explain_over(raw_connect(second.address), "Gone1")
    assert [e["kind"] for e in answer["events"]] == ["registered", "channel closed"]
    assert "broker-gone" in answer["verdict"] and "connection from 127.0.0.1:" in answer["verdict"]
    assert "restored the route history" in second.log_text() and not saved.exists()
    second.kill()  # a crash: nothing saved, and the file read at the last start is gone
    third = restartable()
    assert explain_over(raw_connect(third.address), "Gone1")["verdict"].startswith("Gone1 was never registered here")


def test_a_history_file_that_is_torn_too_large_or_past_the_budget_is_refused(tmp_path) -> None:
    history = h.RouteHistory(max_bytes=1 << 20)
    good = tmp_path / "good.history"
    routes, source = watched(Clock())
    register(routes, topics=("T1", "T2"), via=channel(1))
    persist.save_history(source, good, 1)
    persist.load_history(history, good, 2, 1 << 20)
    assert [e.kind for e in history.stream()] == ["registered", "restarted"]
    torn = tmp_path / "torn.history"
    torn.write_bytes(good.read_bytes()[:-3])
    bomb = tmp_path / "bomb.history"  # a header claiming a million events, then a row of a million empty lists
    payload = (1).to_bytes(8, "big") + msgpack.packb([h.FORMAT, 1, 0, 0, 0, 0, 0, 1_000_000, 0]) + \
        b"\xdd" + (1_000_000).to_bytes(4, "big") + b"\x90" * 1_000_000
    bomb.write_bytes(persist.HISTORY_MAGIC + persist._CRC.pack(zlib.crc32(payload)) + payload)
    for path, limit, why in ((torn, 1 << 20, "not a namesrv route history"), (good, 10, "larger than 10 bytes"),
                             (bomb, 8 << 20, "unreadable")):
        with pytest.raises(persist.SnapshotError, match=why):
            persist.load_history(history, path, 3, limit)
    assert [e.kind for e in history.stream()] == ["registered", "restarted"]  # nothing changed


def register_over(conn, name: str, topics: tuple[str, ...]) -> None:
    table = {topic: TopicConfig(topic, 4, 4) for topic in topics}
    body = RegisterBrokerBody(TopicConfigSerializeWrapper(table, DataVersion(1, 1_700_000_000_000, 0))).encode()
    header = {"brokerName": name, "brokerAddr": f"127.0.0.1:{10911 + len(name)}", "clusterName": "H", "brokerId": 0,
              "haServerAddr": "127.0.0.1:10912", "bodyCrc32": zlib.crc32(body) & 0x7FFFFFFF}
    assert conn.call(conn.request(RequestCode.REGISTER_BROKER, header, body)).code == ResponseCode.SUCCESS


def explain_over(conn, topic: str) -> dict:
    response = conn.call(conn.request(RequestCode.EXPLAIN_ROUTE, {"topic": topic}))
    assert response.code == ResponseCode.SUCCESS, response
    return orjson.loads(response.body)


def test_worker_processes_restore_one_history_from_the_boot_copy(restartable, raw_connect) -> None:
    first = restartable(serverWorkerProcesses=2)
    gone = raw_connect(first.address)
    register_over(gone, "broker-gone", ("Gone1", "Gone2"))
    gone.close()
    wait_until(lambda: explain_over(raw_connect(first.address), "Gone1")["events"][-1]["kind"] == "channel closed",
               5, "the close recorded")
    first.stop()
    second = restartable(serverWorkerProcesses=2)
    answers = {orjson.dumps(explain_over(raw_connect(second.address), "Gone1")["events"]) for _ in range(8)}
    assert len(answers) == 1 and [e["kind"] for e in orjson.loads(answers.pop())] == ["registered", "channel closed"]
    assert second.log_text().count("restored the route history") == 2
    assert not (second.workdir / "routes.snapshot.history").exists()  # taken by the boot copy: read once
    second.stop()
    assert [path.name for path in second.workdir.glob("*.history*")] == ["routes.snapshot.history"]  # saved again


# ---------------------------------------------------------------- the ring's records


class _Peer:
    remote_addr = "10.0.1.1:40000"


def _recounted(history: h.RouteHistory) -> dict[str, object]:
    """The history's accounting worked out afresh from what it holds."""
    ring = list(history._ring)
    seqs = [record[h.HEAD][h.SEQ] for record in ring]
    refs: dict[int, int] = {}
    for head, _ in history._losses.values():
        refs[head[h.SEQ]] = refs.get(head[h.SEQ], 0) + 1
    forgotten = [seq for seq in refs if seq < history._kept_from]
    return {"ordered": seqs == sorted(seqs) and all(seq >= history._kept_from for seq in seqs),
            "ring": h.EVENT_BYTES * len(set(seqs)) + sum(record[h.CHARGED] for record in ring),
            "losses": sum(h.LOSS_BYTES + h.NAME_BYTES + len(topic) for topic in history._losses)
            + h.EVENT_BYTES * len(forgotten),
            "refs": refs, "events": len(set(seqs)), "forgotten": sorted(forgotten)}


@pytest.mark.parametrize("seed", range(6))
def test_the_rings_accounting_holds_under_random_writes_and_survives_its_encoding(seed) -> None:
    """Reports of every kind, several a write or none, topics losing and regaining entries, budgets
    from a few events to all of them: after each write what the history charges is what it holds, and
    its encoding reads back to the same history."""
    rnd = random.Random(seed)
    topics = [f"T{i}-" + "x" * rnd.randint(0, 40) for i in range(60)]
    by_topic: dict[str, dict[str, int]] = {}
    history = h.RouteHistory(max_bytes=[3000, 8000, 20_000, 60_000, 1 << 22][seed % 5])
    now = [1000]
    history.bind(by_topic, lambda: now[0])
    kinds = [h.REGISTERED, h.UNREGISTERED, h.EXPIRED, h.CHANNEL_CLOSED, h.TOPIC_DELETED, h.TOPIC_REGISTERED,
             h.WRITE_PERM_WIPED, h.WRITE_PERM_ADDED]
    for step in range(300):
        now[0] += rnd.randint(0, 50)
        group = f"g{rnd.randint(0, 3)}"
        history.cause(rnd.choice(kinds), "C", "10.0.0.1:10911", group, 0, _Peer() if rnd.random() < 0.7 else None)
        for _ in range(rnd.choice([0, 1, 1, 2, 3])):
            chosen = rnd.sample(topics, rnd.choice([1, 2, 10, 40]))
            for topic in chosen:
                if rnd.random() < 0.5:
                    by_topic.setdefault(topic, {})[group] = 1
                else:
                    by_topic.get(topic, {}).pop(group, None)
            history.changed(chosen if rnd.random() < 0.9 else ())
        counted = _recounted(history)
        assert counted["ordered"] and counted["ring"] == history._ring_bytes, step
        assert (counted["losses"], counted["refs"], counted["events"]) == (
            history._loss_bytes, history._loss_refs, history._events), step
        assert counted["forgotten"] == sorted(history._forgotten_topics), step
        if step % 25 == 0:
            copy = h.RouteHistory(max_bytes=history.max_bytes * 4)
            copy.decode(history.encode())
            copy.max_bytes = history.max_bytes
            assert copy.encode() == history.encode() and copy.usage() == history.usage(), step
            assert [(e.seq, e.topics, e.parts) for e in copy.stream()] == \
                   [(e.seq, e.topics, e.parts) for e in history.stream()], step
    assert history.failures == 0 and history.usage()["events"] > 0
