"""The request generator's loop (namesrv.fastpath's RequestGenerator): the Cython twin writes the same
bytes and records the same events as the pure one, for any schedule and any answers in any chunks,
and both agree with the protocol's own codecs and with HdrHistogram's bucket layout."""
from __future__ import annotations

import json
import socket
import threading
import time
from array import array

import pytest
from hdrh.histogram import HdrHistogram
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fastpath_cases import IMPLEMENTATIONS, _fastpath, needs_extension
from namesrv.fastpath import generator as pure_generator
from namesrv.fastpath import pure
from namesrv.protocol import FrameDecoder, RemotingCommand, SerializeType

SECOND = 1_000_000_000
HISTOGRAM = HdrHistogram(1, 3_600_000_000, 3)
LAYOUT = (HISTOGRAM.unit_magnitude, HISTOGRAM.sub_bucket_half_count_magnitude, 3_600_000_000)
SENTINEL = 2_059_198_193
ROUTE, REGISTER = 105, 103


def parts(command: RemotingCommand) -> tuple[int, bytes, bytes, bytes, int]:
    """(code, head, tail, body, serialize type) of a request: its header split around the opaque."""
    command.opaque = SENTINEL
    header = command.encode_header()
    if command.serialize_type == SerializeType.JSON:
        at = header.index(b'"opaque":%d' % SENTINEL) + len(b'"opaque":')
        head, tail = header[:at], header[at + len(str(SENTINEL)):]
    else:
        head, tail = header[:5], header[9:]
    return command.code, head, tail, command.body or b"", int(command.serialize_type)


REQUESTS = [RemotingCommand.request(ROUTE, {"topic": "TopicTest"}),
            RemotingCommand.request(REGISTER, {"brokerName": "b"}, b'{"x":1}'),
            RemotingCommand.request(ROUTE, {"topic": "Other"}, serialize_type=SerializeType.ROCKETMQ)]


def generator(impl, templates=REQUESTS, connections: int = 2, echo_ok: bool = False):
    made = impl.RequestGenerator(*LAYOUT, echo_ok=echo_ok)
    made.measure_start_ns = 10 * SECOND
    for command in templates:
        made.template(*parts(command))
    for _ in range(connections):
        made.connect(-1)
    return made


def decode(histograms: bytes, responses: bytes) -> tuple[list[tuple], list[tuple]]:
    """The records as (metric, code, interval, bucket index) and (interval, code, response code)."""
    hist = [(key >> 52, (key >> 36) & 0xFFFF, (key >> 16) & 0xFFFFF, key & 0xFFFF)
            for key in array("q", histograms)]
    resp = [((key >> 32) - 1, (key >> 16) & 0xFFFF, (key & 0xFFFF) - 1) for key in array("q", responses)]
    return hist, resp


def answer(opaque: int, code: int = 0, serialize_type: int = SerializeType.JSON, request: int = ROUTE) -> bytes:
    response = RemotingCommand.request(request, serialize_type=serialize_type).make_response(code, "remark")
    response.opaque = opaque
    return response.encode()


def test_the_twins_are_both_there():
    assert pure.RequestGenerator is pure_generator.RequestGenerator
    if _fastpath is not None:
        assert _fastpath.RequestGenerator.__module__ == "namesrv._fastpath"


@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
def test_requests_are_stamped_as_the_encoder_writes_them_with_opaques_in_turn(impl):
    made = generator(impl)
    made.schedule(array("q", [11 * SECOND, 11 * SECOND, 12 * SECOND]), array("i", [0, 1, 2]), array("i", [0, 0, 1]))
    assert made.send_due(11 * SECOND) == 2 and made.scheduled == 1 and made.next_due_ns() == 12 * SECOND
    assert made.send_due(12 * SECOND + 5000) == 1 and made.sent == 3 and made.pending == 3
    first = FrameDecoder().feed(made.outgoing(0))
    assert [RemotingCommand.decode(frame).opaque for frame in first] == [1, 2]
    for frame, command, opaque in zip(first, REQUESTS, (1, 2)):
        command.opaque = opaque
        assert frame == command.encode()[4:]
    command = REQUESTS[2]
    command.opaque = 1  # the other connection's first
    assert made.outgoing(1) == command.encode() and made.outgoing(1) == b""
    hist, resp = decode(*made.take())
    assert resp == [] and [h[:3] for h in hist] == [(1, ROUTE, 1), (1, REGISTER, 1), (1, ROUTE, 2)]
    assert hist[2][3] == HISTOGRAM._counts_index_for(5)  # 5 µs late


@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
def test_a_cut_drops_what_is_scheduled_from_then_on(impl):
    made = generator(impl)
    made.schedule(array("q", [11, 12, 13, 14]), array("i", [0] * 4), array("i", [0] * 4))
    made.send_due(11)
    assert made.cancel(13) == 2 and made.scheduled == 1 and made.cancel(100) == 0
    made.schedule(array("q", [12]), array("i", [0]), array("i", [0]))  # after what is left, not what was
    assert made.send_due(20) == 2 and made.sent == 3


@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
def test_answers_are_matched_by_opaque_and_counted_in_hdr_buckets(impl):
    made = generator(impl)
    made.schedule(array("q", [9 * SECOND, 10 * SECOND + 1, 11 * SECOND, 11 * SECOND]), array("i", [0, 1, 2, 0]),
                  array("i", [0, 0, 1, 1]))
    made.send_due(12 * SECOND)
    arrived = 12 * SECOND + 123_456_789
    data = answer(2, request=REGISTER) + answer(1, 17) + answer(99)  # 99: nobody asked
    for cut in range(len(data) + 1):  # every split of the stream gives the same answers
        again = generator(impl)
        again.schedule(array("q", [9 * SECOND, 10 * SECOND + 1]), array("i", [0, 1]), array("i", [0, 0]))
        again.send_due(12 * SECOND)
        again.take()
        assert again.feed(0, data[:cut], arrived) and again.feed(0, data[cut:], arrived)
        assert again.answered == 2 and again.pending == 0
    assert made.feed(0, data, arrived)
    made.feed(1, answer(1, serialize_type=SerializeType.ROCKETMQ) + answer(2, 1), arrived)
    assert made.answered == 4 and made.pending == 0
    hist, resp = decode(*made.take())
    latency = [h for h in hist if h[0] == 0]
    assert latency == [(0, REGISTER, 0, HISTOGRAM._counts_index_for((arrived - 10 * SECOND - 1) // 1000)),
                       (0, ROUTE, 1, HISTOGRAM._counts_index_for((arrived - 11 * SECOND) // 1000)),
                       (0, ROUTE, 1, HISTOGRAM._counts_index_for((arrived - 11 * SECOND) // 1000))]
    # the warm-up request (intended before the window) is tallied by response code only, as interval -1
    assert resp == [(0, REGISTER, 0), (-1, ROUTE, 17), (1, ROUTE, 0), (1, ROUTE, 1)]


@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
def test_pushes_are_not_answers_but_an_echo_is_where_asked(impl):
    request = RemotingCommand.request(ROUTE, {"topic": "x"}, opaque=1).encode()
    for echo_ok, answered in ((False, 0), (True, 1)):
        made = generator(impl, echo_ok=echo_ok)
        made.schedule(array("q", [11 * SECOND]), array("i", [0]), array("i", [0]))
        made.send_due(11 * SECOND)
        made.feed(0, request, 11 * SECOND + 1000)
        assert made.answered == answered
        if answered:
            assert decode(*made.take())[1] == [(1, ROUTE, 0)]


@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
def test_a_bad_frame_loses_the_connection_and_its_requests_count_as_never_answered(impl):
    made = generator(impl)
    made.schedule(array("q", [11 * SECOND] * 3), array("i", [0, 0, 0]), array("i", [0, 0, 1]))
    made.send_due(11 * SECOND)
    made.take()
    assert not made.feed(0, answer(1) + (2).to_bytes(4, "big"), 12 * SECOND)  # a length under 4
    assert not made.alive(0) and made.alive(1) and made.pending == 1
    assert decode(*made.take())[1] == [(1, ROUTE, 0), (1, ROUTE, -1)]
    made.schedule(array("q", [13 * SECOND]), array("i", [0]), array("i", [0]))
    made.send_due(13 * SECOND)  # sent on a lost connection: never answered
    assert decode(*made.take())[1] == [(3, ROUTE, -1)] and made.outgoing(0) == b""
    assert made.drop(1) == 1 and decode(*made.take())[1] == [(1, ROUTE, -1)]


@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
def test_a_request_unanswered_for_a_whole_ring_of_opaques_counts_as_never_answered(impl):
    made = generator(impl, connections=1)
    count = pure_generator.PENDING_SLOTS + 2
    made.schedule(array("q", [11 * SECOND] * count), array("i", [0] * count), array("i", [0] * count))
    made.send_due(11 * SECOND)
    assert made.pending == pure_generator.PENDING_SLOTS
    assert decode(*made.take())[1] == [(1, ROUTE, -1), (1, ROUTE, -1)]


@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
def test_a_closed_loop_sends_one_more_per_answer_until_its_stop(impl):
    made = generator(impl, connections=1)
    made.refill(0, array("i", [0, 1]), 3, 20 * SECOND, 21 * SECOND)
    sent = [RemotingCommand.decode(frame) for frame in FrameDecoder().feed(made.outgoing(0))]
    assert [(c.code, c.opaque) for c in sent] == [(ROUTE, 1), (REGISTER, 2), (ROUTE, 3)]
    made.feed(0, answer(2), 20 * SECOND + 1000)
    assert [(c.code, c.opaque) for c in map(RemotingCommand.decode, FrameDecoder().feed(made.outgoing(0)))] == \
        [(REGISTER, 4)]
    made.feed(0, answer(1) + answer(3), 21 * SECOND)  # at the stop: answered, nothing more sent
    assert made.outgoing(0) == b"" and made.pending == 1 and made.sent == 4


@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
def test_bad_input_is_refused(impl):
    made = generator(impl)
    with pytest.raises(ValueError):
        made.schedule(array("q", [1, 2]), array("i", [0]), array("i", [0, 0]))
    with pytest.raises(ValueError):
        made.schedule(array("q", [1]), array("i", [7]), array("i", [0]))
    with pytest.raises(ValueError):
        made.schedule(array("q", [5, 4]), array("i", [0, 0]), array("i", [0, 0]))
    made.schedule(array("q", [5]), array("i", [0]), array("i", [0]))
    with pytest.raises(ValueError):
        made.schedule(array("q", [4]), array("i", [0]), array("i", [0]))  # before what is scheduled
    with pytest.raises(ValueError):
        made.template(70_000, b"", b"", b"", 0)
    with pytest.raises(ValueError):
        made.feed(9, b"", 0)
    with pytest.raises(ValueError):
        impl.RequestGenerator(0, 0, 1)


JSON_VALUES = st.recursive(st.none() | st.booleans() | st.integers(-(10 ** 20), 10 ** 20) | st.text(max_size=5),
                           lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner,
                                                                                       max_size=3), max_leaves=6)
HEADER_KEYS = st.sampled_from(["code", "opaque", "flag", "remark", "extFields", "language", "version", 'op"aque'])


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(HEADER_KEYS, JSON_VALUES, max_size=6), st.sampled_from([None, 1, 2]))
def test_the_json_reader_finds_what_json_loads_finds(fields, indent):
    header = json.dumps(fields, indent=indent).encode()
    got = pure_generator._json_fields(header)

    def readable(key: str) -> bool:
        value = fields.get(key)
        return type(value) is int and len(str(abs(value))) <= 18

    if not readable("opaque"):
        assert got is None
    else:
        assert got == tuple(fields[key] if readable(key) else 0 for key in ("code", "opaque", "flag"))


EVENTS = st.lists(st.one_of(
    st.tuples(st.just("answer"), st.integers(0, 1), st.integers(-3, 40), st.integers(-2, 300),
              st.sampled_from([SerializeType.JSON, SerializeType.ROCKETMQ])),
    st.tuples(st.just("push"), st.integers(0, 1), st.integers(0, 40)),
    st.tuples(st.just("junk"), st.integers(0, 1), st.binary(max_size=40)),
    st.tuples(st.just("json"), st.integers(0, 1), st.dictionaries(HEADER_KEYS, JSON_VALUES, max_size=4)),
    st.tuples(st.just("send"), st.integers(0, 30)),
    st.tuples(st.just("drop"), st.integers(0, 1)),
    st.tuples(st.just("cancel"), st.integers(0, 3 * SECOND)),
), max_size=40)


def frame_of(header: bytes, serialize_type: int = 0) -> bytes:
    return (len(header) + 4).to_bytes(4, "big") + ((serialize_type << 24) | len(header)).to_bytes(4, "big") + header


@needs_extension
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.integers(0, 3 * SECOND), st.integers(0, 2), st.integers(0, 1)), max_size=40), EVENTS,
       st.integers(1, 64), st.booleans())
def test_the_twins_write_and_record_the_same_for_any_traffic(requests, events, chunk, echo_ok):
    made = [generator(impl, echo_ok=echo_ok) for impl in (pure, _fastpath)]
    requests.sort()
    at = array("q", [10 * SECOND + when for when, _, _ in requests])
    for one in made:
        one.schedule(at, array("i", [t for _, t, _ in requests]), array("i", [c for _, _, c in requests]))
    now = 10 * SECOND
    for event in events:
        now += 7_777_777
        if event[0] == "send":
            now += event[1] * SECOND // 10
            results = [one.send_due(now) for one in made]
        elif event[0] == "drop":
            results = [one.drop(event[1]) for one in made]
        elif event[0] == "cancel":
            results = [one.cancel(10 * SECOND + event[1]) for one in made]
        else:
            if event[0] == "answer":
                data = answer(event[2], event[3], event[4])
            elif event[0] == "push":
                data = RemotingCommand.request(ROUTE, {"topic": "t"}, opaque=event[2]).encode()
            elif event[0] == "junk":
                data = frame_of(event[2])
            else:
                data = frame_of(json.dumps(event[2]).encode())
            results = [[one.feed(event[1], data[i:i + chunk], now) for i in range(0, len(data), chunk)] for one in made]
        assert results[0] == results[1], event
        written = [(one.outgoing(0), one.outgoing(1)) for one in made]
        assert written[0] == written[1], event
    assert made[0].take() == made[1].take()
    assert (made[0].sent, made[0].answered, made[0].pending, made[0].scheduled) == \
        (made[1].sent, made[1].answered, made[1].pending, made[1].scheduled)


def responder(sock: socket.socket, stop: threading.Event) -> None:
    """Answer every request frame on `sock` with SUCCESS, as a server would (until `stop`)."""
    decoder = FrameDecoder()
    sock.settimeout(0.05)
    while not stop.is_set():
        try:
            data = sock.recv(1 << 16)
        except TimeoutError:
            continue
        if not data:
            return
        sock.sendall(b"".join(RemotingCommand.decode(frame).make_response(0, None).encode()
                              for frame in decoder.feed(data)))


@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
def test_pump_sends_on_time_over_real_sockets_and_reads_every_answer(impl):
    ours, theirs = socket.socketpair()
    ours.setblocking(False)
    stop = threading.Event()
    thread = threading.Thread(target=responder, args=(theirs, stop), daemon=True)
    thread.start()
    try:
        made = impl.RequestGenerator(*LAYOUT)
        route = made.template(*parts(REQUESTS[0]))
        conn = made.connect(ours.fileno())
        start = time.monotonic_ns() + 20_000_000
        made.measure_start_ns = start
        intended = array("q", [start + i * 1_000_000 for i in range(200)])  # 1,000/s for 0.2 s
        made.schedule(intended, array("i", [route] * 200), array("i", [conn] * 200))
        made.pump(start + 100_000_000)
        assert 95 <= made.sent <= 105
        time.sleep(0.15)
        made.pump(0)  # late: one pass, which sends everything due
        assert made.sent == 200
        deadline = time.monotonic_ns() + 5 * SECOND
        while made.pending and time.monotonic_ns() < deadline:
            made.pump(time.monotonic_ns() + 10_000_000)
        assert (made.sent, made.answered, made.pending, made.scheduled) == (200, 200, 0, 0)
        hist, resp = decode(*made.take())
        assert sum(1 for h in hist if h[0] == 0) == 200  # every one intended in the window, every latency kept
        assert len(resp) == 200 and {(code, response) for _, code, response in resp} == {(ROUTE, 0)}
    finally:
        stop.set()
        thread.join(2)
        ours.close()
        theirs.close()
