"""Worker-side recording: per (interval, request code) HDR histograms and response counts, shipped as deltas.

A worker records each answered request into the histogram of the 1-s interval holding its
intended send time and, once a second, ships everything recorded since the last shipment as a
`Delta` (encoded HDR histograms: compact and lossless). The coordinator adds deltas into its
`RunRecorder`; late answers simply arrive in a later delta for the same interval.
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from hdrh.histogram import HdrHistogram

from bench.storm.hdr import new_histogram, record_us
from bench.storm.rundir import NO_RESPONSE, RunRecorder


@dataclass(slots=True)
class Delta:
    """What one worker recorded since its last shipment (picklable)."""

    worker: int
    histograms: list[tuple[str, int, int, bytes]] = field(default_factory=list)  # metric, interval, code, encoded
    responses: list[tuple[int, int, int, int]] = field(default_factory=list)  # interval, request, response, count
    sent: int = 0  # requests sent (measured or not) since the last delta, for the progress bar

    def apply_to(self, run: RunRecorder) -> None:
        for metric, interval, code, encoded in self.histograms:
            run.add_histogram(metric, interval, code, HdrHistogram.decode(encoded))
        for interval, request_code, response_code, count in self.responses:
            run.add_responses(interval, request_code, response_code, count)


class IntervalRecorder:
    """Latency (answer − intended send) and send delay (actual − intended send) in µs, per interval.

    `measure_start_ns` is the end of warm-up on the monotonic clock all workers share
    (CLOCK_MONOTONIC is system-wide); requests intended before it are not recorded, but their
    response codes are tallied in `unmeasured` (bring-up and warm-up must not fail silently).
    """

    __slots__ = ("worker", "measure_start_ns", "interval_ns", "unmeasured", "_latency", "_send_delay", "_responses",
                 "_sent")

    def __init__(self, worker: int, measure_start_ns: int, interval_ns: int = 1_000_000_000) -> None:
        self.worker = worker
        self.measure_start_ns = measure_start_ns
        self.interval_ns = interval_ns
        self._latency: dict[tuple[int, int], HdrHistogram] = {}
        self._send_delay: dict[tuple[int, int], HdrHistogram] = {}
        self._responses: dict[tuple[int, int, int], int] = defaultdict(int)
        self._sent = 0
        self.unmeasured: dict[int, int] = defaultdict(int)

    def interval_of(self, intended_ns: int) -> int:
        """Index of the interval holding `intended_ns`; negative during warm-up."""
        return (intended_ns - self.measure_start_ns) // self.interval_ns

    def sent(self, request_code: int, intended_ns: int, sent_ns: int) -> None:
        self._sent += 1
        interval = self.interval_of(intended_ns)
        if interval >= 0:
            record_us(self._histogram(self._send_delay, interval, request_code), (sent_ns - intended_ns) // 1000)

    def answered(self, request_code: int, intended_ns: int, answered_ns: int, response_code: int) -> None:
        interval = self.interval_of(intended_ns)
        if interval >= 0:
            record_us(self._histogram(self._latency, interval, request_code), (answered_ns - intended_ns) // 1000)
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
        for metric, table in (("latency", self._latency), ("send_delay", self._send_delay)):
            for (interval, code), histogram in sorted(table.items()):
                delta.histograms.append((metric, interval, code, histogram.encode()))
            table.clear()
        delta.responses = [(*key, count) for key, count in sorted(self._responses.items())]
        self._responses.clear()
        self._sent = 0
        return delta

    @staticmethod
    def _histogram(table: dict[tuple[int, int], HdrHistogram], interval: int, code: int) -> HdrHistogram:
        histogram = table.get((interval, code))
        if histogram is None:
            histogram = table[(interval, code)] = new_histogram()
        return histogram
