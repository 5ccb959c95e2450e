"""Replies travelling from worker threads to the reactor thread.

ZeroMQ sockets belong to one thread, so workers never touch them: they append encoded replies
here and the reactor sends them. The reactor polls `fileno` next to its sockets; a single byte
in a pipe wakes it, and at most one wake-up byte is outstanding however many batches arrive.
"""
from __future__ import annotations

import os
import threading
from collections import deque

from namesrv.channel import Channel
from namesrv.remoting.budget import RequestBudget

#: (connection, encoded reply), or (connection, reason text): close that connection.
Delivery = tuple[Channel, "bytes | str"]


class Outbox:
    """A multi-producer, single-consumer queue of delivery batches with a pollable wake-up fd."""

    def __init__(self, budget: RequestBudget | None = None) -> None:
        """`budget`: what replies waiting here count against (namesrv.remoting.budget); None: unbounded."""
        self._budget = budget
        self._batches: deque[tuple[list[Delivery], int]] = deque()
        self._taken = 0
        self._lock = threading.Lock()
        self._signalled = False
        self._read_fd, self._write_fd = os.pipe()
        os.set_blocking(self._read_fd, False)
        os.set_blocking(self._write_fd, False)

    def fileno(self) -> int:
        return self._read_fd

    def put(self, batch: list[Delivery], wait: bool = False) -> None:
        """Queue a batch and wake the reactor unless a wake-up is already pending. With `wait` (an
        executor thread), first wait while the budget has no room for the batch's replies."""
        size = 0
        if self._budget is not None:
            size = sum(len(payload) for _, payload in batch)
            if wait:
                self.wake()  # what waits ahead of us must be taken first
            self._budget.hold_replies(size, wait)
        self._batches.append((batch, size))
        self.wake()

    def close_channel(self, channel: Channel, reason: str) -> None:
        """Ask the reactor to close a connection (thread-safe); `reason` goes to its log line."""
        self.put([(channel, reason)])

    def wake(self) -> None:
        with self._lock:
            if self._signalled:
                return
            self._signalled = True
        os.write(self._write_fd, b"\x01")

    def drain(self) -> list[Delivery]:
        """Everything queued so far, oldest first (reactor thread only). Its replies stay counted
        against the budget until `sent()`: until then the reactor holds them."""
        with self._lock:
            if self._signalled:
                self._signalled = False
                os.read(self._read_fd, 64)
        items: list[Delivery] = []
        taken = 0
        batches = self._batches
        while batches:
            batch, size = batches.popleft()
            items.extend(batch)
            taken += size
        self._taken += taken
        return items

    def sent(self) -> None:
        """The replies drained so far are sent or queued at their connections (reactor thread only)."""
        if self._budget is not None and self._taken:
            self._budget.replies_taken(self._taken)
        self._taken = 0

    def __len__(self) -> int:
        return len(self._batches)

    def close(self) -> None:
        os.close(self._read_fd)
        os.close(self._write_fd)
