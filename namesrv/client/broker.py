"""The broker's side of the NameServer protocol (RocketMQ's BrokerOuterAPI and registration task, reference 8.1).

`AsyncBrokerOuterAPI` registers a topic table with every NameServer in parallel and returns what
came back within the timeout; `AsyncBrokerService` is the periodic task a broker runs. Both are
what a simulated broker fleet is built from.

Large topic tables are split (RocketMQ fails past 16 MiB, ~60k topics): the table goes out in
chunks of at most `max_body_bytes`, one REGISTER_BROKER per chunk, in order. A NameServer applies
a chunk's topics only when the broker's DataVersion changed, the broker registers first, or the
topic is missing for this broker name — so a chunk after the first, carrying the DataVersion
the first chunk just stored, would skip topics whose config changed. When a NameServer has not
yet stored the broker's current DataVersion, the chunks therefore carry distinct transitional
DataVersions (timestamp - k) and only the last carries the real one: every chunk counts as
changed, and the NameServer ends with the real DataVersion. Once it has it, all chunks carry the
real one and only missing topics are (re)applied, so steady-state registrations stay cheap and
an operator's wipeWritePerm is not undone every period.
"""
from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from namesrv.client.api import BrokerIdentity
from namesrv.client.errors import RemotingError
from namesrv.client.namesrv_client import ServerResult, parse_namesrv_addrs
from namesrv.client.remoting import AsyncRemotingClient
from namesrv.client.sync import LoopThread, SyncFacade, mirror
from namesrv.protocol.route import RegisterBrokerResult
from namesrv.protocol.topic import DataVersion, RegisterBrokerBody, TopicConfig, TopicConfigSerializeWrapper

log = logging.getLogger(__name__)

#: RocketMQ's registerBrokerTimeoutMills (5.x), seconds.
DEFAULT_REGISTER_TIMEOUT = 24.0
#: Largest registration body sent in one request; well under the 16 MiB frame limit.
DEFAULT_MAX_BODY_BYTES = 4 * 1024 * 1024
#: RocketMQ's registerNameServerPeriod default and the bounds it is clamped to, ms.
DEFAULT_REGISTER_PERIOD_MS = 30_000
REGISTER_PERIOD_MIN_MS = 10_000
REGISTER_PERIOD_MAX_MS = 60_000


def clamp_register_period(period_ms: int) -> int:
    """RocketMQ schedules registration every max(10 s, min(period, 60 s))."""
    return max(REGISTER_PERIOD_MIN_MS, min(period_ms, REGISTER_PERIOD_MAX_MS))


class BrokerTopicTable:
    """A broker's topic configs and the DataVersion that changes with them."""

    def __init__(self, topics: Iterable[TopicConfig] = (), data_version: DataVersion | None = None) -> None:
        self._topics = {config.topic_name: config for config in topics}
        self.data_version = data_version or DataVersion(0, _now_ms())

    def __len__(self) -> int:
        return len(self._topics)

    def put(self, *configs: TopicConfig) -> None:
        """Add or replace topics and bump the DataVersion."""
        for config in configs:
            self._topics[config.topic_name] = config
        self.data_version = self.data_version.next_version(_now_ms())

    def remove(self, *topic_names: str) -> None:
        for name in topic_names:
            self._topics.pop(name, None)
        self.data_version = self.data_version.next_version(_now_ms())

    def snapshot(self) -> TopicConfigSerializeWrapper:
        """What a registration carries: a copy of the table with the current DataVersion."""
        return TopicConfigSerializeWrapper(dict(self._topics), self.data_version)


def _now_ms() -> int:
    return int(time.time() * 1000)


@dataclass(slots=True)
class RegistrationPlan:
    """The bodies of one registration, split into chunks when the table is too big for one request."""

    wrapper: TopicConfigSerializeWrapper
    filter_server_list: list[str]
    compressed: bool
    version: int
    max_body_bytes: int
    chunks: list[dict[str, TopicConfig]] = field(default_factory=list)
    _bodies: dict[bool, list[bytes]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        whole = self._encode(self.wrapper)
        if len(whole) <= self.max_body_bytes or len(self.wrapper.topic_config_table) < 2:
            self._bodies[False] = self._bodies[True] = [whole]
            self.chunks = [self.wrapper.topic_config_table]
            return
        names = list(self.wrapper.topic_config_table)
        parts = -(-len(whole) // self.max_body_bytes)
        size = -(-len(names) // parts)
        for start in range(0, len(names), size):
            self._split_until_small(names[start:start + size])

    @property
    def data_version(self) -> DataVersion:
        return self.wrapper.data_version

    def _encode(self, wrapper: TopicConfigSerializeWrapper) -> bytes:
        return RegisterBrokerBody(wrapper, self.filter_server_list).encode(self.compressed, self.version)

    def _chunk_wrapper(self, topics: dict[str, TopicConfig], data_version: DataVersion,
                       last: bool) -> TopicConfigSerializeWrapper:
        mapping = self.wrapper.topic_queue_mapping_info_map if last else {}
        return TopicConfigSerializeWrapper(topics, data_version, self.wrapper.mapping_data_version, mapping,
                                           self.wrapper.topic_queue_mapping_detail_map if last else {})

    def _split_until_small(self, names: list[str]) -> None:
        table = self.wrapper.topic_config_table
        topics = {name: table[name] for name in names}
        body = self._encode(self._chunk_wrapper(topics, self.data_version, False))
        if len(body) > self.max_body_bytes and len(names) > 1:
            half = len(names) // 2
            self._split_until_small(names[:half])
            self._split_until_small(names[half:])
        else:
            self.chunks.append(topics)

    def bodies(self, chained: bool) -> list[bytes]:
        """The request bodies in sending order; `chained` gives every chunk a distinct DataVersion
        (see the module docstring), the last chunk the real one."""
        if chained not in self._bodies:
            real = self.data_version
            count = len(self.chunks)
            bodies = []
            for index, topics in enumerate(self.chunks):
                last = index == count - 1
                version = real if last or not chained else DataVersion(
                    real.counter, real.timestamp - (count - 1 - index), real.state_version)
                bodies.append(self._encode(self._chunk_wrapper(topics, version, last)))
            self._bodies[chained] = bodies
        return self._bodies[chained]


class AsyncBrokerOuterAPI:
    """Registration, data-version queries and unregistration against every configured NameServer."""

    def __init__(self, namesrv_addrs: str | Iterable[str], *, remoting: AsyncRemotingClient | None = None,
                 timeout: float = DEFAULT_REGISTER_TIMEOUT, max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
                 **remoting_options: Any) -> None:
        self.addresses = parse_namesrv_addrs(namesrv_addrs)
        self._owns_remoting = remoting is None
        self.remoting = remoting or AsyncRemotingClient(**remoting_options)
        self.timeout = timeout
        self.max_body_bytes = max_body_bytes
        self._stored_versions: dict[tuple[str, str, str], DataVersion] = {}

    def plan(self, wrapper: TopicConfigSerializeWrapper, filter_server_list: list[str] | None = None,
             compressed: bool = False) -> RegistrationPlan:
        """Encode a registration once (split if needed); reusable across NameServers."""
        return RegistrationPlan(wrapper, list(filter_server_list or []), compressed, self.remoting.version,
                                self.max_body_bytes)

    async def register_broker_all(self, identity: BrokerIdentity, wrapper: TopicConfigSerializeWrapper,
                                  filter_server_list: list[str] | None = None, *, oneway: bool = False,
                                  compressed: bool = False,
                                  timeout: float | None = None) -> dict[str, RegisterBrokerResult]:
        """Register with every NameServer in parallel; the results of those that answered within
        `timeout`, by address, in configured order. Failures are logged; a slow or dead NameServer
        never delays the others past the timeout. Oneway registrations return no results."""
        plan = self.plan(wrapper, filter_server_list, compressed)
        timeout = self.timeout if timeout is None else timeout
        loop = asyncio.get_running_loop()
        tasks = {address: loop.create_task(self._register_one(address, identity, plan, oneway, timeout))
                 for address in self.addresses}
        done, pending = await asyncio.wait(tasks.values(), timeout=timeout)
        for task in pending:
            task.cancel()
        results: dict[str, RegisterBrokerResult] = {}
        for address, task in tasks.items():
            if task not in done:
                log.warning("register %s with %s: no answer within %g s", identity.broker_name, address, timeout)
            elif task.exception() is not None:
                log.warning("register %s with %s failed: %s", identity.broker_name, address, task.exception())
            elif task.result() is not None:
                results[address] = task.result()
        return results

    async def _register_one(self, address: str, identity: BrokerIdentity, plan: RegistrationPlan, oneway: bool,
                            timeout: float) -> RegisterBrokerResult | None:
        key = (address, identity.cluster_name, identity.broker_addr)
        chained = len(plan.chunks) > 1 and self._stored_versions.get(key) != plan.data_version
        result = None
        for body in plan.bodies(chained):
            if oneway:
                await self.remoting.register_broker_oneway(address, identity, body, compressed=plan.compressed)
            else:
                result = await self.remoting.register_broker(address, identity, body, compressed=plan.compressed,
                                                             timeout=timeout)
        if not oneway:
            self._stored_versions[key] = plan.data_version
        return result

    async def need_register(self, identity: BrokerIdentity, data_version: DataVersion,
                            timeout: float | None = None) -> bool:
        """QUERY_DATA_VERSION on every NameServer: True if any says changed, holds another version,
        fails or does not answer in time."""
        timeout = self.timeout if timeout is None else timeout
        loop = asyncio.get_running_loop()
        tasks = [loop.create_task(self.remoting.query_data_version(address, identity, data_version, timeout))
                 for address in self.addresses]
        done, pending = await asyncio.wait(tasks, timeout=timeout)
        for task in pending:
            task.cancel()
        if pending:
            return True
        for task in done:
            if task.exception() is not None:
                return True
            changed, stored = task.result()
            if changed or stored != data_version:
                return True
        return False

    async def unregister_broker_all(self, identity: BrokerIdentity,
                                    timeout: float = 3.0) -> list[ServerResult[None]]:
        """UNREGISTER_BROKER on every NameServer (in parallel, `timeout` each)."""
        async def one(address: str) -> ServerResult[None]:
            self._stored_versions.pop((address, identity.cluster_name, identity.broker_addr), None)
            try:
                await self.remoting.unregister_broker(address, identity, timeout)
                return ServerResult(address)
            except RemotingError as exc:
                log.warning("unregister %s from %s failed: %s", identity.broker_name, address, exc)
                return ServerResult(address, error=exc)
        return list(await asyncio.gather(*(one(address) for address in self.addresses)))

    async def heartbeat_all(self, identity: BrokerIdentity) -> None:
        """Oneway BROKER_HEARTBEAT to every NameServer (RocketMQ's acting-master liveness beat)."""
        async def one(address: str) -> None:
            try:
                await self.remoting.broker_heartbeat(address, identity)
            except RemotingError as exc:
                log.warning("heartbeat of %s to %s failed: %s", identity.broker_name, address, exc)
        await asyncio.gather(*(one(address) for address in self.addresses))

    async def close(self) -> None:
        if self._owns_remoting:
            await self.remoting.close()


class AsyncBrokerService:
    """A broker's registration task: register at start, then every period; unregister on stop.

    `register_period_ms` is clamped to [10 s, 60 s] as in RocketMQ; `period_override_ms` replaces
    the clamped period and exists for tests only. With `force_register=False` a period only
    registers when `need_register` says a NameServer lacks the current DataVersion.
    `heartbeat_interval_ms` adds RocketMQ's lightweight oneway BROKER_HEARTBEAT between registrations.
    A 5.x NameServer refuses a broker's first registration if its table holds exactly one topic
    (the single-topic guard); real brokers always carry several system topics.
    """

    def __init__(self, identity: BrokerIdentity, namesrv_addrs: str | Iterable[str],
                 topics: BrokerTopicTable | None = None, *, register_period_ms: int = DEFAULT_REGISTER_PERIOD_MS,
                 period_override_ms: int | None = None, force_register: bool = True,
                 register_timeout: float = DEFAULT_REGISTER_TIMEOUT, compressed: bool = False,
                 heartbeat_interval_ms: int | None = None, outer_api: AsyncBrokerOuterAPI | None = None,
                 **api_options: Any) -> None:
        self.identity = identity
        self.topics = topics if topics is not None else BrokerTopicTable()
        self.period_ms = period_override_ms if period_override_ms is not None else \
            clamp_register_period(register_period_ms)
        self.force_register = force_register
        self.compressed = compressed
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self._owns_api = outer_api is None
        self.api = outer_api or AsyncBrokerOuterAPI(namesrv_addrs, timeout=register_timeout, **api_options)
        self.master_addr: str | None = None
        self.ha_master_addr: str | None = None
        self.order_topic_config: dict[str, str] = {}
        self.last_results: dict[str, RegisterBrokerResult] = {}
        self.registrations = 0
        self._tasks: list[asyncio.Task[None]] = []
        self._stopped = False

    async def start(self) -> dict[str, RegisterBrokerResult]:
        """Register now (forced), then start the periodic task; returns the first results."""
        results = await self.register(force=True)
        loop = asyncio.get_running_loop()
        self._tasks.append(loop.create_task(self._every(self.period_ms, self.register)))
        if self.heartbeat_interval_ms:
            self._tasks.append(loop.create_task(
                self._every(self.heartbeat_interval_ms, lambda: self.api.heartbeat_all(self.identity))))
        return results

    async def register(self, force: bool | None = None) -> dict[str, RegisterBrokerResult]:
        """One registration round; without force, skipped (empty result) when no NameServer needs it."""
        wrapper = self.topics.snapshot()
        if not (self.force_register if force is None else force) and \
                not await self.api.need_register(self.identity, wrapper.data_version):
            return {}
        results = await self.api.register_broker_all(self.identity, wrapper, compressed=self.compressed)
        self.registrations += 1
        self.last_results = results
        if results:
            first = next(iter(results.values()))
            if self.identity.broker_id != 0:
                self.master_addr = first.master_addr
                self.ha_master_addr = first.ha_server_addr
            self.order_topic_config = dict(first.kv_table.table)
        return results

    async def _every(self, period_ms: int, action: Callable[[], Awaitable[object]]) -> None:
        while True:
            await asyncio.sleep(period_ms / 1000)
            try:
                await action()
            except Exception:  # noqa: BLE001 - a periodic task must outlive any one bad round
                log.exception("periodic task of broker %s failed", self.identity.broker_name)

    async def stop(self, unregister: bool = True) -> None:
        """Stop the periodic tasks, unregister from every NameServer (unless told not to), close.
        Only the first call does anything."""
        if self._stopped:
            return
        self._stopped = True
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()
        if unregister:
            await self.api.unregister_broker_all(self.identity)
        if self._owns_api:
            await self.api.close()


@mirror(AsyncBrokerOuterAPI)
class BrokerOuterAPI(SyncFacade):
    """Blocking twin of AsyncBrokerOuterAPI."""

    def __init__(self, namesrv_addrs: str | Iterable[str], *, runner: LoopThread | None = None,
                 **options: Any) -> None:
        self._attach(AsyncBrokerOuterAPI(namesrv_addrs, **options), runner)


@mirror(AsyncBrokerService)
class BrokerService(SyncFacade):
    """Blocking twin of AsyncBrokerService; its tasks run in the facade's loop thread."""

    _closer = "stop"

    def __init__(self, identity: BrokerIdentity, namesrv_addrs: str | Iterable[str],
                 topics: BrokerTopicTable | None = None, *, runner: LoopThread | None = None, **options: Any) -> None:
        self._attach(AsyncBrokerService(identity, namesrv_addrs, topics, **options), runner)

    @property
    def service(self) -> AsyncBrokerService:
        return self._target
