"""Helpers for tests that pause real server processes."""
from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def frozen(pid: int) -> Iterator[None]:
    """SIGSTOP the process, wait until the kernel reports it stopped, SIGCONT on exit."""
    os.kill(pid, signal.SIGSTOP)
    try:
        deadline = time.monotonic() + 5
        while "T (stopped)" not in Path(f"/proc/{pid}/status").read_text():
            assert time.monotonic() < deadline, "process did not stop"
            time.sleep(0.005)
        yield
    finally:
        os.kill(pid, signal.SIGCONT)
