"""What may enter the route table (namesrv.routeinfo.route_input), and log lines a name cannot forge.

A registration breaking a rule is refused whole with SYSTEM_ERROR naming the rule, and the
broker's earlier routes stay as they were; the names real RocketMQ brokers register pass.
"""
from __future__ import annotations

import logging
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fastpath_cases import reference_facts
from namesrv.channel import Channel
from namesrv.config import NamesrvConfig
from namesrv.fastpath import body_crc32
from namesrv.fastpath.registration import queue_facts
from namesrv.kvconfig import KVConfigManager
from namesrv.logsetup import EscapeControlCharacters, setup_logging
from namesrv.processor import RequestProcessor
from namesrv.protocol import (DataVersion, QueueData, RegisterBrokerBody, RemotingCommand, RequestCode, ResponseCode,
                              TopicConfig, TopicConfigSerializeWrapper, TopicRouteData)
from namesrv.routeinfo import RouteInfoManager
from namesrv.routeinfo.route_input import IllegalRoute, check_queues, check_queues_summed, queues_within

BROKER = Channel("tcp", b"broker-1", "10.0.0.1:50000")
MASTER = {"clusterName": "C", "brokerName": "b1", "brokerAddr": "10.0.0.1:10911", "brokerId": "0",
          "haServerAddr": "10.0.0.1:10912"}
#: Topics a RocketMQ 4.9.8 / 5.x broker registers by itself, and client-made ones.
REAL_TOPICS = ["TBW102", "SELF_TEST_TOPIC", "DefaultCluster", "DefaultCluster_REPLY_TOPIC", "broker-a",
               "RMQ_SYS_TRACE_TOPIC", "SCHEDULE_TOPIC_XXXX", "%RETRY%please_rename_unique_group_name_4",
               "%DLQ%group", "rmq_sys_SYNC_BROKER_MEMBER_broker-a", "%LMQ%x", "a|b", "T" * 127]


class Server:
    def __init__(self, tmp_path: Path) -> None:
        self.config = NamesrvConfig(kv_config_path=str(tmp_path / "kv.json"))
        self.routes = RouteInfoManager(self.config)
        self.processor = RequestProcessor(self.config, self.routes, KVConfigManager(self.config.kv_config_path))

    def send(self, code: int, ext: dict | None = None, body: bytes | None = None) -> RemotingCommand:
        frame = RemotingCommand.request(code, ext, body, opaque=1).encode()
        return self.processor.process(RemotingCommand.decode(frame[4:]), BROKER)

    def register(self, topics: dict[str, TopicConfig], header: dict = MASTER, counter: int = 1) -> RemotingCommand:
        data = RegisterBrokerBody(TopicConfigSerializeWrapper(topics, DataVersion(counter, counter)), []).encode()
        return self.send(RequestCode.REGISTER_BROKER, {**header, "bodyCrc32": str(body_crc32(data))}, data)


@pytest.fixture
def server(tmp_path: Path) -> Server:
    return Server(tmp_path)


def test_the_topics_real_brokers_register_pass(server):
    answer = server.register({name: TopicConfig(name, 8, 8) for name in REAL_TOPICS})
    assert answer.code == ResponseCode.SUCCESS, answer.remark
    assert all(server.routes.pickup_topic_route(name) is not None for name in REAL_TOPICS)


@pytest.mark.parametrize("config, rule", [
    (TopicConfig("Big", 8, 2 ** 31 - 1), "maxQueueNumsPerTopic"),
    (TopicConfig("Big", 1025, 8), "maxQueueNumsPerTopic"),
    (TopicConfig("Negative", -1, 8), "maxQueueNumsPerTopic"),
    (TopicConfig("Perm", 8, 8, perm=16), "PermName"),
    (TopicConfig("T" * 128, 8, 8), "at most 127"),
    (TopicConfig("bad\nname", 8, 8), "^[%|a-zA-Z0-9_-]+$"),
    (TopicConfig("dot.ted", 8, 8), "^[%|a-zA-Z0-9_-]+$"),
])
def test_a_registration_breaking_a_rule_is_refused_and_changes_nothing(server, config, rule):
    kept = {name: TopicConfig(name, 4, 4) for name in ("Kept", "Kept2")}
    assert server.register(kept).code == ResponseCode.SUCCESS
    before = server.routes.snapshot()
    answer = server.register({**kept, config.topic_name: config}, counter=2)
    assert answer.code == ResponseCode.SYSTEM_ERROR and rule in answer.remark, answer.remark
    assert answer.remark.startswith("register broker failed: ")
    assert server.routes.snapshot() == before


@pytest.mark.parametrize("field, value", [("brokerName", "b\nFORGED"), ("clusterName", "C\x1b[31m"),
                                          ("brokerAddr", "10.0.0.1:1\r"), ("brokerName", "b" * 256),
                                          ("haServerAddr", "h\u2028x")])
def test_broker_names_with_control_characters_or_too_long_are_refused(server, field, value):
    answer = server.register({name: TopicConfig(name, 4, 4) for name in ("T", "U")}, header={**MASTER, field: value})
    assert answer.code == ResponseCode.SYSTEM_ERROR and field in answer.remark, answer.remark
    assert server.routes.snapshot().broker_live_table == {}


def test_register_topic_in_namesrv_is_held_to_the_same_rules(server):
    assert server.register({name: TopicConfig(name, 4, 4) for name in ("T", "U")}).code == ResponseCode.SUCCESS
    for topic, queue in (("NEW", QueueData("b1", 8, 2 ** 31 - 1)), ("bad topic", QueueData("b1", 4, 4))):
        body = TopicRouteData(queue_datas=[queue]).encode()
        answer = server.send(RequestCode.REGISTER_TOPIC_IN_NAMESRV, {"topic": topic}, body)
        assert answer.code == ResponseCode.SYSTEM_ERROR, answer
        assert server.routes.pickup_topic_route(topic) is None


def test_every_handler_escapes_control_characters_in_messages():
    root = logging.getLogger()
    saved = list(root.handlers), root.level
    try:
        setup_logging(None)
        assert root.handlers and all(any(isinstance(f, EscapeControlCharacters) for f in handler.filters)
                                     for handler in root.handlers)
    finally:
        for handler in list(root.handlers):
            root.removeHandler(handler)
        for handler in saved[0]:
            root.addHandler(handler)
        root.setLevel(saved[1])
    record = logging.LogRecord("x", logging.INFO, __file__, 1, "put %s", ("k\nFORGED \x1b[2J",), None)
    assert EscapeControlCharacters().filter(record) and record.getMessage() == "put k\\nFORGED \\x1b[2J"


def test_a_name_from_the_wire_cannot_forge_a_log_line(namesrv_factory, raw_connect):
    server = namesrv_factory()
    conn = raw_connect(server.address)
    put = conn.call(conn.request(RequestCode.PUT_KV_CONFIG, {"namespace": "NS\nFORGED-LINE ns", "key": "k",
                                                            "value": "v\r\nFORGED-LINE value"}))
    assert put.code == ResponseCode.SUCCESS
    data = RegisterBrokerBody(TopicConfigSerializeWrapper({}, DataVersion(1, 1)), []).encode()
    refused = conn.call(conn.request(RequestCode.REGISTER_BROKER, {**MASTER, "brokerAddr": "1:2\nFORGED-LINE addr",
                                                                  "bodyCrc32": str(body_crc32(data))}, data))
    assert refused.code == ResponseCode.SYSTEM_ERROR
    server.wait_for_log(r"refused: brokerAddr")
    lines = server.log_text().splitlines()
    assert not [line for line in lines if line.startswith("FORGED-LINE")], lines[-5:]


@pytest.mark.timeout(60)
def test_the_client_refuses_a_route_with_more_queues_than_any_broker(namesrv_factory, raw_connect):
    """A NameServer that stores any queue count (RocketMQ's, or namesrv told to) answers a route of
    2**31-1 write queues; the client must fail with a clear error, not build an object per queue."""
    from namesrv.client import InvalidRouteError, NamesrvClient
    server = namesrv_factory(maxQueueNumsPerTopic=2 ** 31 - 1)
    conn = raw_connect(server.address)
    topics = {"Huge": TopicConfig("Huge", 8, 2 ** 31 - 1), "Fine": TopicConfig("Fine", 8, 8)}
    data = RegisterBrokerBody(TopicConfigSerializeWrapper(topics, DataVersion(1, 1)), []).encode()
    answer = conn.call(conn.request(RequestCode.REGISTER_BROKER, {**MASTER, "bodyCrc32": str(body_crc32(data))}, data))
    assert answer.code == ResponseCode.SUCCESS
    with NamesrvClient([server.address], timeout=5) as client:
        assert len(client.publish_queues("Fine")) == 8
        with pytest.raises(InvalidRouteError, match="2147483647 queues: at most 1024"):
            client.publish_queues("Huge")


def broker(n: int) -> dict:
    return {**MASTER, "brokerName": f"b{n}", "brokerAddr": f"10.0.0.{n}:10911"}


def topics(*names: str) -> dict[str, TopicConfig]:
    return {name: TopicConfig(name, 4, 4) for name in names}


def test_max_brokers_refuses_one_more_broker_and_changes_nothing(server):
    server.config.max_brokers = 2
    assert server.register(topics("A", "Z"), broker(1)).code == ResponseCode.SUCCESS
    assert server.register(topics("A", "Z"), broker(2)).code == ResponseCode.SUCCESS
    before = server.routes.snapshot()
    refused = server.register(topics("B", "Z"), broker(3))
    assert (refused.code, refused.remark) == (ResponseCode.SYSTEM_ERROR,
                                              "register broker failed: 2 brokers are registered, maxBrokers=2")
    assert server.routes.snapshot() == before
    assert server.register(topics("A", "C", "Z"), broker(2), counter=2).code == ResponseCode.SUCCESS  # a known one
    server.send(RequestCode.UNREGISTER_BROKER, {k: broker(1)[k] for k in ("clusterName", "brokerAddr", "brokerName",
                                                                          "brokerId")})
    assert server.register(topics("B", "Z"), broker(3)).code == ResponseCode.SUCCESS


def test_max_queue_datas_counts_topics_per_group_and_refuses_whole_registrations(server):
    server.config.max_queue_datas = 10
    assert server.register(topics(*"ABCDEF"), broker(1)).code == ResponseCode.SUCCESS  # 6 held
    before = server.routes.snapshot()
    refused = server.register(topics(*"ABCDE"), broker(2))  # 5 more: 11
    assert (refused.code, refused.remark) == (
        ResponseCode.SYSTEM_ERROR, "register broker failed: 5 new topic queue entries would pass maxQueueDatas=10 "
                                   "(6 held)")
    assert server.routes.snapshot() == before
    assert server.register(topics(*"ABCDEF"), broker(1), counter=2).code == ResponseCode.SUCCESS  # nothing new
    assert server.register(topics(*"ABCD"), broker(2)).code == ResponseCode.SUCCESS  # exactly 10
    route = TopicRouteData(queue_datas=[QueueData("b1", 4, 4, 6, 0)]).encode()
    answer = server.send(RequestCode.REGISTER_TOPIC_IN_NAMESRV, {"topic": "G"}, route)
    assert (answer.code, answer.remark) == (ResponseCode.SYSTEM_ERROR,
                                            "1 new topic queue entries would pass maxQueueDatas=10 (10 held)")
    assert server.routes.pickup_topic_route("G") is None
    server.send(RequestCode.DELETE_TOPIC_IN_NAMESRV, {"topic": "A"})  # frees two
    assert server.send(RequestCode.REGISTER_TOPIC_IN_NAMESRV, {"topic": "G"}, route).code == ResponseCode.SUCCESS


NAME_CHARACTERS = "aZ09%|_-.\n é" + "T"


@settings(max_examples=500, deadline=None)
@given(st.lists(st.tuples(st.text(NAME_CHARACTERS, max_size=130) | st.just("T" * 127) | st.just("T" * 128),
                          st.integers(-2, 1030), st.integers(-2, 1030), st.integers(-1, 40), st.integers(0, 3)),
                min_size=1, max_size=20),
       st.sampled_from([0, 8, 1024]))
def test_summed_up_entries_pass_exactly_when_each_entry_passes(rows, max_queue_nums):
    """`queues_within` on a decode's facts decides as `check_queues` on each entry would, and
    `check_queues_summed` (a snapshot's restore) refuses with the same message."""
    try:
        check_queues(rows, max_queue_nums)
        refusal = None
    except IllegalRoute as exc:
        refusal = str(exc)
    assert queues_within(reference_facts(rows), max_queue_nums) is (refusal is None)
    try:
        check_queues_summed(queue_facts(rows), rows, max_queue_nums)
        summed = None
    except IllegalRoute as exc:
        summed = str(exc)
    assert summed == refusal


def test_a_body_its_facts_refuse_is_refused_with_the_entry_s_rule(server):
    """The facts only say whether to look; the refusal names the entry, as before."""
    topics = {f"T{i}": TopicConfig(f"T{i}", 8, 8) for i in range(500)}
    topics["T250"] = TopicConfig("T250", 8, 8, perm=16)
    answer = server.register(topics)
    assert answer.code == ResponseCode.SYSTEM_ERROR
    assert answer.remark == "register broker failed: topic 'T250' has perm 16: only PermName's bits (15) are allowed"
