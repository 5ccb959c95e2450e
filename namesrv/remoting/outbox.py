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

#: (connection, encoded reply), or (connection, reason text): close that connection.
Delivery = tuple[Channel, "bytes | str"]


class Outbox:
    """A multi-producer, single-consumer queue of delivery batches with a pollable wake-up fd."""

    def __init__(self) -> None:
        self._batches: deque[list[Delivery]] = deque()
        self._lock = threading.Lock()
        self._signalled = False
        self._read_fd, self._write_fd = os.pipe()
        os.set_blocking(self._read_fd, False)
        os.set_blocking(self._write_fd, False)

    def fileno(self) -> int:
        return self._read_fd

    def put(self, batch: list[Delivery]) -> None:
        """Queue a batch and wake the reactor unless a wake-up is already pending."""
        self._batches.append(batch)
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
        """Everything queued so far, oldest first (reactor thread only)."""
        with self._lock:
            if self._signalled:
                self._signalled = False
                os.read(self._read_fd, 64)
        items: list[Delivery] = []
        batches = self._batches
        while batches:
            items.extend(batches.popleft())
        return items

    def __len__(self) -> int:
        return len(self._batches)

    def close(self) -> None:
        os.close(self._read_fd)
        os.close(self._write_fd)
