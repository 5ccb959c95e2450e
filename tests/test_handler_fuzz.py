"""Every request handler under fuzzing (issue 8): random and mutated requests against a real
RequestProcessor over a real RouteInfoManager and a KVConfigManager writing to a tmp directory.

A request starts as a well-formed one for a random code (every code of SUPPORTED_CODES, plus
unknown codes), then is mutated: ext fields dropped, replaced by wrong-typed, huge, empty or
non-ASCII values, or moved to another code; bodies flipped, truncated, spliced, swapped for the
body of another code, non-UTF-8, or deflated garbage. It travels through the real codec (both
header codecs, or a hand-written JSON header with non-string ext values); what the protocol
layer refuses never reaches a handler and is skipped. For every request the processor must
answer, never raise, with a known response code and the request's opaque, refuse what the admin
guard refuses, and never hit an unexpected exception (the catch-all's ERROR log). After every
sequence the route table must be consistent (test_routeinfo_properties' checker). A long seeded
run under tracemalloc bounds memory.

One generator (`RequestFuzzer`) serves both drivers: hypothesis's random (shrinkable, replayable)
and a seeded `random.Random` for the long run.
"""
from __future__ import annotations

import contextlib
import logging
import random
import struct
import tracemalloc
import zlib
from collections.abc import Iterator

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_processor import Clock
from test_routeinfo_properties import check_consistent

from namesrv.channel import Channel
from namesrv.config import NamesrvConfig
from namesrv.fastpath import body_crc32
from namesrv.kvconfig import KVConfigManager
from namesrv.processor import ADMIN_CODES, RESPONSE_HEADER_CODES, SUPPORTED_CODES, RequestProcessor
from namesrv.protocol import (
    DataVersion,
    KVTable,
    QueueData,
    RegisterBrokerBody,
    RemotingCommand,
    RequestCode,
    ResponseCode,
    SerializeType,
    TopicConfig,
    TopicConfigSerializeWrapper,
    TopicList,
    TopicRouteData,
)
from namesrv.errors import ProtocolError
from namesrv.routeinfo import RouteInfoManager
from namesrv.security import ADMIN_TOKEN_FIELD, AdminGuard

TOKEN = "fuzz-admin-token-0123456789"
VALID_RESPONSE_CODES = {ResponseCode.SUCCESS, ResponseCode.SYSTEM_ERROR, ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
                        ResponseCode.NO_PERMISSION, ResponseCode.TOPIC_NOT_EXIST, ResponseCode.QUERY_NOT_FOUND}
CODES = sorted(SUPPORTED_CODES)

# Small pools, so that requests collide on the same brokers, topics and KV keys.
CLUSTERS = ("C", "C2", "")
BROKERS = ("broker-a", "broker-b", "")
ADDRS = ("10.0.0.1:10911", "10.0.0.2:10911", "[::1]:10911", "")
TOPICS = ("T1", "T2", "%RETRY%g", "TBW102", "C", "")
NAMESPACES = ("NS", "ORDER_TOPIC_CONFIG", "")
NUMBERS = ("0", "1", "2", "-1", "2147483647", "2147483648", "-9223372036854775808", "9223372036854775808",
           "1e3", " 1", "0x10", "1.5", "")
ODD = ("true", "TRUE", "false", "null", "ünïcödé", "\x00\x01", "😀", "\\u0000", '"q"', "k=v\nk2=v2", " ", "a;b")
HUGE = ("x" * 100_000, "9" * 40_000, "é" * 50_000, "{" * 30_000)
FIELDS = ("topic", "brokerName", "brokerAddr", "clusterName", "brokerId", "bodyCrc32", "compressed", "namespace",
          "key", "value", "cluster", "heartbeatTimeoutMillis", "enableActingMaster", "acceptStandardJsonOnly",
          "haServerAddr", "__ZONE_NAME", "__ZONE_MODE", ADMIN_TOKEN_FIELD, "epoch", "")
PROPERTY_KEYS = ("orderMessageEnable", "enableTopicList", "supportActingMaster", "deleteTopicWithBrokerRegistration",
                 "adminToken", "adminAllowedNetworks", "maxTopicsPerRegistration", "configStorePath", "listenPort",
                 "no.such.key")
CHANNELS = (Channel("tcp", b"b1", "10.0.0.1:50000"), Channel("tcp", b"b2", "10.0.0.2:50000"),
            Channel("zmq", b"z1", ""), Channel("tcp", b"x", "203.0.113.7:40000"), Channel("tcp", b"v6", "[::1]:5"))
CONFIG_VARIANTS = (
    {},
    {"admin_allowed_networks": "10.0.0.0/8;::1", "admin_token": TOKEN, "max_topics_per_registration": 3},
    {"admin_token": TOKEN, "support_acting_master": True, "delete_topic_with_broker_registration": True},
    {"admin_allowed_networks": "10.0.0.1/32", "order_message_enable": True, "enable_topic_list": False,
     "enable_all_topic_list": False, "need_wait_for_service": True},
)


class RequestFuzzer:
    """Well-formed requests for every code, and mutations of them, from one random source."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng

    def chance(self, p: float) -> bool:
        return self.rng.random() < p

    def pick(self, pool):
        return pool[self.rng.randrange(len(pool))]

    # ---- values and bodies
    def value(self) -> str:
        roll = self.rng.random()
        if roll < 0.03:
            return self.pick(HUGE)
        return self.pick((CLUSTERS, BROKERS, ADDRS, TOPICS, NAMESPACES, NUMBERS, ODD)[self.rng.randrange(7)])

    def wrapper(self) -> TopicConfigSerializeWrapper:
        table = {}
        for _ in range(self.rng.randrange(6)):
            name = self.pick(TOPICS) or "T0"
            table[name] = TopicConfig(name, self.rng.randrange(17), self.rng.randrange(17), self.rng.randrange(8),
                                      self.pick(("SINGLE_TAG", "MULTI_TAG")), self.rng.randrange(4),
                                      self.chance(0.5), self.pick((None, {}, {"+message.type": "FIFO"})))
        return TopicConfigSerializeWrapper(table, DataVersion(self.rng.randrange(4), 0, self.rng.randrange(3)))

    def body(self, kind: str | None = None) -> bytes | None:
        kind = kind or self.pick(("register", "compressed", "wrapper", "route", "version", "kv", "properties",
                                  "topics", "json", "binary", "non-utf8", "zeros", "none"))
        rng = self.rng
        if kind == "register":
            return RegisterBrokerBody(self.wrapper(), self.pick(([], ["10.0.0.9:1"]))).encode()
        if kind == "compressed":
            return RegisterBrokerBody(self.wrapper(), []).encode(compressed=True, version=self.pick((400, 479)))
        if kind == "wrapper":
            return self.wrapper().encode()
        if kind == "route":
            queues = [QueueData(self.pick(BROKERS), rng.randrange(9), rng.randrange(9), rng.randrange(8),
                                rng.randrange(4)) for _ in range(rng.randrange(4))]
            return TopicRouteData(queue_datas=queues).encode(standard=self.chance(0.5))
        if kind == "version":
            return DataVersion(rng.randrange(4), rng.randrange(2), rng.randrange(3)).encode()
        if kind == "kv":
            return KVTable({self.pick(TOPICS): self.value() for _ in range(rng.randrange(3))}).encode()
        if kind == "properties":
            return "".join(f"{self.pick(PROPERTY_KEYS)}={self.pick(('true', 'false', '1', '', 'x'))}\n"
                           for _ in range(rng.randrange(4))).encode()
        if kind == "topics":
            return TopicList([self.pick(TOPICS) for _ in range(rng.randrange(4))], self.pick((None, "h:1"))).encode()
        if kind == "json":
            return orjson.dumps(self.json_value(3))
        if kind == "binary":
            return rng.randbytes(rng.randrange(64))
        if kind == "non-utf8":
            return b"\xff\xfe\xc0" + rng.randbytes(rng.randrange(16)) + b"=\x80"
        if kind == "zeros":  # deflated garbage: inflates, never parses
            return zlib.compress(bytes(rng.randrange(1 << 20)))
        return None

    def json_value(self, depth: int):
        roll = self.rng.randrange(8 if depth else 5)
        if roll == 0:
            return None
        if roll == 1:
            return self.chance(0.5)
        if roll == 2:
            return self.rng.randint(-2 ** 63, 2 ** 63 - 1)
        if roll == 3:
            return self.rng.random() * 1e6
        if roll == 4:
            return self.value()
        if roll in (5, 6):
            return {self.value(): self.json_value(depth - 1) for _ in range(self.rng.randrange(3))}
        return [self.json_value(depth - 1) for _ in range(self.rng.randrange(3))]

    # ---- well-formed requests
    def identity(self) -> dict:
        return {"clusterName": self.pick(CLUSTERS[:2]), "brokerAddr": self.pick(ADDRS[:3]),
                "brokerName": self.pick(BROKERS[:2]), "brokerId": self.pick(("0", "0", "1", "2"))}

    def well_formed(self, code: int) -> tuple[dict, bytes | None]:
        kv = {"namespace": self.pick(NAMESPACES[:2]), "key": self.pick(TOPICS[:3])}
        bodyless = {
            RequestCode.PUT_KV_CONFIG: kv | {"value": self.pick(("broker-a:4", "v", "broker-b:2"))},
            RequestCode.GET_KV_CONFIG: kv, RequestCode.DELETE_KV_CONFIG: kv,
            RequestCode.GET_KVLIST_BY_NAMESPACE: {"namespace": kv["namespace"]},
            RequestCode.UNREGISTER_BROKER: self.identity(),
            RequestCode.GET_ROUTEINFO_BY_TOPIC: {"topic": self.pick(TOPICS[:3]),
                                                 "acceptStandardJsonOnly": self.pick(("true", "false"))},
            RequestCode.WIPE_WRITE_PERM_OF_BROKER: {"brokerName": self.pick(BROKERS[:2])},
            RequestCode.ADD_WRITE_PERM_OF_BROKER: {"brokerName": self.pick(BROKERS[:2])},
            RequestCode.DELETE_TOPIC_IN_NAMESRV: {"topic": self.pick(TOPICS[:3]), "clusterName": self.pick(CLUSTERS)},
            RequestCode.GET_TOPICS_BY_CLUSTER: {"cluster": self.pick(CLUSTERS)},
            RequestCode.EXPLAIN_ROUTE: {"topic": self.pick(TOPICS[:3])},
            RequestCode.GET_BROKER_MEMBER_GROUP: {"clusterName": self.pick(CLUSTERS), "brokerName": self.pick(BROKERS)},
            RequestCode.BROKER_HEARTBEAT: self.identity(),
            RequestCode.SUBSCRIBE_ROUTE_CHANGES: ({"all": "true"} if self.chance(0.3) else
                                                  {"topics": ";".join(self.rng.sample(TOPICS[:3], 2))}),
        }
        if code in bodyless:
            ext, body = bodyless[code], None
        elif code == RequestCode.REGISTER_BROKER:
            compressed = self.chance(0.4)
            body = self.body("compressed" if compressed else "register")
            ext = self.identity() | {"haServerAddr": "10.0.0.1:10912", "compressed": str(compressed).lower(),
                                     "bodyCrc32": str(body_crc32(body)) if self.chance(0.5) else "0",
                                     "heartbeatTimeoutMillis": self.pick(("10000", "120000")),
                                     "enableActingMaster": self.pick(("true", "false"))}
        elif code == RequestCode.REGISTER_TOPIC_IN_NAMESRV:
            ext, body = {"topic": self.pick(TOPICS[:3])}, self.body("route")
        elif code == RequestCode.UPDATE_NAMESRV_CONFIG:
            ext, body = {}, self.body("properties")
        elif code == RequestCode.QUERY_DATA_VERSION:
            ext, body = self.identity(), self.body("version")
        else:
            ext, body = {}, None
        if code in ADMIN_CODES and self.chance(0.7):
            ext[ADMIN_TOKEN_FIELD] = TOKEN
        return ext, body

    # ---- mutation
    def mutated(self, code: int) -> tuple[dict | None, bytes | None]:
        ext, body = self.well_formed(self.pick(CODES) if self.chance(0.1) else code)  # maybe another code's
        for _ in range(self.rng.randrange(3)):
            roll = self.rng.randrange(4)
            if roll == 0 and ext:
                del ext[self.pick(sorted(ext))]
            elif roll == 1 and ext:
                ext[self.pick(sorted(ext))] = self.value()
            elif roll == 2:
                ext[self.pick(FIELDS)] = self.value()
            else:
                body = self.mutated_body(body)
        return (None if not ext and self.chance(0.3) else ext), body

    def mutated_body(self, body: bytes | None) -> bytes | None:
        roll = self.rng.randrange(5)
        if not body or roll == 0:
            return self.body()  # the body of another code, or garbage
        cut = self.rng.randrange(len(body) + 1)
        if roll == 1:
            return body[:cut]
        if roll == 2:
            return body[:cut] + bytes([self.rng.randrange(256)]) + body[cut + 1:]
        if roll == 3:
            return body[:cut] + (self.body() or b"") + body[cut:]
        return body + body

    # ---- the request as the server decodes it
    def request(self) -> RemotingCommand | None:
        """A decoded request, or None when the protocol layer refuses it (never a handler's business)."""
        code = self.pick(CODES) if self.chance(0.92) else self.rng.randint(-2 ** 31, 2 ** 31 - 1)
        ext, body = self.mutated(code) if self.chance(0.6) else self.well_formed(code)
        opaque = self.rng.randint(-2 ** 31, 2 ** 31 - 1)
        version = self.pick((0, 36, 37, 317, 400, 401, 433, 479, 613, self.rng.randint(-2 ** 31, 2 ** 31 - 1)))
        try:
            if self.chance(0.2):
                return self.raw_json_request(code, ext, body, opaque, version)
            request = RemotingCommand.request(code, ext, body, opaque=opaque, version=version,
                                              serialize_type=self.pick((SerializeType.JSON, SerializeType.ROCKETMQ)),
                                              oneway=self.chance(0.1))
            return RemotingCommand.decode(request.encode()[4:])
        except ProtocolError:
            return None

    def raw_json_request(self, code: int, ext: dict | None, body: bytes | None, opaque: int,
                         version: int) -> RemotingCommand:
        """A JSON header written by hand: ext values of any JSON type, as a careless client sends them."""
        typed = None if ext is None else {k: self.json_value(1) if self.chance(0.3) else v for k, v in ext.items()}
        header = orjson.dumps({"code": code, "extFields": typed, "flag": self.pick((0, 2)), "language": "JAVA",
                               "opaque": opaque, "serializeTypeCurrentRPC": "JSON", "version": version})
        return RemotingCommand.decode(struct.pack(">I", len(header)) + header + (body or b""))


class Harness:
    """A real processor over real tables and a KV file in `directory`."""

    def __init__(self, directory, **config) -> None:
        self.clock = Clock()
        self.config = NamesrvConfig(kv_config_path=str(directory / "kvConfig.json"),
                                    config_store_path=str(directory / "namesrv.properties"), **config)
        self.routes = RouteInfoManager(self.config, clock=self.clock)
        self.processor = RequestProcessor(self.config, self.routes, KVConfigManager(self.config.kv_config_path),
                                          clock=self.clock)
        self.guard = AdminGuard.from_settings(self.config.admin_allowed_networks, self.config.admin_token)

    def send(self, request: RemotingCommand, channel: Channel) -> RemotingCommand:
        """process(), and every property its answer must have."""
        response = self.processor.process(request, channel)
        assert isinstance(response, RemotingCommand) and response.is_response
        assert response.opaque == request.opaque
        assert response.code in VALID_RESPONSE_CODES, (request, response)
        if request.code not in SUPPORTED_CODES:
            assert response.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
        else:
            assert (response.ext_fields is not None) == (request.code in RESPONSE_HEADER_CODES)
        if request.code in ADMIN_CODES:
            refusal = self.guard.refusal(request.ext_fields, channel.remote_addr)
            if refusal is not None:
                assert (response.code, response.remark) == (ResponseCode.NO_PERMISSION, refusal)
        wire = RemotingCommand.decode(response.encode()[4:])  # what the client reads back
        assert (wire.code, wire.opaque) == (response.code, response.opaque)
        self.clock.now += 1_000
        return response


class ErrorWatch(logging.Handler):
    """Keeps ERROR records of the namesrv loggers: the processor's catch-all logs unexpected exceptions so."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.errors: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if len(self.errors) < 5:
            self.errors.append(self.format(record))


@contextlib.contextmanager
def watched_errors() -> Iterator[ErrorWatch]:
    """Only ERROR records are made (warnings for every bad request would cost time and, captured, memory)."""
    logger = logging.getLogger("namesrv")
    watch, level = ErrorWatch(), logger.level
    logger.addHandler(watch)
    logger.setLevel(logging.ERROR)
    try:
        yield watch
    finally:
        logger.removeHandler(watch)
        logger.setLevel(level)


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                   HealthCheck.too_slow])
@given(rng=st.randoms(use_true_random=False), variant=st.sampled_from(range(len(CONFIG_VARIANTS))),
       length=st.integers(1, 12))
def test_random_and_mutated_requests_are_always_answered(tmp_path, rng, variant, length):
    harness = Harness(tmp_path, **CONFIG_VARIANTS[variant])
    fuzzer = RequestFuzzer(rng)
    with watched_errors() as watch:
        for _ in range(length):
            request = fuzzer.request()
            if request is not None:
                harness.send(request, fuzzer.pick(CHANNELS))
    assert watch.errors == []
    check_consistent(harness.routes, harness.config)


def test_a_long_mutated_run_keeps_memory_bounded(tmp_path):
    """5,000 seeded requests: the peak stays near the largest single request, and what stays
    allocated after the run is only the (small, bounded-pool) tables' worth."""
    harness = Harness(tmp_path, **CONFIG_VARIANTS[1] | {"max_topics_per_registration": 200000})
    fuzzer = RequestFuzzer(random.Random(20240807))
    answered = 0
    tracemalloc.start()
    try:
        with watched_errors() as watch:
            for _ in range(5_000):
                request = fuzzer.request()
                if request is not None:
                    harness.send(request, fuzzer.pick(CHANNELS))
                    answered += 1
        retained, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert watch.errors == []
    assert answered > 4_000
    # Measured: peak about 4.3 MiB (a 1 MiB inflated body, 100k-character values), retained about 0.3 MiB.
    assert peak < 16 * 2 ** 20, f"peak {peak / 2 ** 20:.1f} MiB"
    assert retained < 4 * 2 ** 20, f"retained {retained / 2 ** 20:.1f} MiB (a leak of ~1 KB per request shows here)"
    check_consistent(harness.routes, harness.config)


@pytest.mark.parametrize("seed", range(3))
def test_every_code_is_reached_with_success_and_with_errors(tmp_path, seed):
    """The generator is not vacuous: each supported code gets answered both SUCCESS and otherwise."""
    harness = Harness(tmp_path)
    fuzzer = RequestFuzzer(random.Random(seed))
    outcomes: dict[int, set[bool]] = {code: set() for code in CODES}
    with watched_errors():
        for _ in range(1_500):
            request = fuzzer.request()
            if request is not None:
                response = harness.send(request, fuzzer.pick(CHANNELS))
                if request.code in outcomes:
                    outcomes[request.code].add(response.code == ResponseCode.SUCCESS)
    always_succeed = {RequestCode.GET_BROKER_CLUSTER_INFO, RequestCode.GET_SYSTEM_TOPIC_LIST_FROM_NS,
                      RequestCode.GET_NAMESRV_CONFIG, RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER,
                      RequestCode.GET_UNIT_TOPIC_LIST, RequestCode.GET_HAS_UNIT_SUB_TOPIC_LIST,
                      RequestCode.GET_HAS_UNIT_SUB_UNUNIT_TOPIC_LIST, RequestCode.GET_BROKER_MEMBER_GROUP,
                      RequestCode.WIPE_WRITE_PERM_OF_BROKER, RequestCode.ADD_WRITE_PERM_OF_BROKER,
                      RequestCode.GET_TOPICS_BY_CLUSTER, RequestCode.DELETE_KV_CONFIG, RequestCode.UNSUBSCRIBE_ROUTE_CHANGES}
    for code, seen in outcomes.items():
        assert True in seen, f"code {code} never succeeded"
        if code not in always_succeed:
            assert False in seen, f"code {code} never failed"
