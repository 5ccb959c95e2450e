"""Wire compatibility end to end: a real namesrv process on 127.0.0.1, raw TCP, bytes checked as a
RocketMQ peer sees them (reference sections 1, 2 and 4)."""
from __future__ import annotations

import json
import time
import zlib
from collections.abc import Callable

import pytest

from namesrv.protocol import (
    ClusterInfo,
    DataVersion,
    KVTable,
    LanguageCode,
    RegisterBrokerBody,
    RemotingCommand,
    RequestCode,
    ResponseCode,
    SerializeType,
    TopicConfig,
    TopicConfigSerializeWrapper,
    TopicRouteData,
    Version,
)
from namesrv.protocol.codes import FLAG_RESPONSE

CLUSTER = "WireCluster"
MASTER_ADDR, MASTER_HA = "127.0.0.1:10911", "127.0.0.1:10912"
SLAVE_ADDR, SLAVE_HA = "127.0.0.1:20911", "127.0.0.1:20912"
OVERLOAD = "[OVERLOAD]system busy, start flow control for a while"


def topic_body(*topics: tuple[str, int]) -> bytes:
    table = {name: TopicConfig(name, queues, queues) for name, queues in topics}
    return RegisterBrokerBody(TopicConfigSerializeWrapper(table, DataVersion(1, 1_700_000_000_000, 0))).encode()


def register(conn, broker_id: int = 0, addr: str = MASTER_ADDR, ha: str = MASTER_HA, name: str = "broker-a",
             topics: tuple[tuple[str, int], ...] = (("TopicA", 4), ("TopicB", 2)), **ext: object) -> RemotingCommand:
    body = topic_body(*topics)
    header = {"brokerName": name, "brokerAddr": addr, "clusterName": CLUSTER, "haServerAddr": ha,
              "brokerId": broker_id, "bodyCrc32": zlib.crc32(body) & 0x7FFFFFFF, **ext}
    return conn.call(conn.request(RequestCode.REGISTER_BROKER, header, body))


def route(conn, topic: str, **options: object) -> RemotingCommand:
    return conn.call(conn.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic}, **options))


def wait_until(condition: Callable[[], bool], timeout: float, what: str) -> float:
    started = time.monotonic()
    while not condition():
        if time.monotonic() - started > timeout:
            raise AssertionError(f"not within {timeout} s: {what}")
        time.sleep(0.02)
    return time.monotonic() - started


@pytest.fixture
def namesrv(namesrv_factory):
    return namesrv_factory()


def test_master_and_slave_register_and_the_slave_learns_its_master(namesrv, raw_connect) -> None:
    master, slave, admin = raw_connect(namesrv.address), raw_connect(namesrv.address), raw_connect(namesrv.address)
    answer = register(master)
    assert (answer.code, answer.remark, answer.ext_fields, answer.body) == (ResponseCode.SUCCESS, None, {}, None)
    answer = register(slave, 1, SLAVE_ADDR, SLAVE_HA)
    assert answer.code == ResponseCode.SUCCESS
    assert answer.ext_fields == {"masterAddr": MASTER_ADDR, "haServerAddr": MASTER_HA}

    info = admin.call(admin.request(RequestCode.GET_BROKER_CLUSTER_INFO))
    assert info.code == ResponseCode.SUCCESS and info.ext_fields is None
    assert b'"brokerAddrs":{0:"127.0.0.1:10911",1:"127.0.0.1:20911"}' in info.body  # legacy JSON, always
    decoded = ClusterInfo.decode(info.body)
    assert decoded.cluster_addr_table == {CLUSTER: ["broker-a"]}
    assert decoded.broker_addr_table["broker-a"].broker_addrs == {0: MASTER_ADDR, 1: SLAVE_ADDR}
    namesrv.wait_for_log(r"new broker registered: broker-a\[1\] 127\.0\.0\.1:20911")


@pytest.mark.parametrize("serialize_type", [SerializeType.JSON, SerializeType.ROCKETMQ])
def test_route_query_is_answered_in_the_callers_codec(namesrv, raw_connect, serialize_type: int) -> None:
    broker, client = raw_connect(namesrv.address), raw_connect(namesrv.address)
    register(broker)
    answer = route(client, "TopicA", serialize_type=serialize_type)
    assert answer.serialize_type == serialize_type
    assert (answer.code, answer.flag, answer.language, answer.version) == (
        ResponseCode.SUCCESS, FLAG_RESPONSE, LanguageCode.JAVA, Version.V5_3_3)
    decoded = TopicRouteData.decode(answer.body)
    assert [(q.broker_name, q.read_queue_nums, q.write_queue_nums, q.perm) for q in decoded.queue_datas] == [
        ("broker-a", 4, 4, 6)]
    assert [(b.broker_name, b.broker_addrs) for b in decoded.broker_datas] == [("broker-a", {0: MASTER_ADDR})]
    missing = route(client, "NoSuchTopic", serialize_type=serialize_type)
    assert missing.serialize_type == serialize_type
    assert missing.code == ResponseCode.TOPIC_NOT_EXIST
    assert missing.remark.startswith("No topic route info in name server for the topic: NoSuchTopic")


def test_codecs_mixed_on_one_connection_are_each_answered_in_kind(namesrv, raw_connect) -> None:
    conn = raw_connect(namesrv.address)
    requests = [conn.request(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER,
                             serialize_type=SerializeType.ROCKETMQ if i % 2 else SerializeType.JSON)
                for i in range(200)]
    conn.send(*requests)
    answers = {answer.opaque: answer for answer in (conn.recv() for _ in requests)}
    assert sorted(answers) == [r.opaque for r in requests]
    for request in requests:
        assert answers[request.opaque].serialize_type == request.serialize_type
        assert answers[request.opaque].code == ResponseCode.SUCCESS


def test_route_json_flavour_follows_the_request_version(namesrv, raw_connect) -> None:
    broker, client = raw_connect(namesrv.address), raw_connect(namesrv.address)
    register(broker)
    register(raw_connect(namesrv.address), 1, SLAVE_ADDR, SLAVE_HA)
    legacy = route(client, "TopicA", version=Version.V4_6_0)  # what rocketmq-client-cpp sends
    assert b'"brokerAddrs":{0:"127.0.0.1:10911",1:"127.0.0.1:20911"}' in legacy.body
    with pytest.raises(json.JSONDecodeError):
        json.loads(legacy.body)
    standard = route(client, "TopicA", version=Version.V4_9_4)
    assert json.loads(standard.body)["brokerDatas"][0]["brokerAddrs"] == {"0": MASTER_ADDR, "1": SLAVE_ADDR}
    asked = client.call(client.request(RequestCode.GET_ROUTEINFO_BY_TOPIC,
                                       {"topic": "TopicA", "acceptStandardJsonOnly": True}, version=Version.V4_6_0))
    assert asked.body == standard.body
    assert TopicRouteData.decode(legacy.body) == TopicRouteData.decode(standard.body)


def test_crc_mismatch_is_refused_and_registers_nothing(namesrv, raw_connect) -> None:
    conn = raw_connect(namesrv.address)
    body = topic_body(("TopicA", 4), ("TopicB", 4))
    good = zlib.crc32(body) & 0x7FFFFFFF
    header = {"brokerName": "broker-a", "brokerAddr": MASTER_ADDR, "clusterName": CLUSTER, "haServerAddr": MASTER_HA,
              "brokerId": 0, "bodyCrc32": good ^ 1}
    answer = conn.call(conn.request(RequestCode.REGISTER_BROKER, header, body))
    assert (answer.code, answer.remark, answer.ext_fields) == (ResponseCode.SYSTEM_ERROR, "crc32 not match", {})
    assert route(conn, "TopicA").code == ResponseCode.TOPIC_NOT_EXIST
    answer = conn.call(conn.request(RequestCode.REGISTER_BROKER, {**header, "bodyCrc32": good}, body))
    assert answer.code == ResponseCode.SUCCESS
    assert route(conn, "TopicA").code == ResponseCode.SUCCESS


def test_oneway_requests_are_processed_and_never_answered(namesrv, raw_connect) -> None:
    conn = raw_connect(namesrv.address)
    conn.send(conn.request(RequestCode.PUT_KV_CONFIG, {"namespace": "NS", "key": "k", "value": "v"}, oneway=True))
    gets: set[int] = set()

    def stored() -> bool:
        request = conn.request(RequestCode.GET_KV_CONFIG, {"namespace": "NS", "key": "k"})
        gets.add(request.opaque)
        answer = conn.call(request)  # asserts the next frame answers this very request
        return answer.code == ResponseCode.SUCCESS and answer.ext_fields == {"value": "v"}

    wait_until(stored, 5, "the oneway PUT_KV_CONFIG applied")
    heartbeat = conn.request(RequestCode.BROKER_HEARTBEAT, {"clusterName": CLUSTER, "brokerAddr": MASTER_ADDR,
                                                            "brokerName": "broker-a"}, oneway=True)
    conn.send(heartbeat)
    assert conn.call(conn.request(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER)).code == ResponseCode.SUCCESS


def test_unknown_code_is_answered_request_code_not_supported(namesrv, raw_connect) -> None:
    conn = raw_connect(namesrv.address)
    for serialize_type in (SerializeType.JSON, SerializeType.ROCKETMQ):
        answer = conn.call(conn.request(999, serialize_type=serialize_type))
        assert (answer.code, answer.remark, answer.serialize_type) == (
            ResponseCode.REQUEST_CODE_NOT_SUPPORTED, " request type 999 not supported", serialize_type)
    namesrv.wait_for_log(r"\[NettyServerPublicExecutor_\d+\] .*request code 999 from tcp:127\.0\.0\.1:\d+ not supported")


def test_a_response_sent_to_the_server_is_dropped(namesrv, raw_connect) -> None:
    conn = raw_connect(namesrv.address)
    stray = RemotingCommand(ResponseCode.SUCCESS, opaque=4242, flag=FLAG_RESPONSE)
    conn.send(stray)
    answer = conn.call(conn.request(RequestCode.GET_BROKER_CLUSTER_INFO))
    assert answer.code == ResponseCode.SUCCESS  # the stray got no reply: this is the very next frame


def test_kv_round_trip_survives_a_restart(namesrv_factory, raw_connect, tmp_path) -> None:
    kv_path = tmp_path / "kv" / "kvConfig.json"
    first = namesrv_factory(kvConfigPath=kv_path)
    conn = raw_connect(first.address)
    for key, value in (("k1", "v1"), ("k2", "v2"), ("gone", "x")):
        put = conn.call(conn.request(RequestCode.PUT_KV_CONFIG, {"namespace": "NS", "key": key, "value": value}))
        assert (put.code, put.ext_fields) == (ResponseCode.SUCCESS, None)
    assert conn.call(conn.request(RequestCode.DELETE_KV_CONFIG, {"namespace": "NS", "key": "gone"})).code == 0
    got = conn.call(conn.request(RequestCode.GET_KV_CONFIG, {"namespace": "NS", "key": "k1"},
                                 serialize_type=SerializeType.ROCKETMQ))
    assert (got.code, got.ext_fields) == (ResponseCode.SUCCESS, {"value": "v1"})
    missing = conn.call(conn.request(RequestCode.GET_KV_CONFIG, {"namespace": "NS", "key": "gone"}))
    assert (missing.code, missing.remark, missing.ext_fields) == (
        ResponseCode.QUERY_NOT_FOUND, "No config item, Namespace: NS Key: gone", {})
    listed = conn.call(conn.request(RequestCode.GET_KVLIST_BY_NAMESPACE, {"namespace": "NS"}))
    assert KVTable.decode(listed.body).table == {"k1": "v1", "k2": "v2"}

    assert first.stop() == 0
    assert json.loads(kv_path.read_text()) == {"configTable": {"NS": {"k1": "v1", "k2": "v2"}}}
    second = namesrv_factory(kvConfigPath=kv_path)
    conn = raw_connect(second.address)
    listed = conn.call(conn.request(RequestCode.GET_KVLIST_BY_NAMESPACE, {"namespace": "NS"}))
    assert KVTable.decode(listed.body).table == {"k1": "v1", "k2": "v2"}


def test_closing_the_broker_connection_removes_the_broker_at_once(namesrv, raw_connect) -> None:
    broker, client = raw_connect(namesrv.address), raw_connect(namesrv.address)
    register(broker)
    register(raw_connect(namesrv.address), name="broker-b", addr="127.0.0.1:30911", ha="127.0.0.1:30912")
    assert route(client, "TopicA").code == ResponseCode.SUCCESS
    broker_port = broker.sock.getsockname()[1]
    broker.close()
    # at once: no expiry is involved (the broker's timeout is the default 120 s)
    wait_until(lambda: [b.broker_name for b in TopicRouteData.decode(route(client, "TopicA").body).broker_datas]
               == ["broker-b"], 2, "broker-a removed")
    namesrv.wait_for_log(rf"channel closed: broker broker-a\[0\] 127\.0\.0\.1:10911 .*127\.0\.0\.1:{broker_port}")


def test_a_silent_broker_expires_after_its_own_heartbeat_timeout(namesrv_factory, raw_connect) -> None:
    """broker-a registers and falls silent; broker-b, registered after it with the same 2-s timeout, keeps
    beating every 0.1 s (a stall of the beats up to nearly 2 s, on a busy machine, is harmless)."""
    namesrv = namesrv_factory(scanNotActiveBrokerInterval=100)
    silent, beating, client = (raw_connect(namesrv.address) for _ in range(3))
    registered = time.monotonic()
    register(silent, heartbeatTimeoutMillis=2000)
    register(beating, name="broker-b", addr="127.0.0.1:30911", ha="127.0.0.1:30912", heartbeatTimeoutMillis=2000)

    def brokers() -> list[str]:
        answer = route(client, "TopicA")
        return [] if answer.code else sorted(b.broker_name for b in TopicRouteData.decode(answer.body).broker_datas)

    started = time.monotonic()
    while brokers() == ["broker-a", "broker-b"]:
        beating.send(beating.request(RequestCode.BROKER_HEARTBEAT, {"clusterName": CLUSTER, "brokerName": "broker-b",
                                                                    "brokerAddr": "127.0.0.1:30911"}, oneway=True))
        assert time.monotonic() - started < 20, "broker-a did not expire"
        time.sleep(0.1)
    assert brokers() == ["broker-b"]
    assert time.monotonic() - registered >= 2.0  # not before its own timeout, counted from its registration
    assert silent.closed_by_server(2)  # the expired broker's connection is closed, as RocketMQ does
    namesrv.wait_for_log(r"expired: broker broker-a\[0\] 127\.0\.0\.1:10911")
    namesrv.wait_for_log(r"closed tcp connection 127\.0\.0\.1:\d+: broker 127\.0\.0\.1:10911 expired")


def test_idle_connections_are_closed_and_their_brokers_removed(namesrv_factory, raw_connect) -> None:
    namesrv = namesrv_factory(serverChannelMaxIdleTimeSeconds=1)
    broker = raw_connect(namesrv.address)
    register(broker)
    started = time.monotonic()
    assert broker.closed_by_server(5)
    assert 0.9 <= time.monotonic() - started < 3.5
    namesrv.wait_for_log(r"closed tcp connection 127\.0\.0\.1:\d+: idle for 1 s")
    client = raw_connect(namesrv.address)
    assert route(client, "TopicA").code == ResponseCode.TOPIC_NOT_EXIST


def test_a_full_queue_answers_system_busy_and_every_request_is_answered(namesrv_factory, raw_connect) -> None:
    namesrv = namesrv_factory(clientRequestThreadPoolNums=1, clientRequestThreadPoolQueueCapacity=1)
    conn = raw_connect(namesrv.address)
    requests = [conn.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": f"T{i}"}) for i in range(500)]
    conn.send(*requests)
    answers = [conn.recv() for _ in requests]
    assert sorted(a.opaque for a in answers) == [r.opaque for r in requests]
    busy = [a for a in answers if a.code == ResponseCode.SYSTEM_BUSY]
    assert busy and all(a.remark == OVERLOAD for a in busy)
    assert {a.code for a in answers} == {ResponseCode.SYSTEM_BUSY, ResponseCode.TOPIC_NOT_EXIST}
    namesrv.wait_for_log(r"ClientRequestExecutorThread queue full \(1\): \d+ requests refused with SYSTEM_BUSY")
    # other codes run on the default pool, which is not full
    assert conn.call(conn.request(RequestCode.GET_BROKER_CLUSTER_INFO)).code == ResponseCode.SUCCESS


def test_oneway_requests_over_the_in_flight_bound_are_dropped(namesrv_factory, raw_connect) -> None:
    namesrv = namesrv_factory(serverOnewaySemaphoreValue=1, defaultThreadPoolNums=1)
    conn = raw_connect(namesrv.address)
    puts = [conn.request(RequestCode.PUT_KV_CONFIG, {"namespace": "NS", "key": f"k{i}", "value": "v"}, oneway=True)
            for i in range(300)]
    conn.send(*puts)
    namesrv.wait_for_log(r"oneway requests over the in-flight bound: \d+ dropped so far")

    def count() -> int:
        answer = conn.call(conn.request(RequestCode.GET_KVLIST_BY_NAMESPACE, {"namespace": "NS"}))
        return len(KVTable.decode(answer.body).table) if answer.code == ResponseCode.SUCCESS else 0

    time.sleep(0.5)  # let the accepted ones finish
    applied = count()
    assert 1 <= applied < len(puts)  # some applied, the rest dropped
    time.sleep(0.3)
    assert count() == applied  # and nothing was merely late; no frame answered a oneway (call() checks opaques)
