"""The pauses of Python's cyclic garbage collector, by generation: `namesrv_gc_pause_seconds` on /metrics.

A collection runs on whichever thread allocated past a threshold, holding the interpreter lock, so
every request of the process waits for it. The route table keeps nothing the collector walks (its
entries are tuples of ints, namesrv.routeinfo.tables.queues), so a full collection costs in
proportion to the server's other objects, not to the fleet; this histogram is how an operator sees
that it stays so. One per process (gc.callbacks is the interpreter's): `install` is idempotent.

What a server holds for its whole life is frozen before it serves (`freeze_before_serving`): the
route table's topic dict alone grows an entry per topic, and each full collection visited every
one (`python -m bench scale --wire` measures the pauses); a frozen dict is not visited, however it
grows. Frozen objects are never collected: a cycle among
them that dies later stays, which bounds the cost by what the built server held.
"""
from __future__ import annotations

import gc
import time
from bisect import bisect_left

from namesrv.request_stats import LATENCY_BOUNDS

GENERATIONS = (0, 1, 2)


def freeze_before_serving() -> None:
    """Collect what building the server left behind, then move every object alive into the collector's
    permanent generation: full collections walk only what the server makes from now on (gc.freeze).
    Called by the process's entry point once its controller is built and before it starts serving,
    so that its full collection holds up no request (done after the start, it made a ZeroMQ client
    streaming megabytes at a fresh server time out now and then: tests/test_limits.py), never by a
    library user."""
    gc.collect()
    gc.freeze()


class GcPauses:
    """Per generation: counts per LATENCY_BOUNDS bucket (then +Inf), then the sum of seconds."""

    def __init__(self) -> None:
        self.buckets: dict[int, list[float]] = {generation: [0.0] * (len(LATENCY_BOUNDS) + 2)
                                                for generation in GENERATIONS}
        self._started = 0.0

    def install(self) -> None:
        if self._observe not in gc.callbacks:
            gc.callbacks.append(self._observe)

    def _observe(self, phase: str, info: dict[str, int]) -> None:
        # Collections never overlap (the interpreter lock is held and gc refuses to nest): one start time.
        if phase == "start":
            self._started = time.perf_counter()
            return
        seconds = time.perf_counter() - self._started
        buckets = self.buckets.get(info["generation"])
        if buckets is not None:
            buckets[bisect_left(LATENCY_BOUNDS, seconds)] += 1
            buckets[-1] += seconds

    def snapshot(self) -> dict[int, list[float]]:
        return {generation: list(buckets) for generation, buckets in self.buckets.items()}


#: The process's one recorder (the controller installs it).
PAUSES = GcPauses()
