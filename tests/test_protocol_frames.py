"""FrameDecoder and encode_frames (reference 1.1): any chunking of a stream yields the same frames,
and a bad length is refused as soon as its 4 bytes are in, before the frame's data arrives."""
from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from namesrv.protocol import (
    DEFAULT_MAX_FRAME_LENGTH,
    FrameDecoder,
    LanguageCode,
    ProtocolError,
    RemotingCommand,
    RequestCode,
    ResponseCode,
    SerializeType,
    encode_frames,
)


pytestmark = pytest.mark.usefixtures("each_fastpath")


def sample_commands() -> list[RemotingCommand]:
    request = RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "TopicTest"}, opaque=1)
    return [
        request,
        request.make_response(ResponseCode.SUCCESS, body=b'{"brokerDatas":[]}' * 20),
        RemotingCommand.request(RequestCode.REGISTER_BROKER, {"brokerName": "b"}, b"\x00\x01" * 300, opaque=2,
                                serialize_type=SerializeType.ROCKETMQ, language=LanguageCode.JAVA),
        RemotingCommand.request(RequestCode.BROKER_HEARTBEAT, {"clusterName": "c"}, oneway=True, opaque=3),
        RemotingCommand(ResponseCode.SYSTEM_ERROR, flag=1, opaque=2, remark="crc32 not match",
                        serialize_type=SerializeType.ROCKETMQ),
    ]


STREAM = encode_frames(sample_commands())
EXPECTED_FRAMES = [command.encode()[4:] for command in sample_commands()]


def feed_all(decoder: FrameDecoder, chunks) -> list[bytes]:
    frames: list[bytes] = []
    for chunk in chunks:
        frames.extend(decoder.feed(chunk))
    return frames


def length_prefix(total: int) -> bytes:
    return struct.pack(">i", total)


# --- chunking ------------------------------------------------------------------------------------

def test_encode_frames_writes_every_command_into_one_buffer():
    assert STREAM == b"".join(command.encode() for command in sample_commands())


def test_many_frames_in_one_chunk():
    decoder = FrameDecoder()
    frames = decoder.feed(STREAM)
    assert frames == EXPECTED_FRAMES
    assert decoder.buffered == 0
    assert [RemotingCommand.decode(frame) for frame in frames] == sample_commands()


def test_one_byte_at_a_time():
    decoder = FrameDecoder()
    frames: list[bytes] = []
    ends = []
    for index in range(len(STREAM)):
        completed = decoder.feed(STREAM[index:index + 1])
        if completed:
            ends.append(index + 1)
        frames.extend(completed)
    assert frames == EXPECTED_FRAMES
    boundaries, pos = [], 0
    for frame in EXPECTED_FRAMES:
        pos += 4 + len(frame)
        boundaries.append(pos)
    assert ends == boundaries  # each frame is released by exactly its own last byte
    assert decoder.buffered == 0


@settings(max_examples=150, deadline=None)
@given(st.lists(st.integers(0, len(STREAM)), max_size=30), st.sampled_from([bytes, bytearray, memoryview]))
def test_any_chunking_yields_the_same_frames(cuts, kind):
    points = [0, *sorted(cuts), len(STREAM)]
    chunks = [kind(STREAM[a:b]) for a, b in zip(points, points[1:])]
    decoder = FrameDecoder()
    assert feed_all(decoder, chunks) == EXPECTED_FRAMES
    assert decoder.buffered == 0


def test_partial_frame_is_buffered_until_complete():
    decoder = FrameDecoder()
    first = STREAM[:len(EXPECTED_FRAMES[0]) + 4 + 10]
    assert decoder.feed(first) == [EXPECTED_FRAMES[0]]
    assert decoder.buffered == 10
    assert decoder.feed(b"") == []
    assert decoder.buffered == 10
    assert decoder.feed(STREAM[len(first):]) == EXPECTED_FRAMES[1:]
    assert decoder.buffered == 0


def test_frame_with_only_a_header_length_field():
    decoder = FrameDecoder()
    assert decoder.feed(length_prefix(4) + b"\x00\x00\x00\x00") == [b"\x00\x00\x00\x00"]


def test_the_decoder_keeps_working_after_many_frames():
    decoder = FrameDecoder()
    for _ in range(50):
        assert decoder.feed(STREAM[:7]) == []
        assert decoder.feed(STREAM[7:]) == EXPECTED_FRAMES


# --- bad lengths ---------------------------------------------------------------------------------

def test_largest_default_frame_waits_for_its_data():
    decoder = FrameDecoder()
    assert DEFAULT_MAX_FRAME_LENGTH == 16 * 1024 * 1024
    assert decoder.feed(length_prefix(16777212)) == []  # totalLength + 4 == maxFrameLength: accepted
    assert decoder.buffered == 4


def test_oversize_frame_is_refused_before_its_data_arrives():
    with pytest.raises(ProtocolError, match="exceeds the maximum frame length"):
        FrameDecoder().feed(length_prefix(16777213))


def test_oversize_length_split_across_chunks_is_refused_when_complete():
    decoder = FrameDecoder()
    prefix = length_prefix(16777397)  # issue #5296's canonical "Adjusted frame length exceeds" case
    assert decoder.feed(prefix[:2]) == []
    with pytest.raises(ProtocolError, match="16777397"):
        decoder.feed(prefix[2:])


def test_oversize_frame_after_good_frames_in_one_chunk():
    with pytest.raises(ProtocolError, match="exceeds the maximum frame length"):
        FrameDecoder().feed(STREAM + length_prefix(1 << 30))


@pytest.mark.parametrize("total", [-1, -4, -(1 << 31), 0, 1, 3])
def test_negative_or_too_short_length_is_refused(total):
    with pytest.raises(ProtocolError, match=f"bad frame length {total}"):
        FrameDecoder().feed(length_prefix(total))


def test_bad_length_after_a_buffered_partial_frame():
    decoder = FrameDecoder()
    assert decoder.feed(STREAM[:-1]) == EXPECTED_FRAMES[:-1]
    with pytest.raises(ProtocolError, match="bad frame length -5"):
        decoder.feed(STREAM[-1:] + length_prefix(-5))


@pytest.mark.parametrize("max_frame_length", [8, 64, 1024, 1 << 20])
def test_max_frame_length_is_configurable(max_frame_length):
    largest = max_frame_length - 4
    decoder = FrameDecoder(max_frame_length)
    assert decoder.max_frame_length == max_frame_length
    frame = length_prefix(largest) + bytes(largest)
    assert decoder.feed(frame) == [bytes(largest)]
    with pytest.raises(ProtocolError, match=f"exceeds the maximum frame length {max_frame_length}"):
        FrameDecoder(max_frame_length).feed(length_prefix(largest + 1))


def test_small_limit_refuses_an_ordinary_request():
    request = sample_commands()[0].encode()
    with pytest.raises(ProtocolError, match="exceeds the maximum frame length 64"):
        FrameDecoder(64).feed(request[:4])


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=300), st.lists(st.integers(0, 300), max_size=10), st.sampled_from([16, 64, 256]))
def test_random_bytes_only_ever_raise_protocol_error_and_stay_bounded(data, cuts, max_frame_length):
    decoder = FrameDecoder(max_frame_length)
    points = [0, *sorted(c for c in cuts if c <= len(data)), len(data)]
    try:
        for a, b in zip(points, points[1:]):
            for frame in decoder.feed(data[a:b]):
                assert 4 <= len(frame) <= max_frame_length - 4
            assert decoder.buffered < max_frame_length
    except ProtocolError:
        pass
