"""What a producer or an operator needs from a set of NameServers (RocketMQ client behaviour, reference 8.2).

Reads go to one NameServer, picked round-robin from a random start and kept while it answers;
a connect failure or timeout moves to the next one and retries there. Writes (KV, permissions,
topic deletion, config) go to every NameServer, as mqadmin does, and report per server.
Routes are cached and refreshed every poll interval (30 s, like `pollNameServerInterval`).

With `push` (the default), the client also subscribes to the changes of its cached routes on the
connection it reads from (namesrv's SUBSCRIBE_ROUTE_CHANGES): a change reaches the cache in
milliseconds, and a version that skips one makes it fetch that route again. A NameServer without
push (RocketMQ's never answers an unknown code: the subscription times out after
SUBSCRIBE_TIMEOUT) is remembered as such and served by polling alone; so is one that drops the
subscription for a slow reader, until the next poll subscribes again.
"""
from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any, Generic, TypeVar

from namesrv.client.api import order_topic_counts
from namesrv.client.errors import MQResponseError, RemotingConnectError, RemotingError, RemotingTimeoutError
from namesrv.client.remoting import AsyncRemotingClient
from namesrv.client.sync import LoopThread, SyncFacade, mirror
from namesrv.errors import ProtocolError
from namesrv.protocol import jsonbody
from namesrv.protocol.codes import PERM_WRITE, RequestCode, ResponseCode
from namesrv.protocol.command import RemotingCommand
from namesrv.protocol.route import ClusterInfo, TopicList, TopicRouteData

log = logging.getLogger(__name__)

T = TypeVar("T")

#: The topic whose route producers borrow for topics brokers will auto-create (AUTO_CREATE_TOPIC_KEY_TOPIC).
AUTO_CREATE_TOPIC_KEY_TOPIC = "TBW102"
#: Java's DefaultMQProducer.defaultTopicQueueNums.
DEFAULT_TOPIC_QUEUE_NUMS = 4
#: Java's ClientConfig.pollNameServerInterval, seconds.
DEFAULT_POLL_INTERVAL = 30.0
#: How long a subscription may take before the NameServer counts as one without push, seconds.
SUBSCRIBE_TIMEOUT = 3.0


def parse_namesrv_addrs(value: str | Iterable[str]) -> list[str]:
    """Split "a:1;b:2" (or take a list) into ["a:1", "b:2"], de-duplicated, order kept; empty is an error."""
    items = value.split(";") if isinstance(value, str) else list(value)
    addresses = list(dict.fromkeys(item.strip() for item in items if item and item.strip()))
    if not addresses:
        raise ValueError("no NameServer address given (expected host:port[;host:port...])")
    return addresses


@dataclass(frozen=True, slots=True)
class ServerResult(Generic[T]):
    """The outcome of a write on one NameServer: its value, or the error it failed with."""

    address: str
    value: T | None = None
    error: RemotingError | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


@dataclass(frozen=True, slots=True)
class MessageQueue:
    topic: str
    broker_name: str
    queue_id: int


def route_from_default_topic(default_route: TopicRouteData,
                             queue_nums: int = DEFAULT_TOPIC_QUEUE_NUMS) -> TopicRouteData:
    """The route a producer uses for a topic the broker will auto-create: TBW102's, each broker's queue
    count cut to min(queue_nums, readQueueNums)."""
    queue_datas = []
    for queue_data in default_route.queue_datas:
        nums = min(queue_nums, queue_data.read_queue_nums)
        queue_datas.append(replace(queue_data, read_queue_nums=nums, write_queue_nums=nums))
    return TopicRouteData(queue_datas, [broker.copy() for broker in default_route.broker_datas],
                          dict(default_route.filter_server_table))


def publish_queues(topic: str, route: TopicRouteData) -> list[MessageQueue]:
    """The queues a producer may send to: from orderTopicConf when set, else every writable queue of
    brokers that have a master, brokers in name order."""
    if route.order_topic_conf:
        return [MessageQueue(topic, broker_name, i) for broker_name, count in order_topic_counts(route.order_topic_conf)
                if broker_name for i in range(count)]
    with_master = {broker.broker_name for broker in route.broker_datas if broker.master_addr()}
    queues = []
    for queue_data in sorted(route.queue_datas, key=lambda q: q.broker_name):
        if queue_data.perm & PERM_WRITE and queue_data.broker_name in with_master:
            queues.extend(MessageQueue(topic, queue_data.broker_name, i) for i in range(queue_data.write_queue_nums))
    return queues


@dataclass(slots=True)
class CachedRoute:
    route: TopicRouteData
    from_default_topic: bool


class AsyncNamesrvClient:
    """A NameServer client over a list of addresses; see the module docstring for the failover rules."""

    def __init__(self, namesrv_addrs: str | Iterable[str], *, remoting: AsyncRemotingClient | None = None,
                 poll_interval: float = DEFAULT_POLL_INTERVAL, push: bool = True,
                 default_topic_queue_nums: int = DEFAULT_TOPIC_QUEUE_NUMS, **remoting_options: Any) -> None:
        self.addresses = parse_namesrv_addrs(namesrv_addrs)
        self._owns_remoting = remoting is None
        self.remoting = remoting or AsyncRemotingClient(**remoting_options)
        self.poll_interval = poll_interval
        self.default_topic_queue_nums = default_topic_queue_nums
        self._index = random.randrange(len(self.addresses))
        self._routes: dict[str, CachedRoute] = {}
        self._poller: asyncio.Task[None] | None = None
        self.push = push
        #: NameServers that do not push (no answer to, or a refusal of, a subscription).
        self.without_push: set[str] = set()
        #: The connection the subscription lives on, and the topics subscribed there.
        self._push_connection: object | None = None
        self._subscribed: set[str] = set()
        #: topic -> the version of its route last pushed or answered.
        self._versions: dict[str, int] = {}
        #: Route changes applied from pushes, since start.
        self.pushes_applied = 0

    @property
    def current_address(self) -> str:
        """The NameServer reads go to now."""
        return self.addresses[self._index]

    async def _on_any(self, operation: Callable[[str], Awaitable[T]]) -> T:
        """Run on the current NameServer; on connect failure or timeout switch to the next (each tried once)."""
        error: RemotingError | None = None
        for _ in range(len(self.addresses)):
            address = self.addresses[self._index]
            try:
                return await operation(address)
            except (RemotingConnectError, RemotingTimeoutError) as exc:
                error = exc
                self._index = (self._index + 1) % len(self.addresses)
                log.info("NameServer %s failed (%s); switching to %s", address, exc, self.current_address)
        assert error is not None
        raise error

    async def _on_all(self, operation: Callable[[str], Awaitable[T]]) -> list[ServerResult[T]]:
        async def one(address: str) -> ServerResult[T]:
            try:
                return ServerResult(address, await operation(address))
            except RemotingError as exc:
                return ServerResult(address, error=exc)
        return list(await asyncio.gather(*(one(address) for address in self.addresses)))

    # ---- reads (one NameServer) ----
    async def fetch_topic_route(self, topic: str) -> TopicRouteData:
        """The topic's own route, no fallback; MQResponseError(17) if it has none."""
        return await self._on_any(lambda address: self.remoting.get_route_info_by_topic(address, topic))

    async def get_topic_route(self, topic: str, *, use_default_topic: bool = True) -> TopicRouteData:
        """The topic's route; for an unknown topic, TBW102's route cut to the default queue count
        (a producer sends there and the broker auto-creates the topic)."""
        return (await self._resolve_route(topic, use_default_topic)).route

    async def _resolve_route(self, topic: str, use_default_topic: bool) -> CachedRoute:
        try:
            return CachedRoute(await self.fetch_topic_route(topic), False)
        except MQResponseError as exc:
            if exc.code != ResponseCode.TOPIC_NOT_EXIST or not use_default_topic \
                    or topic == AUTO_CREATE_TOPIC_KEY_TOPIC:
                raise
        default = await self.fetch_topic_route(AUTO_CREATE_TOPIC_KEY_TOPIC)
        return CachedRoute(route_from_default_topic(default, self.default_topic_queue_nums), True)

    async def get_cluster_info(self) -> ClusterInfo:
        return await self._on_any(self.remoting.get_broker_cluster_info)

    async def get_all_topic_list(self) -> list[str]:
        return (await self._on_any(self.remoting.get_all_topic_list)).topic_list

    async def get_topics_by_cluster(self, cluster: str) -> list[str]:
        return (await self._on_any(lambda address: self.remoting.get_topics_by_cluster(address, cluster))).topic_list

    async def get_system_topic_list(self) -> TopicList:
        return await self._on_any(self.remoting.get_system_topic_list)

    async def get_kv_config(self, namespace: str, key: str) -> str | None:
        return await self._on_any(lambda address: self.remoting.get_kv_config(address, namespace, key))

    async def get_kv_list_by_namespace(self, namespace: str) -> dict[str, str]:
        return await self._on_any(lambda address: self.remoting.get_kv_list_by_namespace(address, namespace))

    # ---- per NameServer ----
    async def get_namesrv_configs(self) -> list[ServerResult[dict[str, str]]]:
        return await self._on_all(self.remoting.get_namesrv_config)

    async def put_kv_config(self, namespace: str, key: str, value: str) -> list[ServerResult[None]]:
        return await self._on_all(lambda address: self.remoting.put_kv_config(address, namespace, key, value))

    async def delete_kv_config(self, namespace: str, key: str) -> list[ServerResult[None]]:
        return await self._on_all(lambda address: self.remoting.delete_kv_config(address, namespace, key))

    async def wipe_write_perm_of_broker(self, broker_name: str) -> list[ServerResult[int]]:
        return await self._on_all(lambda address: self.remoting.wipe_write_perm_of_broker(address, broker_name))

    async def add_write_perm_of_broker(self, broker_name: str) -> list[ServerResult[int]]:
        return await self._on_all(lambda address: self.remoting.add_write_perm_of_broker(address, broker_name))

    async def delete_topic(self, topic: str, cluster: str | None = None) -> list[ServerResult[None]]:
        return await self._on_all(lambda address: self.remoting.delete_topic_in_namesrv(address, topic, cluster))

    async def explain_route(self, topic: str, timeout: float | None = None) -> list[ServerResult[dict[str, Any]]]:
        """Each NameServer's explanation of the topic's route (namesrv only: RocketMQ's NameServers do
        not know EXPLAIN_ROUTE; 4.9.x never answers it, hence `timeout`)."""
        return await self._on_all(lambda address: self.remoting.explain_route(address, topic, timeout))

    async def topic_routes(self, topic: str) -> list[ServerResult[TopicRouteData]]:
        """The topic's route on each NameServer (MQResponseError 17 where it has none)."""
        return await self._on_all(lambda address: self.remoting.get_route_info_by_topic(address, topic))

    async def update_namesrv_config(self, properties: Mapping[str, str]) -> list[ServerResult[None]]:
        return await self._on_all(lambda address: self.remoting.update_namesrv_config(address, properties))

    # ---- route cache ----
    async def route(self, topic: str) -> TopicRouteData:
        """The cached route (TBW102-based for a topic not created yet), fetched on first use."""
        cached = self._routes.get(topic)
        if cached is None:
            cached = self._routes[topic] = await self._resolve_route(topic, True)
            await self._subscribe()
        return cached.route

    @property
    def push_active(self) -> bool:
        """Route changes of the cached topics are being pushed to this client."""
        return self._push_connection is not None and not getattr(self._push_connection, "closed", True)

    async def _subscribe(self) -> None:
        """Subscribe to the cached topics not yet subscribed on the current connection (all of them on a
        new connection); best effort: a NameServer without push is left to polling."""
        address = self.current_address
        if not self.push or address in self.without_push or not self._routes:
            return
        try:
            connection = await self.remoting.connection(address)
            if connection is not self._push_connection:
                self._push_connection, self._subscribed = None, set()
            topics = set(self._routes) - self._subscribed
            if not topics:
                return
            routes = await self.remoting.subscribe_route_changes(address, sorted(topics), self._on_push,
                                                                 timeout=SUBSCRIBE_TIMEOUT)
        except (RemotingTimeoutError, MQResponseError) as exc:
            self.without_push.add(address)
            log.info("NameServer %s does not push route changes (%s): polling every %.0f s", address, exc,
                     self.poll_interval)
            return
        except RemotingError as exc:
            log.info("route-change subscription at %s failed (%s): polling until the next try", address, exc)
            return
        self._push_connection = connection
        self._subscribed |= topics
        for topic, (version, _route) in routes.items():
            self._versions[topic] = version

    def _on_push(self, command: RemotingCommand) -> None:
        """A ROUTE_CHANGED from the NameServer (on the event loop)."""
        if command.code != RequestCode.ROUTE_CHANGED:
            return
        if "dropped" in (command.ext_fields or {}):
            log.warning("NameServer %s stopped pushing: %s", self.current_address, command.ext_fields["dropped"])
            self._push_connection, self._subscribed = None, set()
            return
        try:
            changes = jsonbody.loads(command.body or b"{}", "RouteChanged").get("changes", [])
            for change in changes:
                self._apply_push(change["topic"], change["version"], change["route"])
        except (ProtocolError, KeyError, TypeError, AttributeError) as exc:
            log.warning("ignoring a malformed route change from %s: %s", self.current_address, exc)

    def _apply_push(self, topic: str, version: int, route: object) -> None:
        if topic not in self._routes:
            return
        known = self._versions.get(topic)
        self._versions[topic] = version
        if known is not None and version != known + 1:  # missed one: the route itself is fetched again
            asyncio.get_running_loop().create_task(self._refetch(topic))
            return
        if route is None:
            del self._routes[topic]  # next use resolves it again (TBW102 for a producer)
            self._subscribed.discard(topic)
        else:
            self._routes[topic] = CachedRoute(TopicRouteData.from_dict(route), False)
        self.pushes_applied += 1

    async def _refetch(self, topic: str) -> None:
        """Fetch a cached route again (a poll, or a missed push); a failure keeps the old route."""
        try:
            self._routes[topic] = await self._resolve_route(topic, True)
        except RemotingError as exc:
            log.warning("route refresh of %s failed, keeping the old route: %s", topic, exc)

    async def publish_queues(self, topic: str) -> list[MessageQueue]:
        return publish_queues(topic, await self.route(topic))

    def is_default_route(self, topic: str) -> bool:
        """True while the cached route of `topic` is borrowed from TBW102."""
        cached = self._routes.get(topic)
        return cached is not None and cached.from_default_topic

    async def refresh_routes(self) -> None:
        """Re-fetch every cached route; a failure keeps the old route (as RocketMQ clients do)."""
        for topic in list(self._routes):
            await self._refetch(topic)
        await self._subscribe()

    async def start(self) -> None:
        """Start refreshing cached routes every poll interval."""
        if self._poller is None:
            self._poller = asyncio.get_running_loop().create_task(self._poll())

    async def _poll(self) -> None:
        while True:
            await asyncio.sleep(self.poll_interval)
            await self.refresh_routes()

    async def close(self) -> None:
        if self._poller is not None:
            self._poller.cancel()
            self._poller = None
        if self._owns_remoting:
            await self.remoting.close()


@mirror(AsyncNamesrvClient)
class NamesrvClient(SyncFacade):
    """Blocking twin of AsyncNamesrvClient (same methods)."""

    def __init__(self, namesrv_addrs: str | Iterable[str], *, runner: LoopThread | None = None,
                 **options: Any) -> None:
        self._attach(AsyncNamesrvClient(namesrv_addrs, **options), runner)

    @property
    def addresses(self) -> list[str]:
        return self._target.addresses

    @property
    def current_address(self) -> str:
        return self._target.current_address
