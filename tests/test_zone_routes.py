"""Zone routes (namesrv.routeinfo.zones, RocketMQ 5.x ZoneRouteRPCHook): the rule driven directly, through
the request processor and its inline path (which must step aside for zone-mode queries), and a real server
over TCP and ZeroMQ."""
from __future__ import annotations

import zlib

import orjson
import pytest
import zmq
from inline_harness import InlineServer

from namesrv.channel import Channel
from namesrv.processor.route_push import RouteSubscriptions
from namesrv.protocol import (DataVersion, RegisterBrokerBody, RemotingCommand, RequestCode, ResponseCode,
                              SerializeType, TopicConfig, TopicConfigSerializeWrapper)
from namesrv.protocol.codes import Version
from namesrv.protocol.msgpack_codec import decode_msgpack, encode_msgpack
from namesrv.protocol.route import BrokerData, QueueData, TopicRouteData
from namesrv.routeinfo import Registrant
from namesrv.routeinfo.zones import ZONE_MODE, ZONE_NAME, requested_zone, zone_key, zone_route

CLIENT = Channel("tcp", b"client-1", "10.0.0.100:50000")
ROUTE = RequestCode.GET_ROUTEINFO_BY_TOPIC


def zone_mode(zone: str | None, mode: str = "true") -> dict[str, str]:
    return {ZONE_MODE: mode} | ({} if zone is None else {ZONE_NAME: zone})


# ---------------------------------------------------------------- the rule (5.x ZoneRouteRPCHookTest, -MoreTest)


def group(name: str, zone: str | None, addrs: dict[int, str]) -> BrokerData:
    return BrokerData("c", name, addrs, zone_name=zone)


def sample_route() -> TopicRouteData:
    """BrokerA in zone1 and BrokerB in zone2, both with a master; filter servers on both masters."""
    return TopicRouteData([QueueData("BrokerA", 8, 8, 6), QueueData("BrokerB", 8, 8, 6)],
                          [group("BrokerA", "zone1", {0: "127.0.0.1:10911"}),
                           group("BrokerB", "zone2", {0: "127.0.0.1:10912"})],
                          {"127.0.0.1:10911": [], "127.0.0.1:10912": ["fs:1"]})


def names(route: TopicRouteData) -> tuple[list[str], list[str]]:
    return [g.broker_name for g in route.broker_datas], [q.broker_name for q in route.queue_datas]


@pytest.mark.parametrize("ext", [
    None, {}, {"topic": "T"},
    zone_mode("zone1", "false"),  # zone mode off
    zone_mode("zone1", "yes"),  # Boolean.parseBoolean: only "true"
    zone_mode(None),  # no zone name
    zone_mode(""), zone_mode("  \t"),  # blank
    {ZONE_NAME: "zone1"},  # a broker's (or a zone client's) name alone asks for nothing
])
def test_requests_not_in_zone_mode_ask_for_no_zone(ext):
    assert requested_zone(ext) is None


@pytest.mark.parametrize("mode", ["true", "TRUE", "True"])
def test_zone_mode_is_true_in_any_case_with_a_zone_name(mode):
    assert requested_zone(zone_mode("zone1", mode)) == "zone1"
    assert requested_zone(zone_mode(" zone1 ", mode)) == " zone1 "  # not blank: taken as it is, as 5.x


def test_the_zone_keeps_its_groups_and_drops_the_others_queues_and_filter_servers():
    route, in_zone = zone_route(sample_route(), "zone1")
    assert in_zone and names(route) == (["BrokerA"], ["BrokerA"])
    assert route.filter_server_table == {"127.0.0.1:10911": []}


def test_zone_names_compare_ignoring_case_as_java():
    assert names(zone_route(sample_route(), "ZONE2")[0]) == (["BrokerB"], ["BrokerB"])
    assert zone_key("Zone-1") == zone_key("zONE-1") and zone_key("ÄRZTE") == zone_key("ärzte")
    assert zone_key("ß") != zone_key("SS")  # Java compares char by char: different lengths differ
    assert zone_key("ẞ") == zone_key("ß")  # the capital sharp s lower-cases to ß


def test_a_group_without_a_master_stays_in_every_zone():
    """5.x: "master down, consume from slave" outranks the zone."""
    route = sample_route()
    route.broker_datas[1].broker_addrs = {1: "127.0.0.1:10922"}
    route.filter_server_table["127.0.0.1:10922"] = ["fs:2"]
    filtered, _ = zone_route(route, "zone1")
    assert names(filtered) == (["BrokerA", "BrokerB"], ["BrokerA", "BrokerB"])
    assert filtered is route  # nothing to leave out: the route itself
    route.broker_datas[0].broker_addrs = {}  # no address at all: no master either
    assert names(zone_route(route, "zone3")[0]) == (["BrokerA", "BrokerB"], ["BrokerA", "BrokerB"])


def test_a_zone_no_group_is_in_keeps_only_masterless_groups():
    route = sample_route()
    route.broker_datas.append(group("BrokerC", None, {0: "127.0.0.1:10913"}))  # registered without a zone
    filtered, in_zone = zone_route(route, "zone3")
    assert not in_zone and names(filtered) == ([], []) and filtered.filter_server_table == {}


def test_the_left_out_groups_static_topic_mappings_go_and_the_rest_stays():
    route = sample_route()
    route.order_topic_conf = "BrokerA:8;BrokerB:8"
    route.topic_queue_mapping_by_broker = {"BrokerA": {"bname": "BrokerA"}, "BrokerB": {"bname": "BrokerB"}}
    filtered, _ = zone_route(route, "zone2")
    assert filtered.topic_queue_mapping_by_broker == {"BrokerB": {"bname": "BrokerB"}}
    assert filtered.order_topic_conf == "BrokerA:8;BrokerB:8"
    assert names(route) == (["BrokerA", "BrokerB"], ["BrokerA", "BrokerB"])  # the input is not changed


# ---------------------------------------------------------------- through the processor and its inline path

A_MASTER, B_MASTER, C_SLAVE = "10.0.0.1:10911", "10.0.0.2:10911", "10.0.0.3:10911"


class Server(InlineServer):
    """Groups A (zone1), B (zone2) and C (zone2, its master away: slave 1 only), all serving T1 and T2."""

    def __init__(self, tmp_path, **config) -> None:
        super().__init__(tmp_path, **config)
        self.register("A", A_MASTER, 0, "zone1")
        self.register("B", B_MASTER, 0, "zone2")
        self.register("C", C_SLAVE, 1, "zone2")

    def register(self, name: str, addr: str, broker_id: int, zone: str | None, acting: bool = False) -> None:
        wrapper = TopicConfigSerializeWrapper({t: TopicConfig(t, 4, 4) for t in ("T1", "T2")}, DataVersion(1, 1))
        result = self.routes.register(Registrant("c1", addr, name, broker_id, None, None, acting, zone), wrapper, [], Channel("tcp", name.encode(), addr))
        assert result is not None

    def query(self, ext: dict[str, str] | None = None, *, topic: str = "T1", version: int = Version.V5_3_3,
              serialize_type: int = SerializeType.JSON, opaque: int = 7) -> bytes:
        return RemotingCommand.request(ROUTE, {"topic": topic, **(ext or {})}, serialize_type=serialize_type,
                                       version=version, opaque=opaque).encode()[4:]

    def answer(self, frame: bytes) -> RemotingCommand:
        """The regular path's answer, checked to be what the inline path gives or leaves to it."""
        expected = self.regular(frame, CLIENT)
        inline = self.inline(frame, CLIENT)
        assert inline is None or type(inline) is RemotingCommand or inline == expected
        return RemotingCommand.decode(expected[4:])


def groups(response: RemotingCommand) -> list[str]:
    assert response.code == ResponseCode.SUCCESS, response.remark
    route = orjson.loads(response.body)
    assert sorted(q["brokerName"] for q in route["queueDatas"]) == sorted(b["brokerName"] for b in route["brokerDatas"])
    return sorted(b["brokerName"] for b in route["brokerDatas"])


@pytest.fixture
def server(tmp_path) -> Server:
    return Server(tmp_path)


@pytest.mark.parametrize("serialize_type", [SerializeType.JSON, SerializeType.ROCKETMQ])
def test_a_zone_mode_query_is_answered_with_its_zone_and_never_from_the_plain_cached_body(server, serialize_type):
    plain = server.query(serialize_type=serialize_type)
    zoned = server.query(zone_mode("zone1"), serialize_type=serialize_type)
    assert groups(server.answer(plain)) == ["A", "B", "C"]
    assert type(server.inline(plain, CLIENT)) is bytes  # the plain body is cached and answered inline
    for _ in range(3):  # the first zone query fills its own cache entry; the inline path still steps aside
        assert groups(server.answer(zoned)) == ["A", "C"]
        assert type(server.inline(zoned, CLIENT)) is not bytes
    assert groups(server.answer(server.query(zone_mode("ZONE2"), serialize_type=serialize_type))) == ["B", "C"]
    assert groups(server.answer(plain)) == ["A", "B", "C"]


def test_a_chunk_of_plain_and_zone_queries_answers_the_plain_ones_inline_only(server):
    plain, zoned = server.query(opaque=1), server.query(zone_mode("zone1"), opaque=2)
    server.answer(plain)
    server.answer(zoned)
    replies, commands = server.processor.inline.answer_all([plain, zoned, plain], CLIENT, 0.0)
    assert len(replies) == 2 and [c.opaque for c in commands] == [2]
    assert groups(server.processor.process(commands[0], CLIENT)) == ["A", "C"]


@pytest.mark.parametrize("ext", [zone_mode("zone1", "false"), zone_mode(None), zone_mode("   "), {ZONE_NAME: "zone1"}])
def test_queries_not_in_zone_mode_get_every_group_inline(server, ext):
    frame = server.query(ext)
    assert groups(server.answer(frame)) == ["A", "B", "C"]
    assert type(server.inline(frame, CLIENT)) is bytes


def test_answers_other_than_success_are_left_alone(tmp_path, server):
    missing = server.answer(server.query(zone_mode("zone1"), topic="NoSuchTopic"))
    assert missing.code == ResponseCode.TOPIC_NOT_EXIST and missing.body is None
    waiting = Server(tmp_path / "waiting", need_wait_for_service=True)
    response = waiting.answer(waiting.query(zone_mode("zone1")))
    assert (response.code, response.remark) == (ResponseCode.SYSTEM_ERROR, "name server not ready")


def test_the_client_s_json_flavour_is_kept(server):
    legacy = server.answer(server.query(zone_mode("zone1"), version=Version.V4_6_0))
    assert b'"brokerAddrs":{0:"10.0.0.1:10911"}' in legacy.body and b'"zoneName":"zone1"' in legacy.body
    standard = server.answer(server.query(zone_mode("zone1")))
    assert b'"brokerAddrs":{"0":"10.0.0.1:10911"}' in standard.body


def test_zone_answers_are_cached_per_zone_and_follow_route_changes(server):
    routes = server.routes
    first = routes.topic_route_body("T1", True, None, "zone1")
    assert routes.topic_route_body("T1", True, None, "ZONE1") is first  # one entry for the zone, any case
    unknown = routes.topic_route_body("T1", True, None, "zone9")
    assert routes.topic_route_body("T1", True, None, "zone9") is not unknown  # no group there: not cached
    assert groups(RemotingCommand(0, body=unknown)) == ["C"]
    server.register("B", B_MASTER, 0, "zone1")  # B moves to zone1: every answer of its topics changes
    assert groups(RemotingCommand(0, body=routes.topic_route_body("T1", True, None, "zone1"))) == ["A", "B", "C"]
    server.routes.unregister_broker("c1", A_MASTER, "A", 0)
    assert groups(server.answer(server.query(zone_mode("zone1")))) == ["B", "C"]


def test_an_acting_master_is_filtered_as_a_master(tmp_path):
    """Routes are filtered as 5.x's hook sees them: after the lowest slave of a read-only acting-master
    group is shown as id 0 (supportActingMaster)."""
    server = Server(tmp_path, support_acting_master=True)
    server.register("D", "10.0.0.4:10911", 1, "zone2", acting=True)
    server.routes.wipe_write_perm_of_broker("D")
    assert groups(server.answer(server.query(zone_mode("zone1")))) == ["A", "C"]


def test_registration_records_the_brokers_zone_from_its_ext_fields(server):
    """A 5.x broker sends its zone as the raw `__ZONE_NAME` extField (there is no typed header field)."""
    table = {t: TopicConfig(t, 4, 4) for t in ("T3", "T4")}
    body = RegisterBrokerBody(TopicConfigSerializeWrapper(table, DataVersion(1, 1))).encode()
    header = {"brokerName": "E", "brokerAddr": "10.0.0.5:10911", "clusterName": "c1", "brokerId": 0,
              "bodyCrc32": zlib.crc32(body) & 0x7FFFFFFF, ZONE_NAME: "Zone3"}
    frame = RemotingCommand.request(RequestCode.REGISTER_BROKER, header, body, version=Version.V5_3_3).encode()[4:]
    assert RemotingCommand.decode(server.regular(frame, CLIENT)[4:]).code == ResponseCode.SUCCESS
    route = orjson.loads(server.answer(server.query(zone_mode("zone3"), topic="T3")).body)
    assert [(b["brokerName"], b["zoneName"]) for b in route["brokerDatas"]] == [("E", "Zone3")]


# ---------------------------------------------------------------- route-change subscriptions in zone mode


def test_a_zone_mode_subscription_is_answered_and_pushed_its_zone(server):
    request = RemotingCommand.request(RequestCode.SUBSCRIBE_ROUTE_CHANGES, {"topics": "T1", **zone_mode("zone1")})
    answer = server.processor.process(request, CLIENT)
    route = orjson.loads(answer.body)["routes"][0]["route"]
    assert sorted(b["brokerName"] for b in route["brokerDatas"]) == ["A", "C"]
    asked = []

    def route_body(topic: str, standard: bool, zone: str | None) -> bytes:
        asked.append(zone)
        return server.processor.route_body(topic, standard, zone)

    other = Channel("tcp", b"client-2", "10.0.0.101:50000")
    server.processor.subscriptions.subscribe(other, ["T1"], everything=False, standard=True)
    pushed = server.processor.subscriptions.publish({"T1"}, route_body, lambda topic: True,
                                                    lambda channel, command: command.encode())
    assert sorted(asked, key=str) == [None, "zone1"] and len(pushed) == 2
    bodies = {channel: orjson.loads(RemotingCommand.decode(frame[4:]).body)["changes"][0]["route"]
              for channel, frame in pushed}
    assert [b["brokerName"] for b in bodies[CLIENT]["brokerDatas"]] == ["A", "C"]
    assert len(bodies[other]["brokerDatas"]) == 3


def test_subscribers_of_different_zones_do_not_share_frames():
    subs = RouteSubscriptions(max_topics=10)
    one, two = Channel("tcp", b"1", "h:1"), Channel("tcp", b"2", "h:2")
    subs.subscribe(one, ["T"], everything=False, standard=True, zone="zone1")
    subs.subscribe(two, ["T"], everything=False, standard=True, zone="zone2")
    pushed = dict(subs.publish({"T"}, lambda topic, standard, zone: zone.encode(), lambda topic: True,
                               lambda channel, command: command.body))
    assert b'"route":zone1' in pushed[one] and b'"route":zone2' in pushed[two]


# ---------------------------------------------------------------- a real server


def register_over_tcp(conn, name: str, addr: str, broker_id: int, zone: str) -> None:
    body = RegisterBrokerBody(TopicConfigSerializeWrapper({t: TopicConfig(t, 4, 4) for t in ("Z1", "Z2")},
                                                          DataVersion(1, 1_700_000_000_000))).encode()
    header = {"brokerName": name, "brokerAddr": addr, "clusterName": "Z", "brokerId": broker_id,
              "bodyCrc32": zlib.crc32(body) & 0x7FFFFFFF, ZONE_NAME: zone}
    response = conn.call(conn.request(RequestCode.REGISTER_BROKER, header, body, version=Version.V5_3_3))
    assert response.code == ResponseCode.SUCCESS, response.remark


def test_a_real_server_answers_zone_mode_queries_with_their_zone_over_tcp_and_zeromq(namesrv_factory, raw_connect,
                                                                                     zmq_context):
    server = namesrv_factory()
    broker = raw_connect(server.address)
    register_over_tcp(broker, "za", "127.0.0.1:20911", 0, "az-1")
    register_over_tcp(broker, "zb", "127.0.0.1:20912", 0, "az-2")
    client = raw_connect(server.address)

    def route_groups(ext: dict[str, str]) -> list[str]:
        return groups(client.call(client.request(ROUTE, {"topic": "Z1", **ext}, version=Version.V5_3_3)))

    for _ in range(3):  # the repeats are answered from caches: the inline path's and the zone's own
        assert route_groups({}) == ["za", "zb"]
        assert route_groups(zone_mode("AZ-1")) == ["za"]
        assert route_groups(zone_mode("az-2")) == ["zb"]
    dealer = zmq_context.socket(zmq.DEALER)
    dealer.setsockopt(zmq.LINGER, 0)
    dealer.connect(server.zmq_address)
    for opaque, ext, expected in [(1, zone_mode("az-2"), ["zb"]), (2, {}, ["za", "zb"]),
                                  (3, zone_mode("az-2"), ["zb"])]:
        dealer.send(encode_msgpack(RemotingCommand.request(ROUTE, {"topic": "Z1", **ext}, opaque=opaque,
                                                           version=Version.V5_3_3)))
        assert dealer.poll(5000)
        answer = decode_msgpack(dealer.recv())
        assert answer.opaque == opaque and groups(answer) == expected
