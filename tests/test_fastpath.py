"""The protocol hot path: one suite over both implementations, plus properties that they agree.

`namesrv.fastpath.pure` (pure Python) and `namesrv._fastpath` (Cython) must give the same results and
the same `ProtocolError` messages for every input, because `namesrv.fastpath` silently picks
whichever is importable.
"""
from __future__ import annotations

import os
import random
import subprocess
import sys
import zlib
from pathlib import Path

import pytest
import xxhash
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from fastpath_cases import IMPLEMENTATIONS, _fastpath, needs_extension
import namesrv.fastpath
from namesrv.fastpath import pure
from namesrv.protocol import FrameDecoder, ProtocolError, RemotingCommand, SerializeType

MAX_FRAME = 16 * 1024 * 1024
REPO = Path(__file__).resolve().parents[1]

# Reference 1.3: GET_ROUTEINFO_BY_TOPIC(topic=TopicTest), version 479, opaque 1, binary header.
REQUEST_FRAME = bytes.fromhex(
    "0000002d 01000029 0069 00 01df 00000001 00000000 00000000 00000014"
    " 0005 746f706963 00000009 546f70696354657374"
)
REQUEST_FIELDS = (105, 0, 479, 1, 0, None, {"topic": "TopicTest"})
# Reference 1.3: the minimal response (code 0, opaque 1, flag 1, no remark, no extFields).
RESPONSE_FRAME = bytes.fromhex("00000019 01000015 0000 00 01df 00000001 00000001 00000000 00000000")
RESPONSE_FIELDS = (0, 0, 479, 1, 1, None, None)


@pytest.fixture(params=IMPLEMENTATIONS)
def impl(request):
    return request.param


def be32(value: int) -> bytes:
    return value.to_bytes(4, "big", signed=True)


def be16(value: int) -> bytes:
    return value.to_bytes(2, "big", signed=True)


def header(remark: bytes = b"", ext: bytes = b"", *, remark_len: int | None = None,
           ext_len: int | None = None) -> bytes:
    """A binary header built byte by byte, with lengths that may lie."""
    fixed = be16(105) + b"\x03" + be16(479) + be32(7) + be32(0)
    return (fixed + be32(len(remark) if remark_len is None else remark_len) + remark
            + be32(len(ext) if ext_len is None else ext_len) + ext)


def entry(key: bytes, value: bytes, *, key_len: int | None = None, value_len: int | None = None) -> bytes:
    return (be16(len(key) if key_len is None else key_len) + key
            + be32(len(value) if value_len is None else value_len) + value)


def frame_of(size: int) -> bytes:
    """A whole frame (prefix included) of exactly `size` bytes: binary header plus padding body."""
    head = pure.encode_binary_header(105, 0, 479, 1, 0, None, {"topic": "TopicTest"})
    body = b"b" * (size - 8 - len(head))
    return be32(4 + len(head) + len(body)) + be32((SerializeType.ROCKETMQ << 24) | len(head)) + head + body


# ---------------------------------------------------------------- worked examples (reference 1.3)

def test_request_example_splits_decodes_and_encodes(impl):
    assert impl.split_frames(REQUEST_FRAME, MAX_FRAME) == ([REQUEST_FRAME[4:]], 49)
    assert impl.decode_binary_header(REQUEST_FRAME[8:]) == REQUEST_FIELDS
    assert impl.encode_binary_header(*REQUEST_FIELDS) == REQUEST_FRAME[8:]
    assert len(REQUEST_FRAME[8:]) == 41


def test_minimal_response_example(impl):
    assert impl.split_frames(RESPONSE_FRAME, MAX_FRAME) == ([RESPONSE_FRAME[4:]], 29)
    assert impl.decode_binary_header(RESPONSE_FRAME[8:]) == RESPONSE_FIELDS
    assert impl.encode_binary_header(*RESPONSE_FIELDS) == RESPONSE_FRAME[8:]


def test_empty_remark_and_ext_encode_as_absent(impl):
    minimal = RESPONSE_FRAME[8:]
    assert impl.encode_binary_header(0, 0, 479, 1, 1, "", {}) == minimal
    assert impl.encode_binary_header(0, 0, 479, 1, 1, "", {"a": "", "": "b", "c": None}) == minimal


def test_remotingcommand_uses_the_live_implementation_consistently():
    command = RemotingCommand(105, opaque=1, ext_fields={"topic": "TopicTest"}, serialize_type=SerializeType.ROCKETMQ)
    frames, used = namesrv.fastpath.split_frames(command.encode(), MAX_FRAME)
    assert used == len(command.encode())
    assert RemotingCommand.decode(frames[0]) == command


# ---------------------------------------------------------------- round trips

@pytest.mark.parametrize("fields", [
    (105, 0, 479, 1, 0, None, {"topic": "TopicTest"}),
    (-32768, 255, 32767, -2147483648, 2147483647, "x", None),
    (32767, 0, -32768, 2147483647, -2147483648, "remarque àé 漢字 🎉", {"clé": "valeur ✓", "k": "v" * 1000}),
    (0, 13, 0, 0, 3, "r" * 70000, {f"key{i}": str(i) for i in range(1000)}),  # more keys than cache slots
    (1, 1, 1, 1, 1, None, {"k" * 32767: "long key is still legal"}),
])
def test_round_trip(impl, fields):
    assert impl.decode_binary_header(impl.encode_binary_header(*fields)) == fields


def test_zero_length_strings_decode_as_null(impl):
    ext = entry(b"", b"orphan value") + entry(b"nokey", b"") + entry(b"topic", b"T")
    assert impl.decode_binary_header(header(b"", ext)) == (105, 3, 479, 7, 0, None, {"topic": "T"})
    only_nulls = entry(b"", b"v") + entry(b"k", b"")
    assert impl.decode_binary_header(header(b"", only_nulls)) == (105, 3, 479, 7, 0, None, {})


def test_duplicate_keys_keep_the_last_value(impl):
    ext = entry(b"k", b"first") + entry(b"k", b"second")
    assert impl.decode_binary_header(header(b"", ext))[6] == {"k": "second"}


def test_bytes_after_the_ext_section_are_ignored(impl):
    assert impl.decode_binary_header(header(b"hi", entry(b"k", b"v")) + b"trailing")[5:] == ("hi", {"k": "v"})


# ---------------------------------------------------------------- decode errors

@pytest.mark.parametrize("size", range(21))
def test_header_shorter_than_fixed_part(impl, size):
    with pytest.raises(ProtocolError, match=rf"^binary header of {size} bytes is shorter than the 21-byte fixed part$"):
        impl.decode_binary_header(header(b"", b"")[:size])


@pytest.mark.parametrize(("data", "message"), [
    (header(b"abc", remark_len=-1), "binary header: remark length -1 exceeds the header"),
    (header(b"abc", remark_len=4), "binary header: remark length 4 exceeds the header"),
    (header(b"abc", remark_len=-2147483648), "binary header: remark length -2147483648 exceeds the header"),
    (header(b"", b"xy", ext_len=3), "binary header: extFields length 3 exceeds the header"),
    (header(b"", b"xy", ext_len=-5), "binary header: extFields length -5 exceeds the header"),
    (header(b"", b"\x00"), "binary header: truncated extFields key length"),
    (header(b"", entry(b"k", b"v") + b"\x00"), "binary header: truncated extFields key length"),
    (header(b"", entry(b"key", b"v", key_len=-1)), "binary header: extFields key length -1 exceeds the ext section"),
    (header(b"", be16(-32768)), "binary header: extFields key length -32768 exceeds the ext section"),
    (header(b"", be16(4) + b"key"), "binary header: extFields key length 4 exceeds the ext section"),
    (header(b"", be16(3) + b"key" + b"\x00\x00\x00"), "binary header: truncated extFields value length"),
    (header(b"", entry(b"k", b"val", value_len=-1)),
     "binary header: extFields value length -1 exceeds the ext section"),
    (header(b"", entry(b"k", b"val", value_len=4)), "binary header: extFields value length 4 exceeds the ext section"),
    # the value fits in the header but not in the ext section extLength announced
    (header(b"", entry(b"k", b"val"), ext_len=9) + b"zz",
     "binary header: extFields value length 3 exceeds the ext section"),
])
def test_lengths_past_the_end(impl, data, message):
    with pytest.raises(ProtocolError) as caught:
        impl.decode_binary_header(data)
    assert str(caught.value) == message


@pytest.mark.parametrize(("data", "message"), [
    (header(b"ab\xff"), "binary header: remark is not valid UTF-8 (invalid start byte at byte 2)"),
    (header(b"\xe6\xbc"), "binary header: remark is not valid UTF-8 (unexpected end of data at byte 0)"),
    (header(b"", entry(b"k\x80", b"v")),
     "binary header: extFields key is not valid UTF-8 (invalid start byte at byte 1)"),
    (header(b"", entry(b"k", b"\xed\xa0\x80")),  # an encoded surrogate is not UTF-8
     "binary header: extFields value is not valid UTF-8 (invalid continuation byte at byte 0)"),
])
def test_invalid_utf8(impl, data, message):
    with pytest.raises(ProtocolError) as caught:
        impl.decode_binary_header(data)
    assert str(caught.value) == message


# ---------------------------------------------------------------- encode errors

@pytest.mark.parametrize("fields", [
    (32768, 0, 479, 1, 0), (-32769, 0, 479, 1, 0), (0, 256, 479, 1, 0), (0, -1, 479, 1, 0),
    (0, 0, 32768, 1, 0), (0, 0, -32769, 1, 0), (0, 0, 479, 2147483648, 0), (0, 0, 479, -2147483649, 0),
    (0, 0, 479, 1, 2147483648), (0, 0, 479, 1, -2147483649), (0, 0, 479, 1, 1 << 70), (-(1 << 70), 0, 0, 0, 0),
])
def test_encode_rejects_out_of_range_numbers(impl, fields):
    code, language, version, opaque, flag = fields
    with pytest.raises(ProtocolError) as caught:
        impl.encode_binary_header(*fields, None, None)
    assert str(caught.value) == (f"binary header cannot carry code={code} language={language} version={version} "
                                 f"opaque={opaque} flag={flag}")


def test_encode_rejects_a_key_over_32767_bytes(impl):
    with pytest.raises(ProtocolError, match=r"^binary header: extFields key of 32768 bytes is too long$"):
        impl.encode_binary_header(0, 0, 0, 0, 0, None, {"é" * 16384: "v"})


class FalsyKeyThatEditsTheDict:
    """A skipped key whose truth test, on its `at`-th call, changes the dict being encoded."""

    def __init__(self, entries: dict, at: int, edit) -> None:
        self.entries, self.at, self.edit, self.calls = entries, at, edit, 0

    def __bool__(self) -> bool:
        self.calls += 1
        if self.calls == self.at:
            self.edit(self.entries)
        return False


@needs_extension
@pytest.mark.parametrize("edit", [lambda d: d.__setitem__("late", "v" * 100), lambda d: d.pop("k")],
                         ids=["grows", "shrinks"])
def test_cython_encoder_never_writes_past_its_buffer_when_ext_fields_change_underfoot(edit):
    entries: dict = {}
    entries[FalsyKeyThatEditsTheDict(entries, 2, edit)] = "x"  # call 1: sizing pass, call 2: writing pass
    entries["k"] = "v"
    with pytest.raises(RuntimeError, match="ext_fields changed while being encoded"):
        _fastpath.encode_binary_header(0, 0, 0, 0, 0, None, entries)


@pytest.mark.parametrize(("remark", "ext", "message"), [
    ("ok\ud800", None, "binary header: remark is not encodable as UTF-8 (surrogates not allowed at index 2)"),
    (None, {"\udfff": "v"},
     "binary header: extFields key is not encodable as UTF-8 (surrogates not allowed at index 0)"),
    (None, {"k": "v\ud83d"},
     "binary header: extFields value is not encodable as UTF-8 (surrogates not allowed at index 1)"),
])
def test_encode_rejects_lone_surrogates(impl, remark, ext, message):
    with pytest.raises(ProtocolError) as caught:
        impl.encode_binary_header(0, 0, 0, 0, 0, remark, ext)
    assert str(caught.value) == message


# ---------------------------------------------------------------- frame splitting

def test_split_keeps_partial_frames_for_later(impl):
    stream = REQUEST_FRAME + RESPONSE_FRAME + REQUEST_FRAME
    for cut in range(len(stream) + 1):
        frames, used = impl.split_frames(stream[:cut], MAX_FRAME)
        ends = [end for end in (49, 78, 127) if end <= cut]
        assert frames == [REQUEST_FRAME[4:], RESPONSE_FRAME[4:], REQUEST_FRAME[4:]][:len(ends)]
        assert used == (ends[-1] if ends else 0)


def test_split_accepts_a_frame_of_only_the_header_length_field(impl):
    assert impl.split_frames(be32(4) + be32(0), MAX_FRAME) == ([be32(0)], 8)


@pytest.mark.parametrize("total", [3, 0, -1, -2147483648])
def test_split_rejects_lengths_below_four(impl, total):
    with pytest.raises(ProtocolError) as caught:
        impl.split_frames(RESPONSE_FRAME + be32(total), MAX_FRAME)
    assert str(caught.value) == f"bad frame length {total} at offset 29: shorter than the header-length field"


def test_max_frame_boundary_fails_fast(impl):
    # Netty compares totalLength + 4 with maxFrameLength (reference 1.1): 16777212 waits for its bytes...
    assert impl.split_frames(be32(16777212) + b"\x00" * 100, MAX_FRAME) == ([], 0)
    # ...16777213 is refused at once, before its bytes arrive.
    with pytest.raises(ProtocolError) as caught:
        impl.split_frames(be32(16777213), MAX_FRAME)
    assert str(caught.value) == "frame length 16777213 exceeds the maximum frame length 16777216"
    with pytest.raises(ProtocolError, match="frame length 2147483647 exceeds"):
        impl.split_frames(be32(2147483647), MAX_FRAME)


def test_small_max_frame_length(impl):
    frame = frame_of(200)
    assert impl.split_frames(frame, 200) == ([frame[4:]], 200)
    with pytest.raises(ProtocolError, match="^frame length 196 exceeds the maximum frame length 199$"):
        impl.split_frames(frame, 199)


@pytest.mark.parametrize("wrap", [bytes, bytearray, memoryview], ids=["bytes", "bytearray", "memoryview"])
def test_buffer_types(impl, wrap):
    stream = REQUEST_FRAME + RESPONSE_FRAME + REQUEST_FRAME[:10]
    frames, used = impl.split_frames(wrap(stream), MAX_FRAME)
    assert (frames, used) == ([REQUEST_FRAME[4:], RESPONSE_FRAME[4:]], 78)
    assert all(type(frame) is bytes for frame in frames)
    assert impl.decode_binary_header(wrap(REQUEST_FRAME[8:])) == REQUEST_FIELDS
    assert impl.decode_binary_header(wrap(header("ré".encode(), entry(b"k", b"v"))))[5:] == ("ré", {"k": "v"})
    assert impl.body_crc32(wrap(REQUEST_FRAME)) == zlib.crc32(REQUEST_FRAME) & 0x7FFFFFFF


def test_memoryview_slices_are_read_from_their_own_offset(impl):
    backing = b"\xff" * 7 + REQUEST_FRAME + b"\xff" * 7
    view = memoryview(backing)[7:7 + len(REQUEST_FRAME)]
    assert impl.split_frames(view, MAX_FRAME) == ([REQUEST_FRAME[4:]], 49)
    assert impl.decode_binary_header(view[4:][4:]) == REQUEST_FIELDS
    assert impl.body_crc32(view) == zlib.crc32(REQUEST_FRAME) & 0x7FFFFFFF


@pytest.mark.parametrize("chunking", ["one byte", "all at once", "random"])
def test_frame_decoder_is_indifferent_to_chunking(impl, chunking, monkeypatch):
    monkeypatch.setattr(namesrv.fastpath, "split_frames", impl.split_frames)
    commands = [
        RemotingCommand(105, opaque=1, ext_fields={"topic": "TopicTest"}, serialize_type=SerializeType.ROCKETMQ),
        RemotingCommand(103, opaque=2, ext_fields={"brokerName": "b"}, body=b"{}" * 300),
        RemotingCommand(0, opaque=1, flag=1, remark="ok", serialize_type=SerializeType.ROCKETMQ),
        RemotingCommand(3, opaque=9, remark="é" * 40, body=bytes(range(256)) * 4),
    ]
    stream = b"".join(command.encode() for command in commands)
    rng = random.Random(7)
    if chunking == "one byte":
        chunks = [stream[i:i + 1] for i in range(len(stream))]
    elif chunking == "all at once":
        chunks = [stream]
    else:
        cuts = sorted(rng.sample(range(1, len(stream)), 25))
        chunks = [stream[a:b] for a, b in zip([0, *cuts], [*cuts, len(stream)])]
    decoder = FrameDecoder(MAX_FRAME)
    frames = [frame for chunk in chunks for frame in decoder.feed(chunk)]
    assert decoder.buffered == 0
    assert [RemotingCommand.decode(frame) for frame in frames] == commands


def test_frame_decoder_refuses_an_oversized_length_before_its_bytes(impl, monkeypatch):
    monkeypatch.setattr(namesrv.fastpath, "split_frames", impl.split_frames)
    decoder = FrameDecoder(MAX_FRAME)
    assert decoder.feed(be32(16777212)) == []
    assert decoder.buffered == 4
    decoder = FrameDecoder(MAX_FRAME)
    decoder.feed(be32(16777213)[:3])
    with pytest.raises(ProtocolError, match="exceeds the maximum frame length 16777216"):
        decoder.feed(be32(16777213)[3:])


# ---------------------------------------------------------------- CRC32

@pytest.mark.parametrize("empty", [None, b"", bytearray(), memoryview(b"")],
                         ids=["None", "bytes", "bytearray", "memoryview"])
def test_crc_of_nothing_is_zero(impl, empty):
    assert impl.body_crc32(empty) == 0


def test_crc_check_value_is_masked_to_31_bits(impl):
    assert impl.body_crc32(b"123456789") == 0xCBF43926 & 0x7FFFFFFF  # the CRC-32 check value, top bit cleared


@pytest.mark.parametrize("size", [1, 4095, 64 * 1024 - 1, 64 * 1024, 300_001])
def test_crc_matches_zlib_at_every_size(impl, size):
    data = random.Random(size).randbytes(size)
    assert impl.body_crc32(data) == zlib.crc32(data) & 0x7FFFFFFF
    assert impl.body_crc32(bytearray(data)) == impl.body_crc32(memoryview(data))


# ---------------------------------------------------------------- which implementation is live

@pytest.mark.parametrize(("first_import", "force_pure", "expected"), [
    pytest.param("namesrv.fastpath", "", "cython", marks=needs_extension),
    ("namesrv.fastpath", "1", "python"),
    # importing an implementation first must neither break nor change the choice
    pytest.param("namesrv._fastpath", "", "cython", marks=needs_extension),
    ("namesrv.fastpath.pure", "1", "python"),
])
def test_implementation_choice(first_import, force_pure, expected):
    env = {**os.environ, "NAMESRV_PURE_PYTHON": force_pure}
    code = f"import {first_import}; import namesrv.fastpath as f; print(f.IMPLEMENTATION)"
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True,
                            timeout=60, check=True)
    assert result.stdout.strip() == expected


# ---------------------------------------------------------------- the implementations agree

def outcome(function, *args):
    """What a call did, comparable across implementations (repr keeps bytes/bytearray and int/bool apart)."""
    try:
        return "ok", repr(function(*args))
    except ProtocolError as exc:
        return "error", str(exc)


PROPERTY = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
limits = st.one_of(st.sampled_from([MAX_FRAME, 200, 8, 4, 0, -1]), st.integers(-(1 << 40), 1 << 40),
                   st.integers(0, 300))
texts = st.text(st.one_of(st.characters(), st.characters(categories=["Cs"])), max_size=12)
int16s = st.one_of(st.integers(-(1 << 15), (1 << 15) - 1), st.integers(-(1 << 20), 1 << 20))
int32s = st.one_of(st.integers(-(1 << 31), (1 << 31) - 1), st.integers(-(1 << 40), 1 << 40))
header_args = st.tuples(
    int16s, st.one_of(st.integers(0, 255), st.integers(-300, 300)), int16s, int32s, int32s,
    st.one_of(st.none(), texts),
    st.one_of(st.none(), st.dictionaries(st.one_of(texts, st.just("")), st.one_of(texts, st.just(""), st.none()),
                                         max_size=6)),
)
valid_header_args = st.tuples(
    st.integers(-(1 << 15), (1 << 15) - 1), st.integers(0, 255), st.integers(-(1 << 15), (1 << 15) - 1),
    st.integers(-(1 << 31), (1 << 31) - 1), st.integers(-(1 << 31), (1 << 31) - 1),
    st.one_of(st.none(), st.text(max_size=12)),
    st.one_of(st.none(), st.dictionaries(st.text(max_size=8), st.text(max_size=8), max_size=6)),
)


@st.composite
def mutated(draw, valid: st.SearchStrategy[bytes]) -> bytes:
    """A valid encoding with a few bytes flipped, cut off, inserted or appended."""
    data = bytearray(draw(valid))
    for _ in range(draw(st.integers(1, 3))):
        action = draw(st.sampled_from(["flip", "truncate", "extend", "insert"]))
        position = draw(st.integers(0, len(data)))
        if action == "flip" and data:
            data[min(position, len(data) - 1)] = draw(st.integers(0, 255))
        elif action == "truncate":
            del data[position:]
        elif action == "extend":
            data += draw(st.binary(min_size=1, max_size=8))
        else:
            data[position:position] = draw(st.binary(min_size=1, max_size=4))
    return bytes(data)


valid_headers = valid_header_args.map(lambda args: pure.encode_binary_header(*args))


def _frames(headers: list[bytes]) -> bytes:
    return b"".join(be32(4 + len(h)) + be32((1 << 24) | len(h)) + h for h in headers)


valid_streams = st.lists(valid_headers, max_size=4).map(_frames)
buffer_types = st.sampled_from([bytes, bytearray, memoryview])
wire_strings = st.one_of(st.binary(max_size=6), st.text(max_size=4).map(str.encode))


@st.composite
def lying_headers(draw) -> bytes:
    """Binary headers whose length fields may be a little off, to reach every decoding error."""
    def length(actual: int) -> int:
        return actual + draw(st.sampled_from([0] * 6 + [1, -1, 2, -2, -actual - 1]))

    ext = b"".join(entry(key, value, key_len=length(len(key)), value_len=length(len(value)))
                   for key, value in draw(st.lists(st.tuples(wire_strings, wire_strings), max_size=3)))
    remark = draw(wire_strings)
    data = header(remark, ext, remark_len=length(len(remark)), ext_len=length(len(ext)))
    return data + draw(st.binary(max_size=3))


@st.composite
def lying_streams(draw) -> bytes:
    """Frames whose totalLength may be a little off or absurd, to reach every splitting error."""
    stream = b""
    for head in draw(st.lists(valid_headers, max_size=3)):
        total = 4 + len(head) + draw(st.sampled_from([0, 0, 0, 1, -1, -len(head) - 1, -len(head) - 5, 1 << 30]))
        stream += be32(total) + be32((1 << 24) | len(head)) + head
    return stream + draw(st.binary(max_size=5))


@needs_extension
@PROPERTY
@given(valid_header_args)
def test_valid_headers_round_trip_identically(args):
    encoded = _fastpath.encode_binary_header(*args)
    assert encoded == pure.encode_binary_header(*args)
    *numbers, remark, ext = args
    kept = {key: value for key, value in (ext or {}).items() if key and value}
    expected = (*numbers, remark or None, kept or None)  # empty strings travel as null
    assert _fastpath.decode_binary_header(encoded) == pure.decode_binary_header(encoded) == expected


@needs_extension
@PROPERTY
@given(header_args)
def test_encode_agrees_on_any_arguments(args):
    assert outcome(_fastpath.encode_binary_header, *args) == outcome(pure.encode_binary_header, *args)


@needs_extension
@PROPERTY
@given(st.one_of(st.binary(max_size=64), mutated(valid_headers), lying_headers()), buffer_types)
def test_decode_agrees_on_any_bytes(data, wrap):
    assert outcome(_fastpath.decode_binary_header, wrap(data)) == outcome(pure.decode_binary_header, wrap(data))


@needs_extension
@PROPERTY
@given(st.one_of(st.binary(max_size=64), mutated(valid_streams), lying_streams()), limits, buffer_types)
def test_split_agrees_on_any_bytes(data, limit, wrap):
    assert outcome(_fastpath.split_frames, wrap(data), limit) == outcome(pure.split_frames, wrap(data), limit)


@needs_extension
@PROPERTY
@given(st.one_of(st.none(), st.binary(max_size=300)))
def test_crc_agrees(data):
    assert _fastpath.body_crc32(data) == pure.body_crc32(data)


# ---- the reactor's per-frame helpers: a repeat header's key and opaque, a stamped response frame

@pytest.mark.parametrize(("header", "expected"), [
    (b'{"code":105,"opaque":123,"flag":0}', (b'{"code":105,"opaque":,"flag":0}', 123)),
    (b'{"opaque":-2147483648,"x":1}', (b'{"opaque":,"x":1}', -2 ** 31)),
    (b'{"opaque":2147483647,}', (b'{"opaque":,}', 2 ** 31 - 1)),
    (b'{"opaque":2147483648,}', (b'{"opaque":,}', None)),  # beyond int32
    (b'{"opaque":007,}', (b'{"opaque":,}', None)),  # not how %d writes 7
    (b'{"opaque":-0,}', (b'{"opaque":,}', None)),
    (b'{"opaque": 5,}', (b'{"opaque":,}', None)),  # whitespace: not %d either
    (b'{"opaque":,}', (b'{"opaque":,}', None)),
    (b'{"opaque":5}', None),  # no comma: the opaque is the last field
    (b'{"code":105}', None),
    (b"", None),
])
def test_json_opaque_key(impl, header, expected):
    assert impl.json_opaque_key(header) == expected


@settings(max_examples=500, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(header=st.one_of(st.binary(max_size=80),
                        st.builds(lambda a, n, b: a + b'"opaque":' + n + b, st.binary(max_size=30),
                                  st.one_of(st.integers(-2 ** 40, 2 ** 40).map(lambda i: b"%d" % i),
                                            st.binary(max_size=12)),
                                  st.binary(max_size=30))))
def test_json_opaque_key_implementations_agree(header):
    if _fastpath is not None:
        assert _fastpath.json_opaque_key(header) == pure.json_opaque_key(header)


@settings(max_examples=300)
@example(head=b"", tail=b"", opaque=-2 ** 31, body=None, serialize_type=0)
@example(head=b"", tail=b"", opaque=2 ** 31 - 1, body=None, serialize_type=0)
@example(head=b"", tail=b"", opaque=0, body=None, serialize_type=0)
@example(head=b"", tail=b"", opaque=-10, body=None, serialize_type=0)
@given(head=st.binary(max_size=64), tail=st.binary(max_size=64), opaque=st.integers(-2 ** 31, 2 ** 31 - 1),
       body=st.one_of(st.none(), st.binary(max_size=256)), serialize_type=st.sampled_from([0, 1]))
def test_stamp_frame_is_what_remotingcommand_would_frame(head, tail, opaque, body, serialize_type):
    binary = serialize_type == SerializeType.ROCKETMQ
    stamp = opaque.to_bytes(4, "big", signed=True) if binary else b"%d" % opaque
    header = head + stamp + tail
    expected = ((4 + len(header) + len(body or b"")).to_bytes(4, "big")
                + ((serialize_type << 24) | len(header)).to_bytes(4, "big") + header + (body or b""))
    for module in (pure, _fastpath):
        if module is not None:
            assert module.stamp_frame(serialize_type << 24, binary, head, tail, opaque, body) == expected


def _json_frame(header: bytes, body: bytes = b"") -> bytes:
    return len(header).to_bytes(4, "big") + header + body


@settings(max_examples=300)
@given(opaques=st.lists(st.one_of(st.integers(-2 ** 31, 2 ** 31 - 1), st.just(2 ** 31)), min_size=1, max_size=8),
       garbage=st.lists(st.binary(max_size=12), max_size=3))
def test_json_opaque_keys_implementations_agree(opaques, garbage):
    """Each frame's key and opaque as `json_opaque_key` gives them for its JSON header; None and 0 for an
    opaque beyond int32, garbage, a binary header, a header longer than its frame."""
    headers = [b'{"code":105,"extFields":{"topic":"T%d"},"opaque":%d,"flag":0}' % (i % 4, opaque)
               for i, opaque in enumerate(opaques)]
    frames = ([_json_frame(header, b"ignored body") for header in headers] + garbage
              + [REQUEST_FRAME[4:], (1000).to_bytes(4, "big") + b"{}"])
    keys, found = pure.json_opaque_keys(frames)
    for i, opaque in enumerate(opaques):
        split = pure.json_opaque_key(headers[i])
        assert (keys[i], found[i]) == ((split[0], opaque) if opaque < 2 ** 31 else (None, 0))
    assert keys[len(headers):] == [None] * (len(frames) - len(headers))
    assert found[len(headers):] == [0] * (len(frames) - len(headers))
    if _fastpath is not None:
        assert _fastpath.json_opaque_keys(frames) == (keys, found)


@settings(max_examples=200)
@given(bodies=st.lists(st.one_of(st.none(), st.binary(max_size=40)), max_size=8), data=st.data())
def test_stamp_frames_implementations_agree(bodies, data):
    """One JSON answer per body that is not None, in order, each what `stamp_frame` makes of it."""
    opaques = data.draw(st.lists(st.integers(-2 ** 31, 2 ** 31 - 1), min_size=len(bodies), max_size=len(bodies)))
    head, tail = b'{"code":0,"opaque":', b',"flag":1}'
    expected = [pure.stamp_frame(0, False, head, tail, opaque, body)
                for opaque, body in zip(opaques, bodies) if body is not None]
    assert pure.stamp_frames(head, tail, opaques, bodies) == expected
    if _fastpath is not None:
        assert _fastpath.stamp_frames(head, tail, opaques, bodies) == expected


@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
def test_stamp_frames_refuses_what_is_no_body(impl):
    with pytest.raises(TypeError):
        impl.stamp_frames(b"{", b"}", [1], [bytearray(b"x")])
    with pytest.raises(ValueError):
        impl.stamp_frames(b"{", b"}", [1, 2], [b"x"])


@settings(max_examples=300)
@given(data=st.binary(max_size=300))
def test_entry_digest_is_xxh3(data):
    """The entry digest is XXH3 (64 bits, 0 read as 1) in both twins: the C one calls the xxhash package's own."""
    expected = xxhash.xxh3_64_intdigest(data) or 1
    assert pure.entry_digest(data) == expected
    if _fastpath is not None:
        assert _fastpath.entry_digest(data) == expected
        assert _fastpath.entry_digest(memoryview(data)) == expected


@needs_extension
@settings(max_examples=300)
@given(st.binary(max_size=5000) | st.text(alphabet="[]{}\"a,:", max_size=5000).map(str.encode))
def test_container_counts_agree_between_the_twins(data):
    assert _fastpath.count_containers(data) == pure.count_containers(data) == data.count(b"[") + data.count(b"{")
    assert _fastpath.count_containers(bytearray(data)) == pure.count_containers(data)


BODY_CRC_KEYS = [
    (b'{"extFields":{"bodyCrc32":"104391605","x":"1"},"opaque":,"v":1}',
     (b'{"extFields":{"bodyCrc32":"","x":"1"},"opaque":,"v":1}', 104391605)),
    (b'{"bodyCrc32":"0"}', (b'{"bodyCrc32":""}', 0)),
    (b'{"bodyCrc32":"2147483647"}', (b'{"bodyCrc32":""}', 2147483647)),
    (b'{"bodyCrc32":"2147483648"}', None),  # past int32
    (b'{"bodyCrc32":"07"}', None),  # not as Java writes it
    (b'{"bodyCrc32":"-7"}', None),  # masked CRC32s are never negative
    (b'{"bodyCrc32":""}', None),
    (b'{"bodyCrc32":"7', None),  # no closing quote
    (b'{"bodyCrc32":"7","bodyCrc32":"8"}', None),  # twice: which one the parser takes is not ours to say
    (b'{"bodyCrc32":7}', None),  # a number, not the string Java writes
    (b'{"x":"1"}', None),
]


@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
@pytest.mark.parametrize("key, expected", BODY_CRC_KEYS)
def test_body_crc_key(impl, key, expected):
    assert impl.body_crc_key(key) == expected
    assert impl.body_crc_key(bytearray(key)) == expected


@needs_extension
@settings(max_examples=500)
@given(st.binary(max_size=40).map(lambda b: b'{"a":' + b + b'"bodyCrc32":"') | st.binary(max_size=60),
       st.text(alphabet='0123456789"-x', max_size=12).map(str.encode), st.binary(max_size=30))
def test_body_crc_key_implementations_agree(head, middle, tail):
    key = head + middle + tail
    assert _fastpath.body_crc_key(key) == pure.body_crc_key(key)


@pytest.mark.parametrize("wrap", [bytes, bytearray, memoryview])
def test_body_digest_is_the_xxh3_of_the_frames_body(impl, wrap):
    """`body_digest` reads the body's place off the header-length field: XXH3 of what follows the
    header (0 read as 1), 0 for a frame without a body, whatever the serialize-type byte."""
    from xxhash import xxh3_64_intdigest
    header = b'{"code":904}'
    for serialize_byte in (0, 1):
        field = bytes([serialize_byte]) + len(header).to_bytes(3, "big")
        for body in (b"", b"x", b"{}" * 1000, bytes(range(256)) * 300):  # the last past GIL_FREE_BYTES
            frame = field + header + body
            expected = (xxh3_64_intdigest(body) or 1) if body else 0
            assert impl.body_digest(wrap(frame)) == expected
    assert impl.body_digest(b"\x00\x00\x00\x09{}") == 0  # a header longer than the frame: no body
    assert impl.body_digest(b"") == impl.body_digest(b"\x00\x00") == 0
