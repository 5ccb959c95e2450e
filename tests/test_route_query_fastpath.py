"""The route-query fast path answers exactly as the regular path, or steps aside.

For every request the fast path answers, its bytes must equal `RequestProcessor.process(...)
.encode()`; everything it must not answer (misses, TOPIC_NOT_EXIST, needWaitForService, oneway,
responses, odd headers) it must leave to the regular path (None).
"""
from __future__ import annotations

import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from inline_harness import START, InlineServer
from test_operator_http import requests_of, scrape

from namesrv import fastpath
from namesrv.channel import Channel
from namesrv.kvconfig import ORDER_TOPIC_CONFIG
from namesrv.processor import RequestProcessor
from namesrv.protocol import DataVersion, RemotingCommand, RequestCode, SerializeType, TopicConfig, \
    TopicConfigSerializeWrapper
from namesrv.protocol.codes import FLAG_ONEWAY, FLAG_RESPONSE, Version
from namesrv.routeinfo import Registrant

CLIENT = Channel("tcp", b"client-1", "10.0.0.100:50000")
TOPICS = ["TopicA", "TopicB", "Tópico-ü"]
ROUTE = RequestCode.GET_ROUTEINFO_BY_TOPIC


class Server(InlineServer):
    """Broker b1 registered with TOPICS; queries come from CLIENT."""

    def __init__(self, tmp_path, **config) -> None:
        super().__init__(tmp_path, **config)
        wrapper = TopicConfigSerializeWrapper({t: TopicConfig(t, 4, 4) for t in TOPICS}, DataVersion(1, 1))
        self.routes.register(Registrant("c1", "10.0.0.1:10911", "b1", 0), wrapper, [], Channel("tcp", b"broker", "10.0.0.1:5000"))

    def answer(self, frame: bytes) -> bytes | None:
        return self.inline(frame, CLIENT)

    def regular(self, frame: bytes) -> bytes:
        return super().regular(frame, CLIENT)


def frame_of(command: RemotingCommand) -> bytes:
    return command.encode()[4:]


def query(topic: str, *, serialize_type: int = SerializeType.JSON, version: int = Version.V5_3_3, opaque: int = 7,
          flag: int = 0, extra: dict | None = None) -> bytes:
    ext = {"topic": topic, **(extra or {})}
    command = RemotingCommand.request(ROUTE, ext, serialize_type=serialize_type, version=version, opaque=opaque)
    command.flag = flag
    return frame_of(command)


@pytest.fixture
def server(tmp_path) -> Server:
    return Server(tmp_path)


@pytest.mark.parametrize("serialize_type", [SerializeType.JSON, SerializeType.ROCKETMQ])
@pytest.mark.parametrize("version,extra", [
    (Version.V5_3_3, None),
    (Version.V4_6_0, None),  # legacy flavour
    (Version.V4_6_0, {"acceptStandardJsonOnly": "TRUE"}),
    (Version.V4_6_0, {"acceptStandardJsonOnly": "false"}),
])
def test_cached_answer_is_the_regular_answer(server, serialize_type, version, extra):
    for topic in TOPICS:
        frame = query(topic, serialize_type=serialize_type, version=version, extra=extra)
        assert server.answer(frame) is None  # not cached yet: the regular path fills the cache
        expected = server.regular(frame)
        for opaque in (0, 1, -5, 2 ** 31 - 1, -(2 ** 31)):
            frame = query(topic, serialize_type=serialize_type, version=version, extra=extra, opaque=opaque)
            assert server.answer(frame) == server.regular(frame)
        assert RemotingCommand.decode(expected[4:]).body == server.routes.topic_route_body(
            topic, version >= Version.V4_9_4 or bool(extra and extra["acceptStandardJsonOnly"] == "TRUE"))


def test_unknown_topic_goes_the_regular_way(server):
    frame = query("NoSuchTopic")
    server.regular(frame)
    assert server.answer(frame) is None


def test_a_route_change_is_seen_at_once(server):
    frame = query("TopicA")
    server.regular(frame)
    assert server.answer(frame) is not None
    server.routes.delete_topic("TopicA")
    assert server.answer(frame) is None
    assert RemotingCommand.decode(server.regular(frame)[4:]).code == 17  # TOPIC_NOT_EXIST


@pytest.mark.parametrize("flag", [FLAG_ONEWAY, FLAG_RESPONSE])
def test_oneway_and_responses_are_not_answered(server, flag):
    server.regular(query("TopicA"))
    assert server.answer(query("TopicA")) is not None
    assert server.answer(query("TopicA", flag=flag)) is None


def test_need_wait_for_service_window(tmp_path):
    server = Server(tmp_path, need_wait_for_service=True, wait_seconds_for_service=45)
    frame = query("TopicA")
    server.now = START + 46_000
    server.regular(frame)  # fills the cache
    server.now = START + 1_000
    server.processor = RequestProcessor(server.config, server.routes, server.kv, clock=lambda: server.now)
    assert server.answer(frame) is None  # "name server not ready" is not cached


def test_order_topic_conf_is_part_of_the_answer(tmp_path):
    server = Server(tmp_path, order_message_enable=True)
    frame = query("TopicA")
    server.regular(frame)
    assert server.answer(frame) == server.regular(frame)
    server.kv.put(ORDER_TOPIC_CONFIG, "TopicA", "b1:4")
    assert server.answer(frame) is None
    expected = server.regular(frame)
    assert b"b1:4" in expected and server.answer(frame) == expected


@pytest.mark.parametrize("header", [
    b'{"code":"105","extFields":{"topic":"TopicA"},"flag":0,"opaque":1,"version":479}',  # number as a string
    b'{"code":105,"extFields":{"topic":"TopicA","x":1},"flag":0,"opaque":1,"version":479}',  # non-string ext
    b'{"code":105,"extFields":{"topic":"TopicA","x":null},"flag":"0","opaque":1}',  # null ext value
])
def test_lenient_json_headers_are_answered_as_the_regular_path_answers_them(server, header):
    """The inline path reads headers with the regular path's parser: what that parser tolerates is
    answered, and with the same bytes."""
    server.regular(query("TopicA"))
    frame = len(header).to_bytes(4, "big") + header
    expected = server.regular(frame)
    assert b'"brokerName":"b1"' in RemotingCommand.decode(expected[4:]).body
    assert server.answer(frame) == expected


@pytest.mark.parametrize("header", [
    b'{"code":105,"extFields":{"topic":"TopicA"},"flag":0,"opaque":4294967296,"version":479}',  # opaque > int32
    b'{"code":105,"extFields":{"topic":"TopicA"},"flag":0,"opaque":1,"remark":[1]}',  # bad remark
    b'{"code":105,"flag":0,"opaque":1}',  # no topic
    b'{"code":105,"extFields":{"topic":"TopicA"}',  # not JSON
    b'[105]',
    b'{"code":106,"extFields":{"topic":"TopicA"},"flag":0,"opaque":1,"version":479}',  # another code
    b'{"code":105,"extFields":{"topic":"TopicA"},"flag":2,"opaque":1,"version":479}',  # oneway
    b'{"code":105,"extFields":{"topic":"TopicA"},"flag":1,"opaque":1,"version":479}',  # a response
])
def test_odd_json_headers_are_left_to_the_regular_path(server, header):
    server.regular(query("TopicA"))
    frame = len(header).to_bytes(4, "big") + header
    assert server.answer(frame) is None


@settings(max_examples=300, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.binary(max_size=64), serialize_byte=st.sampled_from([0, 1, 2, 255]))
def test_garbage_never_raises(server, data, serialize_byte):
    frame = ((serialize_byte << 24) | len(data)).to_bytes(4, "big") + data
    assert server.answer(frame) is None
    assert server.answer(data) is None


@settings(max_examples=100, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(extra=st.dictionaries(st.sampled_from(["acceptStandardJsonOnly", "lo", "zone"]), st.text(max_size=8)),
       version=st.integers(-(2 ** 15), 2 ** 15 - 1), opaque=st.integers(-(2 ** 31), 2 ** 31 - 1),
       serialize_type=st.sampled_from([SerializeType.JSON, SerializeType.ROCKETMQ]))
def test_any_cached_query_matches_the_regular_path(server, extra, version, opaque, serialize_type):
    extra = {k: v for k, v in extra.items() if v}  # the binary codec drops empty values
    frame = query("TopicB", serialize_type=serialize_type, version=version, opaque=opaque, extra=extra)
    expected = server.regular(frame)
    assert server.answer(frame) == expected
    assert b'"brokerName":"b1"' in RemotingCommand.decode(expected[4:]).body  # a real route, not an error


def test_cache_gives_a_read_entry_a_second_chance_and_never_spins():
    from namesrv.routeinfo.cache import ENTRY_OVERHEAD, RouteBodyCache
    cache = RouteBodyCache(max_bytes=2 * (100 + ENTRY_OVERHEAD))
    cache.put("a", True, None, b"x" * 100)
    cache.put("b", True, None, b"x" * 100)
    assert cache.get("a", True, None) is not None  # read: survives the next eviction once
    cache.put("c", True, None, b"x" * 100)
    assert cache.topics() == {"a", "c"}
    cache.put("d", True, None, b"x" * 100)  # a went behind c: c is the oldest now
    assert cache.topics() == {"a", "d"}
    cache.put("e", True, None, b"x" * 150)
    cache.put("e", False, None, b"x" * 150)  # one topic's two flavours exceed the budget together
    assert cache.topics() <= {"e"} and cache.size()[1] <= 2 * (100 + ENTRY_OVERHEAD)


#: What a broker may register over the wire: TopicValidator's characters (namesrv.routeinfo.route_input).
REGISTRABLE = [topic for topic in TOPICS if topic.isascii()]


def _register(conn, queues: int, counter: int):
    from namesrv.protocol import RegisterBrokerBody
    wrapper = TopicConfigSerializeWrapper({t: TopicConfig(t, queues, queues) for t in REGISTRABLE},
                                          DataVersion(counter, 1))
    ext = {"brokerName": "b1", "brokerAddr": "127.0.0.1:10911", "clusterName": "c1", "brokerId": 0}
    response = conn.call(conn.request(RequestCode.REGISTER_BROKER, ext, RegisterBrokerBody(wrapper, []).encode(),
                                      version=Version.V5_3_3))
    assert response.code == 0, response


def test_a_real_server_answers_pipelined_queries_inline_and_sees_changes(namesrv_factory, raw_connect):
    """Once each kind of query was asked once (its route cached), every pipelined query of a registered
    topic is answered inline by the reactor (`/metrics`: path fast_path, none more by the executors);
    the others (TOPIC_NOT_EXIST) by the executors."""
    server = namesrv_factory()
    broker, client = raw_connect(server.address), raw_connect(server.address)
    _register(broker, 4, 1)
    kinds = [(topic, serialize_type, version) for topic in (*TOPICS, "NoSuchTopic")
             for serialize_type in (SerializeType.JSON, SerializeType.ROCKETMQ)
             for version in (Version.V4_6_0, Version.V5_3_3)]
    for topic, serialize_type, version in kinds:  # one at a time: each route body cached for the batch
        client.call(client.request(ROUTE, {"topic": topic}, serialize_type=serialize_type, version=version))
    before = requests_of(scrape(server), "GET_ROUTEINFO_BY_TOPIC")
    queries = [client.request(ROUTE, {"topic": topic}, serialize_type=serialize_type, version=version)
               for _ in range(20) for topic, serialize_type, version in kinds]
    client.send(*queries)
    answers = {answer.opaque: answer for answer in (client.recv() for _ in queries)}
    bodies: dict[tuple, bytes | None] = {}
    for query_ in queries:
        answer = answers[query_.opaque]
        topic = query_.ext_fields["topic"]
        # A non-ASCII topic cannot be registered: asked for, it is a topic that does not exist.
        assert answer.code == (0 if topic in REGISTRABLE else 17) and answer.serialize_type == query_.serialize_type
        assert bodies.setdefault((topic, query_.version), answer.body) == answer.body  # cached or not: same bytes
    registered = sum(query_.ext_fields["topic"] in REGISTRABLE for query_ in queries)
    counted: dict[tuple[str, str], float] = {}

    def answered_by(path: str, response: str) -> float:
        return counted.get((response, path), 0.0) - before.get((response, path), 0.0)

    deadline = time.monotonic() + 10  # the tallies are read at scrape time, a moment after the answers leave
    while (answered_by("fast_path", "SUCCESS") + answered_by("executor", "TOPIC_NOT_EXIST") < len(queries)
           and time.monotonic() < deadline):
        counted = requests_of(scrape(server), "GET_ROUTEINFO_BY_TOPIC")
        time.sleep(0.02)
    assert (answered_by("fast_path", "SUCCESS"), answered_by("executor", "SUCCESS")) == (registered, 0), counted
    assert answered_by("executor", "TOPIC_NOT_EXIST") == len(queries) - registered
    _register(broker, 8, 2)  # every topic's queue count changes: the next answers must show it
    after = client.call(client.request(ROUTE, {"topic": "TopicA"}))
    assert after.body != bodies[("TopicA", Version.V5_3_3)] and b'"readQueueNums":8' in after.body


@pytest.mark.parametrize("digits,valid", [(b"007", False), (b"1_0", False), (b"+1", False), (b"2147483648", False),
                                          (b"-2147483649", False), (b"1e3", False), (b"", False), (b" 1", True),
                                          (b"-0", True)])
def test_a_remembered_header_with_odd_opaque_digits_is_parsed_afresh(server, digits, valid):
    server.regular(query("TopicA"))
    header = b'{"code":105,"extFields":{"topic":"TopicA"},"flag":0,"language":"JAVA","opaque":%s,"version":479}'
    frame_of_ = lambda opaque: len(header % opaque).to_bytes(4, "big") + header % opaque  # noqa: E731
    assert server.answer(frame_of_(b"12")) is not None  # parsed, remembered
    assert server.answer(frame_of_(b"13")) == server.regular(frame_of_(b"13"))  # from memory
    answer = server.answer(frame_of_(digits))
    assert answer == (server.regular(frame_of_(digits)) if valid else None)


def test_an_opaque_key_inside_ext_fields_is_never_mistaken_for_the_opaque(server):
    server.regular(query("TopicA", extra={"opaque": "1"}))
    for opaque in (5, 6):
        frame = query("TopicA", extra={"opaque": "1"}, opaque=opaque)
        assert server.answer(frame) == server.regular(frame)


@pytest.mark.usefixtures("each_fastpath")
@pytest.mark.parametrize("order_message_enable", [False, True])
def test_a_chunk_is_answered_as_its_frames_are_one_by_one(tmp_path, order_message_enable):
    """`answer_all` (the chunk's cached route answers at once, then the rest one by one) answers what
    `answer` answers frame by frame, and hands back the rest decoded; with orderMessageEnable, a
    topic's order configuration is part of its answer in the chunk too. A registration's header,
    remembered in the same table as the route queries', is never looked up as a route."""
    server = Server(tmp_path, order_message_enable=order_message_enable)
    server.kv.put(ORDER_TOPIC_CONFIG, TOPICS[0], "b1:4")
    frames = [query(topic, serialize_type=serialize_type, opaque=opaque)
              for opaque, (topic, serialize_type) in enumerate(
                  [(t, s) for t in (*TOPICS, "NoSuchTopic") for s in (SerializeType.JSON, SerializeType.ROCKETMQ)] * 3)]
    frames.append(frame_of(RemotingCommand.request(RequestCode.BROKER_HEARTBEAT, {"clusterName": "c1"}, opaque=99)))
    wrapper = TopicConfigSerializeWrapper({t: TopicConfig(t, 4, 4) for t in TOPICS}, DataVersion(1, 1))
    frames.append(frame_of(RemotingCommand.request(RequestCode.REGISTER_BROKER, {
        "brokerName": "b1", "brokerAddr": "10.0.0.1:10911", "clusterName": "c1", "haServerAddr": "10.0.0.1:10912",
        "brokerId": "0", "compressed": "false"}, body=wrapper.encode(), opaque=100)))
    for frame in frames:
        server.regular(frame)  # fills the route cache
    for _ in range(2):  # the first pass reads the headers, the second finds them remembered
        replies, commands = server.processor.inline.answer_all(list(frames), CLIENT, time.monotonic())
        one_by_one = [server.answer(frame) for frame in frames]
        assert sorted(replies) == sorted(reply for reply in one_by_one if reply is not None)
        assert commands == [RemotingCommand.decode(frame) for frame, reply in zip(frames, one_by_one) if reply is None]
        assert sum(reply is not None for reply in one_by_one[:-2]) == 3 * 2 * len(TOPICS)
        assert all(reply == server.regular(frame) for frame, reply in zip(frames[:-2], one_by_one) if reply is not None)


@pytest.mark.usefixtures("each_fastpath")
def test_a_chunk_of_one_frame_is_answered_as_the_frame_is(tmp_path):
    """A one-frame chunk (a closed-loop client's) is looked up in the route cache only when its
    header is known as a route query: a header not seen before, route query or not, is read by
    `answer`, which answers it (and remembers it) just the same."""
    server = Server(tmp_path)
    frames = [query(topic, serialize_type=serialize_type, opaque=opaque)
              for opaque, (topic, serialize_type) in enumerate(
                  [(t, s) for t in (*TOPICS, "NoSuchTopic") for s in (SerializeType.JSON, SerializeType.ROCKETMQ)])]
    for frame in frames:
        server.regular(frame)  # fills the route cache
    for seen in (False, True):
        for frame in frames:
            key = fastpath.json_opaque_keys([frame])[0][0]
            assert seen or key is None or key not in server.processor.inline.seen.json.table
            replies, commands = server.processor.inline.answer_all([frame], CLIENT, time.monotonic())
            expected = server.answer(frame)
            assert replies == ([] if expected is None else [expected])
            assert commands == ([] if expected is not None else [RemotingCommand.decode(frame)])
            assert expected is None or expected == server.regular(frame)
