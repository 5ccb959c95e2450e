"""Server-side request latency of a storm run, from its two scrapes of the server's Prometheus `/metrics`.

bench/heartbeat_storm.py scrapes the server as the measured window starts (metrics-start.prom, after
warm-up) and at 90 % of it (metrics-end.prom). namesrv's `namesrv_request_duration_seconds` histogram
(a request frame's arrival to its answer being queued, per `request` code name) counts since the
server started, so what the server saw during the run is end − start, bucket by bucket.

Percentiles follow Prometheus's `histogram_quantile`, so they agree with a Grafana panel over the
same window. Being interpolated inside buckets, they are estimates at the buckets' resolution, not
exact like the client's HDR percentiles; merging (summing bucket counts) is exact, as for HDR.
"""
from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families

HISTOGRAM = "namesrv_request_duration_seconds"
START_FILE = "metrics-start.prom"
END_FILE = "metrics-end.prom"
#: The histogram is in seconds; the report, like the client's HDR histograms, in microseconds.
MICROSECONDS_PER_SECOND = 1e6


class NoServerMetrics(Exception):
    """Why a run has no server-side latency: the report shows the reason instead of failing."""


@dataclass(frozen=True, slots=True)
class Buckets:
    """One request code's histogram: cumulative counts by upper bound (seconds, ascending, +Inf last), sum of seconds.

    Deltas and merges keep this form, so `histogram_quantile` reads any of them.
    """

    cumulative: dict[float, float]
    sum_s: float

    @property
    def count(self) -> float:
        return self.cumulative[math.inf]

    def is_cumulative(self) -> bool:
        """No bucket holds a negative count: false for a delta across a server restart."""
        counts = list(self.cumulative.values())
        return counts[0] >= 0 and all(a <= b for a, b in zip(counts, counts[1:]))


@dataclass(frozen=True, slots=True)
class ServerWindow:
    """A run's server-side histograms by `request` label, or why there are none."""

    histograms: dict[str, Buckets] = field(default_factory=dict)
    problem: str | None = None


def histogram_quantile(q: float, cumulative: Mapping[float, float]) -> float:
    """Prometheus's `histogram_quantile` (promql bucketQuantile) of cumulative counts by upper bound, 0 < q ≤ 1.

    rank = q × total (the +Inf bucket's count); the first bucket whose cumulative count reaches the
    rank holds the answer, interpolated linearly between its lower bound (the previous upper bound;
    0 for the first bucket) and its upper bound. A rank in the +Inf bucket answers the highest
    finite bound. NaN without a +Inf bucket, without a finite one, or without observations.
    """
    if not 0 < q <= 1:
        raise ValueError(f"quantile {q} must be in (0, 1]")
    bounds = sorted(cumulative)
    if len(bounds) < 2 or bounds[-1] != math.inf or cumulative[math.inf] <= 0:
        return math.nan
    rank = q * cumulative[math.inf]
    finite = bounds[:-1]
    index = next((i for i, bound in enumerate(finite) if cumulative[bound] >= rank), None)
    if index is None:
        return finite[-1]
    lower, below = (finite[index - 1], cumulative[finite[index - 1]]) if index else (0.0, 0.0)
    upper = finite[index]
    return lower + (upper - lower) * (rank - below) / (cumulative[upper] - below)


def summarize(buckets: Buckets, percentiles: Sequence[float]) -> tuple[dict[float, float], float]:
    """({percentile: µs}, mean µs) of one histogram: what the report's tables show."""
    values = {p: histogram_quantile(p / 100.0, buckets.cumulative) * MICROSECONDS_PER_SECOND for p in percentiles}
    return values, buckets.sum_s / buckets.count * MICROSECONDS_PER_SECOND


def parse_histogram(text: str) -> dict[str, Buckets]:
    """The `request` label -> HISTOGRAM's buckets in one scrape ({} when the server does not export it).

    Series are summed by (request, le), as `sum by (request, le)` would, so extra labels or a scrape
    concatenating several processes still give one histogram per request code.
    """
    counts: dict[str, dict[float, float]] = defaultdict(lambda: defaultdict(float))
    sums: dict[str, float] = defaultdict(float)
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            request = sample.labels.get("request", "")
            if sample.name == HISTOGRAM + "_bucket":
                counts[request][float(sample.labels["le"])] += sample.value
            elif sample.name == HISTOGRAM + "_sum":
                sums[request] += sample.value
    histograms = {}
    for request, by_bound in counts.items():
        if math.inf not in by_bound:
            raise NoServerMetrics(f"{HISTOGRAM} of request {request!r} has no +Inf bucket")
        histograms[request] = Buckets(dict(sorted(by_bound.items())), sums[request])
    return histograms


def merge(histograms: Sequence[Buckets]) -> Buckets:
    """Bucket-by-bucket sum on the bounds all of them have.

    Exact for one bucket layout; for different layouts (two server versions) the common bounds
    still form a valid, coarser histogram, whereas summing by `le` alone would not.
    """
    bounds = sorted(set.intersection(*(set(h.cumulative) for h in histograms)))
    return Buckets({b: sum(h.cumulative[b] for h in histograms) for b in bounds}, sum(h.sum_s for h in histograms))


def window_delta(start: Mapping[str, Buckets], end: Mapping[str, Buckets]) -> dict[str, Buckets]:
    """end − start per request label: the server's latency between the scrapes; labels without requests left out.

    A label first seen after the start scrape had no requests before it (counts start at 0).
    """
    restarted = NoServerMetrics(f"{HISTOGRAM} went backwards between the scrapes (the server restarted?)")
    if start.keys() - end.keys():
        raise restarted
    delta = {}
    for request, last in end.items():
        first = start.get(request)
        if first is not None:
            last = _subtract(last, first)
        if not last.is_cumulative():
            raise restarted
        if last.count > 0:
            delta[request] = last
    return delta


def _subtract(last: Buckets, first: Buckets) -> Buckets:
    """last − first on their common bounds (one server keeps one layout; the intersection is still valid if not)."""
    bounds = sorted(last.cumulative.keys() & first.cumulative.keys())
    return Buckets({b: last.cumulative[b] - first.cumulative[b] for b in bounds}, last.sum_s - first.sum_s)


def run_window(scrapes: Mapping[str, str], record: Mapping | None) -> ServerWindow:
    """A run's server-side latency from its scrape files' texts, or why there is none.

    `record` is meta.json's "server_metrics" entry (None for runs from before the storm scraped):
    it says why a scrape file is missing.
    """
    try:
        texts = [_scrape_text(name, scrapes, record) for name in (START_FILE, END_FILE)]
        start, end = (_parse(name, text) for name, text in zip((START_FILE, END_FILE), texts))
        if not end:
            raise NoServerMetrics(f"the server exports no {HISTOGRAM} histogram (an older namesrv, or another "
                                  "NameServer)")
        delta = window_delta(start, end)
        if not delta:
            raise NoServerMetrics(f"{HISTOGRAM} counted no requests between the scrapes")
    except NoServerMetrics as exc:
        return ServerWindow(problem=str(exc))
    return ServerWindow(delta)


def _scrape_text(name: str, scrapes: Mapping[str, str], record: Mapping | None) -> str:
    if name in scrapes:
        return scrapes[name]
    if record is None:
        raise NoServerMetrics(f"no {name} in the run directory (the storm did not scrape /metrics)")
    if record.get("url") is None:
        raise NoServerMetrics("the storm had no metrics URL (run it with --metrics-url, or --launch)")
    if isinstance(record.get(name), str) and record[name] != name:
        raise NoServerMetrics(f"{name} {record[name]}")
    raise NoServerMetrics(f"{name} is missing from the run directory")


def _parse(name: str, text: str) -> dict[str, Buckets]:
    try:
        return parse_histogram(text)
    except ValueError as exc:
        raise NoServerMetrics(f"{name} is not Prometheus text: {exc}") from None
