"""RequestProcessor: every NameServer request code, answered as RocketMQ answers it (reference 2).

Requests and responses go through the real frame codec (both header codecs), so what is checked
is what a client would read off the wire.
"""
from __future__ import annotations

import itertools
import zlib

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from namesrv.channel import Channel
from namesrv.config import NamesrvConfig
from namesrv import fastpath
from namesrv.fastpath import body_crc32
from namesrv.kvconfig import ORDER_TOPIC_CONFIG, KVConfigManager
from namesrv.processor import RESPONSE_HEADER_CODES, SUPPORTED_CODES, RequestProcessor
from namesrv.processor.requests import POOL_OF
from namesrv.protocol import (
    ClusterInfo,
    DataVersion,
    KVTable,
    QueueData,
    RegisterBrokerBody,
    RemotingCommand,
    RequestCode,
    ResponseCode,
    SerializeType,
    TopicConfig,
    TopicConfigSerializeWrapper,
    TopicList,
    TopicRouteData,
)
from namesrv.protocol.codes import FLAG_UNIT, FLAG_UNIT_SUB, PERM_READ, PERM_WRITE
from namesrv.protocol.topic import decode_registration
from namesrv.routeinfo import Registrant, RouteInfoManager

START = 1_700_000_000_000
BROKER = Channel("tcp", b"broker-1", "10.0.0.1:50000")
CLIENT = Channel("tcp", b"client-1", "10.0.0.100:50000")
_opaque = itertools.count(1)

#: The request codes of the reference (section 2.3), all of which must have a handler.
REFERENCE_CODES = {100, 101, 102, 103, 104, 105, 106, 205, 206, 216, 217, 219, 224, 304, 311, 312, 313, 318, 319,
                   322, 327, 901, 904}


class Clock:
    def __init__(self) -> None:
        self.now = START

    def __call__(self) -> int:
        return self.now


class Wire:
    """A response as the client decodes it, plus its raw header bytes (to see `"extFields":{}`)."""

    def __init__(self, command: RemotingCommand, raw_header: bytes) -> None:
        self.command = command
        self.raw_header = raw_header

    def __getattr__(self, name: str):
        return getattr(self.command, name)


def registration_body(topics, counter: int) -> bytes:
    """A JSON REGISTER_BROKER body of `topics` (names, or TopicConfigs) at DataVersion `counter`."""
    table = {t.topic_name if isinstance(t, TopicConfig) else t: t if isinstance(t, TopicConfig)
             else TopicConfig(t, 4, 4) for t in topics}
    return RegisterBrokerBody(TopicConfigSerializeWrapper(table, DataVersion(counter, START, 0)), []).encode()


class Namesrv:
    """A processor over real tables and a real KV file, driven through the wire codec."""

    def __init__(self, tmp_path, **config) -> None:
        self.clock = Clock()
        self.config = NamesrvConfig(kv_config_path=str(tmp_path / "kvConfig.json"),
                                    config_store_path=str(tmp_path / "namesrv.properties"), **config)
        self.routes = RouteInfoManager(self.config, clock=self.clock)
        self.kv = KVConfigManager(self.config.kv_config_path)
        self.kv.load()
        self.processor = RequestProcessor(self.config, self.routes, self.kv, clock=self.clock)

    def call(self, code: int, ext: dict | None = None, body: bytes | None = None, *, version: int = 479,
             serialize_type: int = SerializeType.JSON, channel: Channel = CLIENT, oneway: bool = False):
        request = RemotingCommand.request(code, ext, body, opaque=next(_opaque), version=version,
                                          serialize_type=serialize_type, oneway=oneway)
        received = RemotingCommand.decode(request.encode()[4:])
        response = self.processor.process(received, channel)
        frame = response.encode()[4:]
        wire = RemotingCommand.decode(frame)
        assert wire.is_response and wire.opaque == request.opaque
        return Wire(wire, frame[4:4 + (int.from_bytes(frame[:4], "big") & 0xFFFFFF)])

    def register(self, name="broker-a", addr="10.0.0.1:10911", broker_id=0, topics=("T1", "T2"), cluster="C",
                 counter=1, channel=BROKER, **ext):
        body = registration_body(topics, counter)
        header = {"brokerName": name, "brokerAddr": addr, "clusterName": cluster,
                  "haServerAddr": addr.replace("10911", "10912"), "brokerId": broker_id,
                  "bodyCrc32": body_crc32(body)} | ext
        return self.call(RequestCode.REGISTER_BROKER, header, body, channel=channel)


@pytest.fixture
def ns(tmp_path) -> Namesrv:
    return Namesrv(tmp_path)


def route_of(response) -> dict:
    assert response.code == ResponseCode.SUCCESS, response.remark
    return orjson.loads(response.body)


def test_every_reference_code_has_a_handler():
    push = {RequestCode.SUBSCRIBE_ROUTE_CHANGES, RequestCode.UNSUBSCRIBE_ROUTE_CHANGES}  # namesrv's own
    assert SUPPORTED_CODES == REFERENCE_CODES | push | {RequestCode.EXPLAIN_ROUTE}
    assert {code for code, pool in POOL_OF.items() if pool == "client"} == {RequestCode.GET_ROUTEINFO_BY_TOPIC, *push}
    assert RESPONSE_HEADER_CODES == {101, 103, 205, 322, 327}


def test_unknown_code_is_answered_not_supported(ns):
    response = ns.call(9999, {"topic": "T"})
    assert response.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
    assert response.remark == " request type 9999 not supported"
    assert response.ext_fields is None and b"extFields" not in response.raw_header
    assert ns.call(RequestCode.NOTIFY_MIN_BROKER_ID_CHANGE).code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED


# ---------------------------------------------------------------- KV codes (100, 101, 102, 219)


def test_put_get_delete_kv_config(ns):
    assert ns.call(RequestCode.PUT_KV_CONFIG, {"namespace": "NS", "key": "k", "value": "v"}).code == 0
    got = ns.call(RequestCode.GET_KV_CONFIG, {"namespace": "NS", "key": "k"})
    assert (got.code, got.ext_fields, got.remark) == (0, {"value": "v"}, None)
    deleted = ns.call(RequestCode.DELETE_KV_CONFIG, {"namespace": "NS", "key": "k"})
    assert deleted.code == 0 and deleted.ext_fields is None
    missing = ns.call(RequestCode.GET_KV_CONFIG, {"namespace": "NS", "key": "k"})
    assert missing.code == ResponseCode.QUERY_NOT_FOUND
    assert missing.remark == "No config item, Namespace: NS Key: k"
    assert b'"extFields":{}' in missing.raw_header  # a response-header code: ext present even on error
    assert orjson.loads(open(ns.config.kv_config_path, "rb").read()) == {"configTable": {"NS": {}}}


def test_put_kv_config_without_namespace_or_key_is_refused(ns):
    for ext in ({"key": "k", "value": "v"}, {"namespace": "NS", "value": "v"}):
        response = ns.call(RequestCode.PUT_KV_CONFIG, ext)
        assert (response.code, response.remark) == (ResponseCode.SYSTEM_ERROR, "namespace or key is null")
        assert response.ext_fields is None


def test_kv_value_missing_or_binary_empty_is_stored_as_null(ns):
    ns.call(RequestCode.PUT_KV_CONFIG, {"namespace": "NS", "key": "a"})
    ns.call(RequestCode.PUT_KV_CONFIG, {"namespace": "NS", "key": "b", "value": ""},
            serialize_type=SerializeType.ROCKETMQ)  # binary: an empty string is null
    for key in ("a", "b"):
        assert ns.call(RequestCode.GET_KV_CONFIG, {"namespace": "NS", "key": key}).code == ResponseCode.QUERY_NOT_FOUND
    empty_key = ns.call(RequestCode.PUT_KV_CONFIG, {"namespace": "NS", "key": "", "value": "v"},
                        serialize_type=SerializeType.ROCKETMQ)
    assert empty_key.remark == "namespace or key is null"


def test_get_kv_config_without_fields_names_null_like_java(ns):
    response = ns.call(RequestCode.GET_KV_CONFIG, {})
    assert response.remark == "No config item, Namespace: null Key: null"


def test_get_kvlist_by_namespace(ns):
    ns.call(RequestCode.PUT_KV_CONFIG, {"namespace": "NS", "key": "k1", "value": "v1"})
    ns.call(RequestCode.PUT_KV_CONFIG, {"namespace": "NS", "key": "k2", "value": "v2"})
    listed = ns.call(RequestCode.GET_KVLIST_BY_NAMESPACE, {"namespace": "NS"})
    assert listed.code == 0 and KVTable.decode(listed.body).table == {"k1": "v1", "k2": "v2"}
    missing = ns.call(RequestCode.GET_KVLIST_BY_NAMESPACE, {"namespace": "Nope"})
    assert (missing.code, missing.remark) == (ResponseCode.QUERY_NOT_FOUND, "No config item, Namespace: Nope")
    assert missing.ext_fields is None


# ---------------------------------------------------------------- REGISTER_BROKER (103)


def test_register_master_then_slave(ns):
    master = ns.register()
    assert (master.code, master.ext_fields, master.body) == (0, {}, None)
    assert b'"extFields":{}' in master.raw_header
    slave = ns.register(addr="10.0.0.2:10911", broker_id=1, channel=Channel("tcp", b"broker-2"))
    assert slave.ext_fields == {"haServerAddr": "10.0.0.1:10912", "masterAddr": "10.0.0.1:10911"}


def test_register_returns_the_order_topic_table(ns):
    ns.call(RequestCode.PUT_KV_CONFIG, {"namespace": ORDER_TOPIC_CONFIG, "key": "T1", "value": "broker-a:4"})
    assert KVTable.decode(ns.register().body).table == {"T1": "broker-a:4"}
    ns.config.return_order_topic_config_to_broker = False
    assert ns.register().body is None


def test_register_binary_header_and_every_body_form(ns):
    wrapper = TopicConfigSerializeWrapper({"A": TopicConfig("A", 2, 2), "B": TopicConfig("B", 2, 2)},
                                          DataVersion(1, START, 0))
    base = {"brokerName": "b", "brokerAddr": "10.0.0.5:10911", "clusterName": "C", "brokerId": "0"}
    compressed = RegisterBrokerBody(wrapper, []).encode(compressed=True)
    response = ns.call(RequestCode.REGISTER_BROKER, base | {"compressed": "TRUE"}, compressed,
                       serialize_type=SerializeType.ROCKETMQ, channel=BROKER)
    assert response.code == 0, response.remark
    assert route_of(ns.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "A"}))["queueDatas"][0]["readQueueNums"] == 2
    old = ns.call(RequestCode.REGISTER_BROKER, base | {"brokerName": "old", "brokerAddr": "10.0.0.6:10911"},
                  wrapper.encode(), version=36, channel=BROKER)  # pre-3.0.11 broker: bare wrapper
    assert old.code == 0, old.remark
    empty = ns.call(RequestCode.REGISTER_BROKER, base | {"brokerName": "none", "brokerAddr": "10.0.0.7:10911"},
                    channel=BROKER)  # no body: an empty topic table
    assert empty.code == 0
    assert "none" in ClusterInfo.decode(ns.call(RequestCode.GET_BROKER_CLUSTER_INFO).body).broker_addr_table


def test_register_crc_mismatch(ns):
    body = RegisterBrokerBody(TopicConfigSerializeWrapper({"A": TopicConfig("A"), "B": TopicConfig("B")})).encode()
    header = {"brokerName": "b", "brokerAddr": "10.0.0.5:10911", "clusterName": "C", "brokerId": "0"}
    for crc in (body_crc32(body) ^ 1, -5):
        response = ns.call(RequestCode.REGISTER_BROKER, header | {"bodyCrc32": crc}, body)
        assert (response.code, response.remark) == (ResponseCode.SYSTEM_ERROR, "crc32 not match")
        assert b'"extFields":{}' in response.raw_header
    assert ns.call(RequestCode.REGISTER_BROKER, header | {"bodyCrc32": "0"}, body).code == 0  # 0 = unchecked
    assert ns.routes.snapshot().broker_addr_table["b"].broker_addrs == {0: "10.0.0.5:10911"}


@pytest.mark.parametrize("field, value, remark", [
    ("brokerId", "abc", "request header field brokerId is not a valid Long: 'abc'"),
    ("brokerId", " 1", "request header field brokerId is not a valid Long: ' 1'"),
    ("brokerId", "9223372036854775808", "request header field brokerId is not a valid Long: '9223372036854775808'"),
    ("bodyCrc32", "2147483648", "request header field bodyCrc32 is not a valid Integer: '2147483648'"),
    ("brokerId", "1" * 40000, f"request header field brokerId is not a valid Long: {'1' * 64!r}"),  # past int()'s limit
    ("heartbeatTimeoutMillis", "10s", "request header field heartbeatTimeoutMillis is not a valid Long: '10s'"),
    ("brokerName", None, "missing request header field: brokerName"),
    ("brokerAddr", None, "missing request header field: brokerAddr"),
    ("clusterName", None, "missing request header field: clusterName"),
    ("brokerId", None, "missing request header field: brokerId"),
])
def test_register_header_errors_name_the_field(ns, field, value, remark):
    header = {"brokerName": "b", "brokerAddr": "10.0.0.5:10911", "clusterName": "C", "brokerId": "0"}
    header[field] = value
    response = ns.call(RequestCode.REGISTER_BROKER, {k: v for k, v in header.items() if v is not None})
    assert (response.code, response.remark) == (ResponseCode.SYSTEM_ERROR, remark)
    assert response.ext_fields == {}
    assert ns.routes.snapshot().broker_addr_table == {}


def test_register_undecodable_body_names_the_problem(ns):
    header = {"brokerName": "b", "brokerAddr": "10.0.0.5:10911", "clusterName": "C", "brokerId": "0"}
    bad_json = ns.call(RequestCode.REGISTER_BROKER, header, b'{"topicConfigSerializeWrapper":')
    assert bad_json.code == ResponseCode.SYSTEM_ERROR and "RegisterBrokerBody is not valid JSON" in bad_json.remark
    not_zlib = ns.call(RequestCode.REGISTER_BROKER, header | {"compressed": "true"}, b"not deflated")
    assert not_zlib.code == ResponseCode.SYSTEM_ERROR and "does not inflate" in not_zlib.remark
    truncated = ns.call(RequestCode.REGISTER_BROKER, header | {"compressed": "true"}, zlib.compress(b"\x00\x00"))
    assert truncated.code == ResponseCode.SYSTEM_ERROR and "truncated" in truncated.remark
    assert ns.routes.snapshot().broker_addr_table == {}


def test_register_single_topic_first_is_refused(ns):
    response = ns.register(topics=("Only",))
    assert (response.code, response.remark, response.ext_fields) == \
        (ResponseCode.SYSTEM_ERROR, "register broker failed", {})


def test_register_zone_and_timeout_headers(ns):
    assert ns.register(__ZONE_NAME="zone-a", heartbeatTimeoutMillis="10000", enableActingMaster="false").code == 0
    group = route_of(ns.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "T1"}))["brokerDatas"][0]
    assert group["zoneName"] == "zone-a" and group["enableActingMaster"] is False
    ns.clock.now += 10_001
    assert len(ns.routes.scan_not_active_brokers()) == 1


def test_repeated_registration_follows_the_broker_to_a_new_connection(ns):
    """The 30-second repeat of an unchanged body takes the decode-free path; a changed body does not."""
    assert ns.register(channel=Channel("tcp", b"old")).code == 0
    assert ns.register(channel=Channel("tcp", b"new")).code == 0  # identical body, new connection
    assert ns.routes.on_channel_destroy(Channel("tcp", b"old")) == []
    changed = ns.register(topics=("T1", TopicConfig("T2", 8, 8)), counter=2, channel=Channel("tcp", b"new"))
    assert changed.code == 0
    queues = {q["brokerName"]: q["readQueueNums"] for q in route_of(ns.call(105, {"topic": "T2"}))["queueDatas"]}
    assert queues == {"broker-a": 8}
    assert len(ns.routes.on_channel_destroy(Channel("tcp", b"new"))) == 1


# ---------------------------------------------------------------- UNREGISTER (104), heartbeat (904), 322


def test_unregister_broker(ns):
    ns.register()
    response = ns.call(RequestCode.UNREGISTER_BROKER, {"brokerName": "broker-a", "brokerAddr": "10.0.0.1:10911",
                                                       "clusterName": "C", "brokerId": "0"})
    assert (response.code, response.ext_fields) == (0, None)
    assert ns.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "T1"}).code == ResponseCode.TOPIC_NOT_EXIST
    missing = ns.call(RequestCode.UNREGISTER_BROKER, {"brokerName": "broker-a", "clusterName": "C"})
    assert missing.remark == "missing request header field: brokerAddr"


def test_broker_heartbeat_refreshes_liveness(ns):
    ns.register()
    ns.clock.now += 100_000
    header = {"clusterName": "C", "brokerAddr": "10.0.0.1:10911", "brokerName": "broker-a", "brokerId": "0",
              "epoch": "not-a-number"}  # fields the NameServer does not use are not parsed
    response = ns.call(RequestCode.BROKER_HEARTBEAT, header, oneway=True)
    assert (response.code, response.ext_fields) == (0, None)
    ns.clock.now += 100_000
    assert ns.routes.scan_not_active_brokers() == []
    assert ns.call(RequestCode.BROKER_HEARTBEAT, {"clusterName": "C", "brokerAddr": "10.9.9.9:1"}).code == 0
    assert ns.call(RequestCode.BROKER_HEARTBEAT, {"clusterName": "C"}).remark == \
        "missing request header field: brokerAddr"


def test_query_data_version(ns):
    header = {"clusterName": "C", "brokerAddr": "10.0.0.1:10911", "brokerName": "broker-a", "brokerId": "0"}
    unknown = ns.call(RequestCode.QUERY_DATA_VERSION, header, DataVersion(1, START, 0).encode())
    assert (unknown.code, unknown.ext_fields, unknown.body) == (0, {"changed": "true"}, None)
    ns.register(counter=1)
    same = ns.call(RequestCode.QUERY_DATA_VERSION, header, DataVersion(1, START, 0).encode())
    assert same.ext_fields == {"changed": "false"} and DataVersion.decode(same.body) == DataVersion(1, START, 0)
    newer = ns.call(RequestCode.QUERY_DATA_VERSION, header, DataVersion(2, START, 0).encode())
    assert newer.ext_fields == {"changed": "true"}
    assert ns.call(RequestCode.QUERY_DATA_VERSION, header).ext_fields == {"changed": "true"}
    bad = ns.call(RequestCode.QUERY_DATA_VERSION, header, b"{counter")
    assert bad.code == ResponseCode.SYSTEM_ERROR and "DataVersion" in bad.remark and bad.ext_fields == {}


# ---------------------------------------------------------------- GET_ROUTEINFO_BY_TOPIC (105)


def test_route_flavour_follows_the_client_version(ns):
    ns.register()
    legacy = ns.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "T1"}, version=400)
    assert b'"brokerAddrs":{0:"10.0.0.1:10911"}' in legacy.body
    standard = ns.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "T1"}, version=401)
    assert b'"brokerAddrs":{"0":"10.0.0.1:10911"}' in standard.body
    asked = ns.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "T1", "acceptStandardJsonOnly": "true"},
                    version=317)
    assert asked.body == standard.body
    assert legacy.ext_fields is None and standard.ext_fields is None
    route = TopicRouteData.decode(standard.body)
    assert route.queue_datas == [QueueData("broker-a", 4, 4, PERM_READ | PERM_WRITE, 0)]


def test_route_of_unknown_topic(ns):
    response = ns.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "Nope"})
    assert response.code == ResponseCode.TOPIC_NOT_EXIST
    assert response.remark == ("No topic route info in name server for the topic: Nope\n"
                               "See https://rocketmq.apache.org/docs/bestPractice/06FAQ for further details.")
    assert response.ext_fields is None


def test_route_query_without_topic_names_the_field(ns):
    for serialize_type in (SerializeType.JSON, SerializeType.ROCKETMQ):
        response = ns.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, None, serialize_type=serialize_type)
        assert (response.code, response.remark) == (ResponseCode.SYSTEM_ERROR, "missing request header field: topic")


def test_order_topic_conf_appears_in_routes_when_enabled(ns):
    ns.register()
    ns.call(RequestCode.PUT_KV_CONFIG, {"namespace": ORDER_TOPIC_CONFIG, "key": "T1", "value": "broker-a:4"})
    assert "orderTopicConf" not in route_of(ns.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "T1"}))
    assert ns.call(RequestCode.UPDATE_NAMESRV_CONFIG, body=b"orderMessageEnable=true").code == 0
    assert route_of(ns.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "T1"}))["orderTopicConf"] == "broker-a:4"
    legacy = ns.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "T1"}, version=333).body
    assert b'"filterServerTable":{},"orderTopicConf":"broker-a:4","queueDatas"' in legacy  # Java's field order
    ns.call(RequestCode.PUT_KV_CONFIG, {"namespace": ORDER_TOPIC_CONFIG, "key": "T1", "value": "broker-a:2"})
    assert route_of(ns.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "T1"}))["orderTopicConf"] == "broker-a:2"
    ns.call(RequestCode.DELETE_KV_CONFIG, {"namespace": ORDER_TOPIC_CONFIG, "key": "T1"})
    assert "orderTopicConf" not in route_of(ns.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "T1"}))


def test_route_queries_wait_for_service_when_configured(tmp_path):
    ns = Namesrv(tmp_path, need_wait_for_service=True, wait_seconds_for_service=45)
    ns.register()
    response = ns.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "T1"})
    assert (response.code, response.remark) == (ResponseCode.SYSTEM_ERROR, "name server not ready")
    ns.clock.now += 45_000
    assert ns.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "T1"}).code == 0


# ---------------------------------------------------------------- cluster info (106), member group (901)


def test_cluster_info_is_legacy_json_for_every_client(ns):
    ns.register()
    ns.register(addr="10.0.0.2:10911", broker_id=1, channel=Channel("tcp", b"b2"))
    response = ns.call(RequestCode.GET_BROKER_CLUSTER_INFO, version=479)
    assert b'"brokerAddrs":{0:"10.0.0.1:10911",1:"10.0.0.2:10911"}' in response.body
    info = ClusterInfo.decode(response.body)
    assert info.cluster_addr_table == {"C": ["broker-a"]} and response.ext_fields is None


def test_broker_member_group(ns):
    ns.register()
    ns.register(addr="10.0.0.2:10911", broker_id=1, channel=Channel("tcp", b"b2"))
    response = ns.call(RequestCode.GET_BROKER_MEMBER_GROUP, {"clusterName": "C", "brokerName": "broker-a"})
    assert response.body == (b'{"brokerMemberGroup":{"brokerAddrs":{0:"10.0.0.1:10911",1:"10.0.0.2:10911"},'
                             b'"brokerName":"broker-a","cluster":"C"}}')
    unknown = ns.call(RequestCode.GET_BROKER_MEMBER_GROUP, {"clusterName": "C", "brokerName": "nope"})
    assert unknown.code == 0 and b'"brokerAddrs":{}' in unknown.body


# ---------------------------------------------------------------- write perm (205, 327)


def test_wipe_and_add_write_perm(ns):
    ns.register()
    wiped = ns.call(RequestCode.WIPE_WRITE_PERM_OF_BROKER, {"brokerName": "broker-a"})
    assert (wiped.code, wiped.ext_fields) == (0, {"wipeTopicCount": "2"})
    assert route_of(ns.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "T1"}))["queueDatas"][0]["perm"] == PERM_READ
    added = ns.call(RequestCode.ADD_WRITE_PERM_OF_BROKER, {"brokerName": "broker-a"})
    assert (added.code, added.ext_fields) == (0, {"addTopicCount": "2"})
    assert route_of(ns.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "T1"}))["queueDatas"][0]["perm"] == 6
    assert ns.call(RequestCode.WIPE_WRITE_PERM_OF_BROKER, {}).ext_fields == {"wipeTopicCount": "0"}
    assert ns.call(RequestCode.ADD_WRITE_PERM_OF_BROKER, {"brokerName": "x"}).ext_fields == {"addTopicCount": "0"}


def test_a_new_data_version_reads_only_the_changed_topics_and_still_restores_what_admins_changed(ns):
    topics = [f"T{i}" for i in range(20)]
    ns.register(topics=topics, counter=1)
    # An admin wipes the write perm: the master's next DataVersion re-applies its whole table,
    # unchanged entries included (the route table no longer holds what they say).
    ns.call(RequestCode.WIPE_WRITE_PERM_OF_BROKER, {"brokerName": "broker-a"})
    assert ns.routes.registration_hints(Registrant("C", "10.0.0.1:10911", "broker-a", 0))[1] is None
    ns.register(topics=topics, counter=2)
    assert all(route_of(ns.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": t}))["queueDatas"][0]["perm"] == 6
               for t in topics)
    # Then one topic changes with the next DataVersion: it alone is read, and answered at once.
    changed = topics[:5] + [TopicConfig("T5", 4, 4, PERM_READ)] + topics[6:]
    if fastpath.IMPLEMENTATION == "cython":  # only its scanner leaves unchanged entries out
        previous = ns.routes.registration_hints(Registrant("C", "10.0.0.1:10911", "broker-a", 0))[1]
        read, _ = decode_registration(registration_body(changed, 3), previous=previous)
        assert (read.omitted, list(read.topics)) == (19, ["T5"])
    ns.register(topics=changed, counter=3)
    assert route_of(ns.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "T5"}))["queueDatas"][0]["perm"] == PERM_READ
    assert route_of(ns.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "T6"}))["queueDatas"][0]["perm"] == 6


def test_a_registration_decoded_against_entries_the_route_table_no_longer_holds_is_decoded_again(ns, monkeypatch):
    if fastpath.IMPLEMENTATION != "cython":
        pytest.skip("only the Cython fast path leaves topic entries out")
    ns.register(topics=("T1", "T2"), counter=1)
    offered = ns.routes.registration_hints(Registrant("C", "10.0.0.1:10911", "broker-a", 0))[1]
    assert offered is not None
    # The race: the hint is taken, then an admin changes the table before the registration locks it.
    ns.call(RequestCode.WIPE_WRITE_PERM_OF_BROKER, {"brokerName": "broker-a"})
    monkeypatch.setattr(ns.routes, "registration_hints", lambda *identity: (None, offered))
    assert ns.register(topics=("T1", "T2"), counter=2).code == ResponseCode.SUCCESS
    assert route_of(ns.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "T1"}))["queueDatas"][0]["perm"] == 6


# ---------------------------------------------------------------- topics (206, 216, 217, 224, 304, 311-313)


def test_all_topic_list_and_its_switch(ns):
    ns.register()
    assert sorted(TopicList.decode(ns.call(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER).body).topic_list) == \
        ["T1", "T2"]
    ns.config.enable_all_topic_list = False
    response = ns.call(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER)
    assert (response.code, response.remark) == (ResponseCode.SYSTEM_ERROR, "disable")


def test_delete_topic_in_namesrv(ns):
    ns.register(topics=("T1", "T2", "T3"))
    ns.register(name="broker-b", addr="10.0.0.3:10911", cluster="C2", topics=("T1", "T2"),
                channel=Channel("tcp", b"b3"))
    assert ns.call(RequestCode.DELETE_TOPIC_IN_NAMESRV, {"topic": "T1", "clusterName": "C"}).code == 0
    assert [q["brokerName"] for q in route_of(ns.call(105, {"topic": "T1"}))["queueDatas"]] == ["broker-b"]
    assert ns.call(RequestCode.DELETE_TOPIC_IN_NAMESRV, {"topic": "T2", "clusterName": ""}).code == 0
    assert ns.call(105, {"topic": "T2"}).code == ResponseCode.TOPIC_NOT_EXIST
    assert ns.call(RequestCode.DELETE_TOPIC_IN_NAMESRV, {}).remark == "missing request header field: topic"


def test_register_topic_in_namesrv(ns):
    ns.register()
    body = TopicRouteData(queue_datas=[QueueData("broker-a", 2, 2, 6, 0)]).encode()
    assert ns.call(RequestCode.REGISTER_TOPIC_IN_NAMESRV, {"topic": "New"}, body).code == 0
    assert route_of(ns.call(105, {"topic": "New"}))["queueDatas"][0]["readQueueNums"] == 2
    ghost = TopicRouteData(queue_datas=[QueueData("ghost", 2, 2, 6, 0)]).encode()
    assert ns.call(RequestCode.REGISTER_TOPIC_IN_NAMESRV, {"topic": "Ghost"}, ghost).code == 0
    assert ns.call(105, {"topic": "Ghost"}).code == ResponseCode.TOPIC_NOT_EXIST
    assert ns.call(RequestCode.REGISTER_TOPIC_IN_NAMESRV, {"topic": "NoBody"}).code == 0
    bad = ns.call(RequestCode.REGISTER_TOPIC_IN_NAMESRV, {"topic": "X"}, b"[")
    assert bad.code == ResponseCode.SYSTEM_ERROR and "TopicRouteData" in bad.remark


def test_topics_by_cluster(ns):
    ns.register(topics=("T1", "T2"))
    ns.register(name="broker-b", addr="10.0.0.3:10911", cluster="C2", topics=("T2", "T3"),
                channel=Channel("tcp", b"b3"))
    listed = TopicList.decode(ns.call(RequestCode.GET_TOPICS_BY_CLUSTER, {"cluster": "C2"}).body)
    assert sorted(listed.topic_list) == ["T2", "T3"]
    assert TopicList.decode(ns.call(RequestCode.GET_TOPICS_BY_CLUSTER, {}).body).topic_list == []
    ns.config.enable_topic_list = False
    assert ns.call(RequestCode.GET_TOPICS_BY_CLUSTER, {"cluster": "C2"}).remark == "disable"


def test_system_topic_list(ns):
    ns.register()
    response = ns.call(RequestCode.GET_SYSTEM_TOPIC_LIST_FROM_NS)
    assert orjson.loads(response.body) == {"brokerAddr": "10.0.0.1:10911", "topicList": ["C", "broker-a"]}


def test_unit_topic_lists_and_their_switch(ns):
    ns.register(topics=("Plain", TopicConfig("Unit", topic_sys_flag=FLAG_UNIT),
                        TopicConfig("Sub", topic_sys_flag=FLAG_UNIT_SUB),
                        TopicConfig("Both", topic_sys_flag=FLAG_UNIT | FLAG_UNIT_SUB)))
    lists = {code: sorted(TopicList.decode(ns.call(code).body).topic_list)
             for code in (RequestCode.GET_UNIT_TOPIC_LIST, RequestCode.GET_HAS_UNIT_SUB_TOPIC_LIST,
                          RequestCode.GET_HAS_UNIT_SUB_UNUNIT_TOPIC_LIST)}
    assert lists == {311: ["Both", "Unit"], 312: ["Both", "Sub"], 313: ["Sub"]}
    ns.config.enable_topic_list = False
    for code in lists:
        assert (ns.call(code).code, ns.call(code).remark) == (ResponseCode.SYSTEM_ERROR, "disable")


# ---------------------------------------------------------------- failures never escape


def test_a_failing_handler_becomes_system_error(tmp_path, monkeypatch):
    ns = Namesrv(tmp_path)
    (tmp_path / "kvConfig.json").mkdir()  # the KV file can no longer be written: said in one line
    response = ns.call(RequestCode.PUT_KV_CONFIG, {"namespace": "NS", "key": "k", "value": "v"})
    assert (response.code, response.remark) == (ResponseCode.SYSTEM_ERROR,
                                                f"cannot write {tmp_path / 'kvConfig.json'}: Is a directory")
    monkeypatch.setattr(KVConfigManager, "get", lambda *args: 1 / 0)  # any other failure: its type and text
    response = ns.call(RequestCode.GET_KV_CONFIG, {"namespace": "NS", "key": "k"})
    assert (response.code, response.remark) == (ResponseCode.SYSTEM_ERROR, "ZeroDivisionError: division by zero")


texts = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=12)
header_values = st.one_of(texts, st.integers(-2 ** 70, 2 ** 70).map(str), st.sampled_from(["true", "0", "-1"]))
header_keys = st.sampled_from(["topic", "brokerName", "brokerAddr", "clusterName", "brokerId", "bodyCrc32",
                               "compressed", "namespace", "key", "value", "cluster", "heartbeatTimeoutMillis",
                               "enableActingMaster", "acceptStandardJsonOnly", "haServerAddr"])


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(code=st.sampled_from(sorted(SUPPORTED_CODES)),
       ext=st.one_of(st.none(), st.dictionaries(header_keys, header_values, max_size=8)),
       body=st.one_of(st.none(), st.binary(max_size=64), st.sampled_from([b"{}", b"[]", b"null", b'{"a":{0:1}}'])),
       version=st.sampled_from([0, 36, 317, 401, 479, 613]))
def test_any_request_gets_an_answer(tmp_path, code, ext, body, version):
    ns = Namesrv(tmp_path)
    response = ns.processor.process(RemotingCommand.request(code, ext, body, version=version), CLIENT)
    assert response.is_response
    assert response.code in (0, 1, 16, 17, 22)
    assert (response.ext_fields is not None) == (code in RESPONSE_HEADER_CODES)
    assert RemotingCommand.decode(response.encode()[4:]).code == response.code


def test_leading_zeros_are_not_digits_that_count(ns):
    """Long.parseLong accepts any number of leading zeros; so does the header reader, past int()'s digit limit."""
    header = {"brokerName": "b", "brokerAddr": "10.0.0.5:10911", "clusterName": "C", "brokerId": "0" * 40000 + "1"}
    assert ns.call(RequestCode.REGISTER_BROKER, header).code == ResponseCode.SUCCESS
    assert ns.routes.snapshot().broker_addr_table["b"].broker_addrs == {1: "10.0.0.5:10911"}
