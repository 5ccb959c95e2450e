"""maxInFlightRequestBytes: how many request bytes one server process holds before it has answered them.

Four things hold what peers cost: incomplete frames (a connection's bytes waiting for the rest
of their frame, a TLS handshake's state), decoded requests waiting in an executor queue or
running, their replies waiting in the outbox for the reactor to send them, and the route-change
pushes subscribers have not taken yet (namesrv.route_publisher keeps those within half the
budget, dropping and closing subscribers past their share). Without a bound in bytes, a peer could make us
hold every connection's largest frame (10,000 x 16 MiB), fill the queues, counted in requests,
with 16 MiB ones, or ask a thousand times for a 1 MB topic list without reading: sixteen executor
threads encode replies far faster than the one reactor thread, which gets a seventeenth of the
interpreter lock, hands them over (1.8 GiB of replies waited in the outbox before). The budget
counts all three (frames by their wire size) and, once it is spent:

* a complete request is answered SYSTEM_BUSY at once ("[OVERLOAD]...", as RocketMQ answers a full
  executor queue), or dropped if oneway; the client retries, as it does for a full queue;
* incomplete frames give way first: before refusing a complete request, and whenever incomplete
  frames alone pass the budget, the connections whose incomplete frame started longest ago are
  closed. A slow-drip peer holding half a frame is the one that goes, not a broker whose
  registration has just arrived whole;
* an executor thread with a reply to post waits until the reactor has taken the replies before
  it (back-pressure on the threads making replies, never on the reactor).

Like Kafka's `queued.max.request.bytes`, with two differences: there is always a bound (never
below maxFrameLength, so the largest frame fits alone), and a full budget never stops the
reactor from reading: stopping would let the peers holding it stall everybody else.
"""
from __future__ import annotations

import logging
import threading
import time

from namesrv.config import NamesrvConfig

log = logging.getLogger(__name__)

#: Budget refusals are logged at most this often, with running counts.
LOG_PERIOD = 1.0


class RequestBudget:
    """Request bytes held: `incomplete` (set by the reactor), `queued` (charged by the reactor,
    released by the executors that answered them), `replies` (held by the outbox until the
    reactor takes them) and `pushes` (set by the route publisher). Thread-safe."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        #: Bytes of incomplete frames across the endpoints (reactor thread only writes it).
        self.incomplete = 0
        #: Bytes of route-change pushes that subscribers hold unsent (the route publisher writes it).
        self.pushes = 0
        self._queued = 0
        self._replies = 0
        self._lock = threading.Lock()
        self._room = threading.Condition(self._lock)
        self._closed = False
        #: Complete requests refused (SYSTEM_BUSY or dropped) and connections closed, since start.
        self.refused = 0
        self.evicted = 0
        self._logged = -LOG_PERIOD

    @classmethod
    def from_config(cls, config: NamesrvConfig) -> RequestBudget:
        """maxInFlightRequestBytes, never below maxFrameLength."""
        return cls(max(config.max_in_flight_request_bytes, config.max_frame_length))

    @property
    def queued(self) -> int:
        """Bytes of requests handed to the executors and not answered yet."""
        return self._queued

    @property
    def replies(self) -> int:
        """Bytes of replies posted to the outbox and not yet taken by the reactor."""
        return self._replies

    @property
    def held(self) -> int:
        return self.incomplete + self._queued + self._replies + self.pushes

    def charge(self, size: int) -> bool:
        """Hold `size` more bytes of complete requests; False (nothing held) if that passes the limit."""
        with self._lock:
            if self.held + size > self.limit:
                self.refused += 1
                return False
            self._queued += size
            return True

    def release(self, size: int) -> None:
        """Requests of `size` bytes were answered (or refused after being charged)."""
        if size:
            with self._lock:
                self._queued -= size

    def hold_replies(self, size: int, wait: bool) -> None:
        """Replies of `size` bytes are posted. With `wait`, first wait (an executor thread) while
        earlier replies are still untaken and these would pass the limit."""
        with self._room:
            while wait and self._replies and not self._closed and self.held + size > self.limit:
                self._room.wait(0.5)
            self._replies += size

    def replies_taken(self, size: int) -> None:
        """The reactor took replies of `size` bytes from the outbox."""
        if size:
            with self._room:
                self._replies -= size
                self._room.notify_all()

    def close(self) -> None:
        """Nobody waits any more (shutdown)."""
        with self._room:
            self._closed = True
            self._room.notify_all()

    def report(self, what: str) -> None:
        """Log a refusal or an eviction, at most once per LOG_PERIOD (with the running counts)."""
        now = time.monotonic()
        if now - self._logged >= LOG_PERIOD:
            self._logged = now
            log.warning("in-flight request bytes at maxInFlightRequestBytes (%d held of %d: %d in incomplete "
                        "frames, %d queued, %d in replies, %d in pushes): %s; %d requests refused, %d connections "
                        "closed so far", self.held, self.limit, self.incomplete, self._queued, self._replies,
                        self.pushes, what, self.refused, self.evicted)
