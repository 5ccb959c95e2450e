"""Prometheus metrics for `/metrics` on the operator's HTTP port, read when scraped.

Everything here is a reading of state the server keeps anyway (table sizes, queue depths, the
in-flight budget, counters of refusals), taken at scrape time by a collector, so the request path
pays nothing for it. Process CPU, memory and descriptors come from prometheus-client's process
collector. With worker processes this is worker 0's view.
"""
from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import psutil
from prometheus_client import CollectorRegistry, ProcessCollector, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from namesrv.kvconfig import KVConfigManager
from namesrv.remoting import Reactor, RequestDispatcher
from namesrv.routeinfo import RouteInfoManager

#: What `/metrics` answers with.
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
#: RouteInfoManager.sizes() keys -> (metric name, help).
TABLE_SIZES = {
    "brokers": ("namesrv_brokers", "Registered brokers (addresses, slaves included)."),
    "clusters": ("namesrv_clusters", "Clusters with at least one broker group."),
    "brokerGroups": ("namesrv_broker_groups", "Broker groups (brokerName)."),
    "topics": ("namesrv_topics", "Topics with at least one queue entry."),
    "queueDatas": ("namesrv_queue_datas", "Topic queue entries, one per topic per broker group (maxQueueDatas)."),
}


@dataclass
class ServerState:
    """Where the collector reads from."""

    routes: RouteInfoManager
    kv: KVConfigManager
    reactor: Reactor
    dispatcher: RequestDispatcher


class ServerCollector:
    """The server's own metrics, collected at scrape time."""

    def __init__(self, state: ServerState) -> None:
        self._state = state
        self._process = psutil.Process()

    def collect(self) -> Iterator[Metric]:
        state = self._state
        for key, value in state.routes.sizes().items():
            name, doc = TABLE_SIZES[key]
            yield GaugeMetricFamily(name, doc, value=value)
        routes = state.routes
        yield _by_label(CounterMetricFamily, "namesrv_registrations", "REGISTER_BROKER applied: a topic table read "
                        "(applied) or a liveness refresh of an unchanged one (unchanged).", "outcome",
                        dict(routes.registrations))
        yield _by_label(CounterMetricFamily, "namesrv_broker_removals", "Brokers taken out of the route table, by "
                        "cause.", "cause", {cause.replace(" ", "_"): routes.removals.get(cause, 0)
                                            for cause in ("unregistered", "expired", "channel closed")})
        yield GaugeMetricFamily("namesrv_kv_entries", "KV config entries, all namespaces.",
                                value=state.kv.entry_count())
        yield _by_label(GaugeMetricFamily, "namesrv_connections", "Open connections.", "transport",
                        state.reactor.connection_counts())
        yield _by_label(GaugeMetricFamily, "namesrv_output_backlog_bytes", "Unsent reply bytes queued for peers "
                        "that read slowly (maxConnectionOutputBytes each).", "transport", state.reactor.backlog_bytes())
        yield _by_label(CounterMetricFamily, "namesrv_connections_refused", "Connections turned away for "
                        "maxConnections.", "transport", state.reactor.refused_counts())
        dispatcher = state.dispatcher
        yield _by_label(GaugeMetricFamily, "namesrv_executor_queued", "Requests waiting in each executor's queue.",
                        "executor", {executor.name: executor.queued for executor in dispatcher.executors})
        yield CounterMetricFamily("namesrv_executor_queue_full", "Requests answered SYSTEM_BUSY for a full "
                                  "executor queue.", value=dispatcher.queue_full)
        budget = dispatcher.budget
        yield _by_label(GaugeMetricFamily, "namesrv_in_flight_bytes", "Request bytes held before their answer "
                        "(maxInFlightRequestBytes): incomplete frames, queued requests, replies not yet taken.",
                        "kind", {"incomplete": budget.incomplete, "queued": budget.queued, "replies": budget.replies})
        yield GaugeMetricFamily("namesrv_in_flight_limit_bytes", "maxInFlightRequestBytes in force.",
                                value=budget.limit)
        yield CounterMetricFamily("namesrv_in_flight_refused", "Requests refused for the in-flight budget.",
                                  value=budget.refused)
        yield CounterMetricFamily("namesrv_in_flight_connections_closed", "Connections closed for their incomplete "
                                  "frames past the in-flight budget.", value=budget.evicted)
        yield GaugeMetricFamily("namesrv_threads", "Threads of the process.", value=self._process.num_threads())


def _by_label(kind: Callable[..., Metric], name: str, doc: str, label: str, values: dict[str, int]) -> Metric:
    family = kind(name, doc, labels=[label])
    for key, value in values.items():
        family.add_metric([key], value)
    return family


def exposition(state: ServerState) -> Callable[[], bytes]:
    """A function returning the metrics in Prometheus's text format (the HTTP port calls it)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(ServerCollector(state))
    ProcessCollector(registry=registry)
    return lambda: generate_latest(registry)
