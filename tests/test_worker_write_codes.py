"""Every write request code reaches every worker process (serverWorkerProcesses=2, real processes on 127.0.0.1).

The cases are parametrized over the request table's `WRITE_CODES` (namesrv.processor.requests), so a
new write row is covered the day it is added, or fails here for want of an example. For each code,
through a connection held by one worker (then the other, then the ZeroMQ endpoint), the example sets
up what the write needs, checks every worker agrees on it, sends the write, and then reads every
worker back with read-only requests only (routes, cluster info, topic list, KV, config): within a
second every worker must show the change, and all the same state. The state must differ from the one
before the write, so a write that reaches only its origin fails.

QUERY_DATA_VERSION and BROKER_HEARTBEAT change only a broker's liveness timestamp, which no read
request shows: they are checked by keeping a broker with a short heartbeat timeout alive through one
worker only, next to a control broker nobody keeps alive. The control must expire on every worker;
the kept broker must stay on every worker (a worker that missed the refreshes expires it).

The server runs with the admin guard on (loopback only, and a token): admin writes carry the token,
and an admin write without it is refused alike everywhere.
"""
from __future__ import annotations

import itertools
import time
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import pytest
import zmq
from test_worker_processes import one_per_worker, wait_until, workers_of

from namesrv.launcher import NamesrvProcess
from namesrv.processor.requests import ADMIN_CODES, WRITE_CODES
from namesrv.protocol import (ClusterInfo, DataVersion, KVTable, RegisterBrokerBody, RemotingCommand, RequestCode,
                              ResponseCode, TopicConfig, TopicConfigSerializeWrapper, TopicList, TopicRouteData)
from namesrv.protocol.msgpack_codec import decode_msgpack, encode_msgpack

CLUSTER = "WriteCodesCluster"
ADMIN_TOKEN = "worker-write-codes-admin-token"
PERM_READ, PERM_WRITE = 4, 2
#: The liveness cases: a broker's heartbeat timeout (no stall of a busy 2-core machine between two
#: beats comes near it) and how often the kept broker beats.
HEARTBEAT_TIMEOUT_MS = 2000
BEAT_SECONDS = 0.1
#: How long every worker has to agree after an answered write before a case gives up: polled, so an
#: agreement takes milliseconds; the bound is only how long a loaded machine may stall.
AGREE_SECONDS = 10.0

_ports = itertools.count(21000)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NamesrvProcess]:
    """One two-worker server for the module: each case uses names of its own, so cases never meet."""
    process = NamesrvProcess({"serverWorkerProcesses": 2, "scanNotActiveBrokerInterval": 100,
                              "adminAllowedNetworks": "127.0.0.1/32", "adminToken": ADMIN_TOKEN},
                             workdir=tmp_path_factory.mktemp("namesrv-write-codes"))
    process.start()
    try:
        assert len(workers_of(process)) == 2
        yield process
    finally:
        process.stop()


@pytest.fixture
def conns(server: NamesrvProcess, raw_connect) -> list:
    """One connection to each worker, in pid order (closed after the case: its brokers go with it)."""
    return [conn for _, conn in sorted(one_per_worker(server, raw_connect).items())]


class ZmqConnection:
    """The ZeroMQ endpoint (tcp: shared by the workers) with RawConnection's `request`, `send` and `call`."""

    def __init__(self, context: zmq.Context, address: str) -> None:
        self.sock = context.socket(zmq.DEALER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.connect(address)
        self._opaque = 0

    def request(self, code: int, ext: dict[str, object] | None = None, body: bytes | None = None,
                **options: object) -> RemotingCommand:
        self._opaque += 1
        return RemotingCommand.request(code, ext, body, opaque=self._opaque, **options)  # type: ignore[arg-type]

    def send(self, *commands: RemotingCommand) -> None:
        for command in commands:
            self.sock.send(encode_msgpack(command))

    def call(self, command: RemotingCommand, timeout: float = 5.0) -> RemotingCommand:
        self.send(command)
        assert self.sock.poll(timeout * 1000), f"no answer over ZeroMQ to {command}"
        response = decode_msgpack(self.sock.recv())
        assert response.opaque == command.opaque and response.is_response, response
        return response


# ---- requests

@dataclass(frozen=True)
class Names:
    """What one case creates: nothing another case touches."""

    tag: str
    port: int = field(default_factory=lambda: next(_ports))

    @property
    def broker(self) -> str:
        return f"{self.tag}-broker"

    @property
    def addr(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def topics(self) -> tuple[str, str, str]:
        return f"{self.tag}-T1", f"{self.tag}-T2", f"{self.tag}-T3"

    @property
    def namespace(self) -> str:
        return f"{self.tag}-NS"

    keys = ("k1", "k2")


def call(conn, code: int, ext: dict[str, object] | None = None, body: bytes | None = None) -> RemotingCommand:
    """A request that must be answered SUCCESS; admin codes carry the token."""
    ext = dict(ext or {})
    if code in ADMIN_CODES:
        ext["adminToken"] = ADMIN_TOKEN
    answer = conn.call(conn.request(code, ext, body))
    assert answer.code == ResponseCode.SUCCESS, f"code {code} answered {answer.code}: {answer.remark}"
    return answer


def data_version(version: int) -> DataVersion:
    return DataVersion(version, 1_700_000_000_000 + version, 0)


def register(conn, n: Names, topics: tuple[str, ...], *, version: int = 1, queues: int = 4,
             **ext: object) -> RemotingCommand:
    table = {topic: TopicConfig(topic, queues, queues) for topic in topics}
    body = RegisterBrokerBody(TopicConfigSerializeWrapper(table, data_version(version))).encode()
    return call(conn, RequestCode.REGISTER_BROKER,
                {"brokerName": n.broker, "brokerAddr": n.addr, "clusterName": CLUSTER, "brokerId": 0,
                 "haServerAddr": n.addr, "bodyCrc32": zlib.crc32(body) & 0x7FFFFFFF, **ext}, body)


def broker_header(n: Names) -> dict[str, object]:
    return {"clusterName": CLUSTER, "brokerAddr": n.addr, "brokerName": n.broker, "brokerId": 0}


def put_kv(conn, n: Names, key: str, value: str) -> RemotingCommand:
    return call(conn, RequestCode.PUT_KV_CONFIG, {"namespace": n.namespace, "key": key, "value": value})


# ---- what a worker shows, through read-only requests

def route(conn, topic: str) -> dict | None:
    answer = conn.call(conn.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic}))
    if answer.code == ResponseCode.TOPIC_NOT_EXIST:
        return None
    assert answer.code == ResponseCode.SUCCESS, answer
    data = TopicRouteData.decode(answer.body)
    return {"queues": {q.broker_name: (q.read_queue_nums, q.write_queue_nums, q.perm) for q in data.queue_datas},
            "brokers": {b.broker_name: (b.cluster, dict(b.broker_addrs)) for b in data.broker_datas}}


def state(conn, n: Names) -> dict:
    """Everything of `n` a worker answers, and its whole config."""
    info = ClusterInfo.decode(call(conn, RequestCode.GET_BROKER_CLUSTER_INFO).body)
    topics = TopicList.decode(call(conn, RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER).body).topic_list
    kv_answer = conn.call(conn.request(RequestCode.GET_KVLIST_BY_NAMESPACE, {"namespace": n.namespace}))
    assert kv_answer.code in (ResponseCode.SUCCESS, ResponseCode.QUERY_NOT_FOUND), kv_answer
    keys = {}
    for key in n.keys:
        answer = conn.call(conn.request(RequestCode.GET_KV_CONFIG, {"namespace": n.namespace, "key": key}))
        assert answer.code in (ResponseCode.SUCCESS, ResponseCode.QUERY_NOT_FOUND), answer
        keys[key] = answer.ext_fields.get("value") if answer.code == ResponseCode.SUCCESS else None
    config = call(conn, RequestCode.GET_NAMESRV_CONFIG).body.decode()
    return {
        "routes": {topic: route(conn, topic) for topic in n.topics},
        "cluster": {name: (data.cluster, dict(data.broker_addrs))
                    for name, data in info.broker_addr_table.items() if name.startswith(n.tag)},
        "members": sorted(name for name in info.cluster_addr_table.get(CLUSTER, ()) if name.startswith(n.tag)),
        "topic list": sorted(topic for topic in topics if topic.startswith(n.tag)),
        "kv list": KVTable.decode(kv_answer.body).table if kv_answer.code == ResponseCode.SUCCESS else None,
        "kv": keys,
        "config": dict(line.split("=", 1) for line in config.splitlines() if "=" in line),
    }


def agreed_state(conns: list, n: Names, unlike: dict | None = None) -> dict:
    """The state every worker shows within AGREE_SECONDS, unlike `unlike` (if given) on every one."""
    seen: list[dict] = []

    def agreed() -> bool:
        seen[:] = [state(conn, n) for conn in conns]
        return all(s == seen[0] for s in seen) and (unlike is None or seen[0] != unlike)

    try:
        wait_until(agreed, AGREE_SECONDS, "every worker shows the same state")
    except AssertionError:
        shown = "\n".join(f"  worker {i}: {s}" for i, s in enumerate(seen))
        before = "" if unlike is None else f"\n  state before the write: {unlike}"
        raise AssertionError(f"the workers did not agree on a changed state within {AGREE_SECONDS} s:\n"
                             f"{shown}{before}") from None
    return seen[0]


# ---- one example per write code

@dataclass(frozen=True)
class StateExample:
    """`setup` (through the origin) what the write needs; `write` (answered SUCCESS) through the origin,
    seeing the state every worker agreed on before it; `shows` is true of (names, before, after) when
    every worker shows the write."""

    write: Callable[[object, Names, dict], object]
    shows: Callable[[Names, dict, dict], bool]
    setup: Callable[[object, Names], object] = lambda conn, n: None


@dataclass(frozen=True)
class LivenessExample:
    """A write that only refreshes a broker's liveness: `beat` once through the origin."""

    beat: Callable[[object, Names], None]


def query_data_version(conn, n: Names) -> None:
    answer = call(conn, RequestCode.QUERY_DATA_VERSION, broker_header(n), data_version(1).encode())
    assert answer.ext_fields.get("changed") == "false", answer


def broker_heartbeat(conn, n: Names) -> None:
    conn.send(conn.request(RequestCode.BROKER_HEARTBEAT, broker_header(n), oneway=True))  # as brokers send it


def flipped(before: dict) -> str:
    return "false" if before["config"]["orderMessageEnable"] == "true" else "true"


def two_topics(conn, n: Names) -> None:
    register(conn, n, n.topics[:2])


def wipe(conn, n: Names, *_: object) -> None:
    answer = call(conn, RequestCode.WIPE_WRITE_PERM_OF_BROKER, {"brokerName": n.broker})
    assert answer.ext_fields["wipeTopicCount"] == "2", answer


def register_topic(conn, n: Names, _: dict) -> None:
    body = (b'{"queueDatas":[{"brokerName":"%s","readQueueNums":2,"writeQueueNums":2,"perm":6,"topicSysFlag":0}],'
            b'"brokerDatas":[]}' % n.broker.encode())
    call(conn, RequestCode.REGISTER_TOPIC_IN_NAMESRV, {"topic": n.topics[2]}, body)


def perms(after: dict, topic: str) -> set[int]:
    return {perm for _, _, perm in after["routes"][topic]["queues"].values()}


EXAMPLES: dict[int, StateExample | LivenessExample] = {
    RequestCode.PUT_KV_CONFIG: StateExample(
        write=lambda conn, n, _: put_kv(conn, n, "k1", "v1"),
        shows=lambda n, _, after: (after["kv list"], after["kv"]) == ({"k1": "v1"}, {"k1": "v1", "k2": None})),
    RequestCode.DELETE_KV_CONFIG: StateExample(
        setup=lambda conn, n: (put_kv(conn, n, "k1", "v1"), put_kv(conn, n, "k2", "v2")),
        write=lambda conn, n, _: call(conn, RequestCode.DELETE_KV_CONFIG, {"namespace": n.namespace, "key": "k1"}),
        shows=lambda n, _, after: (after["kv list"], after["kv"]) == ({"k2": "v2"}, {"k1": None, "k2": "v2"})),
    # A new DataVersion changing the queue count and adding a topic (the first registration is the setup's).
    RequestCode.REGISTER_BROKER: StateExample(
        setup=two_topics,
        write=lambda conn, n, _: register(conn, n, n.topics, version=2, queues=8),
        shows=lambda n, _, after: after["topic list"] == list(n.topics) and all(
            after["routes"][topic]["queues"] == {n.broker: (8, 8, PERM_READ | PERM_WRITE)} for topic in n.topics)),
    RequestCode.UNREGISTER_BROKER: StateExample(
        setup=two_topics,
        write=lambda conn, n, _: call(conn, RequestCode.UNREGISTER_BROKER, broker_header(n)),
        shows=lambda n, _, after: (after["cluster"], after["members"], after["topic list"]) == ({}, [], [])),
    RequestCode.WIPE_WRITE_PERM_OF_BROKER: StateExample(
        setup=two_topics,
        write=wipe,
        shows=lambda n, _, after: all(perms(after, topic) == {PERM_READ} for topic in n.topics[:2])),
    RequestCode.ADD_WRITE_PERM_OF_BROKER: StateExample(
        setup=lambda conn, n: (two_topics(conn, n), wipe(conn, n)),
        write=lambda conn, n, _: call(conn, RequestCode.ADD_WRITE_PERM_OF_BROKER, {"brokerName": n.broker}),
        shows=lambda n, _, after: all(perms(after, topic) == {PERM_READ | PERM_WRITE} for topic in n.topics[:2])),
    RequestCode.DELETE_TOPIC_IN_NAMESRV: StateExample(
        setup=two_topics,
        write=lambda conn, n, _: call(conn, RequestCode.DELETE_TOPIC_IN_NAMESRV,
                                      {"topic": n.topics[0], "clusterName": CLUSTER}),
        shows=lambda n, _, after: after["routes"][n.topics[0]] is None and after["topic list"] == [n.topics[1]]),
    RequestCode.REGISTER_TOPIC_IN_NAMESRV: StateExample(
        setup=two_topics,
        write=register_topic,
        shows=lambda n, _, after: after["topic list"] == list(n.topics)
        and after["routes"][n.topics[2]]["queues"] == {n.broker: (2, 2, PERM_READ | PERM_WRITE)}),
    RequestCode.UPDATE_NAMESRV_CONFIG: StateExample(
        write=lambda conn, n, before: call(conn, RequestCode.UPDATE_NAMESRV_CONFIG,
                                           body=f"orderMessageEnable={flipped(before)}\n".encode()),
        shows=lambda n, before, after: after["config"] == {**before["config"], "orderMessageEnable": flipped(before)}),
    RequestCode.QUERY_DATA_VERSION: LivenessExample(query_data_version),
    RequestCode.BROKER_HEARTBEAT: LivenessExample(broker_heartbeat),
}


def test_every_write_code_has_an_example() -> None:
    """The parametrization below is the request table's: a write row without an example fails here."""
    assert sorted(EXAMPLES) == sorted(WRITE_CODES), (
        f"write codes without an example: {sorted(WRITE_CODES - set(EXAMPLES))}; "
        f"examples of codes that do not write: {sorted(set(EXAMPLES) - WRITE_CODES)}")


@pytest.mark.parametrize("origin", [0, 1, "zmq"], ids=["via-first-worker", "via-second-worker", "via-zmq"])
@pytest.mark.parametrize("code", sorted(WRITE_CODES))
def test_a_write_reaches_every_worker(server, conns, raw_connect, zmq_context, code: int, origin: int | str) -> None:
    """Setup and write through one worker's connection (or the ZeroMQ endpoint); every worker read back."""
    example = EXAMPLES.get(code)
    if example is None:
        pytest.fail(f"write code {code} ({RequestCode(code).name}) has no example in {__name__}.EXAMPLES")
    via = conns[origin] if isinstance(origin, int) else ZmqConnection(zmq_context, server.zmq_address)
    n = Names(f"c{code}o{origin}")
    if isinstance(example, StateExample):
        example.setup(via, n)
        before = agreed_state(conns, n)
        example.write(via, n, before)
        after = agreed_state(conns, n, unlike=before)
        assert example.shows(n, before, after), f"every worker shows a state, not the write's:\n{before}\n-> {after}"
    else:
        keep_alive(server, conns, raw_connect, via, n, example)


def keep_alive(server, conns: list, raw_connect, via, n: Names, example: LivenessExample) -> None:
    """Two brokers with the same timeout: one kept alive through `via` only, the other (the control)
    registered after it and silent. Once the control has expired on every worker, the timeout has
    passed since the kept broker registered: a worker that missed the refreshes would have expired it."""
    control = Names(f"{n.tag}-control")
    register(via, n, n.topics[:2], heartbeatTimeoutMillis=HEARTBEAT_TIMEOUT_MS)
    register(raw_connect(server.address), control, control.topics[:2],  # its own connection: expiry closes it
             heartbeatTimeoutMillis=HEARTBEAT_TIMEOUT_MS)

    def brokers(conn) -> set[str]:
        info = ClusterInfo.decode(call(conn, RequestCode.GET_BROKER_CLUSTER_INFO).body)
        return {name for name in info.broker_addr_table if name in (n.broker, control.broker)}

    wait_until(lambda: all(brokers(conn) == {n.broker, control.broker} for conn in conns), AGREE_SECONDS,
               "both brokers registered on every worker")
    started = time.monotonic()
    while True:
        example.beat(via, n)
        seen = [brokers(conn) for conn in conns]
        for index, names in enumerate(seen):
            assert n.broker in names, (f"the kept broker expired on worker {index} after "
                                       f"{time.monotonic() - started:.2f} s (refreshed through {n.tag})")
        if all(names == {n.broker} for names in seen):
            return  # the control expired on every worker, the kept one on none
        assert time.monotonic() - started < HEARTBEAT_TIMEOUT_MS / 1000 + AGREE_SECONDS, (
            f"the control broker never expired: {seen}")
        time.sleep(BEAT_SECONDS)


@pytest.mark.parametrize("code", sorted(ADMIN_CODES & WRITE_CODES))  # EXPLAIN_ROUTE, a read: tests/test_route_history.py
def test_an_admin_write_without_the_token_is_refused_on_every_worker(conns, code: int) -> None:
    """Refused alike everywhere: a later write through the same worker is applied after it in the log,
    so once that one shows on every worker, the refused one changed nothing anywhere."""
    example = EXAMPLES[code]
    assert isinstance(example, StateExample)
    n = Names(f"refused{code}")
    example.setup(conns[0], n)
    before = agreed_state(conns, n)
    tokenless = _TokenlessConnection(conns[0])
    with pytest.raises(AssertionError):
        example.write(tokenless, n, before)
    assert tokenless.answers[-1].code == ResponseCode.NO_PERMISSION, tokenless.answers[-1]
    put_kv(conns[0], n, "k2", "after the refusal")
    expected = {**before, "kv list": {**(before["kv list"] or {}), "k2": "after the refusal"},
                "kv": {**before["kv"], "k2": "after the refusal"}}
    assert agreed_state(conns, n, unlike=before) == expected


class _TokenlessConnection:
    """A connection whose requests lose the admin token on the way (and that keeps its answers)."""

    def __init__(self, conn) -> None:
        self._conn = conn
        self.answers: list[RemotingCommand] = []

    def request(self, code: int, ext: dict[str, object] | None = None, body: bytes | None = None,
                **options: object) -> RemotingCommand:
        ext = {key: value for key, value in (ext or {}).items() if key != "adminToken"}
        return self._conn.request(code, ext, body, **options)

    def call(self, command: RemotingCommand, timeout: float = 5.0) -> RemotingCommand:
        self.answers.append(self._conn.call(command, timeout))
        return self.answers[-1]
