"""Every cache namesrv keeps, with its key, its bounds in entries and in bytes, and what invalidates it.

A peer controls what most of these are keyed on, so each is bounded in bytes as well as entries:
a flood of distinct, large headers costs at most the byte bound, then the memo starts over.

`processor.seen_headers.SeenHeaders` (`json`, `binary`), the reactor's
    key: a request header's bytes without its opaque; value: what the inline paths make of it.
    bounds: 16384 entries and 32 MiB each (a header is charged twice its length).
    invalidation: none needed, the value is a function of the key; emptied when full.
    pays: route queries and unchanged re-registrations (`python -m bench cache-value`).
`processor.inline.HeaderReader.shapes`, the reactor's
    key: a JSON registration header's bytes without its opaque and its bodyCrc32 value; value:
    the first such header parsed, rebound to each later one's bodyCrc32 (a broker's next
    DataVersion changes its header only there). Remembered only once a second parse, with other
    digits, showed that the parser reads bodyCrc32 from exactly those digits.
    bounds: 4096 entries, 8 MiB (a header is charged twice its length).
    invalidation: none needed (a function of the key); emptied when full.
    pays: a changed registration's header read (`python -m bench request-instructions`, with and without).
`processor.write_fast_path.WriteFastPath.templates`, the reactor's
    key: codec and response extFields; value: the SUCCESS header split around its opaque.
    bounds: 1024 entries, 4 MiB.
    invalidation: none needed (a function of the key); emptied when full.
    pays: every inline write's answer (`python -m bench cache-value`).
`processor.write_fast_path.WriteFastPath.replays`, the reactor's
    key: the identity of a replayable write's header as read once (`PreparedWrite.request` of the
    seen-header memo; the entry holds it, so no other object can take its id meanwhile); value:
    the last such request's body length and XXH3, its change (a registration's: a refresh), the
    outcome of applying it, what its answer read besides (the KV table's revision), and its
    answer (`Replay`).
    bounds: 12288 entries (a registration's, a heartbeat's and a data-version query's for each of
    maxBrokers), 8 MiB as charged (512 bytes each and its answer's body).
    invalidation: none needed: the kept answer goes out only when the change, applied again, has
    the kept outcome (a registration's refresh checks the broker's last body under the route
    table's lock) and what the answer read is unchanged; emptied when full.
    pays: heartbeats, data-version queries and unchanged re-registrations (`python -m bench request-instructions`).
`routeinfo.cache.RouteBodyCache`, shared by the reactor and the executors
    key: topic, JSON flavour, and a stamp of the inputs outside the route table (order-topic
    conf, acting master); value: the encoded route body.
    bounds: one entry per topic queried; 256 MiB (DEFAULT_MAX_BYTES), CLOCK eviction.
    invalidation: RouteInfoManager's writes, under the route table's write lock, per topic they
    touch; a new stamp simply misses.
    pays: route queries (`python -m bench cache-value`).
`status_page.StatusPage` overview, the operator HTTP port's
    key: none (one entry); value: /status.json's bytes.
    bounds: 1 entry; its size is the route table's brokers (not its topics: those are paged).
    invalidation: rebuilt when a second old.
    pays: 32 pages polling cost one build a second, not 32 (not measured by `python -m bench cache-value`:
    it bounds work, it does not speed up a path).
`_fastpath._key_cache`, the Cython header decoder's
    key: an extFields key's ASCII bytes (at most 48); value: its str object.
    bounds: 256 slots, about 20 KB.
    invalidation: none needed; a slot clash replaces (direct-mapped).
    pays: not measured on its own (it lives inside the binary header decoder).

Not caches, though they remember: a RemotingCommand's parsed typed header and body CRC32 live and
die with the command; a broker's registration fingerprint and topic-entry digests are part of its
live entry in the route table and go with it (bounded by the route table, not here).

"pays" names the measurement that shows what a cache is worth: `python -m bench cache-value` (each path with
and without the cache, same run, requests per second of the sans-IO path), or instructions counted
by `python -m bench request-instructions` where a saving is below the machine's timing noise. The figures
are printed by those commands, with the commit they ran at, not kept here: they rot. A cache
whose saving falls to about nothing has no place here.
"""
from __future__ import annotations

from typing import Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")

#: Bytes charged per remembered entry on top of what its owner counts (dict slot, tuple, objects).
ENTRY_OVERHEAD = 200


class BoundedMemo(Generic[K, V]):
    """A memo of values that are functions of their keys (so nothing ever needs invalidating),
    bounded in entries and in bytes; emptied when a new entry would pass either bound.

    `table` is the plain dict, for readers on the hot path (a lookup is `memo.table.get(key)`);
    entries go in only through `remember`. An entry costing more than an eighth of the byte bound is
    not remembered at all: one huge header must not empty the memo of everybody else's.
    Single-threaded: its owner's thread only.
    """

    __slots__ = ("table", "max_entries", "max_bytes", "bytes", "resets")

    def __init__(self, max_entries: int, max_bytes: int) -> None:
        self.table: dict[K, V] = {}
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        #: Bytes charged for the entries now held.
        self.bytes = 0
        #: Times the memo was emptied for being full.
        self.resets = 0

    def remember(self, key: K, value: V, size: int) -> bool:
        """Hold `value` for `key`, charged `size` bytes plus ENTRY_OVERHEAD; False if too large to hold.

        `size` must follow from the key (its length, say), so a key held again is charged once.
        """
        cost = size + ENTRY_OVERHEAD
        if cost > self.max_bytes // 8:
            return False
        table = self.table
        if key in table:
            table[key] = value
            return True
        if len(table) >= self.max_entries or self.bytes + cost > self.max_bytes:
            table.clear()
            self.bytes = 0
            self.resets += 1
        table[key] = value
        self.bytes += cost
        return True

    def __len__(self) -> int:
        return len(self.table)
