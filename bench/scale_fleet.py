"""The fleet of the route-table scale benchmarks: B master brokers in clusters of K, each broker
serving its cluster's T topics of 8 queues (B × T queue entries; RocketMQ issue #4245's shape).

`bench/routeinfo_scale.py` drives it through the request path in one process and
`bench/routeinfo_wire.py` over TCP against running servers; both render the same requests here.
"""
from __future__ import annotations

from dataclasses import dataclass

from namesrv.fastpath import body_crc32
from namesrv.protocol import (
    DataVersion,
    RegisterBrokerBody,
    RemotingCommand,
    RequestCode,
    TopicConfig,
    TopicConfigSerializeWrapper,
)


@dataclass(frozen=True, slots=True)
class ScaleFleet:
    brokers: int
    topics: int
    brokers_per_cluster: int

    @property
    def clusters(self) -> int:
        return -(-self.brokers // self.brokers_per_cluster)

    @property
    def queue_entries(self) -> int:
        return self.brokers * self.topics

    def cluster_of(self, broker: int) -> int:
        return broker // self.brokers_per_cluster

    def topic(self, cluster: int, index: int) -> str:
        return f"c{cluster}-topic-{index:05d}"

    def cluster_body(self, cluster: int, counter: int = 1) -> bytes:
        """The body every broker of the cluster sends; from counter 2 on, its first topic has 16 queues, not 8."""
        table = {}
        for i in range(self.topics):
            name = self.topic(cluster, i)
            table[name] = TopicConfig(name, 8, 16 if i == 0 and counter > 1 else 8)
        wrapper = TopicConfigSerializeWrapper(table, DataVersion(counter, 1_700_000_000_000, 0))
        return RegisterBrokerBody(wrapper, []).encode()

    def register_request(self, broker: int, body: bytes, broker_id: int = 0, opaque: int = 0) -> RemotingCommand:
        """REGISTER_BROKER of `broker` (id 0: its master) carrying `body`, bodyCrc32 set as 4.9.x brokers do."""
        addr = f"10.{broker // 250}.{broker % 250}.{broker_id + 1}:10911"
        return RemotingCommand.request(RequestCode.REGISTER_BROKER, {
            "brokerName": f"broker-{broker:04d}", "brokerAddr": addr,
            "clusterName": f"cluster-{self.cluster_of(broker)}", "haServerAddr": addr.replace("10911", "10912"),
            "brokerId": broker_id, "bodyCrc32": body_crc32(body)}, body, opaque=opaque)
