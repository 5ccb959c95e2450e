"""The simulated fleet: brokers (masters and slaves) of C clusters and the route-query clients.

Shape follows reference 8: every broker registers its whole topic table (REGISTER_BROKER, JSON
body, bodyCrc32 set, as a 5.x broker with forceRegister does) every `register_period_s`
(RocketMQ: 30 s; compress it to make a storm) with its own DataVersion — unchanged from one
registration to the next, except for a `register_churn` share that carries a changed
topic-table version (as auto-created %RETRY% topics cause), forcing a full re-read. Brokers may
also heartbeat (BROKER_HEARTBEAT, as in acting-master mode, every `heartbeat_period_s`), and R
clients each ask for the route of a random topic every `route_poll_period_s`. Topics live per
cluster: every broker group of a cluster hosts the cluster's T topics, so a route names all the
cluster's groups, as with topics created cluster-wide. Route-change subscribers
(bench/storm/subscriber.py) subscribe to topics with `subscribe_template`.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass

from bench.storm.template import FrameTemplate
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
#: Fake broker ports: addresses are strings in the route table, never dialled by the NameServer.
_BROKER_PORT_BASE = 10000
_HA_PORT_BASE = 40000
MAX_BROKERS = 20000
#: brokers × topics bound: each broker's registration body is held in memory (~200 B per topic).
MAX_TOPIC_ENTRIES = 5_000_000


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
        if self.brokers * self.topics_per_broker > MAX_TOPIC_ENTRIES:
            problems.append(f"brokers × topics_per_broker must be <= {MAX_TOPIC_ENTRIES:,} "
                            "(bodies are held in memory)")
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


def register_template(fleet: FleetShape, broker: BrokerIdentity, body: bytes) -> FrameTemplate:
    ext = {"brokerName": broker.name, "brokerAddr": broker.address, "clusterName": broker.cluster,
           "haServerAddr": broker.ha_address, "brokerId": broker.broker_id, "enableActingMaster": False,
           "compressed": False, "bodyCrc32": fastpath.body_crc32(body)}
    return FrameTemplate(_request(REGISTER, ext, body, fleet.serialize_type))


def heartbeat_template(fleet: FleetShape, broker: BrokerIdentity) -> FrameTemplate:
    ext = {"clusterName": broker.cluster, "brokerAddr": broker.address, "brokerName": broker.name,
           "brokerId": broker.broker_id}
    return FrameTemplate(_request(HEARTBEAT, ext, None, fleet.serialize_type))


def route_template(fleet: FleetShape, topic: str) -> FrameTemplate:
    return FrameTemplate(_request(ROUTE, {"topic": topic}, None, fleet.serialize_type))


def subscribe_template(fleet: FleetShape, topics: Sequence[str]) -> FrameTemplate:
    """SUBSCRIBE_ROUTE_CHANGES for `topics`, from a 5.x client: pushes come in standard JSON."""
    return FrameTemplate(_request(SUBSCRIBE, {"topics": ";".join(topics)}, None, fleet.serialize_type))
