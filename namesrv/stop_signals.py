"""SIGTERM/SIGINT, and stop requests from other threads, as one file descriptor a main thread sleeps on.

Python runs signal handlers in the main thread only, once that thread runs bytecode; but the
kernel may hand a process signal to any thread (e.g. to a worker while the main thread is still
waking from SIGSTOP/SIGCONT), and then a main thread asleep in a lock wait never runs the handler.
So the main thread sleeps in select() on the wakeup fd instead: the C-level handler writes a byte
there from whichever thread took the signal, and the Python handler runs as soon as select returns.
"""
from __future__ import annotations

import logging
import os
import select
import signal

log = logging.getLogger(__name__)


class StopSignals:
    """`install()`, then `while not stops.reason: stops.wait(...)`; `request` stops from any thread."""

    def __init__(self) -> None:
        #: Why the process stops ("SIGTERM", "SIGINT" or a requested reason); None while it runs.
        self.reason: str | None = None
        self._read, self._write = os.pipe()
        os.set_blocking(self._write, False)

    def install(self) -> None:
        """Route SIGTERM and SIGINT here (main thread only)."""
        signal.set_wakeup_fd(self._write)
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, self._on_signal)

    def request(self, reason: str) -> None:
        """Stop for `reason` (thread-safe; the first reason given is kept)."""
        if self.reason is None:
            self.reason = reason
        try:
            os.write(self._write, b"\0")
        except BlockingIOError:
            pass  # the pipe is full of wake-ups already

    def wait(self, *fds: int, timeout: float | None = None) -> list[int]:
        """Sleep until a stop is due, one of `fds` is readable or `timeout` passed; the readable `fds`."""
        try:
            ready, _, _ = select.select([self._read, *fds], [], [], timeout)
        except InterruptedError:
            return []
        if self._read in ready:
            os.read(self._read, 256)
        return [fd for fd in ready if fd != self._read]

    def _on_signal(self, signum: int, _frame: object) -> None:
        name = signal.Signals(signum).name
        log.info("%s received", name)
        if self.reason is None:
            self.reason = name
