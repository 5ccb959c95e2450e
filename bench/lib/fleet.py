"""The one fleet every verb sends from: brokers (masters and slaves) of C clusters and the route-query
clients, and their requests, pre-encoded (`FrameTemplate`).

Shape follows reference 8: every broker registers its whole topic table (REGISTER_BROKER, JSON
body, bodyCrc32 set, as a 5.x broker with forceRegister does) every `register_period_s`
(RocketMQ: 30 s; compress it to make a storm) with its own DataVersion — unchanged from one
registration to the next, except for a `register_churn` share that carries a changed
topic-table version (as auto-created %RETRY% topics cause), forcing a full re-read. Brokers may
also heartbeat (BROKER_HEARTBEAT, as in acting-master mode, every `heartbeat_period_s`), and R
clients each ask for the route of a random topic every `route_poll_period_s`. Topics live per
cluster: every broker group of a cluster hosts the cluster's T topics, so a route names all the
cluster's groups, as with topics created cluster-wide. Route-change subscribers
(bench/storm/subscriber.py) subscribe to topics with `subscribe_template`. The scale fleet of
`python -m bench scale` (masters only, clusters of K brokers serving 10,000 topics) is a FleetShape
too: `scale_fleet`.
"""
from __future__ import annotations

import math
import struct
from collections.abc import Sequence
from dataclasses import asdict, dataclass

from namesrv import fastpath
from namesrv.protocol import (
    DataVersion,
    LanguageCode,
    RegisterBrokerBody,
    RemotingCommand,
    RequestCode,
    SerializeType,
    TopicConfig,
    TopicConfigSerializeWrapper,
    Version,
)
from namesrv.protocol.codes import PERM_READ, PERM_WRITE

REGISTER = int(RequestCode.REGISTER_BROKER)
HEARTBEAT = int(RequestCode.BROKER_HEARTBEAT)
ROUTE = int(RequestCode.GET_ROUTEINFO_BY_TOPIC)
SUBSCRIBE = int(RequestCode.SUBSCRIBE_ROUTE_CHANGES)
ROUTE_CHANGED = int(RequestCode.ROUTE_CHANGED)
DATA_VERSION = int(RequestCode.QUERY_DATA_VERSION)
#: Fake broker ports: addresses are strings in the route table, never dialled by the NameServer.
_BROKER_PORT_BASE = 10000
_HA_PORT_BASE = 40000
MAX_BROKERS = 20000
_PREFIX = struct.Struct(">ii")
_INT32 = struct.Struct(">i")
_SENTINEL = 2_059_198_193  # any int32 whose JSON form cannot appear elsewhere in the header
_BINARY_OPAQUE_OFFSET = 5  # code (2) + language (1) + version (2)


class FrameTemplate:
    """A request encoded once; `render(opaque)` -> the whole frame (length prefix included) with that opaque.

    A storm sends the same few thousand requests again and again: re-encoding them per send would
    make the generator, not the server, the bottleneck. The template is the protocol's own encoding
    (`RemotingCommand.encode`), split around the opaque; `parts` hands the pieces to the generator
    loop (namesrv.fastpath.RequestGenerator), which stamps them the same way.
    """

    __slots__ = ("code", "head", "tail", "body", "serialize_type")

    def __init__(self, command: RemotingCommand) -> None:
        self.code = command.code
        self.serialize_type = int(command.serialize_type)
        self.body = command.body or b""
        probe = RemotingCommand(command.code, language=command.language, version=command.version,
                                opaque=_SENTINEL, flag=command.flag, remark=command.remark,
                                ext_fields=command.ext_fields, serialize_type=command.serialize_type)
        header = probe.encode_header()
        if command.serialize_type == SerializeType.JSON:
            marker = b'"opaque":%d' % _SENTINEL
            if header.count(marker) != 1:
                raise ValueError("cannot locate the opaque in the JSON header")
            at = header.index(marker) + len(b'"opaque":')
            self.head, self.tail = header[:at], header[at + len(str(_SENTINEL)):]
        else:
            at = _BINARY_OPAQUE_OFFSET
            if header[at:at + 4] != _INT32.pack(_SENTINEL):
                raise ValueError("cannot locate the opaque in the binary header")
            self.head, self.tail = header[:at], header[at + 4:]

    def render(self, opaque: int) -> bytes:
        stamp = _INT32.pack(opaque) if self.serialize_type == SerializeType.ROCKETMQ else b"%d" % opaque
        header_len = len(self.head) + len(stamp) + len(self.tail)
        prefix = _PREFIX.pack(4 + header_len + len(self.body), (self.serialize_type << 24) | header_len)
        return b"".join((prefix, self.head, stamp, self.tail, self.body))

    def parts(self) -> tuple[int, bytes, bytes, bytes, int]:
        """(code, head, tail, body, serialize type): RequestGenerator.template's arguments."""
        return self.code, self.head, self.tail, self.body, self.serialize_type


@dataclass(frozen=True, slots=True)
class BrokerIdentity:
    cluster: str
    name: str
    broker_id: int
    address: str
    ha_address: str


@dataclass(frozen=True, slots=True)
class FleetShape:
    """B brokers in groups of one master + S slaves, T topics of Q queues per cluster, R clients."""

    brokers: int = 64
    slaves_per_master: int = 1
    topics_per_broker: int = 100
    queues_per_topic: int = 8
    clusters: int = 2
    register_period_s: float = 30.0
    heartbeat_period_s: float = 0.0
    route_clients: int = 100
    route_poll_period_s: float = 30.0
    register_churn: float = 0.0
    serialize: str = "json"

    def __post_init__(self) -> None:
        problems = []
        if not 1 <= self.brokers <= MAX_BROKERS:
            problems.append(f"brokers must be 1..{MAX_BROKERS}")
        if self.slaves_per_master < 0:
            problems.append("slaves_per_master must be >= 0")
        if self.topics_per_broker < 1 or self.queues_per_topic < 1:
            problems.append("topics_per_broker and queues_per_topic must be >= 1")
        if not 0.0 <= self.register_churn <= 1.0:
            problems.append("register_churn must be in [0, 1]")
        if not 1 <= self.clusters <= self.groups:
            problems.append(f"clusters must be 1..{self.groups} (the number of broker groups)")
        if self.register_period_s < 0 or self.heartbeat_period_s < 0 or self.route_poll_period_s < 0:
            problems.append("periods must be >= 0 (0 = that request kind is off)")
        if self.route_clients < 0:
            problems.append("route_clients must be >= 0")
        if self.serialize not in ("json", "rocketmq"):
            problems.append("serialize must be json or rocketmq")
        if problems:
            raise ValueError("bad fleet shape: " + "; ".join(problems))
        if not self.rates():
            raise ValueError("bad fleet shape: every request kind is off (all periods 0 or no clients)")

    @property
    def groups(self) -> int:
        return math.ceil(self.brokers / (1 + self.slaves_per_master))

    def rates(self) -> dict[int, float]:
        """Requests per second of each request code the fleet sends (kinds that are off are absent)."""
        rates: dict[int, float] = {}
        if self.register_period_s > 0:
            rates[REGISTER] = self.brokers / self.register_period_s
        if self.heartbeat_period_s > 0:
            rates[HEARTBEAT] = self.brokers / self.heartbeat_period_s
        if self.route_poll_period_s > 0 and self.route_clients > 0:
            rates[ROUTE] = self.route_clients / self.route_poll_period_s
        return rates

    def broker(self, index: int) -> BrokerIdentity:
        group, broker_id = divmod(index, 1 + self.slaves_per_master)
        return BrokerIdentity(cluster=f"storm-cluster-{group % self.clusters}", name=f"storm-broker-{group}",
                              broker_id=broker_id, address=f"127.0.0.1:{_BROKER_PORT_BASE + index}",
                              ha_address=f"127.0.0.1:{_HA_PORT_BASE + index}")

    def cluster_topics(self, cluster: str) -> list[str]:
        return [f"{cluster}-topic-{j}" for j in range(self.topics_per_broker)]

    def all_topics(self) -> list[str]:
        return [topic for c in range(self.clusters) for topic in self.cluster_topics(f"storm-cluster-{c}")]

    @staticmethod
    def cluster_of(topic: str) -> str:
        """The cluster whose brokers host `topic` (every broker of it: a flap changes all its topics)."""
        return topic.rpartition("-topic-")[0]

    @property
    def serialize_type(self) -> int:
        return SerializeType.JSON if self.serialize == "json" else SerializeType.ROCKETMQ

    def describe(self) -> dict:
        return {**asdict(self), "groups": self.groups, "distinct_topics": self.clusters * self.topics_per_broker,
                "rates_per_s": {RequestCode(code).name: rate for code, rate in self.rates().items()}}


def scale_fleet(brokers: int, topics: int, brokers_per_cluster: int) -> FleetShape:
    """`brokers` masters in clusters of about `brokers_per_cluster`, each broker serving its cluster's
    `topics` topics of 8 queues (brokers × topics queue entries; RocketMQ issue #4245's shape)."""
    return FleetShape(brokers=brokers, slaves_per_master=0, topics_per_broker=topics, queues_per_topic=8,
                      clusters=max(1, -(-brokers // brokers_per_cluster)))


def _request(code: int, ext: dict[str, object], body: bytes | None, serialize_type: int) -> RemotingCommand:
    """A request as a 5.x Java broker or client sends it."""
    return RemotingCommand.request(code, ext, body, serialize_type=serialize_type, version=Version.V5_3_3,
                                   language=LanguageCode.JAVA)


def register_body(fleet: FleetShape, cluster: str, data_version: DataVersion, read_only: int | None = None) -> bytes:
    """The JSON RegisterBrokerBody of a broker of `cluster` whose topic table has `data_version`
    (and whose topic number `read_only`, if given, has lost its write perm)."""
    queues = fleet.queues_per_topic
    wrapper = TopicConfigSerializeWrapper(
        {t: TopicConfig(t, queues, queues, PERM_READ if i == read_only else PERM_READ | PERM_WRITE)
         for i, t in enumerate(fleet.cluster_topics(cluster))}, data_version)
    return RegisterBrokerBody(wrapper, []).encode()


def register_command(fleet: FleetShape, broker: BrokerIdentity, body: bytes) -> RemotingCommand:
    """REGISTER_BROKER of `broker` carrying `body`, bodyCrc32 set, as a 5.x broker sends it."""
    ext = {"brokerName": broker.name, "brokerAddr": broker.address, "clusterName": broker.cluster,
           "haServerAddr": broker.ha_address, "brokerId": broker.broker_id, "enableActingMaster": False,
           "compressed": False, "bodyCrc32": fastpath.body_crc32(body)}
    return _request(REGISTER, ext, body, fleet.serialize_type)


def register_template(fleet: FleetShape, broker: BrokerIdentity, body: bytes) -> FrameTemplate:
    return FrameTemplate(register_command(fleet, broker, body))


def heartbeat_template(fleet: FleetShape, broker: BrokerIdentity) -> FrameTemplate:
    ext = {"clusterName": broker.cluster, "brokerAddr": broker.address, "brokerName": broker.name,
           "brokerId": broker.broker_id}
    return FrameTemplate(_request(HEARTBEAT, ext, None, fleet.serialize_type))


def data_version_template(fleet: FleetShape, broker: BrokerIdentity, data_version: DataVersion) -> FrameTemplate:
    """QUERY_DATA_VERSION: a 4.x broker asks whether its DataVersion is the NameServer's before re-registering."""
    ext = {"clusterName": broker.cluster, "brokerAddr": broker.address, "brokerName": broker.name,
           "brokerId": broker.broker_id}
    return FrameTemplate(_request(DATA_VERSION, ext, data_version.encode(), fleet.serialize_type))


def route_template(fleet: FleetShape, topic: str) -> FrameTemplate:
    return FrameTemplate(_request(ROUTE, {"topic": topic}, None, fleet.serialize_type))


def subscribe_template(fleet: FleetShape, topics: Sequence[str]) -> FrameTemplate:
    """SUBSCRIBE_ROUTE_CHANGES for `topics`, from a 5.x client: pushes come in standard JSON."""
    return FrameTemplate(_request(SUBSCRIBE, {"topics": ";".join(topics)}, None, fleet.serialize_type))
