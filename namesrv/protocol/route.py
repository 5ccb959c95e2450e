"""What clients read: routes, cluster info, topic lists, KV tables (reference 3.7-3.12)."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from namesrv.protocol import jsonbody
from namesrv.protocol.codes import PERM_READ, PERM_WRITE
from namesrv.errors import ProtocolError
from namesrv.protocol.jsonbody import (
    as_int,
    dumps,
    expect,
    get_bool,
    get_dict,
    get_int,
    get_list,
    get_str,
    int_key_map,
    string_list,
)

MASTER_ID = 0


@dataclass(frozen=True, slots=True)
class QueueData:
    """One broker group's queues of one topic."""

    broker_name: str
    read_queue_nums: int = 16
    write_queue_nums: int = 16
    perm: int = PERM_READ | PERM_WRITE
    topic_sys_flag: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {"brokerName": self.broker_name, "perm": self.perm, "readQueueNums": self.read_queue_nums,
                "topicSysFlag": self.topic_sys_flag, "writeQueueNums": self.write_queue_nums}

    @classmethod
    def from_dict(cls, obj: Any) -> QueueData:
        what = "QueueData"
        expect(obj, dict, what)
        name = get_str(obj, "brokerName", what)
        if not name:
            raise ProtocolError("QueueData has no brokerName")
        sys_flag = get_int(obj, "topicSysFlag", get_int(obj, "topicSynFlag", 0, what, 32), what, 32)  # pre-4.9 spelling
        return cls(name, get_int(obj, "readQueueNums", 16, what, 32), get_int(obj, "writeQueueNums", 16, what, 32),
                   get_int(obj, "perm", PERM_READ | PERM_WRITE, what, 32), sys_flag)


@dataclass(slots=True)
class BrokerData:
    """A master/slave group: id 0 is the master's address."""

    cluster: str
    broker_name: str
    broker_addrs: dict[int, str] = field(default_factory=dict)
    enable_acting_master: bool = False
    zone_name: str | None = None

    def copy(self) -> BrokerData:
        return BrokerData(self.cluster, self.broker_name, dict(self.broker_addrs), self.enable_acting_master,
                          self.zone_name)

    def encode(self, standard: bool) -> bytes:
        parts = [b'{"brokerAddrs":', int_key_map(self.broker_addrs, standard), b',"brokerName":',
                 dumps(self.broker_name), b',"cluster":', dumps(self.cluster), b',"enableActingMaster":',
                 b"true" if self.enable_acting_master else b"false"]
        if self.zone_name is not None:
            parts += (b',"zoneName":', dumps(self.zone_name))
        parts.append(b"}")
        return b"".join(parts)

    @classmethod
    def from_dict(cls, obj: Any) -> BrokerData:
        what = "BrokerData"
        expect(obj, dict, what)
        addrs: dict[int, str] = {}
        for key, addr in get_dict(obj, "brokerAddrs", what).items():
            broker_id = as_int(key)
            if broker_id is None:
                raise ProtocolError(f"{what}.brokerAddrs key {key!r} is not a broker id")
            addrs[broker_id] = expect(addr, str, what, ".brokerAddrs[", key, "]")
        return cls(get_str(obj, "cluster", what) or "", get_str(obj, "brokerName", what) or "", addrs,
                   get_bool(obj, "enableActingMaster", what), get_str(obj, "zoneName", what))

    def master_addr(self) -> str | None:
        return self.broker_addrs.get(MASTER_ID)


@dataclass(slots=True)
class TopicRouteData:
    """GET_ROUTEINFO_BY_TOPIC's answer."""

    queue_datas: list[QueueData] = field(default_factory=list)
    broker_datas: list[BrokerData] = field(default_factory=list)
    filter_server_table: dict[str, list[str]] = field(default_factory=dict)
    order_topic_conf: str | None = None
    topic_queue_mapping_by_broker: dict[str, Any] | None = None

    def encode(self, standard: bool = True) -> bytes:
        """Legacy flavour (bare broker-id keys) for old/Go/C++ clients, standard JSON otherwise."""
        filters = {addr: servers for addr, servers in sorted(self.filter_server_table.items()) if servers is not None}
        parts = [b'{"brokerDatas":[', b",".join(b.encode(standard) for b in self.broker_datas),
                 b'],"filterServerTable":', dumps(filters)]
        if self.order_topic_conf is not None:
            parts += (b',"orderTopicConf":', dumps(self.order_topic_conf))
        parts += (b',"queueDatas":', dumps([q.to_dict() for q in self.queue_datas]))
        if self.topic_queue_mapping_by_broker is not None:
            mapping = self.topic_queue_mapping_by_broker
            parts += (b',"topicQueueMappingByBroker":', dumps(jsonbody.sorted_maps(mapping) if standard else mapping))
        parts.append(b"}")
        text = b"".join(parts)
        return jsonbody.browser_compatible(text) if standard else text

    @classmethod
    def decode(cls, data: bytes) -> TopicRouteData:
        return cls.from_dict(jsonbody.loads(data, "TopicRouteData"))

    @classmethod
    def from_dict(cls, obj: Any) -> TopicRouteData:
        what = "TopicRouteData"
        obj = expect(obj, dict, what)
        filters = {addr: string_list(servers, f"{what}.filterServerTable[{addr}]")
                   for addr, servers in get_dict(obj, "filterServerTable", what).items() if servers is not None}
        mapping = obj.get("topicQueueMappingByBroker")
        return cls([QueueData.from_dict(q) for q in get_list(obj, "queueDatas", what)],
                   [BrokerData.from_dict(b) for b in get_list(obj, "brokerDatas", what)],
                   filters, get_str(obj, "orderTopicConf", what),
                   None if mapping is None else expect(mapping, dict, what, ".topicQueueMappingByBroker"))


@dataclass(slots=True)
class ClusterInfo:
    """GET_BROKER_CLUSTER_INFO's answer; always legacy JSON, as Java sends it to every client."""

    broker_addr_table: dict[str, BrokerData] = field(default_factory=dict)
    cluster_addr_table: dict[str, list[str]] = field(default_factory=dict)

    def encode(self) -> bytes:
        brokers = b",".join(dumps(name) + b":" + data.encode(False) for name, data in self.broker_addr_table.items())
        clusters = dumps({name: sorted(names) for name, names in self.cluster_addr_table.items()})
        return b'{"brokerAddrTable":{' + brokers + b'},"clusterAddrTable":' + clusters + b"}"

    @classmethod
    def decode(cls, data: bytes) -> ClusterInfo:
        what = "ClusterInfo"
        obj = expect(jsonbody.loads(data, what), dict, what)
        brokers = {name: BrokerData.from_dict(b) for name, b in get_dict(obj, "brokerAddrTable", what).items()}
        clusters = {name: string_list(names, f"{what}.clusterAddrTable[{name}]")
                    for name, names in get_dict(obj, "clusterAddrTable", what).items()}
        return cls(brokers, clusters)


@dataclass(slots=True)
class TopicList:
    """A set of topic names; `broker_addr` only for the system-topic list."""

    topic_list: list[str] = field(default_factory=list)
    broker_addr: str | None = None

    def encode(self) -> bytes:
        out: dict[str, Any] = {}
        if self.broker_addr is not None:
            out["brokerAddr"] = self.broker_addr
        out["topicList"] = list(self.topic_list)
        return dumps(out)

    @classmethod
    def decode(cls, data: bytes) -> TopicList:
        obj = expect(jsonbody.loads(data, "TopicList"), dict, "TopicList")
        return cls(string_list(get_list(obj, "topicList", "TopicList"), "TopicList.topicList"),
                   get_str(obj, "brokerAddr", "TopicList"))


@dataclass(slots=True)
class KVTable:
    """A namespace's key/value pairs."""

    table: dict[str, str] = field(default_factory=dict)

    def encode(self) -> bytes:
        return dumps({"table": {k: v for k, v in self.table.items() if v is not None}})

    @classmethod
    def decode(cls, data: bytes) -> KVTable:
        obj = expect(jsonbody.loads(data, "KVTable"), dict, "KVTable")
        return cls({str(k): expect(v, str, "KVTable.table[", k, "]") for k, v in get_dict(obj, "table", "KVTable").items()
                    if v is not None})


@dataclass(slots=True)
class BrokerMemberGroup:
    """GET_BROKER_MEMBER_GROUP's answer (legacy JSON)."""

    cluster: str
    broker_name: str
    broker_addrs: dict[int, str] = field(default_factory=dict)

    def encode(self) -> bytes:
        return (b'{"brokerMemberGroup":{"brokerAddrs":' + int_key_map(self.broker_addrs, False) + b',"brokerName":'
                + dumps(self.broker_name) + b',"cluster":' + dumps(self.cluster) + b"}}")

    @classmethod
    def decode(cls, data: bytes) -> BrokerMemberGroup:
        obj = expect(jsonbody.loads(data, "BrokerMemberGroup"), dict, "BrokerMemberGroup")
        group = BrokerData.from_dict(get_dict(obj, "brokerMemberGroup", "BrokerMemberGroup"))
        return cls(group.cluster, group.broker_name, group.broker_addrs)


@dataclass(frozen=True, slots=True)
class RegisterBrokerResult:
    """What a broker learns from REGISTER_BROKER: its master (for a slave) and the order-topic KV table.
    Immutable: the route table answers every registration that learns no master with one instance."""

    ha_server_addr: str | None = None
    master_addr: str | None = None
    kv_table: KVTable = field(default_factory=KVTable)

    @classmethod
    def from_response(cls, ext_fields: Mapping[str, str] | None, body: bytes | None) -> RegisterBrokerResult:
        ext = ext_fields or {}
        return cls(ext.get("haServerAddr"), ext.get("masterAddr"), KVTable.decode(body) if body else KVTable())
