"""A readers-writer lock: many readers at once, or one writer.

Route queries (readers) vastly outnumber registrations (writers); one mutex would serialise the
queries behind each other for no reason. Writers are preferred: a waiting writer stops new
readers from entering, so a steady stream of queries cannot starve a registration.
Not reentrant: code that holds the lock calls `_locked` helpers, never the public methods.
"""
from __future__ import annotations

import threading
from types import TracebackType


class ReadWriteLock:
    """`with lock.read:` / `with lock.write:`."""

    __slots__ = ("_cond", "_readers", "_writer", "_writers_waiting", "read", "write")

    def __init__(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._readers = 0
        self._writer = False
        self._writers_waiting = 0
        self.read = _ReadSide(self)
        self.write = _WriteSide(self)

    def acquire_read(self) -> None:
        with self._cond:
            while self._writer or self._writers_waiting:
                self._cond.wait()
            self._readers += 1

    def release_read(self) -> None:
        with self._cond:
            self._readers -= 1
            if self._readers == 0:
                self._cond.notify_all()

    def acquire_write(self) -> None:
        with self._cond:
            self._writers_waiting += 1
            try:
                while self._writer or self._readers:
                    self._cond.wait()
            finally:
                self._writers_waiting -= 1
            self._writer = True

    def release_write(self) -> None:
        with self._cond:
            self._writer = False
            self._cond.notify_all()


class _ReadSide:
    __slots__ = ("_lock",)

    def __init__(self, lock: ReadWriteLock) -> None:
        self._lock = lock

    def __enter__(self) -> None:
        self._lock.acquire_read()

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self._lock.release_read()


class _WriteSide:
    __slots__ = ("_lock",)

    def __init__(self, lock: ReadWriteLock) -> None:
        self._lock = lock

    def __enter__(self) -> None:
        self._lock.acquire_write()

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self._lock.release_write()
