"""Replies travelling from worker threads to the reactor thread.

ZeroMQ sockets belong to one thread, so workers never touch them: they append encoded replies
here and the reactor sends them. The reactor polls `fileno` next to its sockets; a single byte
in a pipe wakes it, and at most one wake-up byte is outstanding however many batches arrive.
"""
from __future__ import annotations

import os
import threading
from collections import deque
from typing import NamedTuple

from namesrv.channel import Channel
from namesrv.remoting.budget import RequestBudget

class Close(NamedTuple):
    """A request to close a connection: why (for its log line), the cause it is counted under
    (namesrv.remoting.endpoints.CUT_CAUSES) and whether to reset it at once, unsent output dropped
    (for a peer that does not read: an orderly close would wait behind output that never drains)."""

    reason: str
    cause: str = "requested"
    reset: bool = False


#: (connection, encoded reply), or (connection, Close): close that connection.
Delivery = tuple[Channel, "bytes | Close"]


class Outbox:
    """A multi-producer, single-consumer queue of delivery batches with a pollable wake-up fd."""

    def __init__(self, budget: RequestBudget | None = None) -> None:
        """`budget`: what replies waiting here count against (namesrv.remoting.budget); None: unbounded."""
        self._budget = budget
        self._batches: deque[tuple[list[Delivery], int, int]] = deque()
        self._taken = 0
        #: Batches put so far; the last one the reactor has sent (or queued at its connections), once drained.
        self._put_count = 0
        self._drained_through = 0
        self.delivered_through = 0
        self._lock = threading.Lock()
        self._signalled = False
        self._read_fd, self._write_fd = os.pipe()
        os.set_blocking(self._read_fd, False)
        os.set_blocking(self._write_fd, False)

    def fileno(self) -> int:
        return self._read_fd

    def put(self, batch: list[Delivery], wait: bool = False) -> int:
        """Queue a batch and wake the reactor unless a wake-up is already pending. With `wait` (an
        executor thread), first wait while the budget has no room for the batch's replies. Returns
        the batch's number: it is sent once `delivered_through` reaches it."""
        size = 0
        if self._budget is not None:
            size = sum(len(payload) for _, payload in batch if not isinstance(payload, Close))
            if wait:
                self.wake()  # what waits ahead of us must be taken first
            self._budget.hold_replies(size, wait)
        with self._lock:
            self._put_count += 1
            number = self._put_count
            self._batches.append((batch, size, number))
        self.wake()
        return number

    def close_channel(self, channel: Channel, reason: str, cause: str = "requested", reset: bool = False) -> None:
        """Ask the reactor to close a connection (thread-safe), see `Close`."""
        self.put([(channel, Close(reason, cause, reset))])

    def wake(self) -> None:
        with self._lock:
            if self._signalled:
                return
            self._signalled = True
        os.write(self._write_fd, b"\x01")

    def drain(self, max_bytes: int | None = None) -> list[Delivery]:
        """What is queued, oldest first: everything, or whole batches up to about `max_bytes` of
        replies (the reactor is woken again for the rest). Reactor thread only. Its replies stay
        counted against the budget until `sent()`: until then the reactor holds them."""
        with self._lock:
            if self._signalled:
                self._signalled = False
                os.read(self._read_fd, 64)
        items: list[Delivery] = []
        taken = 0
        batches = self._batches
        while batches and (max_bytes is None or taken < max_bytes):
            batch, size, number = batches.popleft()
            items.extend(batch)
            taken += size
            self._drained_through = number
        self._taken += taken
        if batches:
            self.wake()
        return items

    def sent(self) -> None:
        """The replies drained so far are sent or queued at their connections (reactor thread only)."""
        if self._budget is not None and self._taken:
            self._budget.replies_taken(self._taken)
        self._taken = 0
        self.delivered_through = self._drained_through

    def __len__(self) -> int:
        return len(self._batches)

    def close(self) -> None:
        os.close(self._read_fd)
        os.close(self._write_fd)
