"""Body models (reference section 3): exact bytes of what we write, and tolerance of what Java
brokers of 4.9.8 and 5.x write (missing fields, fastjson's bare integer keys, compressed layout)."""
from __future__ import annotations

import importlib
import os
import struct
import zlib

import orjson
import pytest

from namesrv.protocol import (
    BrokerData,
    BrokerMemberGroup,
    ClusterInfo,
    DataVersion,
    KVTable,
    ProtocolError,
    QueueData,
    RegisterBrokerBody,
    RegisterBrokerResult,
    TopicConfig,
    TopicConfigSerializeWrapper,
    TopicList,
    TopicRouteData,
    Version,
)
from namesrv.protocol import jsonbody

NOW = 1700000000000


def int32(value: int) -> bytes:
    return struct.pack(">i", value)


def blob(data: bytes) -> bytes:
    return int32(len(data)) + data


# --- DataVersion (3.2) ---------------------------------------------------------------------------

def test_data_version_encodes_sorted_with_state_version():
    assert DataVersion(5, NOW, 0).encode() == b'{"counter":5,"stateVersion":0,"timestamp":1700000000000}'


def test_data_version_equality_needs_all_three_fields():
    base = DataVersion(5, NOW, 2)
    assert base == DataVersion(5, NOW, 2) and hash(base) == hash(DataVersion(5, NOW, 2))
    assert base != DataVersion(6, NOW, 2)
    assert base != DataVersion(5, NOW + 1, 2)
    assert base != DataVersion(5, NOW, 3)


def test_data_version_from_4_9_8_has_no_state_version():
    decoded = DataVersion.decode(b'{"counter":5,"timestamp":1700000000000}')
    assert decoded == DataVersion(5, NOW, 0)


def test_data_version_tolerates_fastjson_input():
    assert DataVersion.decode(b'{"timestamp":"1700000000000","counter":"7","extra":[1]}') == DataVersion(7, NOW, 0)
    assert DataVersion.decode(b"{}") == DataVersion()


def test_next_version_bumps_counter_and_stamps_time():
    current = DataVersion(5, NOW, 3)
    following = current.next_version(NOW + 42)
    assert following == DataVersion(6, NOW + 42, 3)
    assert current == DataVersion(5, NOW, 3)  # immutable


def test_data_version_round_trips_java_long_extremes():
    extreme = DataVersion((1 << 63) - 1, -(1 << 63), 1 << 62)
    assert DataVersion.decode(extreme.encode()) == extreme


@pytest.mark.parametrize("body", [b'{"counter":9223372036854775808}', b'{"counter":"99999999999999999999999"}',
                                  b'{"timestamp":1.5}', b'{"stateVersion":true}', b'{"counter":"1_000"}',
                                  b'{"counter":[1]}'])
def test_data_version_refuses_what_is_not_a_java_long(body):
    field = orjson.loads(body).popitem()[0]
    with pytest.raises(ProtocolError, match=f"DataVersion.{field} must be a 64-bit integer"):
        DataVersion.decode(body)


# --- TopicConfig (3.3) -----------------------------------------------------------------------------

TOPIC_CONFIG_5X = (b'{"attributes":{},"order":false,"perm":6,"readQueueNums":8,"topicFilterType":"SINGLE_TAG",'
                   b'"topicName":"T","topicSysFlag":0,"writeQueueNums":8}')


def test_topic_config_json_is_the_reference_example():
    assert orjson.dumps(TopicConfig("T", 8, 8).to_dict()) == TOPIC_CONFIG_5X
    assert TopicConfig.from_dict(orjson.loads(TOPIC_CONFIG_5X)) == TopicConfig("T", 8, 8)


def test_topic_config_defaults():
    config = TopicConfig.from_dict({"topicName": "T"})
    assert (config.read_queue_nums, config.write_queue_nums, config.perm, config.topic_filter_type,
            config.topic_sys_flag, config.order, config.attributes) == (16, 16, 6, "SINGLE_TAG", 0, False, None)


def test_topic_config_from_4_9_8_has_no_attributes():
    config = TopicConfig.from_dict({"order": True, "perm": 4, "readQueueNums": 2, "topicFilterType": "MULTI_TAG",
                                    "topicName": "T", "topicSysFlag": 3, "writeQueueNums": 1})
    assert config == TopicConfig("T", 2, 1, 4, "MULTI_TAG", 3, True, None)
    assert "attributes" not in config.to_dict()


def test_topic_config_name_falls_back_to_its_table_key():
    assert TopicConfig.from_dict({"perm": 6}, "FromKey").topic_name == "FromKey"
    with pytest.raises(ProtocolError, match="has no topicName"):
        TopicConfig.from_dict({"perm": 6})


@pytest.mark.parametrize(("config", "text"), [
    (TopicConfig("T", 8, 8, 6, attributes={}), "T 8 8 6 SINGLE_TAG {}"),
    (TopicConfig("T", 8, 8, 6, attributes={"+message.type": "FIFO"}), 'T 8 8 6 SINGLE_TAG {"+message.type":"FIFO"}'),
    (TopicConfig("T", 1, 2, 4, "MULTI_TAG", attributes=None), "T 1 2 4 MULTI_TAG "),
])
def test_topic_config_text_form(config, text):
    assert config.to_text() == text
    assert TopicConfig.from_text(text) == config


@pytest.mark.parametrize("text", ["T 8 8 6 SINGLE_TAG", "T 8 8 6 SINGLE_TAG ", "T 8 8 6 SINGLE_TAG   "])
def test_topic_config_text_with_five_tokens_and_trailing_empties(text):
    assert TopicConfig.from_text(text) == TopicConfig("T", 8, 8, 6, "SINGLE_TAG", attributes=None)


def test_topic_config_text_ignores_an_unparseable_sixth_token():
    # Java splits on spaces, so an attribute value with a space cuts the JSON; 5.x ignores the bad token.
    config = TopicConfig.from_text('T 8 8 6 SINGLE_TAG {"k":"a b"}')
    assert (config.topic_name, config.read_queue_nums, config.attributes) == ("T", 8, None)
    assert TopicConfig.from_text("T 8 8 6 SINGLE_TAG [1,2]").attributes is None


def test_topic_config_text_loses_sys_flag_and_order():
    config = TopicConfig("T", 4, 4, 6, topic_sys_flag=3, order=True, attributes={})
    decoded = TopicConfig.from_text(config.to_text())
    assert (decoded.topic_sys_flag, decoded.order) == (0, False)
    assert decoded == TopicConfig("T", 4, 4, 6, attributes={})


@pytest.mark.parametrize("text", ["T 8 8 6 single_tag", "T 8 8 6  SINGLE_TAG", "T 8 8 6 TAG {}"])
def test_topic_config_text_needs_a_known_filter_type(text):
    with pytest.raises(ProtocolError, match="unknown topicFilterType"):
        TopicConfig.from_text(text)


@pytest.mark.parametrize("filter_type", ["", "single_tag", "TAG", None])
def test_topic_config_json_reads_an_unknown_filter_type_as_the_default(filter_type):
    assert TopicConfig.from_dict({"topicName": "T", "topicFilterType": filter_type}).topic_filter_type == "SINGLE_TAG"
    assert TopicConfig.from_dict({"topicName": "T", "topicFilterType": "MULTI_TAG"}).topic_filter_type == "MULTI_TAG"


@pytest.mark.parametrize("text", ["", "T", "T 8 8 6", "T 8 8 6 ", "    "])
def test_topic_config_text_needs_five_tokens(text):
    with pytest.raises(ProtocolError, match="needs 5"):
        TopicConfig.from_text(text)


@pytest.mark.parametrize("text", ["T x 8 6 SINGLE_TAG", "T 8  8 6 SINGLE_TAG", "T 8 8 1_0 SINGLE_TAG",
                                  "T 8 8 2147483648 SINGLE_TAG", "T 8.0 8 6 SINGLE_TAG", "T \u0668 8 6 SINGLE_TAG"])
def test_topic_config_text_needs_java_integers(text):
    with pytest.raises(ProtocolError, match="non-integer"):
        TopicConfig.from_text(text)


# --- TopicConfigSerializeWrapper (3.4) ------------------------------------------------------------

def test_wrapper_encodes_sorted_fields():
    wrapper = TopicConfigSerializeWrapper({"T": TopicConfig("T", 8, 8)}, DataVersion(5, NOW), DataVersion(0, NOW))
    assert wrapper.encode() == (
        b'{"dataVersion":{"counter":5,"stateVersion":0,"timestamp":1700000000000},'
        b'"mappingDataVersion":{"counter":0,"stateVersion":0,"timestamp":1700000000000},'
        b'"topicConfigTable":{"T":' + TOPIC_CONFIG_5X
        + b'},"topicQueueMappingDetailMap":{},"topicQueueMappingInfoMap":{}}')
    assert TopicConfigSerializeWrapper.from_dict(orjson.loads(wrapper.encode())) == wrapper


def test_wrapper_without_data_version_gets_zero():
    wrapper = TopicConfigSerializeWrapper.from_dict({"topicConfigTable": {}})
    assert wrapper.data_version == DataVersion() and wrapper.mapping_data_version is None


# --- RegisterBrokerBody, JSON form (3.5) -----------------------------------------------------------

BODY_5X = (b'{"filterServerList":[],"topicConfigSerializeWrapper":{"dataVersion":{"counter":5,"stateVersion":0,'
           b'"timestamp":1700000000000},"mappingDataVersion":{"counter":0,"stateVersion":0,"timestamp":1700000000000},'
           b'"topicConfigTable":{"TopicA":{"attributes":{},"order":false,"perm":6,"readQueueNums":8,'
           b'"topicFilterType":"SINGLE_TAG","topicName":"TopicA","topicSysFlag":0,"writeQueueNums":8}},'
           b'"topicQueueMappingDetailMap":{},"topicQueueMappingInfoMap":{}}}')
BODY_4_9_8 = (b'{"filterServerList":["10.0.0.9:30000"],"topicConfigSerializeWrapper":{"dataVersion":{"counter":3,'
              b'"timestamp":1700000000000},"topicConfigTable":{"TopicB":{"order":true,"perm":6,"readQueueNums":4,'
              b'"topicFilterType":"SINGLE_TAG","topicName":"TopicB","topicSysFlag":1,"writeQueueNums":4},'
              b'"SELF_TEST_TOPIC":{"order":false,"perm":6,"readQueueNums":1,"topicFilterType":"SINGLE_TAG",'
              b'"topicName":"SELF_TEST_TOPIC","topicSysFlag":0,"writeQueueNums":1}}}}')


def body_5x() -> RegisterBrokerBody:
    wrapper = TopicConfigSerializeWrapper({"TopicA": TopicConfig("TopicA", 8, 8)}, DataVersion(5, NOW),
                                          DataVersion(0, NOW))
    return RegisterBrokerBody(wrapper, [])


def test_register_body_json_is_what_a_5x_broker_sends():
    assert body_5x().encode() == BODY_5X
    assert RegisterBrokerBody.decode(BODY_5X) == body_5x()


def test_register_body_from_a_4_9_8_broker():
    body = RegisterBrokerBody.decode(BODY_4_9_8, version=Version.V4_9_8)
    assert body.filter_server_list == ["10.0.0.9:30000"]
    wrapper = body.wrapper
    assert wrapper.data_version == DataVersion(3, NOW, 0)
    assert wrapper.mapping_data_version is None
    assert wrapper.topic_queue_mapping_info_map == {} and wrapper.topic_queue_mapping_detail_map == {}
    assert list(wrapper.topic_config_table) == ["TopicB", "SELF_TEST_TOPIC"]
    assert wrapper.topic_config_table["TopicB"] == TopicConfig("TopicB", 4, 4, 6, "SINGLE_TAG", 1, True, None)


def test_register_body_accepts_any_field_order_and_missing_parts():
    body = RegisterBrokerBody.decode(b'{"topicConfigSerializeWrapper":{"topicConfigTable":{"T":{"topicName":"T"}},'
                                     b'"dataVersion":{"timestamp":1,"counter":2}}}')
    assert body.filter_server_list == []
    assert body.wrapper.data_version == DataVersion(2, 1)
    assert RegisterBrokerBody.decode(b"{}") == RegisterBrokerBody(TopicConfigSerializeWrapper(), [])


def test_register_body_absent_is_an_empty_table_with_data_version_zero():
    for data in (None, b""):
        body = RegisterBrokerBody.decode(data)
        assert body.wrapper == TopicConfigSerializeWrapper() and body.wrapper.data_version == DataVersion(0, 0, 0)


def test_register_body_below_3_0_11_is_a_bare_wrapper():
    wrapper = TopicConfigSerializeWrapper({"T": TopicConfig("T", 4, 4)}, DataVersion(1, NOW))
    encoded = RegisterBrokerBody(wrapper, ["10.0.0.9:30000"]).encode(version=36)
    assert encoded == wrapper.encode()
    decoded = RegisterBrokerBody.decode(encoded, version=36)
    assert decoded.wrapper == wrapper and decoded.filter_server_list is None
    # The same bytes at version 37 are a RegisterBrokerBody without the wrapper key: an empty table.
    assert RegisterBrokerBody.decode(encoded, version=Version.V3_0_11).wrapper.topic_config_table == {}


MAPPING_INFO_LEGACY = (b'{"bname":"broker-a","currIdMap":{0:0,1:1},"dirty":false,"epoch":1700000000000,'
                       b'"scope":"__global__","topic":"StaticTopic","totalQueues":2}')
MAPPING_INFO = {"bname": "broker-a", "currIdMap": {"0": 0, "1": 1}, "dirty": False, "epoch": NOW,
                "scope": "__global__", "topic": "StaticTopic", "totalQueues": 2}


def test_register_body_with_static_topic_bare_integer_keys():
    data = BODY_5X.replace(b'"topicQueueMappingInfoMap":{}', b'"topicQueueMappingInfoMap":{"StaticTopic":'
                           + MAPPING_INFO_LEGACY + b"}")
    with pytest.raises(orjson.JSONDecodeError):
        orjson.loads(data)  # fastjson's output is not JSON...
    body = RegisterBrokerBody.decode(data)  # ...but we read it as Java does
    assert body.wrapper.topic_queue_mapping_info_map == {"StaticTopic": MAPPING_INFO}


def test_strings_that_look_like_bare_keys_are_not_altered():
    tricky = ['a,1:b', '{0:1}', 'x\\",2:y', ',3 :', '\\', 'end,4:']
    attributes = {f"k{i}": value for i, value in enumerate(tricky)}
    config = {"topicName": "T,5:", "attributes": attributes}
    data = (b'{"filterServerList":' + orjson.dumps(tricky) + b',"topicConfigSerializeWrapper":{"topicConfigTable":'
            + orjson.dumps({"T,5:": config})
            + b',"topicQueueMappingInfoMap":{"StaticTopic":' + MAPPING_INFO_LEGACY + b"}}}")
    body = RegisterBrokerBody.decode(data)
    assert body.filter_server_list == tricky
    assert body.wrapper.topic_config_table["T,5:"].attributes == attributes
    assert body.wrapper.topic_queue_mapping_info_map["StaticTopic"]["currIdMap"] == {"0": 0, "1": 1}


@pytest.mark.parametrize(("raw", "expected"), [
    (b'{0:"a",1:"b"}', b'{"0":"a","1":"b"}'),
    (b'{ -1 : 2 ,\n10:{3:4}}', b'{ "-1" : 2 ,\n"10":{"3":4}}'),
    (b'{"s":",1:","t":"\\",2:"}', b'{"s":",1:","t":"\\",2:"}'),
    (b'[1,2,{3:[4,5]}]', b'[1,2,{"3":[4,5]}]'),
    (b'{"unterminated,1:', b'{"unterminated,1:'),
])
def test_quote_bare_keys(raw, expected):
    assert jsonbody.quote_bare_keys(raw) == expected


# --- RegisterBrokerBody, compressed form (3.6) ----------------------------------------------------

def compressed_wrapper() -> TopicConfigSerializeWrapper:
    table = {"TopicA": TopicConfig("TopicA", 8, 8, 6, attributes={}),
             "TopicB": TopicConfig("TopicB", 4, 2, 4, "MULTI_TAG", attributes=None)}
    return TopicConfigSerializeWrapper(table, DataVersion(5, NOW), topic_queue_mapping_info_map={
        "StaticTopic": MAPPING_INFO})


def inflate_layout(raw: bytes, with_mapping: bool) -> tuple[bytes, list[bytes], bytes, list[bytes], bytes]:
    """Split a decompressed register body into its parts, independently of the decoder under test."""
    pos = 0

    def take(count: int) -> bytes:
        nonlocal pos
        pos += count
        assert pos <= len(raw)
        return raw[pos - count:pos]

    def take_blob() -> bytes:
        return take(struct.unpack(">i", take(4))[0])

    data_version = take_blob()
    topics = [take_blob() for _ in range(struct.unpack(">i", take(4))[0])]
    filter_servers = take_blob()
    mappings = [take_blob() for _ in range(struct.unpack(">i", take(4))[0])] if with_mapping else []
    return data_version, topics, filter_servers, mappings, raw[pos:]


def test_compressed_layout_5x():
    body = RegisterBrokerBody(compressed_wrapper(), ["10.0.0.9:30000"]).encode(compressed=True)
    assert body[:2] == b"\x78\xda"  # zlib stream at BEST_COMPRESSION, as Java's Deflater(9)
    data_version, topics, filter_servers, mappings, rest = inflate_layout(zlib.decompress(body), with_mapping=True)
    assert data_version == b'{"counter":5,"stateVersion":0,"timestamp":1700000000000}'
    assert topics == [b"TopicA 8 8 6 SINGLE_TAG {}", b"TopicB 4 2 4 MULTI_TAG "]
    assert filter_servers == b'["10.0.0.9:30000"]'
    assert [orjson.loads(m) for m in mappings] == [MAPPING_INFO]
    assert rest == b""


def test_compressed_layout_always_has_a_mapping_count_from_5_0_0():
    body = RegisterBrokerBody(TopicConfigSerializeWrapper(), []).encode(compressed=True, version=Version.V5_0_0)
    assert zlib.decompress(body) == blob(b'{"counter":0,"stateVersion":0,"timestamp":0}') + int32(0) + blob(b"[]") \
        + int32(0)


def test_compressed_layout_before_5_0_0_has_no_mapping_section():
    body = RegisterBrokerBody(compressed_wrapper(), []).encode(compressed=True, version=Version.V4_9_8)
    *_, mappings, rest = inflate_layout(zlib.decompress(body), with_mapping=False)
    assert mappings == [] and rest == b""


@pytest.mark.parametrize("version", [Version.V5_0_0, Version.V5_3_3])
def test_compressed_round_trip_loses_only_sys_flag_and_order(version):
    wrapper = compressed_wrapper()
    wrapper.topic_config_table["TopicA"].topic_sys_flag = 1
    wrapper.topic_config_table["TopicA"].order = True
    decoded = RegisterBrokerBody.decode(RegisterBrokerBody(wrapper, ["fs:1"]).encode(compressed=True, version=version),
                                        compressed=True, version=version)
    assert decoded.filter_server_list == ["fs:1"]
    assert decoded.wrapper.data_version == DataVersion(5, NOW)
    assert decoded.wrapper.topic_config_table == {
        "TopicA": TopicConfig("TopicA", 8, 8, 6, attributes={}),
        "TopicB": TopicConfig("TopicB", 4, 2, 4, "MULTI_TAG", attributes=None)}
    assert decoded.wrapper.topic_queue_mapping_info_map == {"StaticTopic": MAPPING_INFO}


def test_compressed_body_from_a_4_9_8_broker():
    raw = (blob(b'{"counter":3,"timestamp":1700000000000}') + int32(2) + blob(b"TopicB 4 4 6 SINGLE_TAG")
           + blob(b"%RETRY%g 1 1 6 SINGLE_TAG") + blob(b"[]"))
    for version in (Version.V4_9_8, Version.V5_3_3):  # a 5.x reader tolerates the missing mapping section
        body = RegisterBrokerBody.decode(zlib.compress(raw, 9), compressed=True, version=version)
        assert body.wrapper.data_version == DataVersion(3, NOW, 0)
        assert body.wrapper.topic_config_table == {"TopicB": TopicConfig("TopicB", 4, 4, 6, attributes=None),
                                                   "%RETRY%g": TopicConfig("%RETRY%g", 1, 1, 6, attributes=None)}
        assert body.filter_server_list == [] and body.wrapper.topic_queue_mapping_info_map == {}


def test_compressed_body_from_a_5x_broker_with_fastjson_mapping():
    raw = (blob(b'{"counter":5,"stateVersion":0,"timestamp":1700000000000}') + int32(1)
           + blob(b'StaticTopic 2 2 6 SINGLE_TAG {"+message.type":"NORMAL"}') + blob(b"[]")
           + int32(1) + blob(MAPPING_INFO_LEGACY))
    body = RegisterBrokerBody.decode(zlib.compress(raw, 9), compressed=True, version=Version.V5_3_3)
    assert body.wrapper.topic_config_table["StaticTopic"].attributes == {"+message.type": "NORMAL"}
    assert body.wrapper.topic_queue_mapping_info_map == {"StaticTopic": MAPPING_INFO}
    # An older header version means the mapping section is not read at all.
    older = RegisterBrokerBody.decode(zlib.compress(raw, 9), compressed=True, version=Version.V4_9_8)
    assert older.wrapper.topic_queue_mapping_info_map == {}


def test_compressed_body_ignores_trailing_bytes():
    raw = blob(b'{"counter":1,"timestamp":2}') + int32(0) + blob(b"[]") + int32(0) + b"trailing garbage"
    body = RegisterBrokerBody.decode(zlib.compress(raw) + b"after the stream", compressed=True)
    assert body.wrapper.data_version == DataVersion(1, 2) and body.filter_server_list == []


# --- TopicRouteData (3.1, 3.7) ---------------------------------------------------------------------

ROUTE_LEGACY = (b'{"brokerDatas":[{"brokerAddrs":{0:"127.0.0.1:10911"},"brokerName":"broker-a",'
                b'"cluster":"DefaultCluster","enableActingMaster":false}],"filterServerTable":{},"queueDatas":'
                b'[{"brokerName":"broker-a","perm":6,"readQueueNums":4,"topicSysFlag":0,"writeQueueNums":4}]}')
ROUTE_STANDARD = ROUTE_LEGACY.replace(b"{0:", b'{"0":')


def reference_route() -> TopicRouteData:
    return TopicRouteData([QueueData("broker-a", 4, 4, 6, 0)],
                          [BrokerData("DefaultCluster", "broker-a", {0: "127.0.0.1:10911"})])


def test_route_is_the_reference_example_in_both_flavours():
    enable_acting_master = len(b',"enableActingMaster":false')
    assert (len(ROUTE_LEGACY), len(ROUTE_STANDARD)) == (233 + enable_acting_master, 235 + enable_acting_master)
    assert reference_route().encode(standard=False) == ROUTE_LEGACY
    assert reference_route().encode(standard=True) == ROUTE_STANDARD
    assert orjson.loads(ROUTE_STANDARD)["brokerDatas"][0]["brokerAddrs"] == {"0": "127.0.0.1:10911"}


def test_route_decodes_from_both_flavours():
    assert TopicRouteData.decode(ROUTE_LEGACY) == reference_route()
    assert TopicRouteData.decode(ROUTE_STANDARD) == reference_route()


def test_route_from_4_9_8_without_acting_master_and_pre_4_9_sys_flag_spelling():
    data = (b'{"brokerDatas":[{"brokerAddrs":{0:"127.0.0.1:10911"},"brokerName":"broker-a",'
            b'"cluster":"DefaultCluster"}],'
            b'"filterServerTable":{},"queueDatas":[{"brokerName":"broker-a","perm":6,"readQueueNums":4,'
            b'"topicSynFlag":1,"writeQueueNums":4}]}')
    route = TopicRouteData.decode(data)
    assert route.broker_datas[0].enable_acting_master is False
    assert route.queue_datas == [QueueData("broker-a", 4, 4, 6, 1)]


def test_standard_route_sorts_numeric_keys_numerically_and_legacy_writes_them_bare():
    route = TopicRouteData([], [BrokerData("c", "b", {10: "h:10", 2: "h:2", 0: "h:0"}, True, "zone-1")],
                           {"h:2": ["fs:2"], "h:0": ["fs:1"]}, "b:4", {"b": {"topic": "T"}})
    assert route.encode(standard=True) == (
        b'{"brokerDatas":[{"brokerAddrs":{"0":"h:0","2":"h:2","10":"h:10"},"brokerName":"b","cluster":"c",'
        b'"enableActingMaster":true,"zoneName":"zone-1"}],"filterServerTable":{"h:0":["fs:1"],"h:2":["fs:2"]},'
        b'"orderTopicConf":"b:4","queueDatas":[],"topicQueueMappingByBroker":{"b":{"topic":"T"}}}')
    legacy = route.encode(standard=False)
    assert b'"brokerAddrs":{0:"h:0",2:"h:2",10:"h:10"}' in legacy
    assert TopicRouteData.decode(legacy) == route == TopicRouteData.decode(route.encode(standard=True))


def test_standard_route_escapes_like_browser_compatible():
    route = TopicRouteData([QueueData("b/1")],
                           [BrokerData("集群/A", "b/1", {0: "h:1"}, zone_name="z\x7f\U0001F600\x01\x1f\n\\u001f")])
    standard = route.encode(standard=True)
    assert standard.isascii()
    assert b'"cluster":"\\u96C6\\u7FA4\\/A"' in standard
    assert b'"brokerName":"b\\/1"' in standard
    assert b'"zoneName":"z\\u007F\\uD83D\\uDE00\\u0001\\u001F\\n\\\\u001f"' in standard
    legacy = route.encode(standard=False)
    assert "集群/A".encode() in legacy and b'"brokerName":"b/1"' in legacy
    assert TopicRouteData.decode(standard) == route == TopicRouteData.decode(legacy)


def test_standard_route_sorts_static_topic_mappings_and_legacy_keeps_their_order():
    mapping = {"broker-b": {"bname": "broker-b", "currIdMap": {"10": 1, "2": 0}, "topic": "S"},
               "broker-a": {"topic": "S", "bname": "broker-a", "currIdMap": {}}}
    route = TopicRouteData(topic_queue_mapping_by_broker=mapping)
    assert route.encode(standard=True).endswith(
        b'"topicQueueMappingByBroker":{"broker-a":{"bname":"broker-a","currIdMap":{},"topic":"S"},'
        b'"broker-b":{"bname":"broker-b","currIdMap":{"2":0,"10":1},"topic":"S"}}}')
    assert route.encode(standard=False).endswith(b'"topicQueueMappingByBroker":' + orjson.dumps(mapping) + b"}")
    assert TopicRouteData.decode(route.encode(standard=True)) == route


def test_route_omits_null_optional_fields():
    obj = orjson.loads(reference_route().encode(standard=True))
    assert list(obj) == ["brokerDatas", "filterServerTable", "queueDatas"]
    assert "zoneName" not in obj["brokerDatas"][0]


# --- ClusterInfo, TopicList, KVTable, BrokerMemberGroup, RegisterBrokerResult (3.8-3.12) -----------

def test_cluster_info_is_always_legacy_json():
    info = ClusterInfo({"broker-a": BrokerData("DefaultCluster", "broker-a", {1: "127.0.0.1:10921",
                                                                             0: "127.0.0.1:10911"})},
                       {"DefaultCluster": ["broker-a"]})
    encoded = info.encode()
    assert encoded == (b'{"brokerAddrTable":{"broker-a":{"brokerAddrs":{0:"127.0.0.1:10911",1:"127.0.0.1:10921"},'
                       b'"brokerName":"broker-a","cluster":"DefaultCluster","enableActingMaster":false}},'
                       b'"clusterAddrTable":{"DefaultCluster":["broker-a"]}}')
    assert ClusterInfo.decode(encoded) == info


def test_empty_cluster_info():
    assert ClusterInfo().encode() == b'{"brokerAddrTable":{},"clusterAddrTable":{}}'
    assert ClusterInfo.decode(ClusterInfo().encode()) == ClusterInfo()


def test_topic_list_has_broker_addr_only_when_set():
    assert TopicList(["T1"]).encode() == b'{"topicList":["T1"]}'
    system = TopicList(["bk1", "C1"], "127.0.0.1:20911")
    assert system.encode() == b'{"brokerAddr":"127.0.0.1:20911","topicList":["bk1","C1"]}'
    assert TopicList.decode(system.encode()) == system
    assert TopicList.decode(b'{"topicList":[]}') == TopicList([], None)


def test_kv_table():
    table = KVTable({"T1": "bk1:4", "CZ1": "bkz:3"})
    assert table.encode() == b'{"table":{"T1":"bk1:4","CZ1":"bkz:3"}}'
    assert KVTable.decode(table.encode()) == table
    assert KVTable({"k": None, "v": "1"}).encode() == b'{"table":{"v":"1"}}'
    assert KVTable.decode(b'{"table":{"k":null}}') == KVTable({})
    assert KVTable.decode(b"{}") == KVTable({})


def test_broker_member_group_is_legacy_json():
    group = BrokerMemberGroup("c", "bk", {1: "b:2", 0: "a:1"})
    assert group.encode() == b'{"brokerMemberGroup":{"brokerAddrs":{0:"a:1",1:"b:2"},"brokerName":"bk","cluster":"c"}}'
    assert BrokerMemberGroup.decode(group.encode()) == group
    assert BrokerMemberGroup("c", "unknown").encode() == (
        b'{"brokerMemberGroup":{"brokerAddrs":{},"brokerName":"unknown","cluster":"c"}}')


def test_register_broker_result_from_response():
    result = RegisterBrokerResult.from_response({"haServerAddr": "10.0.0.1:10912", "masterAddr": "10.0.0.1:10911"},
                                                b'{"table":{"T1":"bk1:4"}}')
    assert result == RegisterBrokerResult("10.0.0.1:10912", "10.0.0.1:10911", KVTable({"T1": "bk1:4"}))
    assert RegisterBrokerResult.from_response(None, None) == RegisterBrokerResult(None, None, KVTable())
    assert RegisterBrokerResult.from_response({}, b"") == RegisterBrokerResult()


# --- body CRC (2.3, REGISTER_BROKER) ---------------------------------------------------------------

def _crc_implementations():
    names = ["namesrv.fastpath.pure"]
    if os.environ.get("NAMESRV_PURE_PYTHON") != "1":
        try:
            importlib.import_module("namesrv._fastpath")
            names.append("namesrv._fastpath")
        except ImportError:
            pass
    return names


@pytest.mark.parametrize("module", _crc_implementations())
def test_body_crc32_is_masked_to_31_bits(module):
    body_crc32 = importlib.import_module(module).body_crc32
    assert zlib.crc32(b"a") == 0xE8B7BE43  # top bit set: Java's masked value differs from the raw CRC
    assert body_crc32(b"a") == 0x68B7BE43
    assert body_crc32(BODY_5X) == zlib.crc32(BODY_5X) & 0x7FFFFFFF
    assert body_crc32(b"") == 0 and body_crc32(None) == 0
    assert body_crc32(bytearray(b"a")) == body_crc32(memoryview(b"xa")[1:]) == 0x68B7BE43
