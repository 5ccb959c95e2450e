"""Encoded GET_ROUTEINFO_BY_TOPIC bodies, per topic, so an unchanged route is never re-encoded.

Clients poll every route every 30 s, and routes change far less often: caching the encoded bytes
turns most queries into a dict lookup. The route table invalidates exactly the topics a change
touches; this class only stores, evicts and forgets.

Memory is bounded twice: there is one entry per topic that was actually queried (never per
broker x topic), and a byte budget evicts topics beyond it in second-chance (CLOCK) order: the
oldest entry goes unless it was read since it was last considered. A hit only sets that bit, so
reads never take the mutex (route queries are answered on the reactor thread).

A topic has a body per `variant` of its answer: the JSON flavour (standard or legacy), or that
and a zone (namesrv.routeinfo.zones) for a zone's answer. A body also depends on inputs outside
the route tables (the order-topic configuration from the KV store, the acting-master switch):
callers pass them as a `stamp`, and a stored body is only returned for the same stamp, so
changing those inputs needs no invalidation at all.
"""
from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Collection, Hashable, Iterable

#: Bytes charged per cached body on top of its length (dict slots, tuple, bytes header).
ENTRY_OVERHEAD = 200
#: Default byte budget of the cache (bodies + overhead).
DEFAULT_MAX_BYTES = 256 * 1024 * 1024


class RouteBodyCache:
    """topic -> {variant: (stamp, body)}, oldest first, plus the topics read since.

    Thread-safe on its own: `get` is lock-free (single dict and set operations, atomic under the
    GIL); `put` (readers of the route table fill it concurrently under the shared read lock) and
    invalidation (writers holding the route table's write lock) take the mutex.
    """

    def __init__(self, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        self._max_bytes = max_bytes
        self._entries: OrderedDict[str, dict[Hashable, tuple[Hashable, bytes]]] = OrderedDict()
        self._referenced: set[str] = set()
        self._bytes = 0
        self._mutex = threading.Lock()

    def get(self, topic: str, variant: Hashable, stamp: Hashable) -> bytes | None:
        return self.get_many(((topic, variant),), stamp, tuple)[0]

    def get_many(self, keys: Iterable[object], stamp: Hashable, key_type: type) -> list[bytes | None]:
        """The body stored with `stamp` for each (topic, variant) of `keys`, else None; a key not of
        exactly `key_type` (a tuple type) is answered None. A whole received chunk's route queries
        in one call: per query, one loop turn instead of a call (`python -m bench request-instructions` counts it
        on the reactor's chunk path)."""
        entries = self._entries
        referenced = self._referenced
        bodies: list[bytes | None] = []
        for key in keys:
            body = None
            if type(key) is key_type:
                variants = entries.get(key[0])
                if variants is not None:
                    cached = variants.get(key[1])
                    if cached is not None and cached[0] == stamp:
                        referenced.add(key[0])
                        body = cached[1]
            bodies.append(body)
        return bodies

    def put(self, topic: str, variant: Hashable, stamp: Hashable, body: bytes) -> None:
        cost = len(body) + ENTRY_OVERHEAD
        if cost > self._max_bytes:
            return
        with self._mutex:
            variants = self._entries.get(topic)
            if variants is None:
                variants = self._entries[topic] = {}
            else:
                self._entries.move_to_end(topic)
            previous = variants.get(variant)
            if previous is not None:
                self._bytes -= len(previous[1]) + ENTRY_OVERHEAD
            variants[variant] = (stamp, body)
            self._bytes += cost
            while self._bytes > self._max_bytes:
                oldest = next(iter(self._entries))
                if len(self._entries) > 1 and (oldest == topic or oldest in self._referenced):  # second chance
                    self._referenced.discard(oldest)
                    self._entries.move_to_end(oldest)
                else:
                    self._drop(oldest)

    def invalidate(self, topics: Collection[str]) -> None:
        """Forget the bodies of `topics` (every write that changes a route calls it)."""
        mutex = self._mutex
        mutex.acquire()  # not `with`: see namesrv.routeinfo.rwlock
        try:
            entries = self._entries
            for topic in topics:
                if topic in entries:
                    self._drop(topic)
        finally:
            mutex.release()

    def invalidate_where(self, affected: Callable[[str], bool]) -> None:
        """Forget the bodies of every cached topic `affected` selects (a walk over cached topics only)."""
        with self._mutex:
            for topic in [t for t in self._entries if affected(t)]:
                self._drop(topic)

    def topics(self) -> set[str]:
        with self._mutex:
            return set(self._entries)

    def size(self) -> tuple[int, int]:
        """(topics cached, bytes charged)."""
        with self._mutex:
            return len(self._entries), self._bytes

    def _drop(self, topic: str) -> None:
        self._referenced.discard(topic)
        for _, body in self._entries.pop(topic).values():
            self._bytes -= len(body) + ENTRY_OVERHEAD
