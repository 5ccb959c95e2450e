"""NamesrvController: builds the server from its configuration and runs its life cycle.

It wires RocketMQ's pieces the way NamesrvController does — route table, KV store (loaded at
start), request processor, executors, the reactor and the scheduled tasks — and shuts them down in
the order that loses no accepted request: stop reading, let the executors finish, flush replies.
The KV store writes itself through on every change, so nothing is left to persist at exit.

As one of serverWorkerProcesses > 1 worker processes (namesrv.workers) it also runs its end of
the write log (namesrv.writelog): write requests, the closes of connections that carried them and
expiries go into the one log of all workers and are applied in its order; it serves the shared
ports only once it is in step with the log.
"""
from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

import msgpack

from namesrv.broker_notifier import BrokerNotifier
from namesrv.channel import Channel
from namesrv.config import ConfigError, NamesrvConfig
from namesrv.descriptors import fit_descriptor_limit
from namesrv.divergence.checker import PeerDivergence
from namesrv.gc_pauses import PAUSES
from namesrv.kvconfig import KVConfigManager
from namesrv.memory import heap_trimmer
from namesrv.processor import WRITE_CODES, RequestProcessor
from namesrv.processor.core import file_error
from namesrv.processor.requests import POOL_OF
from namesrv.metrics import ServerState, exposition, local_families
from namesrv.metrics_peers import STATUS, MetricsGatherer, MetricsPeer
from namesrv.operator_http import OperatorHttp
from namesrv.remoting import BindError, Outbox, Reactor, RequestBudget, RequestDispatcher
from namesrv.remoting.curve import exposed_without_curve
from namesrv.remoting.reactor import TCP_KEYS, ZMQ_KEY, tcp_endpoint
from namesrv.request_stats import RequestStats
from namesrv.routeinfo import RouteInfoManager, now_ms
from namesrv.routeinfo.persist import BootCopy, RouteSnapshots
from namesrv.route_publisher import RoutePublisher
from namesrv.status_page import StatusPage, StatusSources, local_facts
from namesrv.writelog.log import MAX_WORKERS
from namesrv.writelog.ports import listening_fd, zmq_tcp_address
from namesrv.writelog.replication import LogClock, SyncError, WorkerBus, WorkerRole

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
                 "scanNotActiveBrokerInterval", "maxFrameLength", "serverWorkerProcesses", "routeSnapshotIntervalSeconds",
                 "routeSnapshotMaxAgeSeconds")


def validate(config: NamesrvConfig) -> None:
    """What the config parser cannot know: values the server cannot run with."""
    for key in _AT_LEAST_ONE:
        if config.get(key) < 1:
            raise ConfigError(key, f"must be at least 1, got {config.get(key)}")
    if config.listen_port > 65535:
        raise ConfigError("listenPort", f"must be a TCP port (0-65535), got {config.listen_port}")
    workers = config.server_worker_processes
    if workers > MAX_WORKERS:
        raise ConfigError("serverWorkerProcesses", f"must be at most {MAX_WORKERS}, got {workers}")
    if workers > 1 and config.zmq_listen_address:
        zmq_tcp_address(config.zmq_listen_address)  # a tcp endpoint the workers can share, or another transport


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
            except OSError as exc:  # a file that can no longer be written (the snapshot): one line each time
                log.error("scheduled task %s failed: %s", name, file_error(exc))
            except Exception:  # noqa: BLE001 - one failed run must not end the schedule
                log.exception("scheduled task %s failed", name)
            due[index] = max(due[index] + period, time.monotonic())


def selector_threads(config: NamesrvConfig, workers: int) -> int:
    """One process's ZeroMQ I/O threads: serverSelectorThreads is the server's, shared by its worker
    processes (at least one each). More I/O threads than cores only add wake-ups (`python -m
    bench throughput --server-set serverWorkerProcesses=N --server-set serverSelectorThreads=M` shows it as CPU
    microseconds per request)."""
    return max(1, config.server_selector_threads // workers)


class NamesrvController:
    """The whole server: `start()`, then `shutdown()` (from any thread but the reactor's).

    `worker`: this process is one of several worker processes; `on_lost_sync(reason)` is called
    (from the bus thread) if it falls out of step with its siblings and must be restarted.
    """

    def __init__(self, config: NamesrvConfig, worker: WorkerRole | None = None,
                 on_lost_sync: Callable[[str], None] | None = None, boot_copy: BootCopy | None = None) -> None:
        validate(config)
        self._descriptor_note = fit_descriptor_limit(config)
        self.config = config
        self.budget = RequestBudget.from_config(config)
        self.outbox = Outbox(self.budget)
        self.kv = KVConfigManager(config.kv_config_path)
        #: Answers by request code, response code and path, with their latency (namesrv.request_stats).
        self.stats = RequestStats()
        self.bus = None
        if worker is None:
            self.routes = RouteInfoManager(config)
        else:
            if on_lost_sync is None:
                raise ValueError("a worker process needs on_lost_sync")
            clock = LogClock()
            self.routes = RouteInfoManager(config, clock=clock)
            self.bus = WorkerBus(worker, config, self.routes, self.kv, clock, self.outbox, on_lost_sync,
                                 max_pending=config.default_thread_pool_queue_capacity, stats=self.stats,
                                 on_fresh_log=None if boot_copy is None else lambda: self._restore_boot_copy(boot_copy))
        self.processor = RequestProcessor(config, self.routes, self.kv, persist=self.bus is None,
                                          inline_writes=self.bus is None)
        self.stats.adopt(self.processor.inline.tally)
        self.dispatcher = RequestDispatcher(config, self.processor, self.outbox, pool_of=POOL_OF,
                                            forward_write=None if self.bus is None else self.bus.forward,
                                            write_codes=WRITE_CODES, budget=self.budget, stats=self.stats)
        self.reactor = Reactor(config, self.dispatcher, self.outbox, self._channel_closed,
                               selector_threads(config, 1 if worker is None else worker.workers),
                               decode=self.processor.inline.answer_all)
        self.route_publisher = RoutePublisher(self.routes, self.processor.subscriptions, self.processor.route_body,
                                              self.outbox, self.reactor, self.budget,
                                              config.max_connection_output_bytes)
        #: NOTIFY_MIN_BROKER_ID_CHANGE: every worker applies every change, worker 0 alone sends it.
        self.broker_notifier = BrokerNotifier(self.routes) if worker is None or worker.index == 0 else None
        #: The continuous divergence check against peerDivergencePeers (worker 0's: all hold the same tables).
        self.divergence = PeerDivergence(config) \
            if config.peer_divergence_peers and (worker is None or worker.index == 0) else None
        #: The operator's HTTP port: one per server (worker 0's with worker processes, whose `/metrics`
        #: and status page gather their siblings' through `_gatherer`; they answer through `_metrics_peer`).
        self.http = None
        self._gatherer = self._metrics_peer = None
        if config.http_listen_address:
            PAUSES.install()
            families = local_families(ServerState(self.routes, self.kv, self.reactor, self.dispatcher,
                                                  self.processor.subscriptions, self.divergence))
            incarnation = None if worker is None else (worker.index, worker.generation)

            def facts() -> dict[str, object]:
                """What only this process knows, for the status page (namesrv.status_page)."""
                return local_facts(self.routes, self.reactor.security_of, self.processor.subscriptions, incarnation)
            if worker is not None and worker.index == 0:
                self._gatherer = MetricsGatherer(worker, families)
                families = self._gatherer.families
            elif worker is not None:
                self._metrics_peer = MetricsPeer(worker, families, lambda: msgpack.packb(facts()))
            if worker is None or worker.index == 0:
                status = None if not config.status_page_enable else StatusPage(StatusSources(
                    config, self.routes, self.kv, facts, workers=1 if worker is None else worker.workers,
                    siblings=list if self._gatherer is None else lambda: self._gatherer.ask(STATUS),
                    address=lambda: self.reactor.tcp_address,
                    divergence=(lambda: None) if self.divergence is None else self.divergence.status)).reply
                self.http = OperatorHttp(config.http_listen_address, self.readiness,
                                         lambda: config.namesrv_address_list, exposition(families), status)
        self._tasks = PeriodicTasks()
        self._tasks.add("scanNotActiveBroker", config.scan_not_active_broker_interval / 1000,
                        self.scan_not_active_brokers)
        self._tasks.add("printKVConfig", KV_LOG_PERIOD_SECONDS, self.kv.log_table)
        #: Warm restart. With worker processes, every worker restores the supervisor's boot copy at a
        #: fresh start, and worker 0 (whose tables are everyone's) saves.
        self.route_snapshots = None
        if config.route_snapshot_enable:
            self.route_snapshots = RouteSnapshots(config, self.routes)
            if worker is None or worker.index == 0:
                self._tasks.add("saveRouteSnapshot", config.route_snapshot_interval_seconds,
                                self.route_snapshots.save)
        release_free_heap = heap_trimmer()
        if release_free_heap is not None:
            self._tasks.add("releaseFreeHeap", HEAP_TRIM_PERIOD_SECONDS, release_free_heap)

    def start(self) -> None:
        """Bind (BindError if a port is taken), load the KV file, start serving, log the boot line.

        A worker process loads the KV file, gets in step with its siblings (SyncError if it
        cannot), then serves the shared ports; the supervisor logs the boot line.
        """
        if self.http is not None:
            self.http.bind()
        if self.bus is None:
            self.reactor.bind()
            self.kv.load()
            if self.route_snapshots is not None and self.route_snapshots.restore():
                self.processor.serve_restored_routes()
        else:
            self.kv.load()
            self.bus.start()
            try:
                self.bus.wait_synchronised()
            except SyncError:
                self.bus.stop()
                raise
            self._bind_shared_ports()
        # As RocketMQ's NettyRemotingServer: a port picked by the kernel becomes the configured one.
        self.config.listen_port = int(self.reactor.tcp_address.rsplit(":", 1)[1])
        if self.reactor.zmq_address is not None:
            self.config.zmq_listen_address = self.reactor.zmq_address
        self.dispatcher.start()
        self.route_publisher.start()
        if self.broker_notifier is not None:
            self.broker_notifier.start()
        self.reactor.start()
        if self.divergence is not None:
            self.divergence.start()
        self._tasks.start()
        if self.http is not None:
            self.http.start()
        if self._metrics_peer is not None:
            self._metrics_peer.start()
        if self._descriptor_note is not None:  # INFO: the server adapted, and refuses a flood past it
            log.info("%s", self._descriptor_note)
        zmq_address = self.reactor.zmq_address
        if zmq_address is not None and not self.reactor.zmq_authenticated and exposed_without_curve(zmq_address):
            log.warning("the ZeroMQ endpoint %s accepts unauthenticated peers from the network: set "
                        "zmqCurveSecretKeyFile and zmqCurveAllowedClientsDir, or bind it to 127.0.0.1", zmq_address)
        if self.bus is None:
            log.info("The Name Server boot success. serializeType=JSON, address %s, zmq %s, http %s (%s)",
                     self.reactor.tcp_address, self.reactor.zmq_address or "disabled",
                     self.http.bound if self.http is not None else "disabled", self.reactor.tls.describe())
        else:
            zmq_address = self.reactor.zmq_address or ("worker 0's" if self.config.zmq_listen_address else "disabled")
            log.info("worker %d (pid %d, generation %d) serving: address %s (%s), zmq %s", self.bus.role.index,
                     os.getpid(), self.bus.role.generation, self.reactor.tcp_address, self.reactor.tls.describe(),
                     zmq_address)

    def _bind_shared_ports(self) -> None:
        """Listen on the ports the supervisor reserved, beside the siblings (SO_REUSEPORT); an
        ipc/inproc ZeroMQ endpoint cannot be shared: worker 0 serves it."""
        config = self.config
        endpoint, keys = tcp_endpoint(config.bind_address, config.listen_port), TCP_KEYS
        try:
            tcp_fd = listening_fd(config.bind_address, config.listen_port, config.server_socket_backlog,
                                  config.server_socket_snd_buf_size, config.server_socket_rcv_buf_size)
            shared_zmq = zmq_tcp_address(config.zmq_listen_address) if config.zmq_listen_address else None
            endpoint, keys = config.zmq_listen_address, ZMQ_KEY
            zmq_fd = None if shared_zmq is None else listening_fd(
                *shared_zmq, config.server_socket_backlog, config.server_socket_snd_buf_size,
                config.server_socket_rcv_buf_size)
        except OSError as exc:
            raise BindError(endpoint, keys, exc.strerror or str(exc)) from None
        self.reactor.bind(tcp_fd, zmq_fd, bind_zmq=shared_zmq is not None or self.bus.role.index == 0)

    def scan_not_active_brokers(self) -> None:
        """Expire silent brokers and close the connections they registered on (as RocketMQ does);
        a worker process proposes them to the write log instead."""
        if self.bus is not None:
            self.bus.propose_expiry(now_ms())
            return
        for removed in self.routes.scan_not_active_brokers():
            if removed.channel is not None:
                self.outbox.close_channel(removed.channel, f"broker {removed.broker_addr} expired")

    def _restore_boot_copy(self, boot_copy: BootCopy) -> None:
        """A worker's fresh start: the routes of the supervisor's boot copy, stamped with its time."""
        if self.route_snapshots.restore(now=boot_copy.at_ms, path=Path(boot_copy.path)):
            self.processor.serve_restored_routes()

    def _channel_closed(self, channel: Channel) -> None:
        """A connection closed (reactor thread): its subscription ends; the brokers it registered go."""
        self.processor.subscriptions.unsubscribe(channel)
        if self.bus is None:
            self.routes.on_channel_destroy(channel)
        else:
            self.bus.propose_close(channel)

    def readiness(self) -> tuple[bool, dict[str, object]]:
        """What /ready answers: route queries are answered (needWaitForService done), with the table's sizes."""
        ready = self.processor.serving_routes()
        wait = self.config.wait_seconds_for_service
        details: dict[str, object] = {} if ready else {"reason": f"needWaitForService: waiting {wait} s after start"}
        return ready, {**details, **self.routes.sizes()}

    def _go_away(self, wait_seconds: int) -> None:
        """enableShutdownGracefully: keep serving, answering GO_AWAY to clients that understand it, until
        every open connection was told or is an older client's, or `wait_seconds` passed."""
        self.reactor.go_away()
        log.info("shutting down gracefully: answering GO_AWAY to RocketMQ 5.3.2+ clients for up to %d s "
                 "(open connections: %s)", wait_seconds, ", ".join(
                     f"{count} {transport}" for transport, count in self.reactor.connection_counts().items()))
        started = time.monotonic()
        settled = self.reactor.wait_settled(wait_seconds)
        dispatcher = self.dispatcher
        log.info("%s after %.1f s: %d GO_AWAY answers on %d connections; %d connections of older clients served",
                 "every connection told" if settled else "shutdownWaitTimeSeconds passed", time.monotonic() - started,
                 dispatcher.go_away_answers, len(dispatcher.told_go_away), len(dispatcher.served_old))

    def shutdown(self) -> None:
        if self.http is not None:
            self.http.stop()  # probes fail from now on: a load balancer stops sending clients here
        if self._gatherer is not None:
            self._gatherer.close()
        if self._metrics_peer is not None:
            self._metrics_peer.stop()
        if self.divergence is not None:
            self.divergence.stop()
        if self.config.enable_shutdown_gracefully:
            self._go_away(self.config.shutdown_wait_time_seconds)
        self.reactor.pause_reading()
        log.info("shutting down: no new requests; finishing the accepted ones (open connections: %s)",
                 ", ".join(f"{count} {transport}" for transport, count in self.reactor.connection_counts().items()))
        self._tasks.stop()
        if not self.dispatcher.shutdown(DRAIN_SECONDS):
            log.warning("requests still running after %.0f s; their replies are lost", DRAIN_SECONDS)
        if self.bus is not None and not self.bus.drain(DRAIN_SECONDS):
            log.warning("writes still outside the write log after %.0f s; they are not answered", DRAIN_SECONDS)
        self.route_publisher.stop()
        if self.broker_notifier is not None:
            self.broker_notifier.stop()
        self.budget.close()
        self.reactor.stop(FLUSH_SECONDS)
        if self.route_snapshots is not None and (self.bus is None or self.bus.role.index == 0):
            try:
                self.route_snapshots.save(force=True)
            except OSError as exc:
                log.error("the routes were not saved at shutdown (%s): the next start restores an older snapshot, "
                          "if any", exc)
        if self.bus is not None:
            self.bus.stop()
        self.outbox.close()
        if self.bus is None:
            log.info("The Name Server shut down")
        else:
            log.info("worker %d shut down", self.bus.role.index)
