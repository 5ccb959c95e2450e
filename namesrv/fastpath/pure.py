"""The pure-Python twin of `namesrv._fastpath` as one module: what namesrv.fastpath falls back to,
and what the parity tests hold the extension to."""
from __future__ import annotations

from namesrv.fastpath.frames import body_crc32, body_digest, split_frames, stamp_frame, stamp_frames
from namesrv.fastpath.generator import RequestGenerator
from namesrv.fastpath.headers import (body_crc_key, decode_binary_header, encode_binary_header, json_opaque_key,
                                      json_opaque_keys)
from namesrv.fastpath.registration import (count_containers, count_entries, entry_digest, queue_fields,
                                           scan_registration)

__all__ = ["RequestGenerator", "body_crc32", "body_crc_key", "body_digest", "count_containers", "count_entries",
           "decode_binary_header",
           "encode_binary_header",
           "entry_digest", "json_opaque_key", "json_opaque_keys", "queue_fields", "scan_registration", "split_frames",
           "stamp_frame", "stamp_frames"]
