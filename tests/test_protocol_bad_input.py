"""Bad input at the protocol layer: every failure is a ProtocolError naming what was wrong, never
another exception, a hang or unbounded memory. Hand-picked cases first, then hypothesis fuzzing
of RemotingCommand.decode and of every body decoder over random and mutated valid inputs."""
from __future__ import annotations

import struct
import tracemalloc
import zlib

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from namesrv.protocol import (
    BrokerData,
    BrokerMemberGroup,
    ClusterInfo,
    DataVersion,
    FrameDecoder,
    KVTable,
    LanguageCode,
    ProtocolError,
    QueueData,
    RegisterBrokerBody,
    RegisterBrokerResult,
    RemotingCommand,
    RequestCode,
    SerializeType,
    TopicConfig,
    TopicConfigSerializeWrapper,
    TopicList,
    TopicRouteData,
    Version,
)
from namesrv.protocol import jsonbody, topic


pytestmark = pytest.mark.usefixtures("each_fastpath")


def int32(value: int) -> bytes:
    return struct.pack(">i", value)


def blob(data: bytes) -> bytes:
    return int32(len(data)) + data


def frame_of(header: bytes, serialize_type: int = SerializeType.JSON, body: bytes = b"") -> bytes:
    """A frame as RemotingCommand.decode takes it: without the 4-byte length prefix."""
    return bytes([serialize_type]) + len(header).to_bytes(3, "big") + header + body


JSON_REQUEST = RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "TopicTest"}, opaque=1).encode()
BINARY_REQUEST = RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "TopicTest"}, opaque=1,
                                         serialize_type=SerializeType.ROCKETMQ).encode()


# --- frames and headers --------------------------------------------------------------------------

@pytest.mark.parametrize("frame", [b"", b"\x00", b"\x00\x00\x00"])
def test_frame_without_a_header_length_field(frame):
    with pytest.raises(ProtocolError, match="no header-length field"):
        RemotingCommand.decode(frame)


@pytest.mark.parametrize("frame", [JSON_REQUEST, BINARY_REQUEST], ids=["json", "binary"])
@pytest.mark.parametrize("missing", [1, 10, 30])
def test_truncated_frame(frame, missing):
    header_length = len(frame) - 8
    with pytest.raises(ProtocolError, match=f"header length {header_length} exceeds the frame"):
        RemotingCommand.decode(frame[4:-missing])


def test_truncated_frame_is_held_back_by_the_frame_decoder():
    decoder = FrameDecoder()
    assert decoder.feed(JSON_REQUEST[:-1]) == []
    assert decoder.buffered == len(JSON_REQUEST) - 1


def test_header_length_beyond_the_frame():
    with pytest.raises(ProtocolError, match="header length 16777215 exceeds the frame"):
        RemotingCommand.decode(b"\x00\xff\xff\xff{}")


@pytest.mark.parametrize("serialize_type", [2, 3, 0x7F, 0x80, 0xFF])
def test_unknown_serialize_type(serialize_type):
    with pytest.raises(ProtocolError, match=f"unknown serialize type {serialize_type}"):
        RemotingCommand.decode(frame_of(b"{}", serialize_type))


@pytest.mark.parametrize(("header", "match"), [
    (b"", "not valid JSON"),
    (b'{"code":105', "not valid JSON"),
    (b'{"code":105,"remark":"\xff\xfe"}', "UTF-8"),
    (b"[1,2]", "must be an object"),
    (b'{"code":"GET_ROUTE"}', "'code' must be a 32-bit integer"),
    (b'{"code":1,"opaque":4294967296}', "'opaque' must be a 32-bit integer"),
    (b'{"code":1,"flag":false}', "'flag' must be a 32-bit integer"),
    (b'{"code":1,"version":"4.9.8"}', "'version' must be a 32-bit integer"),
    (b'{"code":1,"extFields":["topic"]}', "'extFields' must be an object"),
    (b'{"code":1,"remark":{"text":"x"}}', "'remark' must be a string"),
])
def test_bad_json_header_through_decode(header, match):
    with pytest.raises(ProtocolError, match=match):
        RemotingCommand.decode(frame_of(header))


@pytest.mark.parametrize(("header", "match"), [
    (b"\x00" * 20, "shorter than the 21-byte fixed part"),
    (struct.pack(">hBhiii", 105, 0, 479, 1, 0, 100) + int32(0), "remark length 100"),
    (struct.pack(">hBhiii", 105, 0, 479, 1, 0, -1) + int32(0), "remark length -1"),
    (struct.pack(">hBhiii", 105, 0, 479, 1, 0, 2) + b"\xff\xfe" + int32(0), "remark is not valid UTF-8"),
    (struct.pack(">hBhiii", 105, 0, 479, 1, 0, 0) + int32(50), "extFields length 50"),
    (struct.pack(">hBhiii", 105, 0, 479, 1, 0, 0) + int32(1) + b"\x00", "truncated extFields key length"),
    (struct.pack(">hBhiii", 105, 0, 479, 1, 0, 0) + int32(8) + struct.pack(">h", 9) + b"topic\x00", "key length 9"),
])
def test_bad_binary_header_through_decode(header, match):
    with pytest.raises(ProtocolError, match=match):
        RemotingCommand.decode(frame_of(header, SerializeType.ROCKETMQ))


# --- bodies ----------------------------------------------------------------------------------------

def test_compressed_body_that_does_not_inflate():
    with pytest.raises(ProtocolError, match="does not inflate"):
        RegisterBrokerBody.decode(b"\x78\xda not zlib at all", compressed=True)
    raw_deflate = zlib.compressobj(9, zlib.DEFLATED, -15)
    deflated = raw_deflate.compress(b"x" * 100) + raw_deflate.flush()
    with pytest.raises(ProtocolError, match="does not inflate"):  # raw deflate without the zlib header
        RegisterBrokerBody.decode(deflated, compressed=True)


def test_json_body_sent_as_compressed_and_compressed_sent_as_json():
    json_body = RegisterBrokerBody().encode()
    with pytest.raises(ProtocolError, match="does not inflate"):
        RegisterBrokerBody.decode(json_body, compressed=True)
    with pytest.raises(ProtocolError, match="RegisterBrokerBody is not valid JSON"):
        RegisterBrokerBody.decode(RegisterBrokerBody().encode(compressed=True))


DV = blob(b'{"counter":1,"timestamp":2}')


@pytest.mark.parametrize(("raw", "match"), [
    (b"", "truncated at dataVersion"),
    (b"garbage that inflates fine", "dataVersion length"),
    (int32(-1), "dataVersion length -1"),
    (blob(b"not json"), "DataVersion is not valid JSON"),
    (blob(b"[1]"), "DataVersion must be dict"),
    (DV, "truncated at topic count"),
    (DV + int32(-1), "topic count -1"),
    (DV + int32(0x7FFFFFFF), "topic count 2147483647 exceeds the body"),
    (DV + int32(2) + blob(b"T 1 1 6 SINGLE_TAG"), "truncated at TopicConfig"),
    (DV + int32(1) + int32(1000) + b"T 1 1 6", "TopicConfig length 1000"),
    (DV + int32(1) + blob(b"T 1 1"), "needs 5"),
    (DV + int32(1) + blob(b"\xff\xfe 1 1 6 SINGLE_TAG"), "not UTF-8"),
    (DV + int32(0), "truncated at filterServerList"),
    (DV + int32(0) + blob(b'{"a":1}'), "filterServerList must be list"),
    (DV + int32(0) + blob(b"[1]"), r"filterServerList\[\] must be str"),
    (DV + int32(0) + blob(b"[]") + int32(1), "truncated at TopicQueueMappingInfo"),
    (DV + int32(0) + blob(b"[]") + int32(0x7FFFFFFF) + blob(b'{"topic":"T"}'), "truncated at TopicQueueMappingInfo"),
    (DV + int32(0) + blob(b"[]") + int32(1) + blob(b"[]"), "TopicQueueMappingInfo must be dict"),
    (DV + int32(0) + blob(b"[]") + int32(1) + blob(b'{"bname":"b"}'), "TopicQueueMappingInfo.topic must be str"),
])
def test_compressed_body_with_a_bad_layout(raw, match):
    with pytest.raises(ProtocolError, match=match):
        RegisterBrokerBody.decode(zlib.compress(raw), compressed=True, version=Version.V5_3_3)


def test_truncated_zlib_stream_with_a_truncated_layout():
    complete = RegisterBrokerBody(TopicConfigSerializeWrapper({"T": TopicConfig("T")})).encode(compressed=True)
    with pytest.raises(ProtocolError, match="compressed RegisterBrokerBody"):
        RegisterBrokerBody.decode(complete[:len(complete) // 2], compressed=True)


def test_zlib_bomb_is_cut_off_at_the_inflate_limit(monkeypatch):
    monkeypatch.setattr(topic, "MAX_INFLATED_BODY", 1 << 20)
    attributes = b'{"a":"' + b"x" * 60_000 + b'"}'
    parts = [blob(b"T%d 4 4 6 SINGLE_TAG 0 false " % i + attributes) for i in range(40)]
    bomb = zlib.compress(DV + int32(40) + b"".join(parts) + blob(b"[]"), 9)
    assert len(bomb) < 64 << 10
    with pytest.raises(ProtocolError, match=r"inflates past 1048576 bytes \(at TopicConfig\)"):
        RegisterBrokerBody.decode(bomb, compressed=True)


def _peak_bytes_of(decode) -> int:
    tracemalloc.start()
    try:
        with pytest.raises(ProtocolError) as refused:
            decode()
        return tracemalloc.get_traced_memory()[1], str(refused.value)
    finally:
        tracemalloc.stop()


def test_a_part_declaring_more_than_its_bound_is_refused_before_it_is_inflated():
    """Issue 15's bomb: 240 KiB inflating to 250 MiB of `[[],[],...]` as the filterServerList
    (before: 7 GiB and 35 s to refuse)."""
    junk = b"[" + b"[]," * 83_000_000 + b"[]]"
    bomb = zlib.compress(DV + int32(0) + blob(junk), 9)
    del junk
    peak, remark = _peak_bytes_of(lambda: RegisterBrokerBody.decode(bomb, compressed=True))
    assert remark == f"compressed RegisterBrokerBody: filterServerList length 249000004 exceeds " \
                     f"{topic.MAX_COMPRESSED_PART} bytes"
    assert peak < 2 * topic.INFLATE_STEP + (1 << 20)


def test_what_follows_the_layout_is_never_inflated():
    body = zlib.compress(DV + int32(0) + blob(b"[]") + int32(0) + bytes(200 << 20), 9)
    peak = tracemalloc.start() or None
    try:
        decoded = RegisterBrokerBody.decode(body, compressed=True)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert decoded.filter_server_list == [] and decoded.wrapper.topic_config_table == {}
    assert peak < 2 * topic.INFLATE_STEP + (1 << 20)


def test_the_default_inflate_limit_is_bounded():
    assert 16 << 20 <= topic.MAX_INFLATED_BODY <= 64 << 20


@pytest.mark.timeout(60)
@pytest.mark.parametrize("data", [b'"' + b'\\"' * 500_000, b'{"' + b'\\' * 1_000_000, b"{" + b'x"' * 500_000,
                                  b"{" + b",0" * 500_000])
def test_hostile_json_fails_in_linear_time(data):
    with pytest.raises(ProtocolError, match="not valid JSON"):
        jsonbody.loads(data, "body")


@pytest.mark.parametrize(("decode", "data", "match"), [
    (TopicRouteData.decode, b'{"brokerDatas":[{"brokerAddrs":{"master":"h:1"}}]}', "key 'master' is not a broker id"),
    (TopicRouteData.decode, b'{"brokerDatas":[{"brokerAddrs":{"0":5}}]}', r"BrokerData.brokerAddrs\[0\] must be str"),
    (TopicRouteData.decode, b'{"brokerDatas":[{"brokerAddrs":{"99999999999999999999":"h"}}]}', "is not a broker id"),
    (TopicRouteData.decode, b'{"queueDatas":[{"perm":6}]}', "QueueData has no brokerName"),
    (TopicRouteData.decode, b'{"queueDatas":[{"brokerName":"b","perm":4294967296}]}', "QueueData.perm must be a 32"),
    (TopicRouteData.decode, b'{"queueDatas":{}}', "TopicRouteData.queueDatas must be list"),
    (TopicRouteData.decode, b'{"filterServerTable":{"h":[1]}}', r"filterServerTable\[h\]\[\] must be str"),
    (TopicRouteData.decode, b'{"brokerDatas":[{"enableActingMaster":1}]}', "enableActingMaster must be bool"),
    (ClusterInfo.decode, b'{"clusterAddrTable":{"c":"broker-a"}}', r"clusterAddrTable\[c\] must be list"),
    (ClusterInfo.decode, b'{"clusterAddrTable":{"c":["a",1]}}', r"clusterAddrTable\[c\]\[\] must be str"),
    (ClusterInfo.decode, b'{"brokerAddrTable":{"b":[]}}', "BrokerData must be dict"),
    (TopicList.decode, b'{"topicList":[null]}', r"TopicList.topicList\[\] must be str"),
    (TopicList.decode, b'{"topicList":"T"}', "TopicList.topicList must be list"),
    (TopicList.decode, b'{"brokerAddr":1}', "TopicList.brokerAddr must be str"),
    (KVTable.decode, b'{"table":{"k":1}}', r"KVTable.table\[k\] must be str"),
    (KVTable.decode, b'{"table":[]}', "KVTable.table must be dict"),
    (KVTable.decode, b"[]", "KVTable must be dict"),
    (BrokerMemberGroup.decode, b'{"brokerMemberGroup":[]}', "BrokerMemberGroup.brokerMemberGroup must be dict"),
    (DataVersion.decode, b"\xff", "DataVersion is not valid JSON"),
    (RegisterBrokerBody.decode, b'{"topicConfigSerializeWrapper":[]}', "topicConfigSerializeWrapper must be dict"),
    (RegisterBrokerBody.decode, b'{"topicConfigSerializeWrapper":0}', "topicConfigSerializeWrapper must be dict"),
    (RegisterBrokerBody.decode, b'{"filterServerList":"fs"}', "filterServerList must be list"),
    (RegisterBrokerBody.decode, b'{"topicConfigSerializeWrapper":{"topicConfigTable":{"T":null}}}',
     r"TopicConfig\[T\] must be dict"),
    (RegisterBrokerBody.decode, b'{"topicConfigSerializeWrapper":{"topicConfigTable":{"T":{"readQueueNums":"x"}}}}',
     r"TopicConfig\[T\].readQueueNums must be a 32-bit integer"),
    (RegisterBrokerBody.decode, b'{"topicConfigSerializeWrapper":{"topicConfigTable":{"T":{"attributes":[]}}}}',
     r"TopicConfig\[T\].attributes must be dict"),
    (RegisterBrokerBody.decode, b'{"topicConfigSerializeWrapper":{"dataVersion":[]}}', "dataVersion must be dict"),
    (RegisterBrokerBody.decode, b"null", "RegisterBrokerBody must be dict"),
])
def test_body_with_wrong_types_names_the_field(decode, data, match):
    with pytest.raises(ProtocolError, match=match):
        decode(data)


def test_register_broker_result_with_a_bad_body():
    with pytest.raises(ProtocolError, match="KVTable is not valid JSON"):
        RegisterBrokerResult.from_response({}, b"{")


# --- fuzzing -------------------------------------------------------------------------------------

FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def mutated(draw, valid: bytes) -> bytes:
    """`valid` after a few bit flips, truncations, byte overwrites and splices."""
    data = bytearray(valid)
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["flip", "truncate", "overwrite", "splice", "duplicate"]))
        pos = draw(st.integers(0, len(data)))
        if kind == "flip" and data:
            index = min(pos, len(data) - 1)
            data[index] ^= 1 << draw(st.integers(0, 7))
        elif kind == "truncate":
            del data[pos:]
        elif kind == "overwrite" and data:
            index = min(pos, len(data) - 1)
            data[index] = draw(st.sampled_from([0x00, 0x7F, 0x80, 0xFF, ord('"'), ord("{"), ord(":"), ord(","),
                                                ord("\\")]))
        elif kind == "splice":
            data[pos:pos] = draw(st.binary(min_size=1, max_size=8))
        elif kind == "duplicate":
            end = draw(st.integers(pos, len(data)))
            data[pos:pos] = data[pos:end]
    return bytes(data)


def only_protocol_errors(decode, data):
    """Decode `data`: the value, or None when (and only when) a ProtocolError was raised."""
    try:
        return decode(data)
    except ProtocolError:
        return None


def sample_frames() -> list[bytes]:
    commands = [
        RemotingCommand.request(RequestCode.REGISTER_BROKER, {"brokerName": "b", "brokerId": 0, "compressed": False},
                                b'{"filterServerList":[]}', opaque=7, language=LanguageCode.JAVA),
        RemotingCommand(17, flag=1, opaque=9, remark="No topic route info\n", ext_fields={"k": ""}),
        RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "T", "ns": "n"}, b"x", opaque=-3,
                                serialize_type=SerializeType.ROCKETMQ),
        RemotingCommand(0, flag=1, opaque=1, remark="ok", serialize_type=SerializeType.ROCKETMQ),
    ]
    return [command.encode()[4:] for command in commands]


def check_command(frame: bytes) -> None:
    command = only_protocol_errors(RemotingCommand.decode, frame)
    if command is not None:
        again = RemotingCommand.decode(command.encode()[4:])
        assert (again.code, again.opaque, again.flag, again.body) == (command.code, command.opaque, command.flag,
                                                                      command.body)


@FUZZ
@given(st.binary(max_size=200))
def test_fuzz_command_decode_random_bytes(data):
    check_command(data)


@FUZZ
@given(st.sampled_from(sample_frames()).flatmap(mutated))
def test_fuzz_command_decode_mutated_frames(frame):
    check_command(frame)


@FUZZ
@given(st.sampled_from(sample_frames()), st.binary(max_size=120))
def test_fuzz_command_decode_random_headers(frame, header):
    serialize_type = frame[0]
    check_command(frame_of(header, serialize_type) + frame[4 + int.from_bytes(frame[1:4], "big"):])


@FUZZ
@given(st.binary(max_size=200), st.lists(st.integers(0, 200), max_size=6))
def test_fuzz_frame_decoder_then_command_decode(data, cuts):
    decoder = FrameDecoder(256)
    points = [0, *sorted(c for c in cuts if c <= len(data)), len(data)]
    try:
        for a, b in zip(points, points[1:]):
            for frame in decoder.feed(data[a:b]):
                check_command(frame)
    except ProtocolError:
        pass


SCALARS = (st.none() | st.booleans() | st.integers(-(1 << 64), 1 << 64)
           | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=8)
           | st.sampled_from(["0", "6", "-1", "true", "TRUE", "9999999999999999999999", "1_0", " 7", "h:1", "{0:1}"]))
JSON_VALUES = st.recursive(
    SCALARS,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(
        st.sampled_from(["0", "1", "-1", "topicName", "brokerName", "perm", "counter", "timestamp", "topic", "table"])
        | st.text(max_size=6), children, max_size=4),
    max_leaves=12)


HEADER_FIELDS = ["code", "language", "version", "opaque", "flag", "remark", "extFields", "serializeTypeCurrentRPC"]


@FUZZ
@given(st.dictionaries(st.sampled_from(HEADER_FIELDS) | st.text(max_size=4), JSON_VALUES, max_size=8)
       | JSON_VALUES, st.binary(max_size=8))
def test_fuzz_command_decode_random_json_headers(header, body):
    check_command(frame_of(json_value_for_orjson(header), SerializeType.JSON, body))


def json_value_for_orjson(value) -> bytes:
    """orjson writes integers of up to 64 bits only: wider ones travel as their decimal text."""
    def narrow(node):
        if isinstance(node, int) and not isinstance(node, bool) and not -(1 << 63) <= node < 1 << 64:
            return str(node)
        if isinstance(node, list):
            return [narrow(item) for item in node]
        if isinstance(node, dict):
            return {key: narrow(item) for key, item in node.items()}
        return node
    return orjson.dumps(narrow(value))


def _paths(node, prefix=()):
    yield prefix
    if isinstance(node, dict):
        for key, child in node.items():
            yield from _paths(child, (*prefix, key))
    elif isinstance(node, list):
        for index, child in enumerate(node):
            yield from _paths(child, (*prefix, index))


@st.composite
def json_tree_mutated(draw, valid: bytes) -> bytes:
    """`valid` JSON (fastjson's bare keys allowed) with a few nodes replaced by random values or removed."""
    tree = jsonbody.loads(valid, "valid body")
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from(list(_paths(tree))))
        if not path:
            tree = draw(JSON_VALUES)
            continue
        parent = tree
        for step in path[:-1]:
            parent = parent[step]
        if isinstance(parent, dict) and draw(st.booleans()):
            del parent[path[-1]]
        else:
            parent[path[-1]] = draw(JSON_VALUES)
    return json_value_for_orjson(tree)


def reencode_register_body(body: RegisterBrokerBody) -> None:
    """Whatever was accepted encodes in every form, and the JSON forms read back the same. The
    compressed layout cannot carry every table (a topic name with a space, a mapping info without
    its "topic": both fail in Java too), so reading it back may only fail with a ProtocolError."""
    for compressed, version in [(False, Version.V5_3_3), (True, Version.V5_3_3), (True, Version.V4_9_8), (False, 36)]:
        data = body.encode(compressed=compressed, version=version)
        try:
            again = RegisterBrokerBody.decode(data, compressed=compressed, version=version)
        except ProtocolError:
            assert compressed
            continue
        assert again.wrapper.data_version == body.wrapper.data_version
        if not compressed:
            assert again.wrapper.topic_config_table == body.wrapper.topic_config_table


def same_after_reencoding(decode):
    return lambda value: decode(value.encode()) == value


MAPPING = (b'{"bname":"b","currIdMap":{0:0,1:1},"dirty":false,"epoch":1,"scope":"__global__","topic":"S",'
           b'"totalQueues":2}')
WRAPPER = TopicConfigSerializeWrapper({"T": TopicConfig("T", 8, 8, 6, attributes={"a": "b,1:c"}),
                                       "U": TopicConfig("U", attributes=None)}, DataVersion(5, 1700000000000),
                                      DataVersion(0, 1))
REGISTER = RegisterBrokerBody(WRAPPER, ["fs:1"])
ROUTE = TopicRouteData([QueueData("b", 4, 4, 6, 1)], [BrokerData("c", "b", {0: "h:0", 1: "h:1"}, True, "z/é")],
                       {"h:0": ["fs"]}, "b:4", {"b": {"topic": "S"}})
COMPRESSED_LAYOUT = (blob(DataVersion(1, 2).encode()) + int32(1) + blob(b"T 1 1 6 SINGLE_TAG {}") + blob(b"[]")
                     + int32(1) + blob(MAPPING))

# Every body decoder: how to call it, what must hold for whatever it accepted, and valid inputs to mutate.
BODY_DECODERS = {
    "DataVersion": (DataVersion.decode, same_after_reencoding(DataVersion.decode),
                    [DataVersion(5, 1700000000000, 1).encode()]),
    "RegisterBrokerBody/json": (RegisterBrokerBody.decode, reencode_register_body, [
        REGISTER.encode(), REGISTER.encode().replace(b'"topicQueueMappingInfoMap":{}',
                                                     b'"topicQueueMappingInfoMap":{"S":' + MAPPING + b"}")]),
    "RegisterBrokerBody/compressed": (lambda data: RegisterBrokerBody.decode(data, compressed=True),
                                      reencode_register_body,
                                      [REGISTER.encode(compressed=True), zlib.compress(COMPRESSED_LAYOUT)]),
    "RegisterBrokerBody/compressed-4.9.8": (
        lambda data: RegisterBrokerBody.decode(data, compressed=True, version=Version.V4_9_8), reencode_register_body,
        [REGISTER.encode(compressed=True, version=Version.V4_9_8)]),
    "RegisterBrokerBody/bare-wrapper": (lambda data: RegisterBrokerBody.decode(data, version=36),
                                        reencode_register_body, [WRAPPER.encode()]),
    "TopicRouteData": (TopicRouteData.decode,
                       lambda value: TopicRouteData.decode(value.encode(True)) == TopicRouteData.decode(
                           value.encode(False)) == value,
                       [ROUTE.encode(True), ROUTE.encode(False)]),
    "ClusterInfo": (ClusterInfo.decode, lambda value: ClusterInfo.decode(value.encode()).broker_addr_table
                    == value.broker_addr_table,
                    [ClusterInfo({"b": BrokerData("c", "b", {0: "h:0"})}, {"c": ["b"]}).encode()]),
    "TopicList": (TopicList.decode, same_after_reencoding(TopicList.decode), [TopicList(["T", "U"], "h:0").encode()]),
    "KVTable": (KVTable.decode, same_after_reencoding(KVTable.decode), [KVTable({"T": "b:4"}).encode()]),
    "BrokerMemberGroup": (BrokerMemberGroup.decode, same_after_reencoding(BrokerMemberGroup.decode),
                          [BrokerMemberGroup("c", "b", {0: "h:0", 2: "h:2"}).encode()]),
    "RegisterBrokerResult": (lambda data: RegisterBrokerResult.from_response({"masterAddr": "m"}, data),
                             lambda value: value.master_addr == "m", [KVTable({"T": "b:4"}).encode()]),
    "TopicConfig/text": (lambda data: TopicConfig.from_text(data.decode("utf-8", "replace")),
                         lambda value: TopicConfig.from_text(value.to_text()).read_queue_nums == value.read_queue_nums,
                         [b"T 8 8 6 SINGLE_TAG {}", b'T 8 8 6 MULTI_TAG {"a":"1"}']),
}
NAMES = sorted(BODY_DECODERS)
JSON_BODIES = [(name, body) for name, (_, _, bodies) in sorted(BODY_DECODERS.items()) if "compressed" not in name
               and name != "TopicConfig/text" for body in bodies]
ALL_BODIES = [(name, body) for name, (_, _, bodies) in sorted(BODY_DECODERS.items()) for body in bodies]


def check_body(name: str, data: bytes) -> None:
    decode, holds_again, _ = BODY_DECODERS[name]
    value = only_protocol_errors(decode, data)
    if value is not None:
        assert holds_again(value) is not False


@FUZZ
@given(st.sampled_from(NAMES), st.binary(max_size=200))
def test_fuzz_body_decoders_random_bytes(name, data):
    check_body(name, data)


@FUZZ
@given(st.sampled_from(NAMES), JSON_VALUES)
def test_fuzz_body_decoders_random_json(name, value):
    check_body(name, json_value_for_orjson(value))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(JSON_BODIES).flatmap(lambda case: st.tuples(st.just(case[0]), json_tree_mutated(case[1]))))
def test_fuzz_body_decoders_json_tree_mutations(case):
    check_body(*case)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(ALL_BODIES).flatmap(lambda case: st.tuples(st.just(case[0]), mutated(case[1]))))
def test_fuzz_body_decoders_mutated_bytes(case):
    check_body(*case)


@FUZZ
@given(st.sampled_from([COMPRESSED_LAYOUT, zlib.decompress(REGISTER.encode(compressed=True))]).flatmap(mutated),
       st.sampled_from([Version.V4_9_8, Version.V5_3_3]))
def test_fuzz_compressed_layout_that_inflates(raw, version):
    """Valid zlib around a mutated layout: the layout parser itself must hold."""
    body = only_protocol_errors(lambda data: RegisterBrokerBody.decode(data, compressed=True, version=version),
                                zlib.compress(raw))
    if body is not None:
        reencode_register_body(body)
