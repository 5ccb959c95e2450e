"""`scan_registration`'s parse (registration bodies straight to queue-fields tuples) and
`count_entries` (a topic table's size, for maxTopicsPerRegistration) on both fast paths.

What it leaves out against a previous registration is tested in test_scan_registration.py.

Both twins are held to fastpath_cases.reference, written from the contract and not from either twin:
orjson.loads, then the plain entries of the object at the path (every member of its JSON type, ints
within int32) become queue-field tuples. The pure twin must answer exactly that; the Cython scanner
may answer None ("not for me": the caller parses leniently), but never anything else: objects of
the same types, keys in the same order. For JSON without floats, integers beyond 64 bits or deep
nesting it must answer, or the fast path would never be taken.
"""
from __future__ import annotations

import gc
import json
import random
from dataclasses import dataclass
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bench.lib.fleet import FleetShape, register_body
from fastpath_cases import (ANY_VALUE, ENTRY_FIELDS, IMPLEMENTATIONS, INT32_MAX, INT32_MIN, PLAIN_ENTRY, check_facts,
                            plain_body, reference, reference_count, scanned_table)
from namesrv.fastpath import pure, registration
from namesrv.protocol import ProtocolError, RegisterBrokerBody, TopicConfig, TopicConfigSerializeWrapper, Version
from namesrv.protocol.topic import DataVersion, TopicQueueTable, _decode_json_body, decode_registration

each_impl = pytest.mark.parametrize("impl", IMPLEMENTATIONS)
TABLE_PATH = ("topicConfigSerializeWrapper", "topicConfigTable")
LEGACY_PATH = ("topicConfigTable",)
PROPERTY = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@pytest.fixture(scope="module")
def live(each_fastpath):
    """namesrv.fastpath routed to each implementation in turn."""
    return each_fastpath


def same(a: Any, b: Any) -> bool:
    """Equal, of the same types all the way down, dict keys in the same order (`==` alone takes
    True or 1.0 for 1 and ignores key order)."""
    if type(a) is not type(b):
        return False
    if type(a) is dict:
        return list(a) == list(b) and all(same(a[key], b[key]) for key in a)
    if type(a) in (list, tuple):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return a == b


def scanned(impl, data: Any, path: tuple[str, ...]) -> object:
    """scan_registration's value, with no previous registration (None: not for this scanner)."""
    result = impl.scan_registration(data, path, None)
    if result is None:
        return None
    value, _, omitted, _ = result
    assert omitted == 0
    check_facts(impl, result, path)
    return value


def counts(impl, data: bytes, path: tuple[str, ...]) -> int | None:
    """impl's count_entries, checked to be exactly the reference's (Cython: or None); returns it."""
    got = impl.count_entries(data, path)
    if got is not None or impl is pure:
        assert got == reference_count(data, path), (data[:200], got)
    return got


def agrees(impl, data: bytes, path: tuple[str, ...]) -> object:
    """impl's answer, checked to be exactly the reference's (Cython: or None); returns it."""
    got = scanned(impl, data, path)
    if got is not None or impl is pure:
        expected = reference(data, path)
        assert same(got, expected), (data[:200], got, expected)
    return got


# ---------------------------------------------------------------- JSON documents, written many ways

@dataclass(frozen=True)
class Obj:
    """A JSON object as written: (key, value) pairs, so a key may occur twice."""

    pairs: tuple[tuple[str, Any], ...]


def to_python(value: Any) -> Any:
    """What a parser makes of it: the last of duplicate keys wins, in its first key's place."""
    if isinstance(value, Obj):
        out: dict[str, Any] = {}
        for key, item in value.pairs:
            out[key] = to_python(item)
        return out
    if isinstance(value, list):
        return [to_python(item) for item in value]
    return value


_SIMPLE_ESCAPES = {'"': '\\"', "\\": "\\\\", "/": "\\/", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r",
                   "\t": "\\t"}


class Writer:
    """Writes a document with random whitespace and random (valid) string escapes."""

    def __init__(self, seed: int, ascii_only: bool, escape_rate: float, whitespace: bool) -> None:
        self.rng = random.Random(seed)
        self.ascii_only = ascii_only
        self.escape_rate = escape_rate
        self.whitespace = whitespace

    def ws(self) -> str:
        return self.rng.choice(["", "", "", " ", "\n", "\t", "\r\n  "]) if self.whitespace else ""

    def u_escape(self, code: int) -> str:
        text = "\\u%04x" % code
        return text.upper().replace("\\U", "\\u") if self.rng.random() < 0.5 else text

    def char(self, ch: str) -> str:
        code = ord(ch)
        must = ch in '"\\' or code < 0x20 or (self.ascii_only and code > 0x7E)
        if not must and self.rng.random() >= self.escape_rate:
            return ch
        if ch in _SIMPLE_ESCAPES and self.rng.random() < 0.7:
            return _SIMPLE_ESCAPES[ch]
        if code > 0xFFFF:
            code -= 0x10000
            return self.u_escape(0xD800 + (code >> 10)) + self.u_escape(0xDC00 + (code & 0x3FF))
        return self.u_escape(code)

    def string(self, text: str) -> str:
        return '"' + "".join(self.char(ch) for ch in text) + '"'

    def value(self, value: Any) -> str:
        if value is None:
            return "null"
        if value is True:
            return "true"
        if value is False:
            return "false"
        if isinstance(value, int):
            return str(value)
        if isinstance(value, str):
            return self.string(value)
        if isinstance(value, list):
            inner = ",".join(self.ws() + self.value(item) + self.ws() for item in value)
            return "[" + (inner or self.ws()) + "]"
        inner = ",".join(self.ws() + self.string(key) + self.ws() + ":" + self.ws() + self.value(item) + self.ws()
                         for key, item in value.pairs)
        return "{" + (inner or self.ws()) + "}"

    def document(self, value: Any) -> bytes:
        return (self.ws() + self.value(value) + self.ws()).encode("utf-8")


def serialize(value: Any, style: tuple) -> bytes:
    """`value` as one of several writers would put it: orjson, json (ASCII or not), or Writer."""
    kind, seed = style
    if kind == "orjson":
        return orjson.dumps(to_python(value))
    if kind == "json-ascii":
        return json.dumps(to_python(value), ensure_ascii=True).encode()
    if kind == "json-utf8":
        return json.dumps(to_python(value), ensure_ascii=False, indent=seed % 3 or None).encode()
    return Writer(seed, ascii_only=kind == "writer-ascii", escape_rate=0.2, whitespace=True).document(value)


STYLES = st.tuples(st.sampled_from(["orjson", "json-ascii", "json-utf8", "writer", "writer-ascii"]),
                   st.integers(0, 2 ** 32))
texts = st.text(st.characters(exclude_categories=["Cs"]), max_size=10)  # UTF-8 can carry no lone surrogate
keys = st.one_of(texts,
                 st.sampled_from(ENTRY_FIELDS + ("topicConfigTable", "topicConfigSerializeWrapper", "")))
INT_EDGES = [0, -1, 1, INT32_MIN, INT32_MAX, INT32_MIN - 1, INT32_MAX + 1, -(2 ** 63), 2 ** 63 - 1, 2 ** 63,
             2 ** 64 - 1, 999_999_999, 1_000_000_000, -999_999_999]
ints = st.one_of(st.integers(-300, 300), st.integers(INT32_MIN - 2, INT32_MAX + 2),
                 st.integers(-(2 ** 63), 2 ** 64 - 1), st.sampled_from(INT_EDGES))
scalars = st.one_of(st.none(), st.booleans(), ints, texts, st.sampled_from(["SINGLE_TAG", "MULTI_TAG", "7"]))


def objects(children):
    return st.lists(st.tuples(keys, children), max_size=5).map(lambda pairs: Obj(tuple(pairs)))


values = st.recursive(scalars, lambda children: st.one_of(st.lists(children, max_size=5), objects(children)),
                      max_leaves=25)
attributes = st.one_of(st.none(), objects(texts), objects(values))


#: What brokers put in each member of a topic entry (and a few values they do not).
MEMBER_VALUES = {
    "topicName": st.one_of(texts.filter(bool), st.just("T")), "readQueueNums": ints, "writeQueueNums": ints,
    "perm": ints, "topicSysFlag": ints, "order": st.booleans(),
    "topicFilterType": st.sampled_from(["SINGLE_TAG", "MULTI_TAG", "TAG", "single_tag"]), "attributes": attributes,
}


@st.composite
def entries(draw) -> Any:
    """A topic entry: plain as brokers write it, or bent in one of the ways brokers never do."""
    pairs = [(key, draw(member)) for key, member in MEMBER_VALUES.items() if key != "attributes" or draw(st.booleans())]
    if draw(st.booleans()):
        pairs = draw(st.permutations(pairs))
    for _ in range(draw(st.integers(0, 2))):  # bend: drop, retype, repeat a member, or add another one
        how = draw(st.sampled_from(["drop", "retype", "repeat", "extra"]))
        if how == "drop" and pairs:
            pairs.pop(draw(st.integers(0, len(pairs) - 1)))
        elif how == "retype" and pairs:
            index = draw(st.integers(0, len(pairs) - 1))
            pairs[index] = (pairs[index][0], draw(values))
        elif how == "repeat" and pairs:
            key = draw(st.sampled_from([key for key, _ in pairs]))
            again = st.one_of(MEMBER_VALUES[key], values) if key in MEMBER_VALUES else values
            pairs.insert(draw(st.integers(0, len(pairs))), (key, draw(again)))
        else:
            pairs.insert(draw(st.integers(0, len(pairs))), (draw(keys), draw(values)))
    return Obj(tuple(pairs))


tables = st.lists(st.tuples(st.one_of(texts, st.just("T")), st.one_of(entries(), entries(), values)),
                  max_size=6).map(lambda pairs: Obj(tuple(pairs)))  # "T" is the topicName entries() likes
data_versions = st.one_of(st.none(), objects(ints), st.just(Obj((("counter", 3), ("timestamp", 9)))))


@st.composite
def documents(draw) -> tuple[Any, tuple[str, ...]]:
    """(document, table path): registration bodies of both layouts, or any JSON with any path."""
    shape = draw(st.sampled_from(["modern", "legacy", "any"]))
    if shape == "any":
        return draw(values), draw(st.sampled_from([(), ("a",), ("a", "b"), LEGACY_PATH, TABLE_PATH]))
    wrapper = [("dataVersion", draw(data_versions)), ("topicConfigTable", draw(tables)),
               ("topicQueueMappingInfoMap", draw(st.one_of(st.just(Obj(())), values)))]
    wrapper = draw(st.permutations(wrapper))
    if shape == "legacy":
        return Obj(tuple(wrapper)), LEGACY_PATH
    body = [("filterServerList", draw(st.one_of(st.just([]), st.lists(texts, max_size=2), values))),
            ("topicConfigSerializeWrapper", Obj(tuple(wrapper)))]
    return Obj(tuple(draw(st.permutations(body)))), TABLE_PATH


# ---------------------------------------------------------------- properties

@each_impl
@PROPERTY
@given(document=documents(), style=STYLES)
def test_valid_json_is_read_exactly_as_the_reference_and_never_refused(impl, document, style):
    """Both the parse and the topic count (`count_entries`), which must answer for compact JSON."""
    value, path = document
    data = serialize(value, style)
    assert scanned(pure, data, path) is not None or to_python(value) is None
    got = agrees(impl, data, path)
    assert got is not None or to_python(value) is None
    counted = counts(impl, data, path)
    table = to_python(value)
    for step in path:
        table = table.get(step) if isinstance(table, dict) else None
    plain_keys = isinstance(table, dict) and all(key.isascii() and key.isprintable() and '"' not in key
                                                 and "\\" not in key for key in table)
    if style[0] == "orjson" and plain_keys and path and scanned(impl, data, ()) is not None:
        assert counted is not None  # compact, keys without escapes, nothing beyond the scanner: it must count


#: Up to three random byte edits (offset, how, bytes) of a serialized document.
EDITS = st.lists(st.tuples(st.integers(0, 10 ** 6), st.sampled_from(["delete", "insert", "replace"]),
                           st.binary(max_size=3)), min_size=1, max_size=3)


def edited(data: bytes, edits: list[tuple[int, str, bytes]]) -> bytes:
    out = bytearray(data)
    for offset, how, chunk in edits:
        at = offset % (len(out) + 1)
        if how == "delete":
            del out[at:at + 1 + len(chunk)]
        elif how == "insert":
            out[at:at] = chunk or b'"'
        else:
            out[at:at + len(chunk)] = chunk
    return bytes(out)


@each_impl
@PROPERTY
@given(document=documents(), style=STYLES, edits=EDITS)
def test_any_bytes_give_none_or_the_reference(impl, document, style, edits):
    """Both the parse and the topic count (`count_entries`)."""
    value, path = document
    data = edited(serialize(value, style), edits)
    agrees(impl, data, path)
    counts(impl, data, path)


@each_impl
@PROPERTY
@given(value=st.recursive(st.one_of(scalars, st.floats(allow_nan=False), st.integers(2 ** 64, 2 ** 80),
                                    st.integers(-(2 ** 80), -(2 ** 63) - 1)),
                          lambda children: st.one_of(st.lists(children, max_size=4), objects(children)),
                          max_leaves=10),
       path=st.sampled_from([(), ("a",), LEGACY_PATH]))
def test_floats_and_huge_integers_give_none_or_the_reference(impl, value, path):
    agrees(impl, json.dumps(to_python(value)).encode(), path)  # orjson.dumps refuses the huge integers


@each_impl
def test_count_entries_of_registration_bodies(impl):
    assert counts(impl, fleet_body(100), TABLE_PATH) == 100
    assert counts(impl, fleet_body(3, version=36), LEGACY_PATH) == 3  # before 3.0.11: the wrapper alone
    assert impl.count_entries(fleet_body(3), ()) is None
    assert impl.count_entries(b'{"topicConfigTable":[{}]}', LEGACY_PATH) is None  # no object there
    assert impl.count_entries(b'{"topicConfigTable":{"a":1,"b":2}', LEGACY_PATH) is None  # unterminated
    # The last of repeated keys counts, as orjson keeps it; repeated topics count once (the
    # Cython scanner, which tells keys apart by their bytes, leaves those to the reference).
    assert counts(impl, b'{"topicConfigTable":{"a":1},"topicConfigTable":{"a":1,"b":2}}', LEGACY_PATH) == 2
    assert counts(impl, b'{"topicConfigTable":{"a":1,"a":2}}', LEGACY_PATH) in (1, None)
    assert counts(impl, b'{"topicConfigTable":{"a":1,"\\u0061":2}}', LEGACY_PATH) in (1, None)


# ---------------------------------------------------------------- registration bodies

def fleet_body(topics: int, version: int = Version.V5_3_3) -> bytes:
    """What bench/storm's brokers register (the wrapper alone for a version before 3.0.11)."""
    fleet = FleetShape(brokers=1, topics_per_broker=topics, queues_per_topic=8, clusters=1, slaves_per_master=0,
                       serialize="json")
    body = register_body(fleet, fleet.broker(0).cluster, DataVersion(7, 1700000000000))
    if version >= Version.V3_0_11:
        return body
    return orjson.dumps(orjson.loads(body)["topicConfigSerializeWrapper"])


@each_impl
def test_a_fleet_body_reads_every_topic_as_a_tuple(impl):
    body = fleet_body(100)
    got = agrees(impl, body, TABLE_PATH)
    table, counter, timestamp, state_version, servers = got  # the plain form, as brokers send it
    assert len(table) == 100
    assert all(fields == (name, 8, 8, 6, 0) for name, fields in table.items())
    assert (counter, timestamp, state_version, servers) == (7, 1700000000000, 0, [])


@pytest.mark.parametrize("impl", IMPLEMENTATIONS[1:])
def test_the_extension_leaves_the_entries_of_a_large_table_to_no_collection(impl):
    """A large table's entries are read without the interpreter lock, then made into tuples of a
    str and four ints: no cycle, so the extension makes them untracked by the collector at once
    (it would walk each one in a young collection to learn the same)."""
    body = fleet_body(2_000)
    assert len(body) >= 64 * 1024  # the pre-scan's size (GIL_FREE_BYTES)
    gc.disable()  # no young collection may untrack them meanwhile
    try:
        table = scanned(impl, body, TABLE_PATH)[0]
        tracked = [name for name, fields in table.items() if gc.is_tracked(fields)]
    finally:
        gc.enable()
    assert len(table) == 2_000 and not tracked
    assert table == agrees(impl, body, TABLE_PATH)[0]


@each_impl
def test_the_legacy_layout_reads_its_table_at_the_top(impl):
    body = fleet_body(5, Version.V3_0_11 - 1)
    table = scanned_table(agrees(impl, body, LEGACY_PATH), LEGACY_PATH)
    assert [type(fields) for fields in table.values()] == [tuple] * 5


@each_impl
def test_without_a_path_nothing_is_transformed(impl):
    body = fleet_body(3)
    assert same(agrees(impl, body, ()), orjson.loads(body))
    assert same(agrees(impl, body, LEGACY_PATH), orjson.loads(body))  # not at the top here


@each_impl
def test_bodies_of_our_own_encoders(impl):
    configs = {"plain": TopicConfig("plain", 4, 2, 6), "ordered": TopicConfig("ordered", order=True),
               "tagged": TopicConfig("tagged", topic_filter_type="MULTI_TAG", attributes={"+a": "1", "b": "\u00e9"}),
               "no-attributes": TopicConfig("no-attributes", attributes=None),
               "wide": TopicConfig("wide", INT32_MAX, INT32_MIN, -1, topic_sys_flag=INT32_MAX),
               "\u00fcnicode/\U0001f600": TopicConfig("\u00fcnicode/\U0001f600")}
    wrapper = TopicConfigSerializeWrapper(configs, DataVersion(1, 2, 3))
    for version, path in ((Version.V5_3_3, TABLE_PATH), (Version.V3_0_11 - 1, LEGACY_PATH)):
        body = RegisterBrokerBody(wrapper, ["f:1"]).encode(version=version)
        table = scanned_table(agrees(impl, body, path), path)
        assert table == {name: config.queue_fields() for name, config in configs.items()}


ENTRY = {"attributes": {}, "order": False, "perm": 6, "readQueueNums": 8, "topicFilterType": "SINGLE_TAG",
         "topicName": "T", "topicSysFlag": 0, "writeQueueNums": 8}


def raw_entry(member: str, raw: bytes) -> bytes:
    """ENTRY (with `member` added if it is not there) as orjson writes it, `member`'s value being `raw`."""
    name = orjson.dumps(member)
    return orjson.dumps({**ENTRY, member: 0}).replace(name + b":0", name + b":" + raw)


def table_of(entry: bytes) -> bytes:
    """A legacy body (the wrapper alone) whose table holds `entry` under "T"."""
    return b'{"topicConfigTable":{"T":' + entry + b"}}"


def entry_with(**changes: Any) -> dict:
    return {**{key: value for key, value in ENTRY.items() if key not in changes}, **{
        key: value for key, value in changes.items() if value is not DROP}}


DROP = object()


@pytest.mark.parametrize("entry", [
    entry_with(topicName=DROP), entry_with(readQueueNums=DROP), entry_with(order=DROP),
    entry_with(topicFilterType=DROP), entry_with(topicName=""), entry_with(topicName=5),
    entry_with(perm="6"), entry_with(readQueueNums="-3"), entry_with(order="true"), entry_with(order=1),
    entry_with(perm=True), entry_with(topicSysFlag=False), entry_with(writeQueueNums=None),
    entry_with(perm=INT32_MAX + 1), entry_with(readQueueNums=INT32_MIN - 1), entry_with(perm=2 ** 63),
    entry_with(topicFilterType="TAG"), entry_with(topicFilterType=None), entry_with(attributes=[]),
    entry_with(attributes="x"), entry_with(attributes=0), {}, [], None, "T", 5,
], ids=repr)
@each_impl
def test_entries_that_are_not_plain_stay_as_orjson_reads_them(impl, entry):
    body = orjson.dumps({"topicConfigTable": {"T": entry, "P": ENTRY}})
    table = scanned_table(agrees(impl, body, LEGACY_PATH), LEGACY_PATH)
    assert same(table["T"], entry) and table["P"] == ("T", 8, 8, 6, 0)


@pytest.mark.parametrize(("entry", "expected"), [
    # the last of duplicate members counts, as orjson keeps it
    (b'{"perm":"x","topicName":"T","readQueueNums":1,"writeQueueNums":2,"perm":6,"topicSysFlag":0,'
     b'"order":true,"topicFilterType":"MULTI_TAG"}', ("T", 1, 2, 6, 0)),
    (b'{"topicName":"T","readQueueNums":1,"writeQueueNums":2,"perm":6,"topicSysFlag":0,'
     b'"order":true,"topicFilterType":"MULTI_TAG","perm":"6"}',
     {"topicName": "T", "readQueueNums": 1, "writeQueueNums": 2, "perm": "6", "topicSysFlag": 0, "order": True,
      "topicFilterType": "MULTI_TAG"}),
    (b'{"attributes":{"a":[1,{"b":null}]},"topicName":"T","readQueueNums":1,"writeQueueNums":2,"perm":6,'
     b'"topicSysFlag":0,"order":false,"topicFilterType":"SINGLE_TAG","attributes":{}}', ("T", 1, 2, 6, 0)),
    (b'{"attributes":{},"topicName":"T","readQueueNums":1,"writeQueueNums":2,"perm":6,'
     b'"topicSysFlag":0,"order":false,"topicFilterType":"SINGLE_TAG","attributes":[]}',
     {"attributes": [], "topicName": "T", "readQueueNums": 1, "writeQueueNums": 2, "perm": 6, "topicSysFlag": 0,
      "order": False, "topicFilterType": "SINGLE_TAG"}),
    # members the tuple does not need are checked, not kept
    (b'{"extra":[1,2,{"x":"\\u00e9\\ud83d\\ude00"}],"topicName":"T","readQueueNums":1,"writeQueueNums":2,'
     b'"perm":6,"topicSysFlag":0,"order":false,"topicFilterType":"SINGLE_TAG","more":-0}', ("T", 1, 2, 6, 0)),
    # keys written with escapes name the same members
    (b'{"topic\\u004eame":"T","read\\u0051ueueNums":1,"writeQueueNums":2,"perm":6,"topicSysFlag":0,'
     b'"order":false,"topic\\u0046ilterType":"SINGLE_TAG"}', ("T", 1, 2, 6, 0)),
    (b' {\n "topicName" : "T" ,\t"readQueueNums": 1 ,"writeQueueNums":\r\n2,"perm":6,"topicSysFlag":0,'
     b'"order":false , "topicFilterType" : "SINGLE_TAG" , "attributes" : { "k" : "v" } } ', ("T", 1, 2, 6, 0)),
    (b'{"topicName":"T\\u00e9\\n","readQueueNums":0,"writeQueueNums":-0,"perm":-2147483648,'
     b'"topicSysFlag":2147483647,"order":false,"topicFilterType":"SINGLE\\u005fTAG"}',
     ("T\u00e9\n", 0, 0, INT32_MIN, INT32_MAX)),
], ids=range(8))
@each_impl
def test_entry_members_read_as_the_dict_says(impl, entry, expected):
    assert same(scanned_table(agrees(impl, table_of(entry), LEGACY_PATH), LEGACY_PATH)["T"], expected)


#: For each member: another value a plain entry may have, and one no plain entry has.
OTHER_VALUES = {"topicName": ("U", ""), "readQueueNums": (3, "3"), "writeQueueNums": (-5, 2 ** 31),
                "perm": (INT32_MIN, True), "topicSysFlag": (INT32_MAX, None), "order": (True, 0),
                "topicFilterType": ("MULTI_TAG", "TAG"), "attributes": ({"k": [1]}, [])}


@each_impl
@pytest.mark.parametrize("member", ENTRY_FIELDS)
@pytest.mark.parametrize("order", ["plain, other plain", "other plain, plain", "plain, not plain",
                                   "not plain, plain"])
def test_a_repeated_member_counts_with_its_last_value(impl, member, order):
    values = {"plain": ENTRY[member], "other plain": OTHER_VALUES[member][0], "not plain": OTHER_VALUES[member][1]}
    first, last = (values[name] for name in order.split(", "))
    others = b",".join(orjson.dumps({key: value})[1:-1] for key, value in ENTRY.items() if key != member)
    entry = (b"{" + orjson.dumps({member: first})[1:-1] + b"," + others + b"," + orjson.dumps({member: last})[1:-1]
             + b"}")
    got = scanned_table(agrees(impl, table_of(entry), LEGACY_PATH), LEGACY_PATH)["T"]
    expected = {member: last, **{key: value for key, value in ENTRY.items() if key != member}}  # first place
    assert same(got, registration._plain_queue_fields(expected) or expected)


@each_impl
@pytest.mark.parametrize("number", [b"01", b"00", b"-01", b"-", b"1.0", b"1e2", b"1E2", b"0.5", b"+1", b"1a",
                                    b"1234567890123456789012", b"--1", b"0x1"])
def test_a_member_number_orjson_would_not_read_as_an_integer_is_left(impl, number):
    for member in ("readQueueNums", "perm", "topicSysFlag", "writeQueueNums", "extra", "attributes"):
        got = agrees(impl, table_of(raw_entry(member, number)), LEGACY_PATH)
        assert got is None or impl is pure


@each_impl
def test_duplicate_tables_and_entries_keep_the_last(impl):
    first = orjson.dumps({"T": ENTRY, "U": ENTRY})
    body = (b'{"topicConfigSerializeWrapper":{"topicConfigTable":' + first + b',"topicConfigTable":{"U":1,'
            b'"T":' + orjson.dumps(ENTRY) + b',"T":' + orjson.dumps(entry_with(perm="x")) + b"}}}")
    table = scanned_table(agrees(impl, body, TABLE_PATH), TABLE_PATH)
    assert list(table) == ["U", "T"] and table["U"] == 1 and table["T"]["perm"] == "x"


# ---------------------------------------------------------------- what the scanner leaves to others

@pytest.mark.parametrize("data", [
    b"", b" ", b"\xef\xbb\xbf{}", b"{}x", b"{} {}", b"[1,]", b'{"a":1,}', b"{,}", b"[,1]", b'{"a" 1}', b"{'a':1}",
    b"{a:1}", b'{0:"x"}', b"01", b"-", b"--1", b"+1", b".5", b"1.", b"1e5", b"0x10", b"tru", b"nulll", b"True",
    b"NaN", b"Infinity", b'"abc', b'"\\"', b'"\\x41"', b'"\\u12"', b'"\\u12g4"', b'"\\ud800"', b'"\\udc00"',
    b'"\\ud800\\u0041"', b'"\\ud800\\ud800"', b'"\\ud800x"', b'"\x00"', b'"\x1f"', b'"\t"', b'"\xff"', b'"\xc3"',
    b'"\xc0\xaf"', b'"\xed\xa0\x80"', b'"\xf4\x90\x80\x80"', b"\x0c1", b"[1\x0b]", b"1 2", b"[1 2]", b'["a" "b"]',
    b"18446744073709551616", b"-9223372036854775809", b"123456789012345678901234567890",
])
@each_impl
def test_what_is_not_strict_json_or_beyond_the_scanner_is_left(impl, data):
    got = agrees(impl, data, ())
    assert got is None or impl is pure  # the reference gives orjson's floats


@pytest.mark.parametrize("data", [b"[1,]", b'"\\ud800"', b'"\xff"', b"{}x", b"\xef\xbb\xbf1", b'{0:"x"}'])
def test_the_reference_answers_none_for_what_orjson_refuses(data):
    assert scanned(pure, data, TABLE_PATH) is None


@each_impl
@pytest.mark.parametrize("data", [b"18446744073709551615", b"-9223372036854775808", b"9223372036854775808",
                                  b"-0", b"0", b"[-1,0,-2147483649]", b'"\\u0000\\u001F\\/\\"\\\\"', b'"\x7f"',
                                  b'"\\uDBFF\\uDFFF\\ud800\\udc00"', b'"\\u00e9\\u00E9\xc3\xa9"', b"true", b'{"a":{}}',
                                  b'{"a":1,"b":2,"a":3}', b' \t\r\n[ 1 , { "" : [ ] } ]\n'])
def test_edges_orjson_accepts(impl, data):
    assert agrees(impl, data, ()) is not None


@each_impl
@pytest.mark.parametrize("member", ["attributes", "extra"])
@pytest.mark.parametrize("bad", [b'{"a" 1}', b'{"a" 11}', b'{"a",1}', b'["a":1]', b'{"a":}', b'{"a":1,}',
                                 b'{"a":1 "b":2}', b"{1:2}", b"{,}", b"[1,]", b"[1 2]", b"[,]", b'{"a":[}', b"{]",
                                 b"[}", b'{"a":tru}', b'{"\\x":1}', b'{"a":"\\ud800"}', b'"\x01"', b"nul", b"-",
                                 b"{", b"}"])
def test_bad_syntax_in_members_the_tuple_drops_is_refused(impl, member, bad):
    assert agrees(impl, table_of(raw_entry(member, bad)), LEGACY_PATH) is None


@each_impl
def test_every_truncation_of_a_body_is_refused(impl):
    body = fleet_body(4)
    for end in range(len(body)):
        assert agrees(impl, body[:end], TABLE_PATH) is None


@each_impl
def test_every_single_byte_deletion_of_a_body(impl):
    body = fleet_body(2)
    for at in range(len(body)):
        agrees(impl, body[:at] + body[at + 1:], TABLE_PATH)


def body_with(where: str, inserted: bytes) -> bytes:
    """A one-topic body with `inserted` written into one of its strings."""
    entry: dict[str, Any] = dict(ENTRY)
    table_key, data_version = "T", {"counter": 1}
    if where == "table key":
        table_key = "TMARK"
    elif where == "topic name":
        entry["topicName"] = "TMARK"
    elif where == "attributes value":
        entry["attributes"] = {"k": "MARK"}
    elif where == "other member":
        entry = {"MARK": [1], **entry}
    else:
        data_version = {"MARK": 1}
    body = orjson.dumps({"topicConfigSerializeWrapper": {"dataVersion": data_version,
                                                         "topicConfigTable": {table_key: entry}}})
    return body.replace(b"MARK", inserted)


@each_impl
@pytest.mark.parametrize("bad", [b"\xff", b"\xc3", b"\xc0\xaf", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\x1f"])
@pytest.mark.parametrize("where", ["table key", "topic name", "attributes value", "other member", "dataVersion"])
def test_invalid_utf8_or_raw_control_characters_anywhere_are_refused(impl, bad, where):
    assert agrees(impl, body_with(where, bad), TABLE_PATH) is None
    assert agrees(impl, body_with(where, "\u00e9\U0001f600".encode()), TABLE_PATH) is not None


@each_impl
@pytest.mark.parametrize("depth", [1, 100, 128, 129, 1025, 100_000])
@pytest.mark.parametrize("kind", ["array", "object", "in attributes", "in another member"])
def test_deep_nesting_is_read_or_left_never_crashes(impl, depth, kind):
    if kind == "array":
        data, path = b"[" * depth + b"]" * depth, ()
    elif kind == "object":
        data, path = b'{"a":' * depth + b"1" + b"}" * depth, ("a", "a")
    else:
        member = "attributes" if kind == "in attributes" else "x"
        data, path = table_of(raw_entry(member, b'{"a":' * depth + b"1" + b"}" * depth)), LEGACY_PATH
    got = agrees(impl, data, path)
    if depth <= 100:
        assert got is not None


@each_impl
@pytest.mark.parametrize("wrap", [bytes, bytearray, memoryview])
def test_any_buffer_reads_the_same(impl, wrap):
    body = fleet_body(3)
    assert same(scanned(impl, wrap(body), TABLE_PATH), scanned(impl, body, TABLE_PATH))


@each_impl
def test_a_str_is_no_buffer(impl):
    with pytest.raises(TypeError):
        impl.scan_registration("{}", (), None)


# ---------------------------------------------------------------- the registration decode uses it

def full_decode(data: bytes, version: int):
    body = RegisterBrokerBody.decode(data, False, version)
    return TopicQueueTable.of(body.wrapper), body.filter_server_list


def outcome(read, *args):
    try:
        return read(*args)
    except ProtocolError as exc:
        return f"ProtocolError: {exc}"


@pytest.mark.parametrize("version", [Version.V5_3_3, Version.V3_0_11 - 1])
def test_decode_registration_reads_a_fleet_body_as_the_full_decode(live, version):
    body = fleet_body(100, version)
    assert decode_registration(body, False, version) == full_decode(body, version)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(document=documents(), style=STYLES)
def test_decode_registration_matches_the_full_decode(live, document, style):
    value, path = document
    data = serialize(value, style)
    version = Version.V3_0_11 - 1 if path == LEGACY_PATH else Version.V5_3_3
    assert outcome(decode_registration, data, False, version) == outcome(full_decode, data, version)


@pytest.mark.parametrize("data", [
    b"{", b"[]", b"null", b"1.5", b'{"topicConfigSerializeWrapper":[]}',
    b'{"topicConfigSerializeWrapper":{"topicConfigTable":{"T":{"perm":"x"}}}}',
    b'{"topicConfigSerializeWrapper":{"topicConfigTable":{"T":{"perm":1.5}}}}',
    b'{"filterServerList":[1],"topicConfigSerializeWrapper":{}}', b'{0:"bare key"}',
    b'{"topicConfigSerializeWrapper":{"dataVersion":{"counter":1e3}}}', b'{"topicConfigTable":{"T":{"perm":1e3}}}',
])
def test_odd_bodies_read_or_fail_as_the_full_decode_does(live, data):
    for version in (Version.V5_3_3, Version.V3_0_11 - 1):
        assert outcome(decode_registration, data, False, version) == outcome(full_decode, data, version)


# ---------------------------------------------------------------- the plain form: the body read at once

#: A DataVersion's field: what brokers send, and near misses (past int64, bools, decimal strings).
INT64 = st.integers(-(2 ** 63), 2 ** 63 - 1)
VERSION_FIELD = st.one_of(INT64, st.none(), st.integers(-(2 ** 64), 2 ** 64),
                          st.sampled_from([2 ** 63 - 1, 2 ** 63, -(2 ** 63), -(2 ** 63) - 1, True, "12", 1.5]))


def version(field: st.SearchStrategy) -> st.SearchStrategy:
    return st.fixed_dictionaries({}, optional={"counter": field, "timestamp": field, "stateVersion": field,
                                               "x": ANY_VALUE})


#: A registration body of the plain form (a wrapper's member may be absent too) ...
PLAIN_VERSION = st.one_of(st.none(), version(st.one_of(INT64, st.none())))
PLAIN_WRAPPER = st.fixed_dictionaries(
    {"topicConfigTable": st.dictionaries(st.text(max_size=3), PLAIN_ENTRY, max_size=3)},
    optional={"dataVersion": PLAIN_VERSION, "mappingDataVersion": PLAIN_VERSION,
              "topicQueueMappingInfoMap": st.sampled_from([{}, None]),
              "topicQueueMappingDetailMap": st.one_of(st.none(), st.dictionaries(st.text(max_size=2), ANY_VALUE,
                                                                                 max_size=2))})
PLAIN_SERVERS = st.one_of(st.none(), st.lists(st.text(max_size=4), max_size=3))
#: ... and what may stand in each place instead: near misses of the plain form's members.
NEAR_MISSES = {
    "topicConfigTable": st.one_of(ANY_VALUE, st.dictionaries(st.text(max_size=3), st.one_of(PLAIN_ENTRY, ANY_VALUE),
                                                             max_size=3)),
    "dataVersion": st.one_of(version(VERSION_FIELD), ANY_VALUE),
    "mappingDataVersion": st.one_of(version(VERSION_FIELD), ANY_VALUE),
    "topicQueueMappingInfoMap": st.one_of(ANY_VALUE, st.dictionaries(st.text(max_size=2), st.one_of(
        st.none(), st.just({}), ANY_VALUE), min_size=1, max_size=2)),
    "topicQueueMappingDetailMap": ANY_VALUE,
    "filterServerList": st.one_of(ANY_VALUE, st.lists(st.one_of(st.text(max_size=2), ANY_VALUE), max_size=2)),
}


@st.composite
def registration_bodies(draw: st.DrawFn) -> dict:
    """A body of the plain form, with up to two of its members replaced by near misses."""
    wrapper = draw(PLAIN_WRAPPER)
    body = {"topicConfigSerializeWrapper": wrapper}
    if draw(st.booleans()):
        body["filterServerList"] = draw(PLAIN_SERVERS)
    for member in draw(st.lists(st.sampled_from(sorted(NEAR_MISSES)), max_size=2)):
        (body if member == "filterServerList" else wrapper)[member] = draw(NEAR_MISSES[member])
    return body


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(body=registration_bodies(), legacy=st.booleans())
def test_the_plain_form_decodes_as_the_general_path(live, body, legacy):
    """Whatever the wrapper's members hold, a body the scanner hands back in its plain form decodes
    to what `_decode_json_body` reads of the parsed body (and one it refuses is never plain)."""
    version, path = (Version.V3_0_11 - 1, LEGACY_PATH) if legacy else (Version.V5_3_3, TABLE_PATH)
    data = json.dumps(body["topicConfigSerializeWrapper"] if legacy else body).encode()  # ints past 64 bits too
    got = agrees(live, data, path)
    general = outcome(_decode_json_body, data, version, TopicQueueTable.from_dict)
    assert outcome(decode_registration, data, False, version) == general
    assert type(got) is not tuple or type(general) is tuple, general  # read at once, so it must read


@pytest.mark.parametrize("wrapper", [
    b'"dataVersion":{"counter":3,"timestamp":1700000000000}',  # a 4.x broker: no stateVersion
    b'"dataVersion":{"counter":3,"stateVersion":0,"timestamp":1700000000000},"mappingDataVersion":{"counter":0,'
    b'"stateVersion":0,"timestamp":1700000000000},"topicQueueMappingDetailMap":{},"topicQueueMappingInfoMap":{}',
])
def test_what_brokers_send_is_of_the_plain_form(live, wrapper):
    data = (b'{"filterServerList":["10.0.0.1:1"],"topicConfigSerializeWrapper":{' + wrapper
            + b',"topicConfigTable":{"T":' + orjson.dumps(ENTRY) + b"}}}")
    table, counter, timestamp, _, servers = live.scan_registration(data, TABLE_PATH, None)[0]
    assert (table, counter, timestamp, servers) == ({"T": ("T", 8, 8, 6, 0)}, 3, 1700000000000, ["10.0.0.1:1"])
    assert decode_registration(data) == _decode_json_body(data, Version.V5_3_3, TopicQueueTable.from_dict)


def test_a_body_that_is_not_json_fails_as_it_always_did(live):
    assert outcome(decode_registration, b'{"topicConfigSerializeWrapper":', False, Version.V5_3_3) == (
        "ProtocolError: RegisterBrokerBody is not valid JSON: unexpected end of data: line 1 column 32 (char 31)")


@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
def test_a_topic_key_of_invalid_utf8_is_not_counted(impl) -> None:
    """orjson refuses the body, so no count may be given (the Cython twin once counted it)."""
    path = ("topicConfigSerializeWrapper", "topicConfigTable")
    body = b'{"filterServerList":[],"topicConfigSerializeWrapper":{"topicConfigTable":{"\x80T":{"perm":0}}}}'
    assert impl.count_entries(body, path) is None
    assert impl.count_entries(body.replace(b"\x80T", "\u00e9T".encode()), path) == 1
