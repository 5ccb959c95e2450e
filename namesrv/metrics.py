"""Prometheus metrics for `/metrics` on the operator's HTTP port, read when scraped.

Everything here is a reading of state the server keeps anyway (table sizes, queue depths, the
in-flight budget, counters of refusals, the per-thread answer tallies of namesrv.request_stats),
taken at scrape time by a collector, so the request path pays only for its tallies. Process CPU,
memory and descriptors come from prometheus-client's process collector.

With worker processes, worker 0 serves the port and reports one view of the whole server: its own
families merged with each sibling's (namesrv.metrics_peers), sample by sample. Counters,
histograms and per-process gauges are summed (requests, connections, CPU seconds, RSS, threads);
what every worker holds alike because it applies the same write log (the route table's sizes, KV
entries, registrations and removals) is worker 0's; the earliest start time is the process start.
A worker restarted starts its counters from zero, which Prometheus reads as a counter reset.
"""
from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from itertools import accumulate

import msgpack
import psutil
from prometheus_client import CollectorRegistry, ProcessCollector, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.utils import floatToGoString

from namesrv.divergence.checker import PeerDivergence, divergence_families
from namesrv.gc_pauses import PAUSES
from namesrv.kvconfig import KVConfigManager
from namesrv.processor.route_push import RouteSubscriptions
from namesrv.remoting import Reactor, RequestDispatcher
from namesrv.request_stats import LATENCY_BOUNDS, request_name, response_name
from namesrv.routeinfo import RouteInfoManager

#: The histogram's `le` labels, +Inf last.
LE_LABELS = tuple(map(floatToGoString, (*LATENCY_BOUNDS, float("inf"))))
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
    subscriptions: RouteSubscriptions
    #: The continuous divergence check, if this process runs it.
    divergence: PeerDivergence | None = None


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
        subscriptions = state.subscriptions
        yield GaugeMetricFamily("namesrv_route_subscribers", "Connections subscribed to route changes.",
                                value=len(subscriptions))
        yield CounterMetricFamily("namesrv_route_pushes", "ROUTE_CHANGED commands pushed.", value=subscriptions.pushed)
        rounds = HistogramMetricFamily("namesrv_route_push_round_seconds", "Rounds of route-change pushes, from "
                                       "taking the route table's changes to the last push posted for sending: the "
                                       "server's part of a change's propagation.")
        rounds.add_metric([], list(zip(LE_LABELS, accumulate(subscriptions.round_buckets[:-1]))),
                          subscriptions.round_buckets[-1])
        yield rounds
        yield CounterMetricFamily("namesrv_route_subscribers_dropped", "Subscribers dropped to polling for not "
                                  "reading their pushes.", value=subscriptions.dropped)
        dispatcher = state.dispatcher
        yield from _request_families(dispatcher)
        cut = CounterMetricFamily("namesrv_connections_cut", "Connections closed from the server's side, by "
                                  "cause (namesrv.remoting.endpoints.CUT_CAUSES).", labels=["transport", "cause"])
        for (transport, cause), count in state.reactor.cut_counts().items():
            cut.add_metric([transport, cause], count)
        yield cut
        yield _by_label(CounterMetricFamily, "namesrv_tls_handshakes", "TLS handshakes on the RocketMQ port, by "
                        "result (done, failed, timed_out).", "result", state.reactor.tls_handshakes())
        tls = state.reactor.tls
        yield CounterMetricFamily("namesrv_tls_context_loads", "TLS server contexts built: 1 at start, one more per "
                                  "certificate reload (0: tlsMode disabled).", value=0 if tls is None else tls.loads)
        yield _by_label(GaugeMetricFamily, "namesrv_executor_queued", "Requests waiting in each executor's queue.",
                        "executor", {executor.name: executor.queued for executor in dispatcher.executors})
        yield CounterMetricFamily("namesrv_executor_queue_full", "Requests answered SYSTEM_BUSY for a full "
                                  "executor queue.", value=dispatcher.queue_full)
        budget = dispatcher.budget
        yield _by_label(GaugeMetricFamily, "namesrv_in_flight_bytes", "Request bytes held before their answer "
                        "(maxInFlightRequestBytes): incomplete frames, queued requests, replies not yet taken, route-change "
                        "pushes subscribers hold unsent.",
                        "kind", {"incomplete": budget.incomplete, "queued": budget.queued, "replies": budget.replies,
                                 "pushes": budget.pushes})
        yield GaugeMetricFamily("namesrv_in_flight_limit_bytes", "maxInFlightRequestBytes in force.",
                                value=budget.limit)
        yield CounterMetricFamily("namesrv_in_flight_refused", "Requests refused for the in-flight budget.",
                                  value=budget.refused)
        yield CounterMetricFamily("namesrv_in_flight_connections_closed", "Connections closed for their incomplete "
                                  "frames past the in-flight budget.", value=budget.evicted)
        yield GaugeMetricFamily("namesrv_threads", "Threads of the process.", value=self._process.num_threads())
        pauses = HistogramMetricFamily("namesrv_gc_pause_seconds", "Pauses of Python's cyclic garbage collector "
                                       "(every thread of the process waits), by generation.", labels=["generation"])
        for generation, buckets in PAUSES.snapshot().items():
            pauses.add_metric([str(generation)], list(zip(LE_LABELS, accumulate(buckets[:-1]))), buckets[-1])
        yield pauses
        yield from divergence_families(state.divergence)


def _request_families(dispatcher: RequestDispatcher) -> Iterator[Metric]:
    """Answers by request, response code and path; latency by request (namesrv.request_stats)."""
    totals = dispatcher.stats.totals()
    answers = CounterMetricFamily("namesrv_requests", "Requests answered (response NONE: oneway), by request code, "
                                  "response code and path: fast_path (the reactor, from the frame), executor, "
                                  "write_log (worker processes: once applied), refused (SYSTEM_BUSY before any "
                                  "executor).", labels=["request", "response", "path"])
    for (code, response, path), count in sorted(totals.answers.items()):
        answers.add_metric([request_name(code), response_name(response), path], count)
    yield answers
    latency = HistogramMetricFamily("namesrv_request_duration_seconds", "From the reactor taking a request's frame "
                                    "off its socket to its answer being queued for sending, by request code.",
                                    labels=["request"])
    for code, buckets in sorted(totals.latency.items()):
        latency.add_metric([request_name(code)], list(zip(LE_LABELS, accumulate(buckets[:-1]))), buckets[-1])
    yield latency


def _by_label(kind: Callable[..., Metric], name: str, doc: str, label: str, values: dict[str, int]) -> Metric:
    family = kind(name, doc, labels=[label])
    for key, value in values.items():
        family.add_metric([key], value)
    return family


#: Families every worker process holds alike (it applies the same write log): worker 0's is reported.
REPLICATED = frozenset({*(name for name, _ in TABLE_SIZES.values()), "namesrv_kv_entries", "namesrv_registrations",
                        "namesrv_broker_removals", "namesrv_in_flight_limit_bytes", "process_max_fds"})
#: Families merged by their smallest value.
EARLIEST = frozenset({"process_start_time_seconds"})


def local_families(state: ServerState) -> Callable[[], list[Metric]]:
    """A function collecting this process's families: the server's and prometheus-client's process metrics."""
    collectors = (ServerCollector(state), ProcessCollector(registry=None))
    return lambda: [family for collector in collectors for family in collector.collect()]


def exposition(families: Callable[[], list[Metric]]) -> Callable[[], bytes]:
    """A function returning `families()` in Prometheus's text format (the HTTP port calls it)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Families(families))
    return lambda: generate_latest(registry)


class _Families:
    def __init__(self, families: Callable[[], list[Metric]]) -> None:
        self.collect = families


def pack_families(families: list[Metric]) -> bytes:
    """`families` as one worker sends them to worker 0 (`unpack_families` reads them)."""
    return msgpack.packb([[family.name, family.type, family.documentation,
                           [[sample.name, sample.labels, sample.value] for sample in family.samples]]
                          for family in families])


def unpack_families(payload: bytes) -> list[Metric]:
    families = []
    for name, kind, documentation, samples in msgpack.unpackb(payload):
        family = Metric(name, documentation, kind)
        for sample_name, labels, value in samples:
            family.add_sample(sample_name, labels, value)
        families.append(family)
    return families


def merge_families(views: list[list[Metric]]) -> list[Metric]:
    """Several processes' families as one server's: see the module docstring. `views[0]` is worker 0's."""
    merged: dict[str, Metric] = {}
    values: dict[str, dict[tuple[str, tuple[tuple[str, str], ...]], float]] = {}
    for view_index, view in enumerate(views):
        for family in view:
            if family.name not in merged:
                merged[family.name] = Metric(family.name, family.documentation, family.type)
                values[family.name] = {}
            elif view_index and family.name in REPLICATED:
                continue
            samples = values[family.name]
            for sample in family.samples:
                key = (sample.name, tuple(sorted(sample.labels.items())))
                known = samples.get(key)
                if known is None:
                    samples[key] = sample.value
                elif family.name in EARLIEST:
                    samples[key] = min(known, sample.value)
                else:
                    samples[key] = known + sample.value
    for name, family in merged.items():
        for (sample_name, labels), value in values[name].items():
            family.add_sample(sample_name, dict(labels), value)
    return list(merged.values())
