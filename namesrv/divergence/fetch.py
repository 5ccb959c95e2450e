"""Reading NameServers' route tables for a comparison, a cluster and a page of topics at a time.

Only RocketMQ's standard requests are used (GET_BROKER_CLUSTER_INFO, GET_TOPICS_BY_CLUSTER,
GET_ROUTEINFO_BY_TOPIC), so any NameServer can be compared: namesrv, the Java NameServer, another
implementation.

`compare` walks the clusters one by one: every NameServer's topic list of the cluster (RocketMQ
has no paged topic list; a cluster's list is the page), then the routes of the union of those
lists, `page_topics` topics at a time from every NameServer at once (pipelined on one
connection each), at most `routes_per_second` route queries per NameServer. What it holds at
once: one cluster's topic lists and one page of routes per NameServer, and the differences kept
(namesrv.divergence.compare).
"""
from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from typing import Protocol

import orjson

from namesrv.client.errors import MQResponseError, RemotingError
from namesrv.client.remoting import AsyncRemotingClient
from namesrv.divergence.compare import DEFAULT_MAX_ITEMS, Comparison, Route
from namesrv.errors import ProtocolError
from namesrv.protocol.codes import RequestCode, ResponseCode
from namesrv.protocol.route import ClusterInfo, TopicRouteData

#: Route queries in flight per NameServer, and the routes held per NameServer at once.
DEFAULT_PAGE_TOPICS = 256


class Source(Protocol):
    """One NameServer's answers."""

    address: str

    async def cluster_info(self) -> ClusterInfo: ...

    async def topics_of(self, cluster: str) -> list[str]: ...

    async def routes(self, topics: Sequence[str]) -> dict[str, Route]: ...


class RemoteSource:
    """A NameServer over the network, through `client` (its timeout, TLS, codec)."""

    def __init__(self, client: AsyncRemotingClient, address: str) -> None:
        self._client = client
        self.address = address

    async def cluster_info(self) -> ClusterInfo:
        return await self._client.get_broker_cluster_info(self.address)

    async def topics_of(self, cluster: str) -> list[str]:
        return (await self._client.get_topics_by_cluster(self.address, cluster)).topic_list

    async def routes(self, topics: Sequence[str]) -> dict[str, Route]:
        client = self._client
        requests = [client.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic}) for topic in topics]
        answers = await client.invoke_many(self.address, requests)
        routes: dict[str, Route] = {}
        for topic, answer in zip(topics, answers):
            if isinstance(answer, RemotingError):
                raise answer
            if answer.code == ResponseCode.TOPIC_NOT_EXIST:
                routes[topic] = None
            elif answer.code != ResponseCode.SUCCESS or not answer.body:
                raise MQResponseError(answer.code, answer.remark, self.address)
            else:
                routes[topic] = queue_entries(answer.body)
        return routes


def queue_entries(body: bytes) -> dict[str, tuple[int, int, int, int]]:
    """A route body's queue entries by group. Standard JSON (4.9.4 and later answer it to a client
    of that version) is read with orjson; anything else with the protocol's own parser."""
    try:
        datas = orjson.loads(body)["queueDatas"]
        return {q["brokerName"]: (int(q["readQueueNums"]), int(q["writeQueueNums"]), int(q["perm"]),
                                  int(q.get("topicSysFlag", q.get("topicSynFlag", 0)))) for q in datas}
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
        route = TopicRouteData.decode(body)
        return {q.broker_name: (q.read_queue_nums, q.write_queue_nums, q.perm, q.topic_sys_flag)
                for q in route.queue_datas}


async def compare(sources: Sequence[Source], *, page_topics: int = DEFAULT_PAGE_TOPICS,
                  routes_per_second: float | None = None, max_items: int = DEFAULT_MAX_ITEMS,
                  stopped: Callable[[], bool] = lambda: False) -> Comparison:
    """Compare the route tables of `sources` (the first is the reference of the per-peer counts).
    A NameServer that fails a request is left out from then on (`Comparison.unreachable`);
    `stopped()` true ends the walk early (the result is then partial)."""
    comparison = Comparison([source.address for source in sources], max_items)
    live = list(sources)

    async def each(call: Callable[[Source], object]) -> dict[str, object]:
        results = await asyncio.gather(*(call(source) for source in live), return_exceptions=True)
        answers = {}
        for source, result in zip(list(live), results):
            if isinstance(result, (RemotingError, ProtocolError, OSError, asyncio.TimeoutError)):
                comparison.failed(source.address, f"{type(result).__name__}: {result}")
                live.remove(source)
            elif isinstance(result, BaseException):
                raise result
            else:
                answers[source.address] = result
        return answers

    infos = await each(lambda source: source.cluster_info())
    for cluster in comparison.clusters(infos):  # type: ignore[arg-type]
        if stopped() or len(live) < 2:
            break
        lists = await each(lambda source: source.topics_of(cluster))
        topics = sorted(set().union(*lists.values()))  # type: ignore[arg-type]
        del lists
        for start in range(0, len(topics), page_topics):
            if stopped() or len(live) < 2:
                break
            page = topics[start:start + page_topics]
            began = time.monotonic()
            comparison.routes(cluster, await each(lambda source: source.routes(page)))  # type: ignore[arg-type]
            if routes_per_second:
                await asyncio.sleep(max(0.0, len(page) / routes_per_second - (time.monotonic() - began)))
    return comparison
