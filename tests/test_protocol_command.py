"""RemotingCommand and its header codecs (reference sections 1.2-1.5, 2.1, 2.3).

Byte-exact checks against the reference's worked examples, flag and codec rules of responses,
round trips in both header codecs, and how lenient / strict the JSON header decoder is. Every
test runs once per fast-path implementation (pure Python, and Cython when it is built).
"""
from __future__ import annotations

import struct

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from namesrv.protocol import (
    FLAG_ONEWAY,
    FLAG_RESPONSE,
    SERVER_VERSION,
    LanguageCode,
    ProtocolError,
    RemotingCommand,
    RequestCode,
    ResponseCode,
    SerializeType,
    Version,
)
from namesrv.protocol.json_header import decode_json_header, encode_json_header


pytestmark = pytest.mark.usefixtures("each_fastpath")


def roundtrip(command: RemotingCommand) -> RemotingCommand:
    frame = command.encode()
    (total,) = struct.unpack_from(">i", frame)
    assert total == len(frame) - 4
    return RemotingCommand.decode(frame[4:])


def header_json(header: bytes) -> bytes:
    """A JSON header wrapped as a frame without its length prefix."""
    return len(header).to_bytes(4, "big") + header


# --- codes ------------------------------------------------------------------------------------

REFERENCE_REQUEST_CODES = {
    100: "PUT_KV_CONFIG", 101: "GET_KV_CONFIG", 102: "DELETE_KV_CONFIG", 103: "REGISTER_BROKER",
    104: "UNREGISTER_BROKER", 105: "GET_ROUTEINFO_BY_TOPIC", 106: "GET_BROKER_CLUSTER_INFO",
    205: "WIPE_WRITE_PERM_OF_BROKER", 206: "GET_ALL_TOPIC_LIST_FROM_NAMESERVER", 216: "DELETE_TOPIC_IN_NAMESRV",
    217: "REGISTER_TOPIC_IN_NAMESRV", 219: "GET_KVLIST_BY_NAMESPACE", 224: "GET_TOPICS_BY_CLUSTER",
    304: "GET_SYSTEM_TOPIC_LIST_FROM_NS", 311: "GET_UNIT_TOPIC_LIST", 312: "GET_HAS_UNIT_SUB_TOPIC_LIST",
    313: "GET_HAS_UNIT_SUB_UNUNIT_TOPIC_LIST", 318: "UPDATE_NAMESRV_CONFIG", 319: "GET_NAMESRV_CONFIG",
    322: "QUERY_DATA_VERSION", 327: "ADD_WRITE_PERM_OF_BROKER", 901: "GET_BROKER_MEMBER_GROUP",
    904: "BROKER_HEARTBEAT", 905: "NOTIFY_MIN_BROKER_ID_CHANGE",
}
REFERENCE_RESPONSE_CODES = {
    0: "SUCCESS", 1: "SYSTEM_ERROR", 2: "SYSTEM_BUSY", 3: "REQUEST_CODE_NOT_SUPPORTED", 4: "TRANSACTION_FAILED",
    16: "NO_PERMISSION", 17: "TOPIC_NOT_EXIST", 22: "QUERY_NOT_FOUND", 1500: "GO_AWAY",
}
REFERENCE_LANGUAGES = ["JAVA", "CPP", "DOTNET", "PYTHON", "DELPHI", "ERLANG", "RUBY", "OTHER", "HTTP", "GO", "PHP",
                       "OMS", "RUST", "NODE_JS"]
REFERENCE_VERSIONS = {"V3_0_11": 37, "V4_5_2": 317, "V4_6_0": 333, "V4_9_4": 401, "V4_9_8": 409, "V5_0_0": 413,
                      "V5_3_3": 479}


@pytest.mark.parametrize(("code", "name"), sorted(REFERENCE_REQUEST_CODES.items()))
def test_every_reference_request_code_is_defined(code, name):
    assert RequestCode(code).name == name


@pytest.mark.parametrize(("code", "name"), sorted(REFERENCE_RESPONSE_CODES.items()))
def test_every_reference_response_code_is_defined(code, name):
    assert ResponseCode(code).name == name


def test_language_codes_and_versions_match_the_reference():
    assert [LanguageCode(i).name for i in range(len(REFERENCE_LANGUAGES))] == REFERENCE_LANGUAGES
    assert {name: int(Version[name]) for name in REFERENCE_VERSIONS} == REFERENCE_VERSIONS
    assert SERVER_VERSION == 479
    assert (FLAG_RESPONSE, FLAG_ONEWAY) == (1, 2)
    assert (SerializeType.JSON, SerializeType.ROCKETMQ) == (0, 1)


# --- the reference's worked examples, byte for byte -----------------------------------------

JSON_REQUEST_HEADER = (b'{"code":105,"extFields":{"topic":"TopicTest"},"flag":0,"language":"JAVA","opaque":1,'
                       b'"serializeTypeCurrentRPC":"JSON","version":479}')
JSON_RESPONSE_HEADER = (b'{"code":0,"flag":1,"language":"JAVA","opaque":1,"serializeTypeCurrentRPC":"JSON",'
                        b'"version":479}')
BINARY_REQUEST_FRAME = bytes.fromhex(
    "0000002d 01000029 0069 00 01df 00000001 00000000 00000000 00000014 0005 746f706963 00000009 546f70696354657374")
BINARY_RESPONSE_FRAME = bytes.fromhex("00000019 01000015 0000 00 01df 00000001 00000001 00000000 00000000")


def reference_request(serialize_type: int) -> RemotingCommand:
    return RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "TopicTest"}, opaque=1,
                                   language=LanguageCode.JAVA, serialize_type=serialize_type)


def test_json_request_is_the_reference_example():
    assert len(JSON_REQUEST_HEADER) == 131
    assert reference_request(SerializeType.JSON).encode() == bytes.fromhex("00000087 00000083") + JSON_REQUEST_HEADER


def test_json_response_is_the_reference_example():
    response = reference_request(SerializeType.JSON).make_response(ResponseCode.SUCCESS)
    frame = response.encode()
    assert frame[8:] == JSON_RESPONSE_HEADER
    assert frame[:8] == struct.pack(">ii", 4 + len(JSON_RESPONSE_HEADER), len(JSON_RESPONSE_HEADER))


def test_binary_request_is_the_reference_example():
    assert reference_request(SerializeType.ROCKETMQ).encode() == BINARY_REQUEST_FRAME


def test_binary_minimal_response_is_the_reference_example():
    response = reference_request(SerializeType.ROCKETMQ).make_response(ResponseCode.SUCCESS)
    assert response.encode() == BINARY_RESPONSE_FRAME


@pytest.mark.parametrize("frame", [bytes.fromhex("00000087 00000083") + JSON_REQUEST_HEADER, BINARY_REQUEST_FRAME],
                         ids=["json", "binary"])
def test_reference_requests_decode(frame):
    command = RemotingCommand.decode(frame[4:])
    assert (command.code, command.language, command.version, command.opaque, command.flag) == (105, 0, 479, 1, 0)
    assert command.ext_fields == {"topic": "TopicTest"}
    assert command.remark is None and command.body is None
    assert command.serialize_type == frame[4]
    assert command.encode() == frame


def test_reference_binary_response_decodes():
    response = RemotingCommand.decode(BINARY_RESPONSE_FRAME[4:])
    assert response.is_response and not response.is_oneway
    assert (response.code, response.opaque, response.version, response.remark, response.ext_fields) == (0, 1, 479, None,
                                                                                                       None)


# --- requests, responses, flags ---------------------------------------------------------------

def test_request_defaults_and_wire_strings():
    request = RemotingCommand.request(RequestCode.REGISTER_BROKER, {
        "brokerId": 0, "compressed": False, "enableActingMaster": True, "brokerName": "b", "zoneName": None})
    assert request.flag == 0 and not request.is_response and not request.is_oneway
    assert request.ext_fields == {"brokerId": "0", "compressed": "false", "enableActingMaster": "true",
                                  "brokerName": "b"}
    assert (request.language, request.version, request.serialize_type) == (LanguageCode.PYTHON, 479, SerializeType.JSON)
    assert RemotingCommand.request(RequestCode.GET_BROKER_CLUSTER_INFO).ext_fields is None


def test_oneway_request_sets_only_the_oneway_bit():
    request = RemotingCommand.request(RequestCode.BROKER_HEARTBEAT, {"clusterName": "c"}, oneway=True)
    assert request.flag == FLAG_ONEWAY and request.is_oneway and not request.is_response
    assert roundtrip(request).is_oneway


@pytest.mark.parametrize("serialize_type", list(SerializeType))
@pytest.mark.parametrize("opaque", [0, 1, 42, -1, -(1 << 31), (1 << 31) - 1])
def test_response_echoes_opaque_and_keeps_the_request_codec(serialize_type, opaque):
    request = RemotingCommand(RequestCode.GET_KV_CONFIG, language=LanguageCode.GO, version=Version.V4_5_2,
                              opaque=opaque, flag=FLAG_ONEWAY, ext_fields={"namespace": "n", "key": "k"},
                              serialize_type=serialize_type)
    response = request.make_response(ResponseCode.QUERY_NOT_FOUND, "No config item", {"value": "v"}, b"body")
    assert response.flag == FLAG_RESPONSE  # exactly the response bit, even for a oneway request
    assert response.is_response and not response.is_oneway
    assert response.opaque == opaque
    assert response.serialize_type == serialize_type
    assert (response.language, response.version) == (LanguageCode.JAVA, SERVER_VERSION)
    decoded = roundtrip(response)
    assert decoded == response
    assert decoded.serialize_type == serialize_type


@pytest.mark.parametrize("serialize_type", list(SerializeType))
def test_response_frame_carries_the_request_codec_in_the_type_byte(serialize_type):
    request = RemotingCommand.decode(reference_request(serialize_type).encode()[4:])
    frame = request.make_response(ResponseCode.TOPIC_NOT_EXIST, "No topic route info").encode()
    assert frame[4] == serialize_type


def test_flag_bits_decode_independently():
    for flag, response, oneway in [(0, False, False), (1, True, False), (2, False, True), (3, True, True),
                                   (0x7FFFFFFC, False, False)]:
        command = RemotingCommand(0, flag=flag)
        assert (command.is_response, command.is_oneway) == (response, oneway)
        assert roundtrip(command).flag == flag


def test_empty_body_travels_as_no_body():
    command = RemotingCommand(RequestCode.GET_BROKER_CLUSTER_INFO, body=b"")
    assert command.encode() == RemotingCommand(RequestCode.GET_BROKER_CLUSTER_INFO).encode()
    assert roundtrip(command).body is None


def test_body_follows_the_header_and_counts_in_total_length():
    body = b'{"table":{"k":"v"}}'
    frame = RemotingCommand(ResponseCode.SUCCESS, flag=FLAG_RESPONSE, body=body).encode()
    total, field = struct.unpack_from(">ii", frame)
    assert total == 4 + (field & 0xFFFFFF) + len(body)
    assert frame.endswith(body)


def test_repr_names_kind_and_body_size():
    assert "oneway" in repr(RemotingCommand(904, flag=FLAG_ONEWAY))
    assert "response" in repr(RemotingCommand(0, flag=FLAG_RESPONSE, body=b"abc")) and "3 bytes" in repr(
        RemotingCommand(0, flag=FLAG_RESPONSE, body=b"abc"))


# --- JSON header encoding ------------------------------------------------------------------

def test_json_field_order_is_alphabetical():
    header = encode_json_header(17, LanguageCode.JAVA, 479, 9, 1, "No topic", {"b": "2", "a": "1"})
    assert list(orjson.loads(header)) == ["code", "extFields", "flag", "language", "opaque", "remark",
                                          "serializeTypeCurrentRPC", "version"]
    assert header == (b'{"code":17,"extFields":{"b":"2","a":"1"},"flag":1,"language":"JAVA","opaque":9,'
                      b'"remark":"No topic","serializeTypeCurrentRPC":"JSON","version":479}')


def test_json_null_remark_and_ext_fields_are_omitted_but_empty_ones_are_kept():
    assert list(orjson.loads(encode_json_header(0, 0, 479, 1, 1, None, None))) == [
        "code", "flag", "language", "opaque", "serializeTypeCurrentRPC", "version"]
    assert orjson.loads(encode_json_header(0, 0, 479, 1, 1, "", {})) == {
        "code": 0, "extFields": {}, "flag": 1, "language": "JAVA", "opaque": 1, "remark": "",
        "serializeTypeCurrentRPC": "JSON", "version": 479}


@pytest.mark.parametrize(("language", "name"), [(LanguageCode.GO, "GO"), (LanguageCode.CPP, "CPP"),
                                                (LanguageCode.NODE_JS, "NODE_JS"), (200, "OTHER")])
def test_json_language_is_written_by_name(language, name):
    assert orjson.loads(encode_json_header(0, language, 479, 0, 0, None, None))["language"] == name


def test_binary_header_keeps_a_language_byte_json_cannot_name():
    command = RemotingCommand(0, language=200, serialize_type=SerializeType.ROCKETMQ)
    assert roundtrip(command).language == 200


def test_non_ascii_strings_survive_both_codecs():
    for serialize_type in SerializeType:
        command = RemotingCommand(1, remark="失败 \u00e9\U0001F600 \"quoted\" \\ \n", ext_fields={"kéy": "välue"},
                                  serialize_type=serialize_type)
        assert roundtrip(command) == command


# --- round trips ----------------------------------------------------------------------------

INT16 = st.integers(-(1 << 15), (1 << 15) - 1)
INT32 = st.integers(-(1 << 31), (1 << 31) - 1)
BODIES = st.none() | st.binary(min_size=1, max_size=64)


@st.composite
def json_commands(draw) -> RemotingCommand:
    return RemotingCommand(
        draw(INT32), language=draw(st.sampled_from(list(LanguageCode))), version=draw(INT32), opaque=draw(INT32),
        flag=draw(INT32), remark=draw(st.none() | st.text(max_size=20)),
        ext_fields=draw(st.none() | st.dictionaries(st.text(max_size=8), st.text(max_size=12), max_size=5)),
        body=draw(BODIES), serialize_type=SerializeType.JSON)


@st.composite
def binary_commands(draw) -> RemotingCommand:
    """Binary headers cannot tell an empty string from null, so only non-empty strings round-trip."""
    text = st.text(min_size=1, max_size=12)
    return RemotingCommand(
        draw(INT16), language=draw(st.integers(0, 255)), version=draw(INT16), opaque=draw(INT32), flag=draw(INT32),
        remark=draw(st.none() | text), ext_fields=draw(st.none() | st.dictionaries(text, text, min_size=1, max_size=5)),
        body=draw(BODIES), serialize_type=SerializeType.ROCKETMQ)


@settings(max_examples=150, deadline=None)
@given(json_commands() | binary_commands())
def test_encode_decode_round_trip(command):
    assert roundtrip(command) == command


@settings(max_examples=100, deadline=None)
@given(json_commands() | binary_commands(), st.integers(0, (1 << 15) - 1), st.text(max_size=10))
def test_response_round_trips_in_the_request_codec(request, code, remark):
    response = request.make_response(code, remark or None)
    decoded = roundtrip(response)
    assert decoded == response
    assert (decoded.opaque, decoded.serialize_type, decoded.flag) == (request.opaque, request.serialize_type,
                                                                      FLAG_RESPONSE)


def test_binary_header_drops_empty_strings_as_java_does():
    command = RemotingCommand(0, remark="", ext_fields={"AccessKey": "", "": "x", "topic": "T"},
                              serialize_type=SerializeType.ROCKETMQ)
    decoded = roundtrip(command)
    assert decoded.remark is None and decoded.ext_fields == {"topic": "T"}
    assert roundtrip(RemotingCommand(0, ext_fields={"k": ""}, serialize_type=SerializeType.ROCKETMQ)).ext_fields is None


def test_binary_header_cannot_carry_a_code_beyond_int16():
    with pytest.raises(ProtocolError, match="binary header cannot carry"):
        RemotingCommand(1 << 15, serialize_type=SerializeType.ROCKETMQ).encode()


def test_encoding_an_unknown_serialize_type_is_refused():
    with pytest.raises(ProtocolError, match="unknown serialize type 2"):
        RemotingCommand(0, serialize_type=2).encode()


@pytest.mark.parametrize("serialize_type", list(SerializeType))
def test_a_header_over_24_bits_is_refused_not_corrupted(serialize_type):
    command = RemotingCommand(1, remark="x" * (1 << 24), serialize_type=serialize_type)
    with pytest.raises(ProtocolError, match="24-bit header-length"):
        command.encode()


# --- JSON header leniency (reference 1.2) -----------------------------------------------------

def decode_header(obj: dict | bytes) -> RemotingCommand:
    raw = obj if isinstance(obj, bytes) else orjson.dumps(obj)
    return RemotingCommand.decode(header_json(raw))


def test_unknown_fields_are_ignored():
    command = decode_header({"code": 105, "opaque": 3, "futureField": {"nested": [1, 2]}, "serializeTypeCurrentRPC":
                             "ROCKETMQ", "extFields": {"topic": "T"}})
    assert (command.code, command.opaque, command.ext_fields) == (105, 3, {"topic": "T"})
    assert command.serialize_type == SerializeType.JSON  # the type byte decides, not the informational field


@pytest.mark.parametrize(("language", "expected"), [
    ("JAVA", LanguageCode.JAVA), ("GO", LanguageCode.GO), ("CPP", LanguageCode.CPP), ("PYTHON", LanguageCode.PYTHON),
    ("KLINGON", LanguageCode.OTHER), ("", LanguageCode.OTHER), (9, LanguageCode.GO), (0, LanguageCode.JAVA),
    (99, LanguageCode.OTHER), (-1, LanguageCode.OTHER), (None, LanguageCode.OTHER), (True, LanguageCode.OTHER),
    (1.5, LanguageCode.OTHER), ([1], LanguageCode.OTHER),
])
def test_language_may_be_any_string_or_int(language, expected):
    assert decode_header({"code": 0, "language": language}).language == expected


def test_missing_language_is_harmless():
    assert decode_header({"code": 0}).language == LanguageCode.OTHER


def test_empty_remark_is_kept():
    assert decode_header({"code": 1, "remark": ""}).remark == ""


def test_numeric_remark_is_coerced():
    assert decode_header({"code": 1, "remark": 42}).remark == "42"


def test_ext_field_numbers_and_booleans_become_strings():
    command = decode_header({"code": 103, "extFields": {"brokerId": 0, "compressed": False, "enableActingMaster": True,
                                                        "bodyCrc32": -12, "ratio": 1.5, "gone": None, "s": "x"}})
    assert command.ext_fields == {"brokerId": "0", "compressed": "false", "enableActingMaster": "true",
                                  "bodyCrc32": "-12", "ratio": "1.5", "s": "x"}


@pytest.mark.parametrize("ext", [None, "missing"])
def test_missing_or_null_ext_fields_decode_as_none(ext):
    header = {"code": 106, "opaque": 1}
    if ext is None:
        header["extFields"] = None
    assert decode_header(header).ext_fields is None


def test_cpp_client_quirks_are_accepted():
    # rocketmq-client-cpp: its own field order, "remark":"" always, empty credential entries.
    header = (b'{"code":105,"language":"CPP","version":333,"opaque":7,"flag":0,"remark":"",'
              b'"extFields":{"topic":"TopicTest","AccessKey":"","Signature":"","OnsChannel":""}}')
    command = decode_header(header)
    assert (command.code, command.language, command.version, command.opaque) == (105, LanguageCode.CPP, 333, 7)
    assert command.remark == ""
    assert command.ext_fields == {"topic": "TopicTest", "AccessKey": "", "Signature": "", "OnsChannel": ""}


def test_go_client_header_is_accepted():
    header = b'{"code":105,"language":"GO","version":317,"opaque":1,"flag":0,"extFields":{"topic":"T"}}'
    command = decode_header(header)
    assert (command.language, command.version) == (LanguageCode.GO, 317)


def test_numeric_strings_are_coerced_like_fastjson():
    command = decode_header({"code": "105", "opaque": "-7", "flag": "+2", "version": "479"})
    assert (command.code, command.opaque, command.flag, command.version) == (105, -7, 2, 479)


def test_absent_or_null_integers_default_to_zero():
    assert decode_header({"code": None, "flag": None}).code == 0
    command = decode_header({})
    assert (command.code, command.opaque, command.flag, command.version) == (0, 0, 0, 0)


def test_int32_extremes_are_accepted():
    command = decode_header({"code": (1 << 31) - 1, "opaque": -(1 << 31)})
    assert (command.code, command.opaque) == ((1 << 31) - 1, -(1 << 31))


# --- JSON header strictness ------------------------------------------------------------------

@pytest.mark.parametrize("raw", [b"[]", b"1", b'"code"', b"null", b"true"])
def test_header_must_be_an_object(raw):
    with pytest.raises(ProtocolError, match="must be an object"):
        decode_json_header(raw)


@pytest.mark.parametrize("raw", [b"", b"{", b'{"code":105', b"{code:105}", b'{"code":105,}', b"{'code':1}",
                                 b'{"code":NaN}', b'{"code":1e999}'])
def test_invalid_json_is_refused(raw):
    with pytest.raises(ProtocolError, match="not valid JSON"):
        decode_json_header(raw)


@pytest.mark.parametrize("raw", [b'{"code":0,"remark":"\xff"}', b'{"code":0,"remark":"\xc3"}',
                                 b'{"code":0,"extFields":{"k":"\xed\xa0\x80"}}', b'{"\xfe":1}'])
def test_invalid_utf8_is_refused(raw):
    with pytest.raises(ProtocolError, match="UTF-8"):
        decode_json_header(raw)


@pytest.mark.parametrize("field", ["code", "opaque", "flag", "version"])
@pytest.mark.parametrize("value", ["abc", "", " 5", "1_0", "0x10", 1.5, 1.0, True, False, [1], {"v": 1}])
def test_integer_fields_of_the_wrong_type_are_refused(field, value):
    with pytest.raises(ProtocolError, match=f"'{field}' must be a 32-bit integer"):
        decode_json_header(orjson.dumps({field: value}))


@pytest.mark.parametrize("field", ["code", "opaque", "flag", "version"])
@pytest.mark.parametrize("value", [1 << 31, -(1 << 31) - 1, 1 << 63, (1 << 64) - 1, "2147483648", "9" * 30])
def test_integer_fields_out_of_int32_range_are_refused(field, value):
    with pytest.raises(ProtocolError, match=f"'{field}' must be a 32-bit integer"):
        decode_json_header(orjson.dumps({field: value}))


@pytest.mark.parametrize("remark", [[], {}, True])
def test_remark_of_the_wrong_type_is_refused(remark):
    with pytest.raises(ProtocolError, match="'remark'"):
        decode_json_header(orjson.dumps({"code": 1, "remark": remark}))


@pytest.mark.parametrize("ext", [[], "topic=T", 5, True])
def test_ext_fields_must_be_an_object(ext):
    with pytest.raises(ProtocolError, match="'extFields' must be an object"):
        decode_json_header(orjson.dumps({"code": 1, "extFields": ext}))


@pytest.mark.parametrize("value", [[1], {"a": "b"}])
def test_ext_field_values_must_be_scalars(value):
    with pytest.raises(ProtocolError, match=r"extFields\['topic'\]"):
        decode_json_header(orjson.dumps({"code": 1, "extFields": {"topic": value}}))
