"""The reactor answers a registration exactly as the regular path, or steps aside.

For every registration the inline path answers, its bytes must equal `RequestProcessor.process(...)
.encode()` and its effect on the route table must be the regular path's. With
inlineRegistrationMaxBodyBytes=0 (the `server` fixture) only unchanged repeats are answered (a
liveness refresh), and a CRC32 mismatch is refused with the regular path's bytes; anything else
(a first registration, a changed body, a refresh the route table declines, a oneway or malformed
header) is left to the regular path (None). With the default, a changed body up to that size is applied inline as well, checked
against a twin server that takes every request the regular way.
"""
from __future__ import annotations

import dataclasses
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from inline_harness import InlineServer

from namesrv.channel import Channel
from namesrv.fastpath import body_crc32
from namesrv.kvconfig import ORDER_TOPIC_CONFIG
from namesrv.processor.seen_headers import OpaqueTemplate
from namesrv.protocol import (DataVersion, RegisterBrokerBody, RemotingCommand, RequestCode, ResponseCode,
                              SerializeType, TopicConfig, TopicConfigSerializeWrapper)
from namesrv.protocol.codes import FLAG_ONEWAY, Version

BROKER = Channel("tcp", b"broker-1", "10.0.0.1:50000")
OTHER = Channel("tcp", b"broker-2", "10.0.0.1:50001")
MASTER = {"clusterName": "c1", "brokerName": "b1", "brokerAddr": "10.0.0.1:10911", "brokerId": "0",
          "haServerAddr": "10.0.0.1:10912"}
SLAVE = {**MASTER, "brokerAddr": "10.0.0.2:10911", "brokerId": "1", "haServerAddr": "10.0.0.2:10912"}


class Server(InlineServer):
    def answer(self, frame: bytes, channel: Channel = BROKER) -> bytes | None:
        """The inline path's answer, or None when it steps aside: then any request it hands back
        must be exactly the frame's decode, its body CRC32 right."""
        reply = self.inline(frame, channel)
        if reply is None or type(reply) is bytes:
            return reply
        assert reply == RemotingCommand.decode(frame)
        assert reply.body_crc32() == body_crc32(reply.body or b"")
        return None

    def regular(self, frame: bytes, channel: Channel = BROKER) -> bytes:
        return super().regular(frame, channel)

    def live(self, header: dict):
        return self.routes.snapshot().broker_live_table[(header["clusterName"], header["brokerAddr"])]


def body(topics: int = 3, counter: int = 1) -> bytes:
    wrapper = TopicConfigSerializeWrapper({f"T{i}": TopicConfig(f"T{i}", 4, 4) for i in range(topics)},
                                          DataVersion(counter, 1))
    return RegisterBrokerBody(wrapper, []).encode()


def registration(header: dict = MASTER, data: bytes | None = None, *, opaque: int = 1, crc: bool = True,
                 serialize_type: int = SerializeType.JSON, version: int = Version.V5_3_3, flag: int = 0,
                 extra: dict | None = None) -> bytes:
    data = body() if data is None else data
    ext = {**header, **({"bodyCrc32": str(body_crc32(data))} if crc else {}), **(extra or {})}
    command = RemotingCommand.request(RequestCode.REGISTER_BROKER, ext, data, opaque=opaque,
                                      serialize_type=serialize_type, version=version)
    command.flag = flag
    return command.encode()[4:]


@pytest.fixture
def server(tmp_path) -> Server:
    """Only unchanged repeats are answered inline."""
    return Server(tmp_path, inline_registration_max_body_bytes=0)


@pytest.mark.parametrize("serialize_type", [SerializeType.JSON, SerializeType.ROCKETMQ])
@pytest.mark.parametrize("crc", [True, False])
def test_a_repeat_is_answered_as_the_regular_path_answers_it(server, serialize_type, crc):
    first = registration(serialize_type=serialize_type, crc=crc)
    assert server.answer(first) is None  # nothing registered yet: the regular path registers
    assert RemotingCommand.decode(server.regular(first)[4:]).code == ResponseCode.SUCCESS
    for opaque in (2, 0, -7, 2 ** 31 - 1, -(2 ** 31)):
        frame = registration(serialize_type=serialize_type, crc=crc, opaque=opaque)
        assert server.answer(frame) == server.regular(frame)


def test_a_slave_learns_its_master_inline(server):
    server.regular(registration(MASTER))
    server.regular(registration(SLAVE))
    frame = registration(SLAVE, opaque=9)
    answer = server.answer(frame)
    assert answer == server.regular(frame)
    ext = RemotingCommand.decode(answer[4:]).ext_fields
    assert ext == {"masterAddr": "10.0.0.1:10911", "haServerAddr": "10.0.0.1:10912"}


def test_order_topic_config_is_returned_inline(tmp_path):
    server = Server(tmp_path, return_order_topic_config_to_broker=True, inline_registration_max_body_bytes=0)
    server.regular(registration())
    server.kv.put(ORDER_TOPIC_CONFIG, "T1", "b1:4")
    frame = registration(opaque=5)
    answer = server.answer(frame)
    assert answer == server.regular(frame) and b"b1:4" in RemotingCommand.decode(answer[4:]).body


def test_the_refresh_keeps_the_broker_alive_and_takes_the_new_channel(server):
    server.regular(registration())
    server.now += 100_000
    assert server.answer(registration(opaque=2), OTHER) is not None
    assert server.live(MASTER).last_update_timestamp == server.now
    assert server.live(MASTER).channel == OTHER
    server.routes.on_channel_destroy(BROKER)  # the old connection's close no longer removes it
    server.now += 100_000
    assert server.routes.scan_not_active_brokers() == []
    assert server.routes.pickup_topic_route("T0") is not None


def test_a_changed_body_goes_the_regular_way(server):
    server.regular(registration())
    changed = registration(data=body(counter=2), opaque=2)
    assert server.answer(changed) is None
    server.regular(changed)
    assert server.live(MASTER).data_version == DataVersion(2, 1)
    assert server.answer(registration(data=body(counter=2), opaque=3)) is not None


def test_a_crc_mismatch_is_refused_as_the_regular_path_refuses_it(server):
    server.regular(registration())
    frame = registration(opaque=2, extra={"bodyCrc32": "12345"})
    answer = server.answer(frame)
    assert answer is not None and answer == server.regular(frame)
    assert RemotingCommand.decode(answer[4:]).remark == "crc32 not match"


def test_a_refresh_the_route_table_declines_goes_the_regular_way(server):
    server.regular(registration())
    server.routes.delete_topic("T1")  # the body would restore it
    frame = registration(opaque=2)
    assert server.answer(frame) is None
    server.regular(frame)
    assert server.routes.pickup_topic_route("T1") is not None


@pytest.mark.parametrize("frame", [
    registration(flag=FLAG_ONEWAY, opaque=2),
    registration({k: v for k, v in MASTER.items() if k != "brokerAddr"}, opaque=2),  # missing field
    registration({**MASTER, "brokerId": "zero"}, opaque=2),  # malformed field
    registration(opaque=2, serialize_type=SerializeType.ROCKETMQ, flag=FLAG_ONEWAY),
])
def test_oneway_and_bad_headers_go_the_regular_way(server, frame):
    server.regular(registration())
    assert server.answer(frame) is None


def test_a_registration_from_memory_is_the_parsed_one(server):
    """A repeat of a remembered header needs no parse; a header differing elsewhere is read anew."""
    server.regular(registration())
    assert server.answer(registration(opaque=2)) is not None  # parsed, remembered
    assert server.answer(registration(opaque=3)) == server.regular(registration(opaque=3))  # from memory
    other_version = registration(opaque=4, version=Version.V4_9_4)
    assert server.answer(other_version) is None  # the fingerprint covers the version: not the same body
    server.regular(other_version)
    assert server.answer(registration(opaque=5, version=Version.V4_9_4)) is not None


def test_a_body_changed_in_place_is_no_repeat(server):
    """A body's fingerprint is its length and CRC32 (with the body form): a body changed in place,
    its length kept (a topic's perm, a DataVersion's digit), is decoded and applied, not taken for
    the broker's last one; its repeat then is."""
    first = body(3)
    for changed in (first.replace(b'"perm":6', b'"perm":4', 1), first.replace(b'"counter":1', b'"counter":2')):
        assert len(changed) == len(first) and changed != first
        server.regular(registration(data=first))
        assert server.answer(registration(data=changed, opaque=2)) is None  # not a repeat: the regular way
        server.regular(registration(data=changed, opaque=3))
        assert server.answer(registration(data=changed, opaque=4)) is not None  # its repeat is one
    assert [queue.perm for queue in server.routes.pickup_topic_route("T0").queue_datas] == [6]  # the first again
    server.regular(registration(data=first.replace(b'"perm":6', b'"perm":4', 1), opaque=5))
    assert [queue.perm for queue in server.routes.pickup_topic_route("T0").queue_datas] == [4]


@settings(max_examples=100, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(opaque=st.integers(-(2 ** 31), 2 ** 31 - 1), version=st.sampled_from([Version.V4_9_4, Version.V5_3_3]),
       serialize_type=st.sampled_from([SerializeType.JSON, SerializeType.ROCKETMQ]),
       header=st.sampled_from([MASTER, SLAVE]),
       topics=st.sampled_from([0, 2, 3, 5]))  # a first registration of one topic is refused (#4522)
def test_any_repeat_matches_the_regular_path(server, opaque, version, serialize_type, header, topics):
    data = body(topics)
    server.regular(registration(header, data, version=version, serialize_type=serialize_type))
    frame = registration(header, data, version=version, serialize_type=serialize_type, opaque=opaque)
    answer = server.answer(frame)
    assert answer is not None and answer == server.regular(frame)


def test_a_real_server_answers_pipelined_repeats_and_sees_changes(namesrv_factory, raw_connect):
    server = namesrv_factory()
    broker = raw_connect(server.address)

    def request(data: bytes, serialize_type: int = SerializeType.JSON) -> RemotingCommand:
        ext = {**MASTER, "bodyCrc32": body_crc32(data)}
        return broker.request(RequestCode.REGISTER_BROKER, ext, data, serialize_type=serialize_type)

    assert broker.call(request(body(3))).code == ResponseCode.SUCCESS
    repeats = [request(body(3), serialize_type) for _ in range(50)
               for serialize_type in (SerializeType.JSON, SerializeType.ROCKETMQ)]
    broker.send(*repeats)
    answers = {answer.opaque: answer for answer in (broker.recv() for _ in repeats)}
    for repeat in repeats:
        answer = answers[repeat.opaque]
        assert answer.code == ResponseCode.SUCCESS and answer.serialize_type == repeat.serialize_type
    assert broker.call(request(body(5, counter=2))).code == ResponseCode.SUCCESS  # a changed table
    client = raw_connect(server.address)
    route = client.call(client.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "T4"}))
    assert route.code == ResponseCode.SUCCESS and b"b1" in route.body


class Twins:
    """A server answering registrations inline (the default inlineRegistrationMaxBodyBytes unless
    given) and a twin taking every request the regular way; `send` compares their answers."""

    def __init__(self, tmp_path, **config) -> None:
        (tmp_path / "inline").mkdir()
        (tmp_path / "regular").mkdir()
        self.inline = Server(tmp_path / "inline", **config)
        self.twin = Server(tmp_path / "regular", **config)

    def send(self, frame: bytes, channel: Channel = BROKER) -> tuple[bool, RemotingCommand]:
        """(answered inline?, the answer); the executor's path answers what the inline one left."""
        reply = self.inline.received(frame, channel)
        inline = type(reply) is bytes
        answer = reply if inline else self.inline.regular(frame, channel)
        assert answer == self.twin.regular(frame, channel)
        assert self.inline.routes.snapshot() == self.twin.routes.snapshot()
        return inline, RemotingCommand.decode(answer[4:])


def with_topics(names: list[str], counter: int, perm: int = 6) -> bytes:
    wrapper = TopicConfigSerializeWrapper({name: TopicConfig(name, 4, 4, perm) for name in names},
                                          DataVersion(counter, 1))
    return RegisterBrokerBody(wrapper, []).encode()


@pytest.mark.parametrize("serialize_type", [SerializeType.JSON, SerializeType.ROCKETMQ])
def test_a_changed_body_is_applied_inline_as_the_regular_path_applies_it(tmp_path, serialize_type):
    twins = Twins(tmp_path)
    topics = [f"T{i}" for i in range(6)]
    steps = [
        (MASTER, with_topics(topics, 1)),  # a new broker
        (MASTER, with_topics(topics, 1)),  # the unchanged repeat
        (MASTER, with_topics(topics, 2, perm=4)),  # every topic read-only
        (MASTER, with_topics(topics[:3] + ["U1"], 3)),  # topics gone and added
        (SLAVE, with_topics(topics, 1)),  # a slave (its topics are not applied)
        (MASTER, with_topics(topics[:3] + ["U1"], 4, perm=2)),
        (MASTER, b""),  # an empty body
    ]
    for opaque, (header, data) in enumerate(steps, 1):
        inline, answer = twins.send(registration(header, data, opaque=opaque, serialize_type=serialize_type))
        assert inline and answer.code == ResponseCode.SUCCESS and answer.opaque == opaque
    assert twins.inline.routes.pickup_topic_route("U1") is not None
    assert twins.inline.routes.pickup_topic_route("T5") is not None  # left out is not deleted (RocketMQ)


@pytest.mark.parametrize("serialize_type", [SerializeType.JSON, SerializeType.ROCKETMQ])
def test_a_new_data_version_over_unchanged_topics_renews_inline_as_the_regular_path_registers(
        tmp_path, serialize_type):
    """A master's new DataVersion whose topic entries all stand renews its live entry only
    (`RouteInfoManager._renews_only_locked`); the twin never renews, so it takes every step."""
    twins = Twins(tmp_path)
    twins.twin.routes._renews_only_locked = lambda *args: False
    for server in (twins.inline, twins.twin):
        server.routes.track_changes()
    renewals: list[bool] = []
    check = twins.inline.routes._renews_only_locked
    twins.inline.routes._renews_only_locked = lambda *args: renewals.append(check(*args)) or renewals[-1]
    topics = [f"T{i}" for i in range(40)]  # runs of sixteen stepped over at once, and single entries

    def filtered(counter: int, servers: list[str]) -> bytes:
        wrapper = TopicConfigSerializeWrapper({name: TopicConfig(name, 4, 4) for name in topics},
                                              DataVersion(counter, 1))
        return RegisterBrokerBody(wrapper, servers).encode()

    steps = [  # (header, body, connection, renewed)
        (MASTER, with_topics(topics, 1), BROKER, False),  # a new broker
        (MASTER, with_topics(topics, 2), BROKER, True),
        (MASTER, with_topics(topics, 3), OTHER, False),  # a new connection
        (MASTER, with_topics(topics, 4), OTHER, True),
        (MASTER, filtered(5, ["10.0.0.1:1"]), OTHER, False),  # filter servers
        (MASTER, filtered(6, ["10.0.0.1:1"]), OTHER, True),
        (MASTER, with_topics(topics, 7), OTHER, False),
        (SLAVE, with_topics(topics, 1), OTHER, False),  # a slave joins the group
        (MASTER, with_topics(topics, 8), OTHER, True),
        ({**MASTER, "haServerAddr": "10.0.0.1:10999"}, with_topics(topics, 9), OTHER, False),
        (MASTER, with_topics(topics, 10), OTHER, False),
        ("delete T3", None, None, None),  # an admin deletes a topic: the next body restores it
        (MASTER, with_topics(topics, 11), OTHER, False),
        (MASTER, with_topics(topics, 12), OTHER, True),
    ]
    for opaque, (header, data, channel, renewed) in enumerate(steps, 1):
        if header == "delete T3":
            for server in (twins.inline, twins.twin):
                server.routes.delete_topic("T3")
            continue
        before = sum(renewals)
        inline, answer = twins.send(registration(header, data, opaque=opaque, serialize_type=serialize_type), channel)
        assert inline and answer.code == ResponseCode.SUCCESS
        assert (sum(renewals) > before) == renewed, opaque
        assert twins.inline.routes.registrations == twins.twin.routes.registrations
        assert twins.inline.routes.route_changes == twins.twin.routes.route_changes
        assert twins.inline.routes.take_changes() == twins.twin.routes.take_changes()
    assert twins.inline.routes.pickup_topic_route("T3") is not None


def test_an_admin_change_between_registrations_is_undone_inline(tmp_path):
    twins = Twins(tmp_path)
    twins.send(registration(data=with_topics(["A", "B"], 1)))
    for server in (twins.inline, twins.twin):
        server.routes.wipe_write_perm_of_broker("b1")
    inline, _ = twins.send(registration(data=with_topics(["A", "B"], 2), opaque=2))
    assert inline and twins.inline.routes.pickup_topic_route("A").queue_datas[0].perm == 6


def test_refusals_are_answered_inline_as_the_regular_path_answers_them(tmp_path):
    twins = Twins(tmp_path, max_topics_per_registration=3)
    inline, answer = twins.send(registration(data=with_topics(["A", "B", "C", "D"], 1)))
    assert inline and answer.code == ResponseCode.SYSTEM_ERROR and "maxTopicsPerRegistration=3" in answer.remark
    inline, answer = twins.send(registration(data=with_topics(["A"], 1), opaque=2))  # single topic, first
    assert inline and answer.code == ResponseCode.SYSTEM_ERROR and answer.remark == "register broker failed"


@pytest.mark.parametrize("field, value", [("brokerName", "b\nFORGED"), ("clusterName", "c" * 256),
                                          ("haServerAddr", "h\x1b[31m")])
def test_illegal_names_are_refused_inline_as_the_regular_path_refuses_them(tmp_path, field, value):
    """The names are checked when the header is read (`RegistrationHeader.illegal_names`), also for a
    header rebound to a new DataVersion's bodyCrc32, and refused where the regular path refuses
    them: after the body's CRC32 check."""
    twins = Twins(tmp_path)
    header = {**MASTER, field: value}
    for counter in (1, 2, 3):
        inline, answer = twins.send(registration(header, with_topics(["A", "B"], counter), opaque=counter))
        assert inline and answer.code == ResponseCode.SYSTEM_ERROR and field in answer.remark, answer.remark
        assert answer.remark.startswith("register broker failed: ")
    assert twins.inline.processor.inline.reader.shapes.table  # the later headers were read from their shape
    inline, answer = twins.send(registration(header, with_topics(["A", "B"], 4), opaque=4,
                                             extra={"bodyCrc32": "12345"}))
    assert inline and answer.remark == "crc32 not match"
    assert twins.inline.routes.snapshot().broker_live_table == {}


@pytest.mark.parametrize("config, data, extra", [
    ({"inline_registration_max_body_bytes": 0}, with_topics(["A", "B"], 1), {}),
    ({"inline_registration_max_body_bytes": 200}, with_topics([f"T{i}" for i in range(5)], 1), {}),
    ({}, RegisterBrokerBody(TopicConfigSerializeWrapper({name: TopicConfig(name, 4, 4) for name in "AB"},
                                                        DataVersion(1, 1)), []).encode(compressed=True),
     {"compressed": "true"}),
])
def test_large_and_compressed_bodies_go_to_the_executor(tmp_path, config, data, extra):
    twins = Twins(tmp_path, **config)
    inline, answer = twins.send(registration(data=data, extra=extra))
    assert not inline and answer.code == ResponseCode.SUCCESS


def test_without_inline_writes_a_registration_is_read_but_never_applied_inline(tmp_path):
    """Worker processes apply every write in the write log's order: the reactor only decodes them."""
    server = Server(tmp_path, inline_writes=False)
    applied, repeat = registration(data=with_topics(["A", "B"], 2), opaque=2), registration(
        data=with_topics(["A", "B"], 2), opaque=3)
    assert server.answer(applied) is None
    assert not server.routes.snapshot().broker_live_table
    assert RemotingCommand.decode(server.regular(applied, BROKER)[4:]).code == ResponseCode.SUCCESS
    assert server.answer(repeat) is None  # not even the unchanged repeat


@settings(max_examples=60, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=st.lists(st.tuples(st.sampled_from([MASTER, SLAVE]), st.lists(st.sampled_from("ABCDEF"), max_size=6),
                                st.sampled_from([2, 4, 6]), st.integers(1, 3)), min_size=1, max_size=8),
       serialize_type=st.sampled_from([SerializeType.JSON, SerializeType.ROCKETMQ]))
def test_any_sequence_of_registrations_matches_the_regular_path(tmp_path_factory, steps, serialize_type):
    twins = Twins(tmp_path_factory.mktemp("twins"))
    for opaque, (header, topics, perm, counter) in enumerate(steps):
        twins.send(registration(header, with_topics(topics, counter, perm), opaque=opaque,
                                serialize_type=serialize_type))


def liveness(code: int, header: dict, data: bytes | None = None, *, opaque: int = 1,
             serialize_type: int = SerializeType.JSON) -> bytes:
    return RemotingCommand.request(code, header, data, opaque=opaque, serialize_type=serialize_type,
                                   version=Version.V5_3_3).encode()[4:]


@pytest.mark.parametrize("serialize_type", [SerializeType.JSON, SerializeType.ROCKETMQ])
def test_heartbeats_and_data_version_queries_are_answered_inline_as_the_regular_path_answers_them(
        tmp_path, serialize_type):
    """BROKER_HEARTBEAT and QUERY_DATA_VERSION are answered inline (repeats from memory of their header),
    with the regular path's bytes and liveness times; for an unknown broker too."""
    twins = Twins(tmp_path)
    twins.send(registration(serialize_type=serialize_type))
    stranger = {**MASTER, "brokerAddr": "10.0.0.9:10911"}
    steps = [liveness(RequestCode.BROKER_HEARTBEAT, MASTER),
             liveness(RequestCode.QUERY_DATA_VERSION, MASTER, DataVersion(1, 1).encode()),  # unchanged
             liveness(RequestCode.QUERY_DATA_VERSION, MASTER, DataVersion(2, 9).encode()),  # changed
             liveness(RequestCode.QUERY_DATA_VERSION, MASTER),  # no body
             liveness(RequestCode.BROKER_HEARTBEAT, stranger),
             liveness(RequestCode.QUERY_DATA_VERSION, stranger, DataVersion(1, 1).encode())]
    for round_ in range(2):  # the second round reads every header from memory
        for opaque, frame in enumerate(steps, 10):
            frame = RemotingCommand.decode(frame)
            frame.opaque, frame.serialize_type = opaque + round_, serialize_type
            for server in (twins.inline, twins.twin):
                server.now += 1_000
            inline, answer = twins.send(frame.encode()[4:])
            assert inline and answer.code == ResponseCode.SUCCESS and answer.opaque == opaque + round_
            if frame.ext_fields["brokerAddr"] == MASTER["brokerAddr"]:
                assert twins.inline.live(MASTER).last_update_timestamp == twins.inline.now


@pytest.mark.parametrize("serialize_type", [SerializeType.JSON, SerializeType.ROCKETMQ])
def test_replayed_heartbeats_and_queries_answer_as_the_regular_path_whatever_changed_between(
        tmp_path, serialize_type):
    """A repeated heartbeat or data-version query is answered from its kept change and answer
    (`WriteHandler.replayable`); when the outcome moved (the broker re-registered with another
    DataVersion, left, came back) the answer is made again. Bytes and tables are the regular path's."""
    twins = Twins(tmp_path)
    query = DataVersion(1, 1).encode()
    heartbeat = liveness(RequestCode.BROKER_HEARTBEAT, MASTER, serialize_type=serialize_type)
    asked = liveness(RequestCode.QUERY_DATA_VERSION, MASTER, query, serialize_type=serialize_type)
    unregister = RemotingCommand.request(RequestCode.UNREGISTER_BROKER, MASTER, serialize_type=serialize_type)
    steps = [heartbeat, asked, heartbeat, asked, asked,  # replays
             registration(serialize_type=serialize_type),  # the first: the query's outcome moves
             asked, asked, heartbeat,
             registration(data=body(counter=2), serialize_type=serialize_type), asked, asked,
             unregister.encode()[4:], heartbeat, asked,  # unknown now
             registration(serialize_type=serialize_type), asked, heartbeat, asked]
    replays = twins.inline.processor.inline.writes.replays
    replayed = []
    for opaque, frame in enumerate(steps, 100):
        command = RemotingCommand.decode(frame)
        command.opaque = opaque
        for server in (twins.inline, twins.twin):
            server.now += 1_000
        inline, answer = twins.send(command.encode()[4:])
        assert answer.opaque == opaque
        if command.code in (RequestCode.BROKER_HEARTBEAT, RequestCode.QUERY_DATA_VERSION):
            assert inline
            replayed.append(sum(replay.prepared.request.code == command.code for replay in replays.table.values()))
    assert replayed and all(count == 1 for count in replayed)  # each header's last answer is kept


@pytest.mark.parametrize("serialize_type", [SerializeType.JSON, SerializeType.ROCKETMQ])
def test_a_chunk_of_one_pipelined_write_is_answered_as_the_regular_path_answers_each(tmp_path, serialize_type):
    """A broker pipelining one heartbeat or data-version query sends a chunk whose frames differ in
    their opaque only: answered at once from the kept replay (the change applied once: they arrived
    together), with the bytes the regular path gives each frame. A run whose outcome moved since the
    replay was kept, or whose bodies differ, is answered the same way as frames one by one."""
    twins = Twins(tmp_path)
    twins.send(registration(serialize_type=serialize_type))

    def frames(code: int, data: bytes | None, opaques, bodies=None) -> list[bytes]:
        made = []
        for index, opaque in enumerate(opaques):
            command = RemotingCommand.decode(liveness(code, MASTER, bodies[index] if bodies else data))
            command.opaque, command.serialize_type = opaque, serialize_type
            made.append(command.encode()[4:])
        return made

    def chunk(sent: list[bytes]) -> None:
        for server in (twins.inline, twins.twin):
            server.now += 1_000
        replies, commands = twins.inline.processor.inline.answer_all(sent, BROKER, time.monotonic())
        assert commands == [] and replies == [twins.twin.regular(frame) for frame in sent]
        assert twins.inline.routes.snapshot() == twins.twin.routes.snapshot()
        assert twins.inline.live(MASTER).last_update_timestamp == twins.inline.now

    asked, moved = DataVersion(1, 1).encode(), DataVersion(2, 9).encode()
    opaques = [5, 1_000_000, -7, 2 ** 31 - 1]
    for code, data in ((RequestCode.BROKER_HEARTBEAT, None), (RequestCode.QUERY_DATA_VERSION, asked)):
        chunk(frames(code, data, [1]))  # its header and replay are kept from now on
        chunk(frames(code, data, opaques))
        chunk(frames(code, data, [9, 10]))
    twins.send(registration(data=body(counter=2), serialize_type=serialize_type))  # the kept outcome moves
    chunk(frames(RequestCode.QUERY_DATA_VERSION, asked, opaques))
    chunk(frames(RequestCode.QUERY_DATA_VERSION, None, opaques, [asked, moved, asked, asked]))  # bodies differ
    chunk(frames(RequestCode.QUERY_DATA_VERSION, asked, opaques))


def test_a_template_stamps_a_run_of_opaques_as_it_stamps_each():
    """`OpaqueTemplate.frames` (one stamping call for a JSON header) is `frame` for each opaque."""
    for serialize_type in (SerializeType.JSON, SerializeType.ROCKETMQ):
        request = RemotingCommand.request(RequestCode.QUERY_DATA_VERSION, serialize_type=serialize_type)
        template = OpaqueTemplate(request.make_response(ResponseCode.SUCCESS, ext_fields={"changed": "false"}))
        opaques = [0, 1, -1, 2 ** 31 - 1, -(2 ** 31), 123456]
        for data in (None, b"", DataVersion(3, 4).encode()):
            assert template.frames(opaques, data) == [template.frame(opaque, data) for opaque in opaques]


OTHER_MASTER = {"clusterName": "c1", "brokerName": "b2", "brokerAddr": "10.0.0.3:10911", "brokerId": "0",
                "haServerAddr": "10.0.0.3:10912"}


class Steps:
    """Counts the inline server's calls of one of its processor's steps: a replayed registration
    takes no `prepare`, one answered from its header's kept answer no `answer`."""

    def __init__(self, server: Server, step: str) -> None:
        self.count = 0
        call = getattr(server.processor, step)

        def counted(*args, **kwargs):
            self.count += 1
            return call(*args, **kwargs)

        setattr(server.processor, step, counted)

    def taken(self) -> int:
        count, self.count = self.count, 0
        return count


@pytest.mark.parametrize("serialize_type", [SerializeType.JSON, SerializeType.ROCKETMQ])
def test_replayed_registrations_answer_as_the_regular_path_whatever_changed_between(tmp_path, serialize_type):
    """An unchanged re-registration is answered from its kept refresh and answer (no prepare, the
    body recognised once); when the order topics (KV ORDER_TOPIC_CONFIG, or whether they are
    returned) changed, the broker expired, unregistered, or another broker sent the same body, the
    answer is the regular path's. Bytes and tables are the twin's throughout."""
    twins = Twins(tmp_path, return_order_topic_config_to_broker=True)
    prepares = Steps(twins.inline, "prepare")
    data = with_topics(["A", "B", "C"], 1)
    opaques = iter(range(1, 1000))

    def register(header: dict = MASTER) -> RemotingCommand:
        for server in (twins.inline, twins.twin):
            server.now += 1_000
        inline, answer = twins.send(registration(header, data, opaque=next(opaques), serialize_type=serialize_type))
        assert inline and answer.code == ResponseCode.SUCCESS
        return answer

    def on_both(change) -> None:
        for server in (twins.inline, twins.twin):
            change(server)

    register()  # a new broker: decoded
    register()  # the first repeat: prepared, its refresh and answer kept
    assert prepares.taken() == 2
    register(), register()
    assert prepares.taken() == 0  # replayed
    on_both(lambda server: server.kv.put(ORDER_TOPIC_CONFIG, "A", "b1:4"))
    assert b"b1:4" in register().body and prepares.taken() == 0  # the kept refresh, answered anew
    assert b"b1:4" in register().body and prepares.taken() == 0
    on_both(lambda server: server.kv.put(ORDER_TOPIC_CONFIG, "B", "b1:2"))
    assert b"b1:2" in register().body
    on_both(lambda server: server.kv.delete(ORDER_TOPIC_CONFIG, "A"))
    assert b"b1:4" not in register().body
    on_both(lambda server: setattr(server.config, "return_order_topic_config_to_broker", False))
    assert register().body is None
    on_both(lambda server: setattr(server.config, "return_order_topic_config_to_broker", True))
    assert register().body is not None and prepares.taken() == 0
    for server in (twins.inline, twins.twin):
        server.now += 200_000
        assert server.routes.scan_not_active_brokers()  # expired
    register()  # the kept refresh is declined (RETRY): prepared again, decoded, registered
    assert prepares.taken() == 1
    register(), register()  # the kept refresh holds again (the same registrant and fingerprint)
    assert prepares.taken() == 0
    unregister = RemotingCommand.request(RequestCode.UNREGISTER_BROKER, MASTER, serialize_type=serialize_type)
    twins.send(unregister.encode()[4:])
    register(), register(), register()
    register(OTHER_MASTER), register(OTHER_MASTER), register(OTHER_MASTER)  # another broker, the same body
    prepares.taken()
    register(), register(OTHER_MASTER)
    assert prepares.taken() == 0


def test_new_data_versions_are_answered_as_the_regular_path_whatever_changed_between(tmp_path):
    """A new DataVersion (a new body and bodyCrc32 under the same JSON header otherwise: read from
    its shape) is decoded and applied, and its answer is the header's kept one while the outcome and
    what the answer reads are the same: a slave's master moving, the order topics changing, or their
    return switched off make it the regular path's again. Bytes and tables are the twin's throughout.
    (A binary header with another bodyCrc32 is another header: parsed, with its own kept answer.)"""
    serialize_type = SerializeType.JSON
    twins = Twins(tmp_path, return_order_topic_config_to_broker=True)
    answers = Steps(twins.inline, "answer")
    counters = iter(range(1, 1000))

    def register(header: dict = SLAVE) -> RemotingCommand:
        counter = next(counters)
        inline, answer = twins.send(registration(header, with_topics(["A", "B"], counter), opaque=counter,
                                                 serialize_type=serialize_type))
        assert inline and answer.code == ResponseCode.SUCCESS
        return answer

    def on_both(change) -> None:
        for server in (twins.inline, twins.twin):
            change(server)

    assert "masterAddr" not in register().ext_fields  # no master yet
    register(), register()
    assert answers.taken() == 1
    register(MASTER)
    assert answers.taken() == 1
    assert register().ext_fields["masterAddr"] == MASTER["brokerAddr"]  # the outcome changed: answered anew
    assert register().ext_fields["masterAddr"] == MASTER["brokerAddr"]
    assert answers.taken() == 1
    on_both(lambda server: server.kv.put(ORDER_TOPIC_CONFIG, "A", "b1:4"))
    assert b"b1:4" in register().body and answers.taken() == 1
    assert b"b1:4" in register().body and answers.taken() == 0
    on_both(lambda server: setattr(server.config, "return_order_topic_config_to_broker", False))
    assert register().body is None and answers.taken() == 1
    unregister = RemotingCommand.request(RequestCode.UNREGISTER_BROKER, MASTER, serialize_type=serialize_type)
    twins.send(unregister.encode()[4:])
    assert "masterAddr" not in register().ext_fields and answers.taken() == 1


@pytest.mark.parametrize("serialize_type", [SerializeType.JSON, SerializeType.ROCKETMQ])
def test_a_replayed_refresh_that_raises_is_answered_system_error(tmp_path, serialize_type, monkeypatch):
    """The kept refresh is applied through the guarded step: a bug answers SYSTEM_ERROR with the
    regular path's bytes (the connection stays), and the next repeat is answered again."""
    twins = Twins(tmp_path)
    frames = [registration(opaque=opaque, serialize_type=serialize_type) for opaque in range(1, 7)]
    for frame in frames[:3]:  # registered, its refresh kept, replayed
        assert twins.send(frame)[0]
    for server in (twins.inline, twins.twin):
        monkeypatch.setattr(server.routes, "refresh", lambda *args: (_ for _ in ()).throw(RuntimeError("boom")))
    inline, answer = twins.send(frames[3])
    assert inline and answer.code == ResponseCode.SYSTEM_ERROR and answer.remark == "RuntimeError: boom"
    monkeypatch.undo()
    for frame in frames[4:]:
        inline, answer = twins.send(frame)
        assert inline and answer.code == ResponseCode.SUCCESS


@pytest.mark.parametrize("serialize_type", [SerializeType.JSON, SerializeType.ROCKETMQ])
def test_a_chunk_of_pipelined_repeated_registrations_is_answered_as_the_regular_path_answers_each(
        tmp_path, serialize_type):
    """A chunk of one broker's unchanged re-registrations is answered from the kept refresh at once
    (applied once); after an order-topic change, or with one body differing, as frames one by one."""
    twins = Twins(tmp_path, return_order_topic_config_to_broker=True)
    data = with_topics(["A", "B"], 1)

    def chunk(opaques, bodies=None) -> None:
        sent = [registration(data=bodies[index] if bodies else data, opaque=opaque, serialize_type=serialize_type)
                for index, opaque in enumerate(opaques)]
        for server in (twins.inline, twins.twin):
            server.now += 1_000
        replies, commands = twins.inline.processor.inline.answer_all(sent, BROKER, time.monotonic())
        assert commands == [] and replies == [twins.twin.regular(frame, BROKER) for frame in sent]
        assert twins.inline.routes.snapshot() == twins.twin.routes.snapshot()

    twins.send(registration(data=data, serialize_type=serialize_type))
    chunk([1])
    chunk([5, 1_000_000, -7, 2 ** 31 - 1])
    for server in (twins.inline, twins.twin):
        server.kv.put(ORDER_TOPIC_CONFIG, "A", "b1:4")
    chunk([9, 10, 11])
    chunk([12, 13])
    chunk([14, 15, 16], [data, with_topics(["A", "B"], 1, perm=4), data])  # one body differs


def test_a_kept_answer_is_current_for_an_equal_outcome_and_the_same_state_read():
    """`Replay.current`: the kept outcome itself, or one equal to it, with what the answer reads
    unchanged; any other outcome, or a changed read, is not."""
    from namesrv.processor.write_fast_path import Replay
    from namesrv.protocol.route import RegisterBrokerResult

    state = [1]
    kept = RegisterBrokerResult("ha:1", "master:1")
    replay = Replay(None, None, None, None, kept, lambda: state[0], 1, None, None, None)
    assert replay.current(kept) and replay.current(RegisterBrokerResult("ha:1", "master:1"))
    assert not replay.current(RegisterBrokerResult("ha:2", "master:1")) and not replay.current(None)
    state[0] = 2
    assert not replay.current(kept)
    unread = dataclasses.replace(replay, reads=None, outcome=(True, DataVersion(1, 2)))
    assert unread.current((True, DataVersion(1, 2))) and not unread.current((False, DataVersion(1, 2)))
