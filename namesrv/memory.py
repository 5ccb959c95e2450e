"""Give freed heap memory back to the OS (glibc's malloc_trim).

An open connection costs tens of KB, mostly libzmq's buffers. Once freed, glibc keeps those pages
in its heaps, fragmented between long-lived objects, so after a connection flood RSS stays at the
flood's high-water mark though nothing uses it. malloc_trim(0) hands the free pages back (madvise):
cheap when there is nothing to return, a few milliseconds right after a flood (`python -m bench
attacks`' connection flood prints RSS before, at the peak and after).
"""
from __future__ import annotations

import ctypes
from collections.abc import Callable


def heap_trimmer() -> Callable[[], None] | None:
    """A function returning free heap pages to the OS, or None if the C library has no malloc_trim
    (musl, macOS): there, RSS keeps the high-water mark of past floods."""
    try:
        trim = ctypes.CDLL(None).malloc_trim  # the process's own C library
    except (OSError, AttributeError):
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int

    def release() -> None:
        trim(0)
    return release
