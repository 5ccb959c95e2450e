"""Give freed heap memory back to the OS (glibc's malloc_trim).

An open connection costs ~60 KB, mostly libzmq's buffers. Once freed, glibc keeps those pages in
its heaps, fragmented between long-lived objects, so after a connection flood RSS stays at the
flood's high-water mark (about 300 MB after 5,000 connections at once) though nothing uses it.
malloc_trim(0) hands the free pages back (madvise): ~0.2 ms when there is nothing to return, a
few ms right after a flood (measured on 5,000-connection bursts: RSS back to ~36 MB).
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
