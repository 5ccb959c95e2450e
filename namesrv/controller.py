"""NamesrvController: builds the server from its configuration and runs its life cycle.

It wires RocketMQ's pieces the way NamesrvController does — route table, KV store (loaded at
start), request processor, executors, the reactor and the scheduled tasks — and shuts them down in
the order that loses no accepted request: stop reading, let the executors finish, flush replies.
The KV store writes itself through on every change, so nothing is left to persist at exit.
"""
from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from namesrv.config import ConfigError, NamesrvConfig
from namesrv.kvconfig import KVConfigManager
from namesrv.memory import heap_trimmer
from namesrv.processor import ROUTE_QUERY_CODES, SUPPORTED_CODES, RequestProcessor
from namesrv.remoting import Outbox, Reactor, RequestDispatcher
from namesrv.routeinfo import RouteInfoManager

log = logging.getLogger(__name__)

#: RocketMQ dumps the KV table to the log every 10 minutes.
KV_LOG_PERIOD_SECONDS = 600.0
#: How often heap pages freed by closed connections go back to the OS (namesrv.memory).
HEAP_TRIM_PERIOD_SECONDS = 10.0
#: How long shutdown waits for accepted requests, then for their replies to leave.
DRAIN_SECONDS = 10.0
FLUSH_SECONDS = 2.0

_AT_LEAST_ONE = ("clientRequestThreadPoolNums", "clientRequestThreadPoolQueueCapacity", "defaultThreadPoolNums",
                 "defaultThreadPoolQueueCapacity", "serverOnewaySemaphoreValue", "serverSelectorThreads",
                 "scanNotActiveBrokerInterval", "maxFrameLength")


def validate(config: NamesrvConfig) -> None:
    """What the config parser cannot know: values the server cannot run with."""
    for key in _AT_LEAST_ONE:
        if config.get(key) < 1:
            raise ConfigError(key, f"must be at least 1, got {config.get(key)}")
    if config.listen_port > 65535:
        raise ConfigError("listenPort", f"must be a TCP port (0-65535), got {config.listen_port}")


class PeriodicTasks:
    """Fixed-rate tasks on one thread (RocketMQ's scheduled executors); a failing run is logged."""

    def __init__(self) -> None:
        self._tasks: list[tuple[str, float, Callable[[], None]]] = []
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name="NSScheduledThread", daemon=True)

    def add(self, name: str, period_seconds: float, task: Callable[[], None]) -> None:
        self._tasks.append((name, period_seconds, task))

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stopped.set()
        if self._thread.ident is not None:
            self._thread.join()

    def _run(self) -> None:
        due = [time.monotonic() + period for _, period, _ in self._tasks]
        while self._tasks:
            index = min(range(len(due)), key=due.__getitem__)
            if self._stopped.wait(max(0.0, due[index] - time.monotonic())):
                return
            name, period, task = self._tasks[index]
            try:
                task()
            except Exception:  # noqa: BLE001 - one failed run must not end the schedule
                log.exception("scheduled task %s failed", name)
            due[index] = max(due[index] + period, time.monotonic())


class NamesrvController:
    """The whole server: `start()`, then `shutdown()` (from any thread but the reactor's)."""

    def __init__(self, config: NamesrvConfig) -> None:
        validate(config)
        self.config = config
        self.routes = RouteInfoManager(config)
        self.kv = KVConfigManager(config.kv_config_path)
        self.processor = RequestProcessor(config, self.routes, self.kv)
        self.outbox = Outbox()
        self.dispatcher = RequestDispatcher(config, self.processor, self.outbox,
                                            route_query_codes=ROUTE_QUERY_CODES, supported_codes=SUPPORTED_CODES,
                                            answer_inline=self.processor.route_query_fast_path.answer)
        self.reactor = Reactor(config, self.dispatcher, self.outbox, self.routes.on_channel_destroy)
        self._tasks = PeriodicTasks()
        self._tasks.add("scanNotActiveBroker", config.scan_not_active_broker_interval / 1000,
                        self.scan_not_active_brokers)
        self._tasks.add("printKVConfig", KV_LOG_PERIOD_SECONDS, self.kv.log_table)
        release_free_heap = heap_trimmer()
        if release_free_heap is not None:
            self._tasks.add("releaseFreeHeap", HEAP_TRIM_PERIOD_SECONDS, release_free_heap)

    def start(self) -> None:
        """Bind (BindError if a port is taken), load the KV file, start serving, log the boot line."""
        self.reactor.bind()
        self.kv.load()
        # As RocketMQ's NettyRemotingServer: a port picked by the kernel becomes the configured one.
        self.config.listen_port = int(self.reactor.tcp_address.rsplit(":", 1)[1])
        if self.reactor.zmq_address is not None:
            self.config.zmq_listen_address = self.reactor.zmq_address
        self.dispatcher.start()
        self.reactor.start()
        self._tasks.start()
        log.info("The Name Server boot success. serializeType=JSON, address %s, zmq %s",
                 self.reactor.tcp_address, self.reactor.zmq_address or "disabled")

    def scan_not_active_brokers(self) -> None:
        """Expire silent brokers and close the connections they registered on (as RocketMQ does)."""
        for removed in self.routes.scan_not_active_brokers():
            if removed.channel is not None:
                self.outbox.close_channel(removed.channel, f"broker {removed.broker_addr} expired")

    def shutdown(self) -> None:
        self.reactor.pause_reading()
        log.info("shutting down: no new requests; finishing the accepted ones (open connections: %s)",
                 ", ".join(f"{count} {transport}" for transport, count in self.reactor.connection_counts().items()))
        self._tasks.stop()
        if not self.dispatcher.shutdown(DRAIN_SECONDS):
            log.warning("requests still running after %.0f s; their replies are lost", DRAIN_SECONDS)
        self.reactor.stop(FLUSH_SECONDS)
        self.outbox.close()
        log.info("The Name Server shut down")
