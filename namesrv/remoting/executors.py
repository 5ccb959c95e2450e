"""A fixed thread pool with a bounded queue, fed and drained in batches.

RocketMQ's executors are ThreadPoolExecutors over bounded queues that reject when full (the
caller answers SYSTEM_BUSY). Here the queue bound counts jobs, as RocketMQ's counts tasks, but
jobs cross the lock in batches: the reactor puts everything one poll round decoded for this pool
with one `submit`, and a worker takes up to `take` jobs per wake-up, so the per-request cost of
the hand-off is a fraction of a lock round trip instead of one or more.
"""
from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

log = logging.getLogger(__name__)

Job = TypeVar("Job")


class BoundedExecutor(Generic[Job]):
    """`threads` workers running `run_batch(jobs)`; at most `capacity` jobs wait in the queue."""

    def __init__(self, name: str, threads: int, capacity: int, run_batch: Callable[[list[Job]], None],
                 take: int = 64) -> None:
        if threads < 1 or capacity < 1:
            raise ValueError(f"{name}: threads and capacity must be at least 1 (got {threads}, {capacity})")
        self.name = name
        self.capacity = capacity
        self._threads = [threading.Thread(target=self._work, name=f"{name}_{i + 1}", daemon=True)
                         for i in range(threads)]
        self._run_batch = run_batch
        self._take = take
        self._queue: deque[Job] = deque()
        self._ready = threading.Condition(threading.Lock())
        self._stopping = False

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def submit(self, jobs: Sequence[Job]) -> int:
        """Queue as many of `jobs` (in order) as fit; returns how many were accepted."""
        with self._ready:
            if self._stopping:
                return 0
            room = self.capacity - len(self._queue)
            accepted = len(jobs) if len(jobs) <= room else max(room, 0)
            if accepted:
                self._queue.extend(jobs[:accepted] if accepted < len(jobs) else jobs)
                self._ready.notify()
        return accepted

    @property
    def queued(self) -> int:
        return len(self._queue)

    def shutdown(self, timeout: float) -> bool:
        """Refuse new jobs, let the workers finish every queued one; False if they did not in time."""
        with self._ready:
            self._stopping = True
            self._ready.notify_all()
        deadline = time.monotonic() + timeout
        for thread in self._threads:
            if thread.ident is not None:
                thread.join(max(0.0, deadline - time.monotonic()))
        return not any(thread.is_alive() for thread in self._threads)

    def _work(self) -> None:
        queue = self._queue
        while True:
            with self._ready:
                while not queue:
                    if self._stopping:
                        return
                    self._ready.wait()
                count = min(len(queue), self._take)
                batch = [queue.popleft() for _ in range(count)]
                if queue:
                    self._ready.notify()  # more left: pass the baton to an idle worker
            try:
                self._run_batch(batch)
            except Exception:  # noqa: BLE001 - a worker must survive anything a batch does
                log.exception("%s: a batch of %d jobs failed", self.name, len(batch))
