"""Worker-side recording: per (metric, interval, code) HDR histograms and response counts, shipped as deltas.

A worker records each answered request into the histogram of the 1-s interval holding its
intended send time (a subscriber process each route change it sees into that of the change)
and, once a second, ships everything recorded since the last shipment as a `Delta` (encoded
HDR histograms: compact and lossless). The coordinator adds deltas into its `RunRecorder`;
late answers simply arrive in a later delta for the same interval. A worker's generator loop
(namesrv.fastpath.RequestGenerator) records as event keys, which the coordinator sums into the
same histograms (`RunRecorder.add_keys`); subscriber processes record with `IntervalRecorder`.
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from hdrh.histogram import HdrHistogram

from bench.lib.hdr import new_histogram, record_us
from bench.lib.output import NO_RESPONSE, RunRecorder


@dataclass(slots=True)
class Delta:
    """What one worker recorded since its last shipment (picklable)."""

    worker: int
    histograms: list[tuple[str, int, int, bytes]] = field(default_factory=list)  # metric, interval, code, encoded
    responses: list[tuple[int, int, int, int]] = field(default_factory=list)  # interval, request, response, count
    sent: int = 0  # requests sent (measured or not) since the last delta, for the progress bar
    #: A generator loop's records (RequestGenerator.take: histogram keys, response keys), summed by the
    #: coordinator so that the worker's loop never stops to do it.
    keys: tuple[bytes, bytes] = (b"", b"")

    def apply_to(self, run: RunRecorder) -> None:
        run.add_keys(*self.keys)
        for metric, interval, code, encoded in self.histograms:
            run.add_histogram(metric, interval, code, HdrHistogram.decode(encoded))
        for interval, request_code, response_code, count in self.responses:
            run.add_responses(interval, request_code, response_code, count)


class IntervalRecorder:
    """Durations in µs per (metric, interval, code): latency (answer − intended send), send delay
    (actual − intended send) and, in subscriber processes, propagation (push received − the route
    change it carries).

    `measure_start_ns` is the end of warm-up on the monotonic clock all processes share
    (CLOCK_MONOTONIC is system-wide); requests intended before it are not recorded, but their
    response codes are tallied in `unmeasured` (bring-up and warm-up must not fail silently).
    """

    __slots__ = ("worker", "measure_start_ns", "interval_ns", "unmeasured", "_histograms", "_responses", "_sent")

    def __init__(self, worker: int, measure_start_ns: int, interval_ns: int = 1_000_000_000) -> None:
        self.worker = worker
        self.measure_start_ns = measure_start_ns
        self.interval_ns = interval_ns
        self._histograms: dict[tuple[str, int, int], HdrHistogram] = {}
        self._responses: dict[tuple[int, int, int], int] = defaultdict(int)
        self._sent = 0
        self.unmeasured: dict[int, int] = defaultdict(int)

    def interval_of(self, intended_ns: int) -> int:
        """Index of the interval holding `intended_ns`; negative during warm-up."""
        return (intended_ns - self.measure_start_ns) // self.interval_ns

    def observe(self, metric: str, code: int, start_ns: int, end_ns: int) -> int:
        """Record end − start as `metric` of `code` in the interval holding `start_ns` (the moment the
        duration is charged to); returns that interval, negative (nothing recorded) before the window."""
        interval = self.interval_of(start_ns)
        if interval >= 0:
            key = (metric, interval, code)
            histogram = self._histograms.get(key)
            if histogram is None:
                histogram = self._histograms[key] = new_histogram()
            record_us(histogram, (end_ns - start_ns) // 1000)
        return interval

    def sent(self, request_code: int, intended_ns: int, sent_ns: int) -> None:
        self._sent += 1
        self.observe("send_delay", request_code, intended_ns, sent_ns)

    def answered(self, request_code: int, intended_ns: int, answered_ns: int, response_code: int) -> None:
        interval = self.observe("latency", request_code, intended_ns, answered_ns)
        if interval >= 0:
            self._responses[(interval, request_code, response_code)] += 1
        else:
            self.unmeasured[response_code] += 1

    def unanswered(self, request_code: int, intended_ns: int) -> None:
        """A request whose answer never came (connection lost, or still pending at the end of the run)."""
        interval = self.interval_of(intended_ns)
        if interval >= 0:
            self._responses[(interval, request_code, NO_RESPONSE)] += 1
        else:
            self.unmeasured[NO_RESPONSE] += 1

    def ship(self) -> Delta:
        """Everything recorded since the last call, then start afresh."""
        delta = Delta(self.worker, sent=self._sent)
        delta.histograms = [(*key, histogram.encode()) for key, histogram in sorted(self._histograms.items())]
        self._histograms.clear()
        delta.responses = [(*key, count) for key, count in sorted(self._responses.items())]
        self._responses.clear()
        self._sent = 0
        return delta
