"""What differs between the route tables of several NameServers (sans-IO).

NameServers share nothing: a broker that failed to register with one of them leaves clients with
different routes depending on which one they ask (apache/rocketmq #4807, rocketmq-operator #227).
`Comparison` is fed what each NameServer answers to RocketMQ's standard requests - its cluster info,
its topic lists per cluster, its routes page by page (namesrv.divergence.fetch) - and keeps what
differs:

- brokers (cluster, group, id, address) some NameServers list and others do not;
- topics some NameServers have a route for and others answer TOPIC_NOT_EXIST, with the groups
  that serve them where they exist;
- queue entries (a group's queues of a topic) that differ between the NameServers holding the
  topic: missing on some, or other queue counts or permissions.

Only a page of routes is held at a time; the differences kept are bounded (`max_items` of each
kind, the rest counted), so comparing a fleet of millions of queue entries holds little more than
one page and one cluster's topic lists.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from namesrv.protocol.route import ClusterInfo

#: A group's queue entry of a topic: (readQueueNums, writeQueueNums, perm, topicSysFlag).
Queue = tuple[int, int, int, int]
#: A topic's route as compared: group -> its entry; None: the NameServer has no route for it.
Route = dict[str, Queue] | None
#: A broker as cluster info lists it.
BrokerKey = tuple[str, str, int, str]

DEFAULT_MAX_ITEMS = 1000
#: Topic names a summary line lists (the rest are counted).
SUMMARY_TOPICS = 10


def queue_json(queue: Queue | None) -> dict[str, int] | None:
    if queue is None:
        return None
    read, write, perm, flag = queue
    return {"readQueueNums": read, "writeQueueNums": write, "perm": perm, "topicSysFlag": flag}


@dataclass
class _Kind:
    """One kind of difference: the first `max_items` kept, all counted, and counted per pair
    (the reference NameServer against each other one)."""

    max_items: int
    items: list[dict[str, Any]] = field(default_factory=list)
    count: int = 0
    against: dict[str, int] = field(default_factory=dict)

    def add(self, item: dict[str, Any], differs_from_reference: Iterable[str]) -> None:
        self.count += 1
        if len(self.items) < self.max_items:
            self.items.append(item)
        for address in differs_from_reference:
            self.against[address] = self.against.get(address, 0) + 1


class Comparison:
    """Feed it each NameServer's answers; `report()` says what differs. `addresses[0]` is the
    reference the per-peer counts (`/metrics`) are taken against."""

    def __init__(self, addresses: Sequence[str], max_items: int = DEFAULT_MAX_ITEMS) -> None:
        self.addresses = list(addresses)
        self.unreachable: dict[str, str] = {}
        self.brokers = _Kind(max_items)
        self.topics = _Kind(max_items)
        self.queues = _Kind(max_items)
        self._topics_seen: set[str] = set()
        #: group -> cluster, as the NameServers' cluster info put it.
        self.group_cluster: dict[str, str] = {}
        self.topics_compared = 0

    @property
    def reachable(self) -> list[str]:
        return [address for address in self.addresses if address not in self.unreachable]

    def failed(self, address: str, error: str) -> None:
        """`address` could not be read: it is left out of the comparison (and said so)."""
        self.unreachable.setdefault(address, error)

    def _pairs(self, present: Mapping[str, object]) -> list[str]:
        """The NameServers whose value differs from the reference's (compared among those read)."""
        reachable = self.reachable
        if not reachable or reachable[0] != self.addresses[0]:
            return []
        reference = present.get(self.addresses[0])
        return [address for address in reachable[1:] if present.get(address) != reference]

    def clusters(self, infos: Mapping[str, ClusterInfo]) -> list[str]:
        """Compare the brokers of every NameServer's cluster info; returns every cluster named."""
        holders: dict[BrokerKey, set[str]] = {}
        clusters: dict[str, None] = {}
        for address, info in infos.items():
            for cluster, groups in info.cluster_addr_table.items():
                clusters[cluster] = None
                for group in groups:
                    self.group_cluster.setdefault(group, cluster)
                    data = info.broker_addr_table.get(group)
                    for broker_id, addr in ({} if data is None else data.broker_addrs).items():
                        holders.setdefault((cluster, group, int(broker_id), addr), set()).add(address)
        reachable = self.reachable
        for key in sorted(holders):
            on = holders[key]
            if len(on) == len(reachable):
                continue
            cluster, group, broker_id, addr = key
            self.brokers.add({"cluster": cluster, "brokerName": group, "brokerId": broker_id, "addr": addr,
                              "on": [a for a in reachable if a in on], "missingOn": [a for a in reachable if a not in on]},
                             self._pairs({a: True for a in on}))
        return sorted(clusters)

    def routes(self, cluster: str, page: Mapping[str, Mapping[str, Route]]) -> None:
        """Compare one page of routes: NameServer -> topic -> route (None: TOPIC_NOT_EXIST). Only
        the entries of `cluster`'s groups are compared, so a topic on several clusters' brokers has
        each entry compared once."""
        reachable = [address for address in self.reachable if address in page]
        topics = sorted({topic for routes in page.values() for topic in routes})
        for topic in topics:
            self.topics_compared += 1
            routes = {address: page[address].get(topic) for address in reachable}
            present = [address for address in reachable if routes[address] is not None]
            if len(present) != len(reachable):
                if topic not in self._topics_seen:  # a topic on several clusters comes once per cluster
                    if len(self._topics_seen) < 4 * self.topics.max_items:
                        self._topics_seen.add(topic)
                    groups = sorted({group for address in present for group in routes[address] or {}})
                    self.topics.add({"topic": topic, "on": present,
                                     "missingOn": [a for a in reachable if a not in present], "servedBy": groups},
                                    self._pairs({a: routes[a] is not None for a in reachable}))
            if len(present) < 2:
                continue
            groups = sorted({group for address in present for group in routes[address] or {}
                             if self.group_cluster.get(group, cluster) == cluster})
            for group in groups:
                entries = {address: (routes[address] or {}).get(group) for address in present}
                if len(set(entries.values())) > 1:
                    self.queues.add({"topic": topic, "brokerName": group,
                                     "byNamesrv": {a: queue_json(q) for a, q in entries.items()}},
                                    self._pairs(entries))

    @property
    def agree(self) -> bool:
        return not (self.unreachable or self.brokers.count or self.topics.count or self.queues.count)

    def report(self, seconds: float | None = None) -> dict[str, Any]:
        """Everything found, as plain data (the CLI's --json, the status page, the checker's last result)."""
        return {
            "namesrvs": self.addresses, "agree": self.agree, "unreachable": dict(self.unreachable),
            "counts": {"brokers": self.brokers.count, "topics": self.topics.count, "queueDatas": self.queues.count},
            "againstReference": {address: {"brokers": self.brokers.against.get(address, 0),
                                           "topics": self.topics.against.get(address, 0),
                                           "queueDatas": self.queues.against.get(address, 0)}
                                 for address in self.addresses[1:]},
            "truncated": any(kind.count > len(kind.items) for kind in (self.brokers, self.topics, self.queues)),
            "brokers": self.brokers.items, "topics": self.topics.items, "queueDatas": self.queues.items,
            "topicsCompared": self.topics_compared, "seconds": seconds, "summary": summary(self),
        }


def summary(comparison: Comparison) -> list[str]:
    """What differs, a line per broker, per group of topics missing alike and per group's entries."""
    lines = [f"{address} could not be read: {error}" for address, error in comparison.unreachable.items()]
    for item in comparison.brokers.items:
        lines.append(f"broker {item['brokerName']}[{item['brokerId']}] {item['addr']} of cluster {item['cluster']} "
                     f"missing on {', '.join(item['missingOn'])} (listed by {', '.join(item['on'])})")
    grouped: dict[tuple, list[str]] = {}
    for item in comparison.topics.items:
        grouped.setdefault((tuple(item["missingOn"]), tuple(item["servedBy"])), []).append(item["topic"])
    for (missing, served), topics in grouped.items():
        by = f" (served by {', '.join(served)} elsewhere)" if served else ""
        lines.append(f"{_topics(topics)} missing on {', '.join(missing)}{by}")
    entries: dict[tuple, list[str]] = {}
    for item in comparison.queues.items:
        missing = tuple(a for a, q in item["byNamesrv"].items() if q is None)
        key = (item["brokerName"], missing) if missing else (item["brokerName"], None)
        entries.setdefault(key, []).append(item["topic"])
    for (group, missing), topics in entries.items():
        if missing:
            lines.append(f"broker {group}'s queues of {_topics(topics)} missing on {', '.join(missing)}")
        else:
            lines.append(f"broker {group}'s queues of {_topics(topics)} differ (queue counts or permissions)")
    for kind, name in ((comparison.brokers, "brokers"), (comparison.topics, "topics"),
                       (comparison.queues, "queue entries")):
        if kind.count > len(kind.items):
            lines.append(f"... and {kind.count - len(kind.items)} more {name} differ (not listed)")
    return lines


def _topics(topics: list[str]) -> str:
    shown = ", ".join(topics[:SUMMARY_TOPICS])
    more = f" and {len(topics) - SUMMARY_TOPICS} more" if len(topics) > SUMMARY_TOPICS else ""
    word = "topic" if len(topics) == 1 else f"{len(topics)} topics"
    return f"{word} {shown}{more}"
