"""Plain records of the route table: live-broker info, removal and min-broker-id reports, a consistent snapshot."""
from __future__ import annotations

import time
from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Any

from namesrv.channel import Channel
from namesrv.protocol.route import BrokerData, QueueData, RegisterBrokerResult
from namesrv.protocol.topic import DataVersion

#: RocketMQ's DEFAULT_BROKER_CHANNEL_EXPIRED_TIME: a broker silent this long (ms) is removed.
DEFAULT_BROKER_CHANNEL_EXPIRED_TIME = 120_000

#: brokerLiveTable / filterServerTable key: (clusterName, brokerAddr), as RocketMQ 5.x keys them.
LiveKey = tuple[str, str]


def now_ms() -> int:
    """Wall-clock milliseconds: the default clock (tests inject their own, so expiry never sleeps)."""
    return time.time_ns() // 1_000_000


@dataclass(slots=True)
class Registrant:
    """Who a REGISTER_BROKER says it is: the header fields the route table keeps (the request's
    `RegistrationHeader` reads them), compared whole when the broker registers again. It travels
    the write log as the list of its fields (namesrv.writelog.log.pack_write). Slots, not a
    NamedTuple: a changed registration reads its fields over a dozen times, and Python 3.11 reads a
    slot with a specialised instruction but a NamedTuple's field through the generic attribute
    lookup; not frozen either: a frozen dataclass sets each field through `object.__setattr__`, and
    worker processes make one from the write log for every registration. Never changed once made.
    One object per header read, so the route table compares it by identity first."""

    cluster_name: str
    broker_addr: str
    broker_name: str
    broker_id: int
    ha_server_addr: str | None = None
    heartbeat_timeout_millis: int | None = None
    #: None for a broker older than 5.x (it sends no such field): RocketMQ's oldVersionBroker.
    enable_acting_master: bool | None = None
    zone_name: str | None = None


@dataclass(slots=True)
class BrokerLiveInfo:
    """What the NameServer knows about one registered broker process.

    The four fields before `refreshed` let a re-registration skip work: the registrant and body
    fingerprint it came with (`registration`, when a fingerprint was given), whether it applied its topic
    table, and how many changes the group's queue entries had seen by then let an identical one
    skip decoding its body (`RouteInfoManager.refresh`); a master's `topic_entries` (its table's
    entries as the fast path digested them, when the route table holds exactly them) let the next
    one read only the topic entries that changed (`decode_registration`'s `previous`).
    """

    last_update_timestamp: int
    heartbeat_timeout_millis: int
    data_version: DataVersion
    channel: Channel | None
    ha_server_addr: str | None
    registration: tuple[Registrant, Hashable] | None = None
    topics_applied: bool = False
    queue_changes_seen: int = 0
    topic_entries: bytes | None = None
    #: (the route table's write epoch, registrant, fingerprint, answer) of the last refresh whose
    #: checks passed: while no writer has run since, the same registrant and fingerprint pass them
    #: again (`RouteInfoManager.refresh`). A memo, not state: never compared or shown.
    refreshed: tuple[int, Registrant, Hashable, RegisterBrokerResult] | None = field(
        default=None, compare=False, repr=False)

    def expired(self, now: int) -> bool:
        return self.last_update_timestamp + self.heartbeat_timeout_millis < now


@dataclass(frozen=True, slots=True)
class RemovedBroker:
    """One broker process taken out of the route table, and why (for the caller's log line).

    `channel` is the connection it had registered on: after an expiry the server closes it,
    as RocketMQ does. `broker_name`/`broker_id` are None when no broker group listed the address.
    """

    reason: str
    cluster_name: str
    broker_addr: str
    broker_name: str | None
    broker_id: int | None
    channel: Channel | None

    def __str__(self) -> str:
        return (f"{self.reason}: broker {self.broker_name}[{self.broker_id}] {self.broker_addr} "
                f"of cluster {self.cluster_name} (channel {self.channel})")


@dataclass(frozen=True, slots=True)
class MinBrokerIdChange:
    """A broker group's lowest broker id changed: NOTIFY_MIN_BROKER_ID_CHANGE's header fields, and
    the brokers to send it to (`notify`, lowest id first).

    A broker that left (`offline_broker_addr`) leaves the group's remaining brokers to be told; a
    broker that joined with a lower id (`ha_broker_addr`: its HA address) is the new minimum, and
    the brokers it outranks are told (itself only when it is alone), as 5.x chooseBrokerAddrsToNotify.
    """

    broker_name: str
    min_broker_id: int
    min_broker_addr: str
    offline_broker_addr: str | None
    ha_broker_addr: str | None
    notify: tuple[str, ...]

    @classmethod
    def of(cls, broker_name: str, broker_addrs: dict[int, str], offline_broker_addr: str | None,
           ha_broker_addr: str | None) -> MinBrokerIdChange:
        """The change for a group now holding `broker_addrs` (not empty)."""
        lowest = min(broker_addrs)
        ids = sorted(broker_addrs)
        if offline_broker_addr is None and len(ids) > 1:
            ids.remove(lowest)
        return cls(broker_name, lowest, broker_addrs[lowest], offline_broker_addr, ha_broker_addr,
                   tuple(broker_addrs[i] for i in ids))

    def ext_fields(self) -> dict[str, str]:
        """NotifyMinBrokerIdChangeRequestHeader's fields (the absent ones left out, as Java writes nulls)."""
        fields = {"minBrokerId": str(self.min_broker_id), "brokerName": self.broker_name,
                  "minBrokerAddr": self.min_broker_addr}
        if self.offline_broker_addr is not None:
            fields["offlineBrokerAddr"] = self.offline_broker_addr
        if self.ha_broker_addr is not None:
            fields["haBrokerAddr"] = self.ha_broker_addr
        return fields


@dataclass(frozen=True, slots=True)
class RouteTables:
    """The route table's six tables: a copy taken under one read lock (`RouteInfoManager.snapshot`), or the
    live tables themselves for a reader holding it (`RouteInfoManager.reading`)."""

    topic_queue_table: dict[str, dict[str, QueueData]]
    broker_addr_table: dict[str, BrokerData]
    cluster_addr_table: dict[str, set[str]]
    broker_live_table: dict[LiveKey, BrokerLiveInfo]
    filter_server_table: dict[LiveKey, list[str]]
    topic_queue_mapping_info_table: dict[str, dict[str, Any]]
