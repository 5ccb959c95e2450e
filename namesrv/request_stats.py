"""Answers counted by request code, response code and path, with their latency, one tally per thread.

Every thread that answers requests (the reactor, each executor thread, a worker process's write-log
thread) writes only to its own `RequestTally`, so counting takes no lock and loses no count; the
`/metrics` scrape sums them (`RequestStats.totals`). A tally is a few dicts and lists, bounded by
the request codes the server knows (any other code is counted as OTHER, so a peer inventing codes
cannot grow it), times the response codes the server answers with, times the paths.

Latency runs from the reactor taking the request's frame off its socket to its answer being queued
for sending: for the fast path, the end of decoding the chunk that held it; for the executors and
the write log, the moment the reply is posted to the reactor's outbox. Time spent in the kernel's
and ZeroMQ's queues before the reactor reads it is not seen here (a client's latency includes it).
Buckets span tens of microseconds (a cached route answered inline) to seconds (a queue behind a
slow registration).
"""
from __future__ import annotations

import threading
from bisect import bisect_left
from dataclasses import dataclass

from namesrv.protocol.codes import RequestCode, ResponseCode

#: Histogram upper bounds, seconds (Prometheus `le`; +Inf follows).
LATENCY_BOUNDS = (1e-05, 2.5e-05, 5e-05, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                  0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
#: The request code under which codes the server does not know are counted.
OTHER_CODE = -1
#: The response code of a oneway request, which is never answered.
NO_RESPONSE = -1
_KNOWN_CODES = frozenset(RequestCode)

#: The `path` label: answered by the reactor from the frame (namesrv.processor.inline), by an
#: executor thread, once applied from the write log (worker processes), or refused SYSTEM_BUSY by
#: the reactor before any executor saw it.
FAST_PATH = "fast_path"
EXECUTOR = "executor"
WRITE_LOG = "write_log"
REFUSED = "refused"


class AnswerSlot:
    """The answers of one (request code, response code, path), and the latency buckets of its code."""

    __slots__ = ("count", "buckets")

    def __init__(self, buckets: list[float]) -> None:
        self.count = 0
        self.buckets = buckets

    def add(self, seconds: float, count: int = 1) -> None:
        """`count` answers, each `seconds` after its request arrived."""
        self.count += count
        buckets = self.buckets
        buckets[bisect_left(LATENCY_BOUNDS, seconds)] += count
        buckets[-1] += seconds * count


class RequestTally:
    """One thread's counts. Only its thread writes; a scrape reads copies (atomic under the GIL).

    A caller answering the same kind of request over and over keeps its `slot` and adds to that:
    the key is built and looked up once, not per answer."""

    __slots__ = ("slots", "latency")

    def __init__(self) -> None:
        #: (request code, response code, path) -> its answers.
        self.slots: dict[tuple[int, int, str], AnswerSlot] = {}
        #: request code -> per-bucket counts (LATENCY_BOUNDS, then +Inf), then the sum of seconds.
        self.latency: dict[int, list[float]] = {}

    def slot(self, code: int, response: int, path: str) -> AnswerSlot:
        if code not in _KNOWN_CODES:
            code = OTHER_CODE
        key = (code, response, path)
        slot = self.slots.get(key)
        if slot is None:
            buckets = self.latency.get(code)
            if buckets is None:
                buckets = self.latency[code] = [0] * (len(LATENCY_BOUNDS) + 2)
            slot = self.slots[key] = AnswerSlot(buckets)
        return slot

    def add(self, code: int, response: int, path: str, seconds: float, count: int = 1) -> None:
        """`count` requests of `code` answered `response` on `path`, each `seconds` after arriving."""
        self.slot(code, response, path).add(seconds, count)


@dataclass
class Totals:
    """Every tally summed: what one scrape reports."""

    answers: dict[tuple[int, int, str], int]
    latency: dict[int, list[float]]


class RequestStats:
    """The process's tallies: `tally()` gives the calling thread its own; `totals()` sums them all."""

    def __init__(self) -> None:
        self._tallies: list[RequestTally] = []
        self._lock = threading.Lock()
        self._local = threading.local()

    def tally(self) -> RequestTally:
        """The calling thread's tally, made on its first call."""
        try:
            return self._local.tally
        except AttributeError:
            tally = self._local.tally = self.adopt(RequestTally())
            return tally

    def adopt(self, tally: RequestTally) -> RequestTally:
        """Count `tally` in the totals (one its owner made, as the reactor's inline answers do)."""
        with self._lock:
            self._tallies.append(tally)
        return tally

    def totals(self) -> Totals:
        answers: dict[tuple[int, int, str], int] = {}
        latency: dict[int, list[float]] = {}
        with self._lock:
            tallies = list(self._tallies)
        for tally in tallies:
            for key, slot in tally.slots.copy().items():
                answers[key] = answers.get(key, 0) + slot.count
            for code, buckets in tally.latency.copy().items():
                summed = latency.get(code)
                latency[code] = list(buckets) if summed is None else [a + b for a, b in zip(summed, buckets)]
        return Totals(answers, latency)


def request_name(code: int) -> str:
    """The `request` label: RocketMQ's name of the code, or OTHER."""
    return "OTHER" if code == OTHER_CODE else RequestCode(code).name


def response_name(code: int) -> str:
    """The `response` label: RocketMQ's name of the code, NONE for a oneway request, else the number."""
    if code == NO_RESPONSE:
        return "NONE"
    try:
        return ResponseCode(code).name
    except ValueError:
        return str(code)
