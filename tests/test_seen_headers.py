"""SeenHeaders and HeaderReader: a header read from memory says exactly what its parse says.

A peer's repeated header differs from its previous one in the opaque only; SeenHeaders remembers
it without the opaque. A broker's registration header with a new body differs in its bodyCrc32
value too; HeaderReader reads it from the shape it first parsed, with the new value
(`PreparedWrite.request_for`). Here the parse is the inline path's own
(`namesrv.processor.inline.read_header`), counted, and every header read is compared with a fresh
parse: opaque and bodyCrc32 look-alikes (a second key, one inside a string or another object,
non-canonical digits) must never make memory answer differently.
"""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from namesrv import fastpath
from namesrv.processor import inline
from namesrv.processor.broker_handlers import RegistrationHeader
from namesrv.processor.inline import HeaderReader, PreparedWrite, read_header
from namesrv.processor.seen_headers import INT32, JSON_FIELD, ROCKETMQ_FIELD, SeenHeaders
from namesrv.protocol.codes import LanguageCode, RequestCode

_EXT = '"brokerName":"b1","brokerAddr":"10.0.0.1:10911","clusterName":"c1","brokerId":"0"'
_TAIL = '"flag":0,"language":"JAVA","opaque":{o},"serializeTypeCurrentRPC":"JSON","version":479}}'
#: JSON REGISTER_BROKER headers around an opaque {o} and digits {c}: the first is what brokers send.
JSON_SHAPES = [
    '{{"code":103,"extFields":{{' + _EXT + ',"bodyCrc32":"{c}"}},' + _TAIL,
    '{{"code":103,"extFields":{{"bodyCrc32":"{c}",' + _EXT + '}},' + _TAIL,
    '{{"bodyCrc32":"{c}","code":103,"extFields":{{' + _EXT + ',"bodyCrc32":77}},' + _TAIL,  # a decoy at the top
    '{{"bodyCrc32":"{c}","code":103,"extFields":{{' + _EXT + '}},' + _TAIL,  # only the decoy
    '{{"code":103,"extFields":{{' + _EXT + ',"bodyCrc32":"{c}","bodyCrc32":"5"}},' + _TAIL,  # twice
    '{{"code":103,"x":{{"bodyCrc32":"{c}"}},"extFields":{{' + _EXT + ',"bodyCrc32":"9"}},' + _TAIL,
    '{{"code":103,"remark":"\\"bodyCrc32\\":\\"{c}\\"","extFields":{{' + _EXT + ',"bodyCrc32":"9"}},' + _TAIL,
    '{{"code":103,"extFields":{{' + _EXT + ',"bodyCrc32":"{c}"}},"flag":1,"opaque":{o},"version":479}}',  # oneway
    '{{"code":105,"extFields":{{"topic":"T","bodyCrc32":"{c}"}},"flag":0,"opaque":{o},"version":479}}',  # a query
    # a second "opaque": (in another object): never remembered, so never learned as a shape either
    '{{"code":103,"extFields":{{' + _EXT + ',"bodyCrc32":"{c}"}},"flag":0,"opaque":{o},"x":{{"opaque":3}}}}',
]
IDENTITY = {"brokerName": "b1", "brokerAddr": "10.0.0.1:10911", "clusterName": "c1", "brokerId": "0"}
DIGITS = st.one_of(st.integers(0, 2 ** 31 - 1).map(str), st.from_regex(r"0[0-9]{1,9}", fullmatch=True),
                   st.sampled_from(["2147483647", "2147483648", "9999999999", "12345678901", "", "-1", "1a", " 1",
                                    "77", "9", "5"]))  # the decoys' own digits: they must not teach memory
OPAQUES = st.integers(-(2 ** 31), 2 ** 31 - 1)


def binary_header(opaque: int, digits: str, shape: int) -> bytes:
    """A binary REGISTER_BROKER header: 0 plain, 1 a remark spelling the field out, 2 the field twice
    (once in the remark), 3 only the remark's."""
    ext = dict(IDENTITY) if shape == 3 else {**IDENTITY, "bodyCrc32": digits}
    decoy = "\x00\tbodyCrc32\x00\x00\x00" + chr(len(digits)) + digits
    remark = {0: None, 1: "x" + decoy.replace("bodyCrc32", "bodyCrc3"), 2: decoy, 3: decoy}[shape]
    return fastpath.encode_binary_header(RequestCode.REGISTER_BROKER, LanguageCode.JAVA, 479, opaque, 0, remark, ext)


def as_read(read: tuple | None, frame: bytes, crc: int | None = None) -> tuple | None:
    """(opaque, what) of a header read, a write's as the request its frame makes: (opaque, its typed
    header, the request)."""
    if read is None or type(read[1]) is not PreparedWrite:
        return read
    opaque, what = read
    request = what.request_for(opaque, frame, crc)
    return opaque, request.typed_header(type(what.header)), request


def reactor_read(reader: HeaderReader, headers: SeenHeaders, header: bytes) -> tuple | None:
    """A JSON header read as `InlineAnswers.answer_all` reads it (remembered, from its shape, or
    parsed), in `as_read`'s form."""
    frame = INT32.pack(len(header)) + header
    keys, opaques = fastpath.json_opaque_keys([frame])
    what = headers.json.table.get(keys[0], headers)
    if what is not headers:
        return as_read((opaques[0], what), frame)
    what, crc = reader.shape(keys[0])
    if what is not None:
        return as_read((opaques[0], what), frame, crc)
    return as_read(headers.read(JSON_FIELD, header), frame)


def parsed(header: bytes) -> tuple | None:
    return as_read(read_header(JSON_FIELD, header), INT32.pack(len(header)) + header)


class CountedParse:
    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, serialize_field: int, header: bytes, json_split: tuple | None = None):
        self.calls += 1
        return read_header(serialize_field, header)


def test_a_new_body_crc_is_read_from_its_shape_not_parsed_nor_remembered(monkeypatch):
    parse = CountedParse()
    monkeypatch.setattr(inline, "read_header", parse)
    reader = HeaderReader()
    headers = SeenHeaders(reader)
    first = JSON_SHAPES[0].format(o=1, c="104391605").encode()
    assert reactor_read(reader, headers, first) == parsed(first)
    assert parse.calls == 2  # the parse, and the check that the digits are the field's
    for opaque, digits in ((2, "7"), (3, "2147483647"), (4, "0"), (5, "104391605")):
        header = JSON_SHAPES[0].format(o=opaque, c=digits).encode()
        read = reactor_read(reader, headers, header)
        calls = parse.calls
        assert read == parsed(header) and read[1].body_crc32 == int(digits)
        assert type(read[1]) is RegistrationHeader  # made directly
        assert read[2].ext_fields["bodyCrc32"] == digits and read[2].opaque == opaque
        parse.calls = calls
    assert parse.calls == 2 and len(headers.json) == 1
    assert reactor_read(reader, headers, JSON_SHAPES[0].format(o=6, c="007").encode())[1].body_crc32 == 7
    assert parse.calls == 3  # not canonical: parsed


@pytest.mark.parametrize("shape", JSON_SHAPES[2:6] + JSON_SHAPES[-1:])  # the field at the top, twice, nested
def test_body_crc_look_alikes_never_teach_the_reader(monkeypatch, shape):
    parse = CountedParse()
    monkeypatch.setattr(inline, "read_header", parse)
    reader = HeaderReader()
    for digits in ("77", "9", "5", "123", "0"):
        header = shape.format(o=1, c=digits).encode()
        reader(JSON_FIELD, header, fastpath.json_opaque_key(header))
    assert len(reader.shapes) == 0


@pytest.fixture
def seen():
    parse = CountedParse()
    return parse, SeenHeaders(parse)


def test_a_repeat_is_read_from_memory_and_a_new_body_crc_is_parsed(seen):
    parse, headers = seen
    shape = JSON_SHAPES[0]
    for opaque in (1, 2, -3, 2 ** 31 - 1):
        header = shape.format(o=opaque, c="104391605").encode()
        read = headers.read(JSON_FIELD, header)
        assert read == read_header(JSON_FIELD, header) and type(read[1]) is PreparedWrite
    assert parse.calls == 1
    header = shape.format(o=5, c="7").encode()
    assert headers.read(JSON_FIELD, header)[1].header.body_crc32 == 7
    assert parse.calls == 2 and len(headers.json) == 2


def test_a_binary_repeat_is_read_from_memory(seen):
    parse, headers = seen
    for opaque in (1, 2, -3):
        header = binary_header(opaque, "104391605", 0)
        assert headers.read(ROCKETMQ_FIELD, header) == read_header(ROCKETMQ_FIELD, header)
    assert parse.calls == 1


@pytest.mark.parametrize("header", [
    b'{"code":105,"extFields":{"topic":"T"},"opaque":1,"opaque":2,"flag":0}',  # twice: the parse takes the last
    b'{"code":105,"extFields":{"topic":"T","x":"\\"opaque\\":9,"},"flag":0,"opaque":1}',  # inside a string first
    b'{"code":105,"extFields":{"topic":"T"},"flag":0,"opaque":01,"version":1}',  # not canonical digits
    b'{"code":105,"extFields":{"topic":"T"},"flag":0,"opaque":"1","version":1}',  # a string
])
def test_opaque_look_alikes_are_parsed_every_time(seen, header):
    parse, headers = seen
    for _ in range(2):
        assert headers.read(JSON_FIELD, header) == read_header(JSON_FIELD, header)
    assert len(headers.json) == 0


@settings(max_examples=300, deadline=None)
@given(shape=st.sampled_from(JSON_SHAPES), reads=st.lists(st.tuples(OPAQUES, DIGITS), min_size=1, max_size=6))
def test_any_json_header_from_memory_is_its_parse(shape, reads):
    reader = HeaderReader()
    headers = SeenHeaders(reader)
    for opaque, digits in reads:
        header = shape.format(o=opaque, c=digits).encode()
        assert reactor_read(reader, headers, header) == parsed(header)


@settings(max_examples=200, deadline=None)
@given(shape=st.integers(0, 3), reads=st.lists(st.tuples(OPAQUES, DIGITS), min_size=1, max_size=6))
def test_any_binary_header_from_memory_is_its_parse(shape, reads):
    headers = SeenHeaders(read_header)
    for opaque, digits in reads:
        header = binary_header(opaque, digits, shape)
        assert headers.read(ROCKETMQ_FIELD, header) == read_header(ROCKETMQ_FIELD, header)


@settings(max_examples=300, deadline=None)
@given(code=st.sampled_from([103, 105, 0x0100, 0x0964]), language=st.integers(0, 255), version=st.integers(0, 32767),
       flag=st.integers(0, 2 ** 31 - 1), remark=st.one_of(st.none(), st.sampled_from(["", "\x00\tbodyCrc32", "x"])),
       reads=st.lists(st.tuples(OPAQUES, DIGITS), min_size=1, max_size=4))
def test_any_binary_header_with_any_fixed_fields_from_memory_is_its_parse(code, language, version, flag, remark,
                                                                          reads):
    headers = SeenHeaders(read_header)
    for opaque, digits in reads:
        header = fastpath.encode_binary_header(code, language, version, opaque, flag, remark,
                                               {**IDENTITY, "bodyCrc32": digits})
        assert headers.read(ROCKETMQ_FIELD, header) == read_header(ROCKETMQ_FIELD, header)
