"""A readers-writer lock: many readers at once, or one writer.

Route queries (readers) vastly outnumber registrations (writers); one mutex would serialise the
queries behind each other for no reason. Writers are preferred: a waiting writer stops new
readers from entering, so a steady stream of queries cannot starve a registration.
Not reentrant: code that holds the lock calls `_locked` helpers, never the public methods.

Every registration that reads a topic table takes the write side, so entering and leaving a side
are one Python call each (the side's `__enter__`/`__exit__` are the implementation), over a C mutex
held only while the counts change, taken with `acquire` and `release` in a `try` (a `with` on it
costs about as much again: the statement looks both methods up and calls `__exit__` with three
arguments); the condition variable is touched only when a thread actually waits. An unchanged
re-registration's refresh takes no side: it checks `epoch` (a seqlock's count of writes) under the
mutex instead (`RouteInfoManager.refresh`).
"""
from __future__ import annotations

import threading
from types import TracebackType


class ReadWriteLock:
    """`with lock.read:` / `with lock.write:`."""

    __slots__ = ("mutex", "_cond", "_readers", "_writer", "_writers_waiting", "_waiters", "epoch", "read", "write")

    def __init__(self) -> None:
        #: Held only while the counts change (and by a lock-free reader acting on its check of `epoch`).
        self.mutex = threading.Lock()
        self._cond = threading.Condition(self.mutex)
        self._readers = 0
        self._writer = False
        self._writers_waiting = 0
        #: Threads waiting on `_cond` (readers or writers): a release notifies only when there are some.
        self._waiters = 0
        #: Writes begun plus writes ended: odd while a writer holds the lock. A reader that takes no
        #: lock reads it before and after it reads the tables: the same even value means no writer
        #: changed them meanwhile (a seqlock's check).
        self.epoch = 0
        self.read = _ReadSide(self)
        self.write = _WriteSide(self)

    def acquire_read(self) -> None:
        self.read.__enter__()

    def release_read(self) -> None:
        self.read.__exit__(None, None, None)

    def acquire_write(self) -> None:
        self.write.__enter__()

    def release_write(self) -> None:
        self.write.__exit__(None, None, None)

    def _wait(self) -> None:
        """Wait for a release (the mutex held)."""
        self._waiters += 1
        try:
            self._cond.wait()
        finally:
            self._waiters -= 1


class _ReadSide:
    __slots__ = ("_lock", "_mutex")

    def __init__(self, lock: ReadWriteLock) -> None:
        self._lock = lock
        self._mutex = lock.mutex

    def __enter__(self) -> None:
        lock, mutex = self._lock, self._mutex
        mutex.acquire()
        try:
            while lock._writer or lock._writers_waiting:
                lock._wait()
            lock._readers += 1
        finally:
            mutex.release()

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        lock, mutex = self._lock, self._mutex
        mutex.acquire()
        try:
            lock._readers -= 1
            if lock._readers == 0 and lock._waiters:
                lock._cond.notify_all()
        finally:
            mutex.release()


class _WriteSide:
    __slots__ = ("_lock", "_mutex")

    def __init__(self, lock: ReadWriteLock) -> None:
        self._lock = lock
        self._mutex = lock.mutex

    def __enter__(self) -> None:
        lock, mutex = self._lock, self._mutex
        mutex.acquire()
        try:
            if lock._writer or lock._readers:
                lock._writers_waiting += 1
                try:
                    while lock._writer or lock._readers:
                        lock._wait()
                finally:
                    lock._writers_waiting -= 1
            lock._writer = True
            lock.epoch += 1
        finally:
            mutex.release()

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        lock, mutex = self._lock, self._mutex
        mutex.acquire()
        try:
            lock._writer = False
            lock.epoch += 1
            if lock._waiters:
                lock._cond.notify_all()
        finally:
            mutex.release()
