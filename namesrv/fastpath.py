"""One import for the protocol hot path: the Cython extension when it is built, else pure Python.

`IMPLEMENTATION` says which one is live ("cython" or "python"). Set NAMESRV_PURE_PYTHON=1 to
force the fallback (benchmarks use it to show the fast path's share). `scan_registration` parses
a registration body with its plain topic entries read straight into queue-fields tuples (and, in
Cython, steps over the entries unchanged since the broker's previous registration).
"""
from __future__ import annotations

import os

if os.environ.get("NAMESRV_PURE_PYTHON") == "1":
    from namesrv._purepath import (body_crc32, count_entries, decode_binary_header, encode_binary_header,
                                   json_opaque_key, queue_fields, route_hits, scan_registration, split_frames,
                                   stamp_frame)

    IMPLEMENTATION = "python"
else:
    try:
        from namesrv._fastpath import (body_crc32, count_entries, decode_binary_header, encode_binary_header,
                                       json_opaque_key, queue_fields, route_hits, scan_registration, split_frames,
                                       stamp_frame)

        IMPLEMENTATION = "cython"
    except ImportError:  # extension not built: same functions, same results, slower
        from namesrv._purepath import (body_crc32, count_entries, decode_binary_header, encode_binary_header,
                                       json_opaque_key, queue_fields, route_hits, scan_registration, split_frames,
                                       stamp_frame)

        IMPLEMENTATION = "python"

__all__ = ["IMPLEMENTATION", "body_crc32", "count_entries", "decode_binary_header", "encode_binary_header",
           "json_opaque_key", "queue_fields", "route_hits", "scan_registration", "split_frames", "stamp_frame"]
