"""serverWorkerProcesses=2 end to end: real supervisor and worker processes on 127.0.0.1.

Connections are told apart by the worker that accepted them (the kernel spreads them over the
workers' SO_REUSEPORT sockets): a client's local port is found among each worker's sockets.
What one worker is told, the other must know within milliseconds; a killed worker comes back
with its siblings' tables; SIGTERM stops them all. Then the sans-IO parts on their own.
"""
from __future__ import annotations

import json
import os
import signal
import statistics
import time
import zlib
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest
import zmq

from namesrv.channel import Channel
from namesrv.config import NamesrvConfig
from namesrv.controller import selector_threads
from namesrv.kvconfig import KVConfigManager
from namesrv.launcher import NamesrvProcess, NamesrvStartError
from namesrv.processor import RequestProcessor
from namesrv.protocol import (DataVersion, ProtocolError, RegisterBrokerBody, RemotingCommand, RequestCode,
                              ResponseCode, TopicConfig, TopicConfigSerializeWrapper, TopicRouteData)
from namesrv.protocol.msgpack_codec import decode_msgpack, encode_msgpack
from namesrv.routeinfo import RouteInfoManager
from namesrv.writelog import snapshot
from namesrv.writelog.log import (CLOSE, EXPIRE, TICK, WRITE, Entry, Proposal, SiblingChannel, Verdict, admit)
from process_control import frozen

CLUSTER = "WorkersCluster"
TOPICS = ("TopicA", "TopicB")
#: How long a write may take to show on every worker before a test gives up. Polled, so a pass takes
#: milliseconds (the figure printed below); the bound is only how long a loaded machine may stall.
VISIBLE_SECONDS = 10.0
#: A broker's heartbeat timeout in the liveness cases: no stall of a busy 2-core machine between two
#: beats (every 0.15 s) comes near it, and a broker left silent still expires within seconds.
HEARTBEAT_TIMEOUT_MS = 2000


def workers_of(server: NamesrvProcess) -> list[psutil.Process]:
    return psutil.Process(server.pid).children()


def accepting_worker(server: NamesrvProcess, conn, timeout: float = 5.0) -> int:
    """The pid of the worker that accepted `conn` (ZeroMQ accepts it a moment after the handshake)."""
    port = conn.sock.getsockname()[1]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for worker in workers_of(server):
            try:
                if any(c.raddr and c.raddr.port == port for c in worker.net_connections("tcp")):
                    return worker.pid
            except psutil.NoSuchProcess:
                continue
        time.sleep(0.01)
    raise AssertionError(f"no worker of {server} holds the connection from port {port}")


def one_per_worker(server: NamesrvProcess, raw_connect, pids: set[int] | None = None) -> dict[int, object]:
    """One open connection to each worker in `pids` (default: all), opening connections until each is hit."""
    wanted = pids or {worker.pid for worker in workers_of(server)}
    found: dict[int, object] = {}
    for _ in range(100):
        conn = raw_connect(server.address)
        pid = accepting_worker(server, conn)
        if pid in wanted and pid not in found:
            found[pid] = conn
            if len(found) == len(wanted):
                return found
        else:
            conn.close()
    raise AssertionError(f"100 connections did not reach every worker of {wanted}")


def register(conn, name: str = "broker-a", addr: str = "127.0.0.1:10911", **ext: object) -> RemotingCommand:
    table = {topic: TopicConfig(topic, 4, 4) for topic in TOPICS}
    body = RegisterBrokerBody(TopicConfigSerializeWrapper(table, DataVersion(1, 1_700_000_000_000, 0))).encode()
    header = {"brokerName": name, "brokerAddr": addr, "clusterName": CLUSTER, "haServerAddr": "127.0.0.1:10912",
              "brokerId": 0, "bodyCrc32": zlib.crc32(body) & 0x7FFFFFFF, **ext}
    answer = conn.call(conn.request(RequestCode.REGISTER_BROKER, header, body))
    assert answer.code == ResponseCode.SUCCESS, answer
    return answer


def brokers(conn, topic: str = "TopicA") -> list[str]:
    answer = conn.call(conn.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic}))
    if answer.code == ResponseCode.TOPIC_NOT_EXIST:
        return []
    assert answer.code == ResponseCode.SUCCESS, answer
    return sorted(group.broker_name for group in TopicRouteData.decode(answer.body).broker_datas)


def wait_until(condition: Callable[[], bool], timeout: float, what: str) -> float:
    """Seconds until `condition` held (polled without sleeping: the delay is what is measured)."""
    started = time.perf_counter()
    while not condition():
        if time.perf_counter() - started > timeout:
            raise AssertionError(f"not within {timeout} s: {what}")
    return time.perf_counter() - started


@pytest.fixture
def workers(namesrv_factory) -> NamesrvProcess:
    return namesrv_factory(serverWorkerProcesses=2, scanNotActiveBrokerInterval=100)


def test_a_registration_on_one_worker_is_visible_on_the_other_within_milliseconds(workers, raw_connect) -> None:
    (pid_a, a), (pid_b, b) = one_per_worker(workers, raw_connect).items()
    assert pid_a != pid_b
    delays = []
    for i in range(20):
        name = f"broker-{i}"
        register(a, name=name, addr=f"127.0.0.1:{20000 + i}")
        delays.append(wait_until(lambda: name in brokers(b), VISIBLE_SECONDS, f"{name} visible on the other worker"))
    print(f"\nvisible on the sibling after the registration's answer: median {statistics.median(delays) * 1e3:.2f} ms, "
          f"max {max(delays) * 1e3:.2f} ms (20 registrations; a route query round trip included)")
    workers.wait_for_log(r"\[w\d/NamesrvBus\] namesrv.routeinfo.manager - new broker registered: broker-0")


def test_unregistration_and_connection_close_reach_the_other_worker(workers, raw_connect) -> None:
    (_, a), (_, b) = one_per_worker(workers, raw_connect).items()
    register(a)
    wait_until(lambda: brokers(b) == ["broker-a"], VISIBLE_SECONDS, "broker-a registered everywhere")
    unregister = {"clusterName": CLUSTER, "brokerAddr": "127.0.0.1:10911", "brokerName": "broker-a", "brokerId": 0}
    assert a.call(a.request(RequestCode.UNREGISTER_BROKER, unregister)).code == ResponseCode.SUCCESS
    wait_until(lambda: brokers(b) == [], VISIBLE_SECONDS, "broker-a unregistered everywhere")

    register(a, name="broker-b", addr="127.0.0.1:30911")
    wait_until(lambda: brokers(b) == ["broker-b"], VISIBLE_SECONDS, "broker-b registered everywhere")
    a.close()
    wait_until(lambda: brokers(b) == [], VISIBLE_SECONDS, "broker-b gone with its connection everywhere")
    workers.wait_for_log(r"\[w\d/NamesrvBus\] .*channel closed: broker broker-b\[0\] 127\.0\.0\.1:30911 .*worker\d")


def test_a_repeat_whose_refresh_no_longer_applies_is_registered_in_full_everywhere(workers, raw_connect) -> None:
    """The origin prepares a repeated body as a liveness refresh; a topic deleted meanwhile makes every
    worker decline it alike (the body would restore the topic), and the origin proposes it again,
    decoded in full: the answer comes, and the topic is back on both workers."""
    (_, a), (_, b) = one_per_worker(workers, raw_connect).items()
    register(a)
    wait_until(lambda: brokers(b) == ["broker-a"], VISIBLE_SECONDS, "broker-a registered everywhere")
    deleted = b.call(b.request(RequestCode.DELETE_TOPIC_IN_NAMESRV, {"topic": "TopicA"}))
    assert deleted.code == ResponseCode.SUCCESS, deleted
    wait_until(lambda: brokers(a) == [], VISIBLE_SECONDS, "TopicA deleted everywhere")
    register(a)
    assert brokers(a) == ["broker-a"]
    wait_until(lambda: brokers(b) == ["broker-a"], VISIBLE_SECONDS, "TopicA restored by the re-registration everywhere")


def test_kv_and_config_writes_reach_the_other_worker_and_are_on_disk_when_answered(workers, raw_connect) -> None:
    (_, a), (pid_b, b) = one_per_worker(workers, raw_connect).items()
    kv_file = workers.workdir / "kvConfig.json"
    with frozen(pid_b):  # the sibling applies the write only after the file's state below is recorded
        put = a.request(RequestCode.PUT_KV_CONFIG, {"namespace": "NS", "key": "k1", "value": "v1"})
        assert a.call(put).code == ResponseCode.SUCCESS
        written = kv_file.stat()
        update = a.request(RequestCode.UPDATE_NAMESRV_CONFIG, body=b"orderMessageEnable=true\n")
        assert a.call(update).code == ResponseCode.SUCCESS
        config_written = (workers.workdir / "namesrv.properties").stat()

    def value_on_b() -> str | None:
        answer = b.call(b.request(RequestCode.GET_KV_CONFIG, {"namespace": "NS", "key": "k1"}))
        return answer.ext_fields.get("value") if answer.code == ResponseCode.SUCCESS else None

    wait_until(lambda: value_on_b() == "v1", VISIBLE_SECONDS, "the KV put visible on the other worker")
    config_on_b = b.call(b.request(RequestCode.GET_NAMESRV_CONFIG)).body.decode()
    assert "orderMessageEnable=true" in config_on_b.splitlines()
    time.sleep(0.2)
    for path, before in ((kv_file, written), (workers.workdir / "namesrv.properties", config_written)):
        after = path.stat()
        assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns), f"{path} rewritten"
    assert json.loads(kv_file.read_text()) == {"configTable": {"NS": {"k1": "v1"}}}


def test_a_broker_kept_alive_on_one_worker_stays_everywhere_and_once_silent_expires_everywhere(
        workers, raw_connect) -> None:
    """broker-a is kept alive through worker a only: by unchanged re-registrations, then by heartbeats.
    Each way is checked against a control broker registered after broker-a's last registration, with
    the same timeout, then silent: once the control has expired everywhere, the timeout has passed since
    that registration, so a worker that missed the refreshes would have expired broker-a too. Then
    broker-a falls silent and expires everywhere, no sooner than its timeout after its last beat."""
    (_, a), (_, b) = one_per_worker(workers, raw_connect).items()
    timeout = HEARTBEAT_TIMEOUT_MS / 1000
    heartbeat = {"clusterName": CLUSTER, "brokerAddr": "127.0.0.1:10911", "brokerName": "broker-a", "brokerId": 0}
    beats = {
        "re-registrations": lambda: register(a, heartbeatTimeoutMillis=HEARTBEAT_TIMEOUT_MS),
        "heartbeats": lambda: a.send(a.request(RequestCode.BROKER_HEARTBEAT, heartbeat, oneway=True)),
    }
    register(a, heartbeatTimeoutMillis=HEARTBEAT_TIMEOUT_MS)
    for index, (way, beat) in enumerate(beats.items()):
        control = f"control-{index}"
        register(raw_connect(workers.address), name=control, addr=f"127.0.0.1:{10921 + index}",
                 heartbeatTimeoutMillis=HEARTBEAT_TIMEOUT_MS)  # its own connection: its expiry closes it
        wait_until(lambda: control in brokers(b), VISIBLE_SECONDS, f"{control} registered everywhere")
        started = time.monotonic()
        while True:
            beat()
            last_beat = time.monotonic()
            seen = {"a": brokers(a), "b": brokers(b)}
            assert all("broker-a" in names for names in seen.values()), f"broker-a expired during the {way}: {seen}"
            if all(names == ["broker-a"] for names in seen.values()):
                break  # the control expired everywhere, broker-a did not
            assert time.monotonic() - started < timeout + VISIBLE_SECONDS, f"{control} never expired: {seen}"
            time.sleep(0.15)
    for conn in (b, raw_connect(workers.address)):
        wait_until(lambda: brokers(conn) == [], timeout + VISIBLE_SECONDS, "broker-a expired")
    assert time.monotonic() - last_beat >= timeout  # no sooner than its timeout after the last beat was sent
    assert a.closed_by_server(VISIBLE_SECONDS)
    workers.wait_for_log(r"expired: broker broker-a\[0\] 127\.0\.0\.1:10911")


@pytest.mark.parametrize("endpoint", ["tcp://127.0.0.1:*", "ipc"])
def test_writes_over_the_zeromq_endpoint_reach_every_worker(namesrv_factory, raw_connect, zmq_context, tmp_path,
                                                            endpoint: str) -> None:
    """A tcp endpoint is shared by every worker; an ipc one is worker 0's alone."""
    if endpoint == "ipc":
        endpoint = f"ipc://{tmp_path}/namesrv.zmq"
    server = namesrv_factory(serverWorkerProcesses=2, zmqListenAddress=endpoint)
    dealer = zmq_context.socket(zmq.DEALER)
    dealer.setsockopt(zmq.LINGER, 0)
    dealer.connect(server.zmq_address)
    put = RemotingCommand.request(RequestCode.PUT_KV_CONFIG, {"namespace": "NS", "key": "k1", "value": "v1"}, opaque=1)
    dealer.send(encode_msgpack(put))
    assert dealer.poll(5000), "no answer over ZeroMQ"
    assert decode_msgpack(dealer.recv()).code == ResponseCode.SUCCESS
    for conn in one_per_worker(server, raw_connect).values():
        get = conn.request(RequestCode.GET_KV_CONFIG, {"namespace": "NS", "key": "k1"})
        wait_until(lambda: conn.call(get).code == ResponseCode.SUCCESS, VISIBLE_SECONDS,
                   "the put visible on every worker")


def test_a_killed_worker_is_restarted_with_its_siblings_routes(workers, raw_connect) -> None:
    (pid_a, a), (pid_b, _) = one_per_worker(workers, raw_connect).items()
    register(a)
    os.kill(pid_b, signal.SIGKILL)
    workers.wait_for_log(rf"worker \d \(pid {pid_b}\) exited with -9; restarting it")
    match = workers.wait_for_log(r"worker \d \(pid (\d+)\) restarted and serving", timeout=15)
    restarted = int(match.group(1))
    assert {worker.pid for worker in workers_of(workers)} == {pid_a, restarted}
    workers.wait_for_log(r"copied the tables of worker \d \(1 brokers, 2 topics, 0 KV namespaces")
    conn = one_per_worker(workers, raw_connect, {restarted})[restarted]
    assert brokers(conn) == ["broker-a"]
    def history(on) -> list:  # the route history came with the tables
        return json.loads(on.call(on.request(RequestCode.EXPLAIN_ROUTE, {"topic": "TopicA"})).body)["events"]
    assert history(conn) == history(a) and [event["kind"] for event in history(conn)] == ["registered"]
    a.close()  # the broker's connection, held by the surviving worker: the restarted one hears the close
    wait_until(lambda: brokers(conn) == [], VISIBLE_SECONDS, "broker-a gone on the restarted worker")


def test_brokers_of_a_killed_worker_are_dropped_by_its_siblings(workers, raw_connect) -> None:
    """A dead worker's connections are closed connections: RocketMQ drops the brokers registered
    over them at once, and so does every sibling (the supervisor logs the worker as gone)."""
    (pid_a, a), (pid_b, b) = one_per_worker(workers, raw_connect).items()
    register(a, "broker-a", "127.0.0.1:10911")
    register(b, "broker-b", "127.0.0.1:10921")
    assert brokers(a) == brokers(b) == ["broker-a", "broker-b"]
    os.kill(pid_b, signal.SIGKILL)
    killed = time.monotonic()
    wait_until(lambda: brokers(a) == ["broker-a"], 2.0, "broker-b gone from the surviving worker")
    assert time.monotonic() - killed < 2.0
    match = workers.wait_for_log(r"worker \d \(pid (\d+)\) restarted and serving", timeout=15)
    restarted = one_per_worker(workers, raw_connect, {int(match.group(1))})[int(match.group(1))]
    assert brokers(restarted) == ["broker-a"]  # the connection that outlived it keeps its broker


def test_sigterm_stops_every_worker_and_the_log_leaves_nothing_on_disk(workers, raw_connect) -> None:
    children = workers_of(workers)
    sockets = [c.laddr for process in (psutil.Process(workers.pid), *children)
               for c in process.net_connections("unix") if c.laddr]
    assert sockets and all(address.startswith(("\0", "@")) for address in sockets), sockets  # abstract namespace
    assert workers.stop() == 0
    gone, alive = psutil.wait_procs(children, timeout=5)
    assert not alive
    log = workers.log_text()
    assert log.count("SIGTERM received") == 3
    assert log.rstrip().endswith("The Name Server shut down")


def test_a_port_held_by_another_server_is_refused_not_shared(workers, tmp_path) -> None:
    """SO_REUSEPORT would let a second server share the port: the supervisor checks it first."""
    second = NamesrvProcess({"serverWorkerProcesses": 2, "listenPort": workers.port}, workdir=tmp_path)
    with pytest.raises(NamesrvStartError, match=rf"cannot listen on tcp://127\.0\.0\.1:{workers.port} "
                                                r"\(bindAddress, listenPort\): Address already in use"):
        second.start()
    assert second.returncode == 2


def test_zero_worker_processes_is_refused(tmp_path) -> None:
    server = NamesrvProcess({"serverWorkerProcesses": 0}, workdir=tmp_path)
    with pytest.raises(NamesrvStartError, match="serverWorkerProcesses: must be at least 1, got 0"):
        server.start()
    assert server.returncode == 2


# ---- the sans-IO parts: the bus's ordering rules and messages, the table copy, memory-only KV writes

def test_the_log_is_applied_in_order_and_a_lost_entry_is_noticed() -> None:
    proposal = Proposal(WRITE, 1, 7, 3, Channel("tcp", b"\x00peer"), b"frame")
    entry = lambda seq, kind=WRITE: Entry(seq, kind, 1, proposal if kind != TICK else None)  # noqa: E731
    assert admit(0, Entry(0, TICK)) is Verdict.SKIP  # first contact, nothing written yet
    assert admit(0, entry(1)) is Verdict.APPLY
    assert admit(1, entry(1)) is Verdict.SKIP  # already applied
    assert admit(1, entry(2, CLOSE)) is Verdict.APPLY
    assert admit(2, Entry(2, TICK)) is Verdict.SKIP
    assert admit(2, Entry(3, TICK)) is Verdict.GAP  # entry 3 never arrived
    assert admit(2, entry(4)) is Verdict.GAP


def test_log_messages_round_trip_and_garbage_is_a_protocol_error() -> None:
    client = Channel("zmq", b"\x00peer", "10.0.0.9:4242")
    proposal = Proposal(WRITE, 3, 9, 12, client, b"frame bytes")
    assert Proposal.decode(proposal.encode()) == proposal
    assert Proposal.decode(proposal.encode()).channel.remote_addr == "10.0.0.9:4242"
    for entry in (Entry(40, WRITE, 1_700_000_000_000, proposal), Entry(41, TICK),
                  Entry(42, WRITE, 5, proposal, (ResponseCode.NO_PERMISSION, "refused")),
                  Entry(43, EXPIRE, 6, Proposal(EXPIRE, 0, 1, 0, Channel("tcp", b""), b"\x93\xa1c\xa1a\x01"))):
        assert Entry.decode(entry.encode()) == entry
    for data in (b"\x01", b"\x93\x01\x02\x03", proposal.encode()[:-3], b"\xc1"):
        with pytest.raises(ProtocolError):
            Entry.decode(data)
        with pytest.raises(ProtocolError):
            Proposal.decode(data)


def test_stand_in_channels_never_equal_a_local_connection_and_close_as_a_lookup_miss() -> None:
    local = Channel("tcp", b"\x00\x00\x00\x00\x01", "10.0.0.9:4242")
    stand_in = SiblingChannel.stand_in(2, 5, local)
    assert stand_in.transport == "tcp" and stand_in != local and stand_in.origin == 2
    assert stand_in == SiblingChannel.stand_in(2, 5, local) != SiblingChannel.stand_in(2, 6, local)
    assert stand_in != SiblingChannel.stand_in(2, 5, Channel("zmq", local.ident))
    assert str(stand_in) == "worker2:10.0.0.9:4242"


def tables(tmp_path: Path, name: str) -> tuple[NamesrvConfig, RouteInfoManager, KVConfigManager, RequestProcessor]:
    config = NamesrvConfig(kv_config_path=str(tmp_path / f"{name}-kv.json"),
                           config_store_path=str(tmp_path / f"{name}.properties"))
    routes, kv = RouteInfoManager(config), KVConfigManager(config.kv_config_path)
    return config, routes, kv, RequestProcessor(config, routes, kv)


def registration(name: str, addr: str) -> RemotingCommand:
    table = {topic: TopicConfig(topic, 4, 4) for topic in TOPICS}
    body = RegisterBrokerBody(TopicConfigSerializeWrapper(table, DataVersion(1, 1, 0))).encode()
    return RemotingCommand.request(RequestCode.REGISTER_BROKER, {"brokerName": name, "brokerAddr": addr,
                                                                 "clusterName": CLUSTER, "brokerId": 0}, body)


def test_a_table_copy_carries_routes_kv_and_config_with_connections_stood_in_for(tmp_path) -> None:
    config, routes, kv, processor = tables(tmp_path, "source")
    local = Channel("tcp", b"\x00\x00\x00\x00\x01", "10.0.0.1:5000")
    remote = SiblingChannel.stand_in(0, 1, Channel("tcp", b"\x00\x00\x00\x00\x01", "10.0.0.2:5000"))
    for command, channel in ((registration("broker-a", "10.0.0.1:10911"), local),
                             (registration("broker-b", "10.0.0.2:10911"), remote),
                             (RemotingCommand.request(RequestCode.PUT_KV_CONFIG, {"namespace": "NS", "key": "k",
                                                                                  "value": "v"}), local),
                             (RemotingCommand.request(RequestCode.UPDATE_NAMESRV_CONFIG,
                                                      body=b"orderMessageEnable=true"), local)):
        assert processor.process(command, channel).code == ResponseCode.SUCCESS
    payload = snapshot.take(1, 5, 57, routes, kv, config)

    copy_config, copy_routes, copy_kv, _ = tables(tmp_path, "copy")
    copied = snapshot.restore(payload, copy_routes, copy_kv, copy_config)
    assert copied.position == 57
    assert copy_kv.get("NS", "k") == "v" and not copy_kv.path.exists()
    assert copy_config.order_message_enable and not Path(copy_config.config_store_path).exists()
    original, copy = routes.snapshot(), copy_routes.snapshot()
    assert copy.topic_queue_table == original.topic_queue_table
    assert copy.broker_addr_table == original.broker_addr_table
    channels = {key: live.channel for key, live in copy.broker_live_table.items()}
    assert channels == {(CLUSTER, "10.0.0.1:10911"): SiblingChannel.stand_in(1, 5, local),
                        (CLUSTER, "10.0.0.2:10911"): remote}
    assert copy_routes.topic_route_body("TopicA", True) == routes.topic_route_body("TopicA", True)
    assert copy_routes.route_events.encode() == routes.route_events.encode()  # the route history too
    copy_routes.on_channel_destroy(SiblingChannel.stand_in(1, 5, local))  # the source's close, replicated
    assert sorted(copy_routes.snapshot().broker_addr_table) == ["broker-b"]


def test_a_memory_only_view_changes_the_shared_table_and_never_the_file(tmp_path) -> None:
    kv = KVConfigManager(tmp_path / "kv.json")
    replica = kv.memory_only()
    replica.put("NS", "k", "v")
    assert kv.get("NS", "k") == "v" and not kv.path.exists()
    kv.put("NS", "k2", "v2")
    replica.delete("NS", "k")
    assert json.loads(kv.path.read_text()) == {"configTable": {"NS": {"k": "v", "k2": "v2"}}}
    assert kv.export_table() == {"NS": {"k2": "v2"}}


@pytest.mark.parametrize("configured, workers, each", [(3, 1, 3), (3, 2, 1), (3, 3, 1), (3, 8, 1), (8, 2, 4),
                                                        (1, 4, 1)])
def test_workers_share_the_selector_threads(configured, workers, each):
    assert selector_threads(NamesrvConfig(server_selector_threads=configured), workers) == each
