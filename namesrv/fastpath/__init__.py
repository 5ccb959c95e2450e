"""One import for the protocol's codecs and scanners: the Cython extension when it is built, else pure Python.

Each concern is a pure module here with its Cython twin beside it (`frames.py` / `frames.pxi`,
`headers.py`, `registration.py`, `generator.py`), the twins built into the one extension
`namesrv._fastpath`: frames off a byte stream and stamped answers, the binary header codec and the
JSON header's opaque key, registration bodies read to queue fields; and, for the benchmarks, the
request generator's send and receive loop. Only codecs, scanners and that loop live here; what to
do with what they read is the processor's.

`IMPLEMENTATION` says which one is live ("cython" or "python"). Set NAMESRV_PURE_PYTHON=1 to
force the pure twins (benchmarks use it to show the extension's share).
"""
from __future__ import annotations

import os

if os.environ.get("NAMESRV_PURE_PYTHON") == "1":
    from namesrv.fastpath.pure import (RequestGenerator, body_crc32, body_crc_key, body_digest, count_containers,
                                       count_entries, decode_binary_header, encode_binary_header, entry_digest,
                                       json_opaque_key, json_opaque_keys, queue_fields, scan_registration,
                                       split_frames, stamp_frame, stamp_frames)

    IMPLEMENTATION = "python"
else:
    try:
        from namesrv._fastpath import (RequestGenerator, body_crc32, body_crc_key, body_digest, count_containers,
                                       count_entries, decode_binary_header, encode_binary_header, entry_digest,
                                       json_opaque_key, json_opaque_keys, queue_fields, scan_registration,
                                       split_frames, stamp_frame, stamp_frames)

        IMPLEMENTATION = "cython"
    except ImportError:  # extension not built: same functions, same results, slower
        from namesrv.fastpath.pure import (RequestGenerator, body_crc32, body_crc_key, body_digest, count_containers,
                                           count_entries, decode_binary_header, encode_binary_header, entry_digest,
                                           json_opaque_key, json_opaque_keys, queue_fields, scan_registration,
                                           split_frames, stamp_frame, stamp_frames)

        IMPLEMENTATION = "python"

__all__ = ["IMPLEMENTATION", "RequestGenerator", "body_crc32", "body_crc_key", "body_digest", "count_containers",
           "count_entries", "decode_binary_header",
           "encode_binary_header", "entry_digest", "json_opaque_key", "json_opaque_keys", "queue_fields",
           "scan_registration", "split_frames", "stamp_frame", "stamp_frames"]
