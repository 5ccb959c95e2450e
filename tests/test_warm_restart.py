"""Warm restart (namesrv.routeinfo.persist): the route tables saved and served again at the next start,
driven directly and end to end (a real server restarted, SIGTERM and SIGKILL, and a real Java
broker and producer across a restart)."""
from __future__ import annotations

import json
import os
import subprocess
import time
import zlib
from pathlib import Path

import msgpack
import pytest

from namesrv.config import NamesrvConfig
from namesrv.launcher import NamesrvProcess
from namesrv.protocol import (DataVersion, RegisterBrokerBody, RequestCode, ResponseCode, TopicConfig,
                              TopicConfigSerializeWrapper, TopicRouteData)
from namesrv.routeinfo import Registrant, RouteInfoManager
from namesrv.routeinfo import persist
from namesrv.routeinfo.persist import FORMAT, MAGIC, RouteSnapshots, decode, encode_routes, restore_routes, snapshot_path
from test_operator_http import RMQ, free_broker_port, get, java_reference_skip_reason, scrape

NOW = 1_700_000_000_000


def manager(tmp_path: Path, clock=lambda: NOW, **config: object) -> tuple[NamesrvConfig, RouteInfoManager]:
    settings = NamesrvConfig(kv_config_path=str(tmp_path / "kvConfig.json"), **config)
    return settings, RouteInfoManager(settings, clock=clock)


def fill(routes: RouteInfoManager, brokers: int = 3, topics: int = 20) -> None:
    for b in range(brokers):
        for broker_id in (0, 1):
            table = {f"T{t}": TopicConfig(f"T{t}", 4 + b, 4, perm=6 if t % 2 else 4) for t in range(b, topics)}
            wrapper = TopicConfigSerializeWrapper(table, DataVersion(b + 1, NOW, 0))
            routes.register(Registrant(f"C{b % 2}", f"127.0.0.1:{10911 + 10 * b + broker_id}", f"broker-{b}", broker_id, f"127.0.0.1:{b}"), wrapper, [f"127.0.0.1:{20000 + b}"] if b else [], None)


def routes_of(routes: RouteInfoManager) -> dict[str, TopicRouteData | None]:
    return {topic: routes.pickup_topic_route(topic) for topic in routes.all_topics().topic_list}


def packed_at_once(routes: RouteInfoManager) -> bytes:
    """The snapshot file of `routes` as it is now, its document packed in one msgpack call."""
    with routes.reading() as tables:
        small = persist._small_tables(tables)
        rows = [[topic, [[group, *entry] for group, entry in queues.items()]]
                for topic, queues in tables.topic_queue_table.items()]
    whole = msgpack.packb({"format": FORMAT, "takenAtMs": NOW, "routes": {**small, "queues": rows}})
    return MAGIC + zlib.crc32(whole).to_bytes(4, "big") + whole


@pytest.mark.parametrize("parts", ["one", "many"])
def test_the_snapshot_packed_in_slices_and_parts_is_the_document_packed_at_once(tmp_path, monkeypatch, parts) -> None:
    _, routes = manager(tmp_path)
    fill(routes)
    if parts == "many":
        monkeypatch.setattr(persist, "SLICE_ENTRIES", 3)
        monkeypatch.setattr(persist, "PART_BYTES", 100)
    packed = encode_routes(routes, NOW)
    assert len(packed) > (5 if parts == "many" else 1)
    assert b"".join(packed) == packed_at_once(routes)


def register_late(routes: RouteInfoManager, topic: str) -> None:
    """broker-0's master now serves `topic` only: a topic added, others gone from its group."""
    wrapper = TopicConfigSerializeWrapper({topic: TopicConfig(topic, 2, 2)}, DataVersion(9, NOW, 0))
    routes.register(Registrant("C0", "127.0.0.1:10911", "broker-0", 0, "127.0.0.1:0"), wrapper, [], None)


def test_a_snapshot_in_slices_is_one_table_even_when_a_route_changes_between_them(tmp_path, monkeypatch) -> None:
    _, routes = manager(tmp_path)
    fill(routes)
    monkeypatch.setattr(persist, "SLICE_ENTRIES", 5)  # many slices
    handovers = []

    def change_between_slices(seconds: float) -> None:
        handovers.append(seconds)
        if len(handovers) == 3:  # after two slices
            register_late(routes, "Late")

    monkeypatch.setattr(persist.time, "sleep", change_between_slices)
    packed = b"".join(encode_routes(routes, NOW))
    assert len(handovers) > 3
    assert packed == packed_at_once(routes)  # packed again: the table as it is now
    assert b"Late" in packed


def churning(tmp_path, monkeypatch) -> tuple[NamesrvConfig, RouteInfoManager, list[float]]:
    """A filled table in which a route changes at every hand-over between slices (a fleet registering),
    and the list of those hand-overs."""
    config, routes = manager(tmp_path)
    fill(routes)
    monkeypatch.setattr(persist, "SLICE_ENTRIES", 5)
    handovers: list[float] = []

    def change_every_time(seconds: float) -> None:
        handovers.append(seconds)
        register_late(routes, f"Late{len(handovers)}")

    monkeypatch.setattr(persist.time, "sleep", change_every_time)
    return config, routes, handovers


def test_a_table_that_keeps_changing_is_packed_under_one_read_lock_at_last(tmp_path, monkeypatch) -> None:
    _, routes, handovers = churning(tmp_path, monkeypatch)
    packed = b"".join(encode_routes(routes, NOW))
    assert len(handovers) == persist.SLICED_ATTEMPTS  # each sliced attempt saw a change after its first slice
    assert packed == packed_at_once(routes)


def test_a_periodic_save_while_routes_keep_changing_waits_for_a_later_interval_then_holds_the_lock(
        tmp_path, monkeypatch) -> None:
    config, routes, changes = churning(tmp_path, monkeypatch)
    snapshots = RouteSnapshots(config, routes)
    for _ in range(persist.SKIPPED_SAVES):  # a fleet registering: nothing written, no lock held long
        assert not snapshots.save() and not snapshots.path.exists()
    assert snapshots.save()  # the next holds the read lock
    saved = decode(snapshots.path.read_bytes())[1]
    assert saved == decode(packed_at_once(routes))[1]  # the table as it is now
    assert saved["queues"][-1][0] == f"Late{len(changes)}"


def test_a_snapshot_restores_every_route_and_each_broker_as_just_registered(tmp_path) -> None:
    config, before = manager(tmp_path)
    fill(before)
    taken = b"".join(encode_routes(before, NOW))
    _, after = manager(tmp_path, clock=lambda: NOW + 60_000)
    sizes = restore_routes(after, decode(taken)[1], NOW + 50_000)
    assert sizes == before.sizes() == {"brokers": 6, "clusters": 2, "brokerGroups": 3, "topics": 20, "queueDatas": 57}
    assert routes_of(after) == routes_of(before) and routes_of(after)["T5"] is not None
    assert after.cluster_info() == before.cluster_info()
    restored = after.snapshot().broker_live_table
    assert {live.last_update_timestamp for live in restored.values()} == {NOW + 50_000}
    assert {live.channel for live in restored.values()} == {None}
    assert restored["C1", "127.0.0.1:10921"].data_version == DataVersion(2, NOW, 0)
    # silent, a restored broker expires like any other: 120 s after the restore
    assert after.scan_not_active_brokers(NOW + 50_000 + 119_000) == []
    assert len(after.scan_not_active_brokers(NOW + 50_000 + 121_000)) == 6 and after.sizes()["topics"] == 0


def test_a_torn_foreign_or_stale_file_is_not_restored_and_the_server_starts_empty(tmp_path, caplog) -> None:
    config, routes = manager(tmp_path, route_snapshot_max_age_seconds=60)
    fill(routes)
    snapshots = RouteSnapshots(config, routes)
    assert snapshots.save() and snapshots.path == tmp_path / "routes.snapshot"
    good = snapshots.path.read_bytes()
    for name, blob in (("torn", good[: len(good) // 2]), ("flipped", good[:-1] + bytes([good[-1] ^ 1])),
                       ("foreign", b'{"brokers": []}'), ("empty", b"")):
        snapshots.path.write_bytes(blob)
        _, fresh = manager(tmp_path)
        assert not RouteSnapshots(config, fresh).restore(), name
        assert fresh.sizes()["brokers"] == 0
    assert "CRC32 mismatch" in caplog.text and "not a namesrv route snapshot" in caplog.text
    snapshots.path.write_bytes(good)
    _, fresh = manager(tmp_path)
    held = snapshots.path.stat().st_mtime_ns // 1_000_000
    assert not RouteSnapshots(config, fresh).restore(now=held + 61_000)
    assert RouteSnapshots(config, fresh).restore(now=held + 59_000) and fresh.sizes()["brokers"] == 6


def test_the_file_is_written_when_a_route_changed_and_only_touched_otherwise(tmp_path) -> None:
    config, routes = manager(tmp_path)
    fill(routes, brokers=1)
    snapshots = RouteSnapshots(config, routes, clock=lambda: 0.0)  # saves take no time: none is held back
    assert snapshots.save()
    content = snapshots.path.read_bytes()
    os.utime(snapshots.path, ns=(0, 0))
    fill(routes, brokers=1)  # the same registrations again: no route changed
    assert not snapshots.save()
    assert snapshots.path.read_bytes() == content and snapshots.path.stat().st_mtime > time.time() - 60
    routes.wipe_write_perm_of_broker("broker-0")
    assert snapshots.save() and snapshots.path.read_bytes() != content
    assert not snapshots.save() and snapshots.save(force=True)


def test_periodic_saves_take_at_most_a_tenth_of_the_time_and_a_forced_one_is_never_held_back(tmp_path) -> None:
    config, routes = manager(tmp_path)
    fill(routes, brokers=1)
    ticks = iter([100.0, 102.0])  # the first save takes 2 s by this clock
    now = [0.0]
    snapshots = RouteSnapshots(config, routes, clock=lambda: next(ticks, now[0]))
    assert snapshots.save()
    content = snapshots.path.read_bytes()
    os.utime(snapshots.path, ns=(0, 0))
    routes.wipe_write_perm_of_broker("broker-0")
    now[0] = 119.0  # 19 s after it began: the 20 s a 2-s save reserves are not over
    assert not snapshots.save()
    assert snapshots.path.read_bytes() == content and snapshots.path.stat().st_mtime == 0  # not touched: stale
    now[0] = 120.0
    assert snapshots.save() and snapshots.path.read_bytes() != content
    routes.add_write_perm_of_broker("broker-0")
    assert snapshots.save(force=True)


def test_a_snapshot_past_the_route_table_bounds_is_refused_whole(tmp_path) -> None:
    config, routes = manager(tmp_path)
    fill(routes)
    RouteSnapshots(config, routes).save()
    small, fresh = manager(tmp_path, max_brokers=5)
    assert not RouteSnapshots(small, fresh).restore() and fresh.sizes()["brokers"] == 0
    assert snapshot_path(NamesrvConfig(route_snapshot_path=str(tmp_path / "x"))) == tmp_path / "x"


def blob(routes: dict) -> bytes:
    payload = msgpack.packb({"format": FORMAT, "takenAtMs": NOW, "routes": routes})
    return MAGIC + zlib.crc32(payload).to_bytes(4, "big") + payload


def spoiled(routes: dict, table: str, index: object, position: int | None, value: object) -> dict:
    """A copy of decoded tables with one value replaced: `routes[table][index][position] = value`
    (position None: the whole entry)."""
    copy = msgpack.unpackb(msgpack.packb(routes), strict_map_key=False)
    if position is None:
        copy[table][index] = value
    else:
        copy[table][index][position] = value
    return copy


#: (what, table, index, position, value): values the wire refuses, or of the wrong type.
SPOILED = [
    ("writeQueueNums past maxQueueNumsPerTopic", "queues", 0, 1, [["broker-0", 4, 2 ** 31 - 1, 6, 0]]),
    ("readQueueNums not an int", "queues", 0, 1, [["broker-0", "x", 4, 6, 0]]),
    ("perm null", "queues", 0, 1, [["broker-0", 4, 4, None, 0]]),
    ("perm past PermName's bits", "queues", 0, 1, [["broker-0", 4, 4, 16, 0]]),
    ("topicSysFlag past 32 bits", "queues", 0, 1, [["broker-0", 4, 4, 6, 2 ** 40]]),
    ("a queue of no group", "queues", 0, 1, [["nobody", 4, 4, 6, 0]]),
    ("an illegal topic name", "queues", 0, 0, "bad topic!"),
    ("a broker name with a control character", "groups", 0, 1, "broker\n0"),
    ("an address of 300 characters", "live", 0, 1, "1" * 300),
    ("a broker id as text", "groups", 0, 2, [["0", "127.0.0.1:10911"]]),
    ("enableActingMaster an int", "groups", 0, 3, 1),
    ("a DataVersion counter past a long", "live", 0, 4, {"counter": 2 ** 63, "timestamp": 1, "stateVersion": 0}),
    ("a live entry of four fields", "live", 0, None, ["C0", "127.0.0.1:10911", None, None]),
    ("a filter server not text", "filters", 0, 2, [5]),
]


@pytest.mark.parametrize("what, table, index, position, value", SPOILED, ids=[case[0] for case in SPOILED])
def test_a_snapshot_with_a_value_no_registration_could_bring_is_set_aside_and_the_server_starts_empty(
        tmp_path, caplog, what, table, index, position, value) -> None:
    config, routes = manager(tmp_path)
    fill(routes)
    good = decode(b"".join(encode_routes(routes, NOW)))[1]
    path = snapshot_path(config)
    path.write_bytes(blob(good))
    _, fresh = manager(tmp_path)
    assert RouteSnapshots(config, fresh).restore(now=NOW), "the unspoiled tables are restored"
    path.write_bytes(blob(spoiled(good, table, index, position, value)))
    _, fresh = manager(tmp_path)
    caplog.clear()
    assert not RouteSnapshots(config, fresh).restore(now=NOW), what
    assert fresh.sizes() == {"brokers": 0, "clusters": 0, "brokerGroups": 0, "topics": 0, "queueDatas": 0}
    (line,) = [record.getMessage() for record in caplog.records if "refused" in record.getMessage()]
    assert "\n" not in line and "set aside as" in line and "starting with no routes" in line, line
    assert not path.exists() and path.with_name("routes.snapshot.refused").exists()


def nested(depth: int) -> list:
    value: list = []
    for _ in range(depth):
        value = [value]
    return value


def test_static_topic_mappings_restore_only_as_json_a_registration_could_bring(tmp_path) -> None:
    config, routes = manager(tmp_path)
    fill(routes)
    good = decode(b"".join(encode_routes(routes, NOW)))[1]
    good["mappings"] = {"T1": {"broker-0": {"bname": "broker-0", "epoch": 1, "hosted": [{"a": [1.5, None, True]}]}}}
    path = snapshot_path(config)
    for mappings, restored in ((good["mappings"], True),
                               ({"T1": {"broker-0": {"bname": b"bytes"}}}, False),
                               ({"T1": {"broker-0": {"deep": nested(20)}}}, False),
                               ({"T1": {"broker-0": "not a mapping"}}, False)):
        path.write_bytes(blob({**good, "mappings": mappings}))
        _, fresh = manager(tmp_path)
        assert RouteSnapshots(config, fresh).restore(now=NOW) is restored, mappings


# ---- a real server


def register(conn, timeout_ms: int | None = None) -> None:
    table = {topic: TopicConfig(topic, 4, 4) for topic in ("Warm1", "Warm2")}
    body = RegisterBrokerBody(TopicConfigSerializeWrapper(table, DataVersion(1, NOW, 0))).encode()
    header = {"brokerName": "broker-w", "brokerAddr": "127.0.0.1:10911", "clusterName": "W", "brokerId": 0,
              "haServerAddr": "127.0.0.1:10912", "bodyCrc32": zlib.crc32(body) & 0x7FFFFFFF}
    if timeout_ms is not None:
        header["heartbeatTimeoutMillis"] = timeout_ms
    assert conn.call(conn.request(RequestCode.REGISTER_BROKER, header, body)).code == ResponseCode.SUCCESS


def route_code(conn, topic: str = "Warm1") -> int:
    return conn.call(conn.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic})).code


@pytest.fixture
def restartable(tmp_path):
    """`start(**overrides)`: a server on the same work directory and port each time; stopped at teardown."""
    servers: list[NamesrvProcess] = []

    def start(**overrides: object) -> NamesrvProcess:
        port = servers[-1].address.rsplit(":", 1)[1] if servers else 0
        server = NamesrvProcess({"listenPort": port, "scanNotActiveBrokerInterval": 100, **overrides},
                                workdir=tmp_path / "server").start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()


def test_a_restarted_server_answers_routes_at_once_and_a_silent_broker_then_expires(restartable, raw_connect) -> None:
    first = restartable(needWaitForService=True, waitSecondsForService=0)
    broker = raw_connect(first.address)
    register(broker, timeout_ms=3000)
    assert route_code(broker) == ResponseCode.SUCCESS
    first.stop()  # SIGTERM with the broker still connected: its routes are saved at shutdown
    started = time.monotonic()
    second = restartable(needWaitForService=True, waitSecondsForService=60)
    client = raw_connect(second.address)
    assert route_code(client) == ResponseCode.SUCCESS  # restored: no TOPIC_NOT_EXIST, no 60-s wait
    assert get(second.http_url + "/ready")[0] == 200
    assert "restored the routes" in second.log_text()
    while route_code(client) == ResponseCode.SUCCESS:  # the broker never registers again
        assert time.monotonic() - started < 10, "the restored broker did not expire"
        time.sleep(0.1)
    assert time.monotonic() - started >= 2.5  # its 3-s timeout counted from the restart
    assert route_code(client) == ResponseCode.TOPIC_NOT_EXIST


def test_a_killed_server_restores_the_routes_of_its_last_periodic_save(restartable, raw_connect) -> None:
    first = restartable(routeSnapshotIntervalSeconds=1)
    register(raw_connect(first.address))
    snapshot = first.workdir / "routes.snapshot"
    deadline = time.monotonic() + 10
    while not snapshot.exists():
        assert time.monotonic() < deadline, "no periodic save"
        time.sleep(0.05)
    first.kill()  # no shutdown: what is on disk is the last periodic save
    second = restartable()
    assert route_code(raw_connect(second.address), "Warm2") == ResponseCode.SUCCESS
    assert not list(first.workdir.glob(".routes.snapshot.*.tmp"))  # the last save was whole


def test_with_warm_restart_off_a_restart_answers_topic_not_exist(restartable, raw_connect) -> None:
    first = restartable(routeSnapshotEnable=False)
    register(raw_connect(first.address))
    first.stop()
    second = restartable(routeSnapshotEnable=False)
    assert route_code(raw_connect(second.address)) == ResponseCode.TOPIC_NOT_EXIST
    assert not (second.workdir / "routes.snapshot").exists()


@pytest.mark.timeout(300)
@pytest.mark.skipif(java_reference_skip_reason() is not None, reason=str(java_reference_skip_reason()))
def test_a_java_producer_started_right_after_a_restart_sends_without_failures(restartable, tmp_path) -> None:
    """A real broker 4.9.8 registers (every 30 s); namesrv restarts; a fresh Java producer and consumer
    start at once. Warm, every send succeeds and no live topic is answered TOPIC_NOT_EXIST; cold
    (routeSnapshotEnable=false, as RocketMQ behaves) the same producer fails to send."""
    env = {k: v for k, v in os.environ.items() if k != "NAMESRV_ADDR"}
    env["ROCKETMQ_REF_RUN"] = str(tmp_path / "rmq")
    server = restartable()
    port = free_broker_port()
    subprocess.run([RMQ / "bin" / "broker", server.address, str(port), "broker-warm"], env=env, check=True,
                   capture_output=True, text=True, timeout=120)

    def produce_consume(address: str) -> dict:
        result = subprocess.run([RMQ / "bin" / "produce-consume", address, "WarmRestartTopic", "20", "20"], env=env,
                                capture_output=True, text=True, timeout=120)
        return json.loads(result.stdout.strip().splitlines()[-1])

    def registrations(server: NamesrvProcess) -> float:
        samples = scrape(server)
        return sum(samples.get(f'namesrv_registrations_total{{outcome="{outcome}"}}', 0.0)
                   for outcome in ("applied", "unchanged"))

    def topic_not_exist(server: NamesrvProcess) -> float:
        return scrape(server).get('namesrv_requests_total{path="executor",request="GET_ROUTEINFO_BY_TOPIC",'
                                  'response="TOPIC_NOT_EXIST"}', 0.0)

    try:
        assert produce_consume(server.address)["send_errors"] == 0  # the topic exists now
        outcomes = {}
        for warm in (True, False):
            server.stop()
            server = restartable(routeSnapshotEnable=warm)
            started = time.monotonic()
            outcome = produce_consume(server.address)
            outcome["seconds"] = time.monotonic() - started
            outcome["topic_not_exist"] = topic_not_exist(server)
            outcomes[warm] = outcome
            # The cold round must start right after the broker's periodic registration (every 30 s), so
            # that the next one cannot come before its first sends. Not "namesrv_brokers 1": a restored
            # broker counts at once. Not the first registration either: the broker registers at once
            # when a round's consumer creates its retry topic. The next one after the round is periodic.
            seen, deadline = registrations(server), time.monotonic() + 40
            while warm and registrations(server) == seen:
                assert time.monotonic() < deadline, "the broker did not register again"
                time.sleep(0.2)
        print(f"warm: {outcomes[True]}\ncold: {outcomes[False]}")
        assert outcomes[True]["send_errors"] == 0 and outcomes[True]["received"] == 20
        assert outcomes[True]["topic_not_exist"] == 0
        assert outcomes[False]["send_errors"] > 0 and outcomes[False]["topic_not_exist"] > 0
    finally:
        subprocess.run([RMQ / "bin" / "stop", "broker-warm"], env=env, capture_output=True, timeout=60)


def test_worker_processes_restore_the_same_tables_and_worker_0_saves_them(restartable, raw_connect) -> None:
    first = restartable(serverWorkerProcesses=2)
    register(raw_connect(first.address))
    first.stop()
    second = restartable(serverWorkerProcesses=2)
    # every worker answers from the restored tables: connections land on either
    codes = {route_code(raw_connect(second.address)) for _ in range(12)}
    assert codes == {ResponseCode.SUCCESS}
    assert second.log_text().count("restored the routes") == 2
    assert len(list(second.workdir.glob(".routes.snapshot.boot-*"))) == 1  # what the workers restored
    second.stop()
    assert not list(second.workdir.glob(".routes.snapshot.boot-*"))  # the supervisor's copy is gone
    third = restartable(serverWorkerProcesses=2)  # worker 0 saved at shutdown: still there
    assert route_code(raw_connect(third.address), "Warm2") == ResponseCode.SUCCESS
