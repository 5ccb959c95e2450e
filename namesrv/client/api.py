"""Typed NameServer requests (what RocketMQ's MQClientAPIImpl/BrokerOuterAPI send), one address at a time.

`NamesrvApi` is a mixin: the class using it provides `request()` (builds a command in the
client's version/language) and `invoke()` / `invoke_oneway()` (moves it). Every method raises
`MQResponseError(code, remark)` when the server answers anything but SUCCESS.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from namesrv import fastpath
from namesrv.client.errors import InvalidRouteError, MQResponseError
from namesrv.config import escape_property, parse_properties
from namesrv.protocol.codes import RequestCode, ResponseCode
from namesrv.protocol.command import RemotingCommand
from namesrv.protocol.route import (
    BrokerMemberGroup,
    ClusterInfo,
    KVTable,
    QueueData,
    RegisterBrokerResult,
    TopicList,
    TopicRouteData,
)
from namesrv.protocol.topic import DataVersion


#: Most queues a route may give one broker for a topic: namesrv's own default maxQueueNumsPerTopic.
#: A client builds an object per queue; a route from any NameServer past this is refused.
MAX_QUEUES_PER_BROKER = 1024


def order_topic_counts(order_topic_conf: str | None) -> list[tuple[str, int]]:
    """(brokerName, queue count) of each `broker:count` entry of a route's orderTopicConf whose count
    is digits (the KV value an operator sets: "broker-a:4;broker-b:4")."""
    counts = []
    for entry in (order_topic_conf or "").split(";"):
        broker_name, _, count = entry.partition(":")
        if count.strip().isdigit():
            counts.append((broker_name, int(count)))
    return counts


def checked_route(topic: str, route: TopicRouteData, address: str = "") -> TopicRouteData:
    """`route`, or InvalidRouteError naming the queue count past MAX_QUEUES_PER_BROKER."""
    counts = [(q.broker_name, n) for q in route.queue_datas for n in (q.read_queue_nums, q.write_queue_nums)]
    for broker_name, count in counts + order_topic_counts(route.order_topic_conf):
        if not 0 <= count <= MAX_QUEUES_PER_BROKER:
            where = f" from {address}" if address else ""
            raise InvalidRouteError(f"route of topic {topic!r}{where} gives broker {broker_name!r} {count} queues: "
                                    f"at most {MAX_QUEUES_PER_BROKER}")
    return route


@dataclass(frozen=True, slots=True)
class BrokerIdentity:
    """Who a broker says it is in REGISTER_BROKER, QUERY_DATA_VERSION, heartbeats and UNREGISTER_BROKER.

    `heartbeat_timeout_ms` is sent only when set (RocketMQ sends it in acting-master mode); the
    NameServer expires the broker that long after its last registration or heartbeat.
    """

    cluster_name: str
    broker_name: str
    broker_addr: str
    broker_id: int = 0
    ha_server_addr: str = ""
    enable_acting_master: bool = False
    heartbeat_timeout_ms: int | None = None
    zone_name: str | None = None

    def key_fields(self) -> dict[str, object]:
        return {"brokerAddr": self.broker_addr, "brokerId": self.broker_id, "brokerName": self.broker_name,
                "clusterName": self.cluster_name}

    def register_fields(self, body: bytes, compressed: bool) -> dict[str, object]:
        fields = self.key_fields()
        fields.update(bodyCrc32=fastpath.body_crc32(body), compressed=compressed,
                      enableActingMaster=self.enable_acting_master, haServerAddr=self.ha_server_addr,
                      heartbeatTimeoutMillis=self.heartbeat_timeout_ms)
        if self.zone_name is not None:
            fields["__ZONE_NAME"] = self.zone_name
        return fields


def _check(response: RemotingCommand, address: str, ok: Iterable[int] = (ResponseCode.SUCCESS,)) -> RemotingCommand:
    if response.code not in ok:
        raise MQResponseError(response.code, response.remark, address)
    return response


def _ext(response: RemotingCommand, key: str) -> str | None:
    return (response.ext_fields or {}).get(key)


class NamesrvApi:
    """One method per NameServer request code."""

    def request(self, code: int, ext_fields: Mapping[str, object] | None = None,
                body: bytes | None = None) -> RemotingCommand:
        raise NotImplementedError

    async def invoke(self, address: str, request: RemotingCommand, timeout: float | None = None) -> RemotingCommand:
        raise NotImplementedError

    async def invoke_oneway(self, address: str, request: RemotingCommand) -> None:
        raise NotImplementedError

    async def call(self, address: str, code: int, ext_fields: Mapping[str, object] | None = None,
                   body: bytes | None = None, timeout: float | None = None) -> RemotingCommand:
        """Invoke and raise MQResponseError unless the answer is SUCCESS."""
        return _check(await self.invoke(address, self.request(code, ext_fields, body), timeout), address)

    # ---- KV config ----
    async def put_kv_config(self, address: str, namespace: str, key: str, value: str) -> None:
        await self.call(address, RequestCode.PUT_KV_CONFIG, {"namespace": namespace, "key": key, "value": value})

    async def get_kv_config(self, address: str, namespace: str, key: str) -> str | None:
        """The value; MQResponseError(22 QUERY_NOT_FOUND) when the key does not exist."""
        response = await self.call(address, RequestCode.GET_KV_CONFIG, {"namespace": namespace, "key": key})
        return _ext(response, "value")

    async def delete_kv_config(self, address: str, namespace: str, key: str) -> None:
        await self.call(address, RequestCode.DELETE_KV_CONFIG, {"namespace": namespace, "key": key})

    async def get_kv_list_by_namespace(self, address: str, namespace: str) -> dict[str, str]:
        response = await self.call(address, RequestCode.GET_KVLIST_BY_NAMESPACE, {"namespace": namespace})
        return KVTable.decode(response.body).table if response.body else {}

    # ---- routes and topics ----
    async def get_route_info_by_topic(self, address: str, topic: str, timeout: float | None = None) -> TopicRouteData:
        """The topic's route; MQResponseError(17 TOPIC_NOT_EXIST) when no live broker serves it."""
        response = await self.call(address, RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic}, timeout=timeout)
        if not response.body:
            raise MQResponseError(ResponseCode.TOPIC_NOT_EXIST, f"empty route body for topic {topic}", address)
        return checked_route(topic, TopicRouteData.decode(response.body), address)

    async def explain_route(self, address: str, topic: str, timeout: float | None = None) -> dict[str, Any]:
        """Why the topic has no route on that NameServer, or the route it has (namesrv's EXPLAIN_ROUTE;
        namesrv.routeinfo.explain says what the answer holds)."""
        response = await self.call(address, RequestCode.EXPLAIN_ROUTE, {"topic": topic}, timeout=timeout)
        return orjson.loads(response.body or b"{}")

    async def get_broker_cluster_info(self, address: str) -> ClusterInfo:
        response = await self.call(address, RequestCode.GET_BROKER_CLUSTER_INFO)
        return ClusterInfo.decode(response.body) if response.body else ClusterInfo()

    async def _topic_list(self, address: str, code: int, ext_fields: Mapping[str, object] | None = None,
                          timeout: float | None = None) -> TopicList:
        response = await self.call(address, code, ext_fields, timeout=timeout)
        return TopicList.decode(response.body) if response.body else TopicList()

    async def get_all_topic_list(self, address: str, timeout: float | None = None) -> TopicList:
        return await self._topic_list(address, RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER, timeout=timeout)

    async def get_topics_by_cluster(self, address: str, cluster: str) -> TopicList:
        return await self._topic_list(address, RequestCode.GET_TOPICS_BY_CLUSTER, {"cluster": cluster})

    async def get_system_topic_list(self, address: str) -> TopicList:
        return await self._topic_list(address, RequestCode.GET_SYSTEM_TOPIC_LIST_FROM_NS)

    async def get_unit_topic_list(self, address: str) -> TopicList:
        return await self._topic_list(address, RequestCode.GET_UNIT_TOPIC_LIST)

    async def get_has_unit_sub_topic_list(self, address: str) -> TopicList:
        return await self._topic_list(address, RequestCode.GET_HAS_UNIT_SUB_TOPIC_LIST)

    async def get_has_unit_sub_ununit_topic_list(self, address: str) -> TopicList:
        return await self._topic_list(address, RequestCode.GET_HAS_UNIT_SUB_UNUNIT_TOPIC_LIST)

    async def delete_topic_in_namesrv(self, address: str, topic: str, cluster: str | None = None) -> None:
        """Drop the topic (only its queues on `cluster`'s brokers when a cluster is given)."""
        await self.call(address, RequestCode.DELETE_TOPIC_IN_NAMESRV, {"topic": topic, "clusterName": cluster})

    async def register_topic_in_namesrv(self, address: str, topic: str, queue_datas: list[QueueData]) -> None:
        body = TopicRouteData(queue_datas=list(queue_datas)).encode(standard=True)
        await self.call(address, RequestCode.REGISTER_TOPIC_IN_NAMESRV, {"topic": topic}, body)

    async def wipe_write_perm_of_broker(self, address: str, broker_name: str) -> int:
        """Clear the write bit of the broker's queues; returns how many topics were touched."""
        response = await self.call(address, RequestCode.WIPE_WRITE_PERM_OF_BROKER, {"brokerName": broker_name})
        return int(_ext(response, "wipeTopicCount") or 0)

    async def add_write_perm_of_broker(self, address: str, broker_name: str) -> int:
        """Give the broker's queues read+write again; returns how many topics were touched."""
        response = await self.call(address, RequestCode.ADD_WRITE_PERM_OF_BROKER, {"brokerName": broker_name})
        return int(_ext(response, "addTopicCount") or 0)

    async def get_broker_member_group(self, address: str, cluster: str, broker_name: str) -> BrokerMemberGroup:
        response = await self.call(address, RequestCode.GET_BROKER_MEMBER_GROUP,
                                   {"clusterName": cluster, "brokerName": broker_name})
        return BrokerMemberGroup.decode(response.body) if response.body else BrokerMemberGroup(cluster, broker_name)

    # ---- NameServer configuration ----
    async def get_namesrv_config(self, address: str) -> dict[str, str]:
        response = await self.call(address, RequestCode.GET_NAMESRV_CONFIG)
        return parse_properties(response.body.decode("utf-8")) if response.body else {}

    async def update_namesrv_config(self, address: str, properties: Mapping[str, str]) -> None:
        body = "".join(f"{key}={escape_property(value)}\n" for key, value in properties.items()).encode("utf-8")
        await self.call(address, RequestCode.UPDATE_NAMESRV_CONFIG, body=body)

    # ---- broker side ----
    async def register_broker(self, address: str, identity: BrokerIdentity, body: bytes, *, compressed: bool = False,
                              timeout: float | None = None) -> RegisterBrokerResult:
        """One REGISTER_BROKER with an already encoded RegisterBrokerBody (bodyCrc32 is set here)."""
        response = await self.call(address, RequestCode.REGISTER_BROKER, identity.register_fields(body, compressed),
                                   body, timeout=timeout)
        return RegisterBrokerResult.from_response(response.ext_fields, response.body)

    async def register_broker_oneway(self, address: str, identity: BrokerIdentity, body: bytes, *,
                                     compressed: bool = False) -> None:
        request = self.request(RequestCode.REGISTER_BROKER, identity.register_fields(body, compressed), body)
        await self.invoke_oneway(address, request)

    async def unregister_broker(self, address: str, identity: BrokerIdentity, timeout: float | None = None) -> None:
        await self.call(address, RequestCode.UNREGISTER_BROKER, identity.key_fields(), timeout=timeout)

    async def query_data_version(self, address: str, identity: BrokerIdentity, data_version: DataVersion,
                                 timeout: float | None = None) -> tuple[bool, DataVersion | None]:
        """(changed, the NameServer's copy of the DataVersion or None); also refreshes liveness."""
        response = await self.call(address, RequestCode.QUERY_DATA_VERSION, identity.key_fields(),
                                   data_version.encode(), timeout=timeout)
        changed = (_ext(response, "changed") or "").lower() == "true"
        return changed, DataVersion.decode(response.body) if response.body else None

    async def broker_heartbeat(self, address: str, identity: BrokerIdentity) -> None:
        """Oneway BROKER_HEARTBEAT (5.x): refreshes the broker's liveness, nothing else."""
        fields = identity.key_fields()
        if identity.heartbeat_timeout_ms is not None:
            fields["heartbeatTimeoutMills"] = identity.heartbeat_timeout_ms  # RocketMQ's spelling
        await self.invoke_oneway(address, self.request(RequestCode.BROKER_HEARTBEAT, fields))
