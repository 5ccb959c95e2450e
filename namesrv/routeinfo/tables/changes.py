"""Which routes changed: counted, their cached answers dropped, and recorded for the route-change push.

A topic's route is whatever GET_ROUTEINFO_BY_TOPIC answers for it: its queue entries, its groups'
addresses and flags, their filter servers, its static-topic mappings. Every write that changes any
of these reports the topics here, and this is the only place that invalidates the route-body cache:
a route answered from the cache is stale exactly when a write forgot to report. The queue table
reports its own puts and removes (namesrv.routeinfo.tables.queues); the manager reports the rest.
"""
from __future__ import annotations

import threading
from collections.abc import Callable, Collection, Iterable

from namesrv.routeinfo.cache import RouteBodyCache


class RouteChanges:
    """`topics(...)`/`group(...)` report changes (under the route table's write lock); `take()` hands
    the tracked ones to the route-change publisher."""

    def __init__(self, cache: RouteBodyCache) -> None:
        self.cache = cache
        #: Grows with every reported change (namesrv.routeinfo.persist saves the tables when it moved):
        #: liveness refreshes and a new DataVersion alone do not move it.
        self.count = 0
        #: Topics changed since the last `take` (None: nobody asked to track them).
        self._tracked: set[str] | None = None
        self._lock = threading.Lock()
        #: Set whenever a tracked change is recorded (the route-change publisher waits on it).
        self.ready = threading.Event()
        #: Told of every change, with its topics (none: a group's, every topic it serves), under the
        #: route table's write lock (namesrv.routeinfo.history).
        self.listener: Callable[[Collection[str], bool], None] | None = None

    def topics(self, topics: Collection[str], stored: bool = False) -> None:
        """These topics' routes changed; `stored`: each was just given the entry (the queue table's
        put), and is named by the table's own string."""
        self.count += 1
        self.cache.invalidate(topics)
        if self._tracked is not None:
            self._record(topics)
        if self.listener is not None:
            self.listener(topics, stored)

    def group(self, serves: Callable[[str], bool], topics: Callable[[], Iterable[str]]) -> None:
        """A broker group's addresses or flags changed: every topic it serves has a new route. Only
        the cached topics are walked (`serves(topic)`); `topics()` lists them all when tracking."""
        self.count += 1
        self.cache.invalidate_where(serves)
        if self._tracked is not None:
            self._record(topics())
        if self.listener is not None:
            self.listener(())

    def _record(self, topics: Iterable[str]) -> None:
        with self._lock:
            self._tracked.update(topics)
        self.ready.set()

    def track(self) -> None:
        """From now on, record which topics' routes change."""
        with self._lock:
            if self._tracked is None:
                self._tracked = set()

    @property
    def tracking(self) -> bool:
        return self._tracked is not None

    def take(self) -> set[str]:
        """The topics changed since the last call (the caller holds the route table's read lock, so
        never half of a write)."""
        with self._lock:
            if self._tracked is None:
                return set()
            changed, self._tracked = self._tracked, set()
        return changed
