"""The ZeroMQ-native framing: one msgpack array per command, one ZeroMQ frame per command.

`[code, language, version, opaque, flag, remark, extFields, body]` — the same fields as a
remoting command, so the same handlers serve both endpoints. A ZeroMQ message may carry several
command frames (batching); replies come back one frame per answered command.
"""
from __future__ import annotations

import msgpack

from namesrv.protocol.command import RemotingCommand
from namesrv.errors import ProtocolError

#: Marks commands that arrived over the ZeroMQ endpoint (answers go back as msgpack).
SERIALIZE_MSGPACK = 0x7F
_FIELDS = 8
_INT32_MIN, _INT32_MAX = -(1 << 31), (1 << 31) - 1


def encode_msgpack(command: RemotingCommand) -> bytes:
    return msgpack.packb([command.code, command.language, command.version, command.opaque, command.flag,
                          command.remark, command.ext_fields, command.body], use_bin_type=True)


def _int(value: object, name: str) -> int:
    if isinstance(value, int) and not isinstance(value, bool) and _INT32_MIN <= value <= _INT32_MAX:
        return value
    raise ProtocolError(f"msgpack command field {name!r} must be an int32, got {value!r}"[:200])


def decode_msgpack(frame: bytes) -> RemotingCommand:
    """Decode one command frame; anything else raises ProtocolError naming the problem."""
    try:
        fields = msgpack.unpackb(frame, raw=False, strict_map_key=True, max_bin_len=len(frame),
                                 max_str_len=len(frame), max_array_len=len(frame), max_map_len=len(frame))
    except Exception as exc:  # msgpack raises several unrelated types for bad input
        raise ProtocolError(f"msgpack command is not valid msgpack: {exc}"[:300]) from None
    if not isinstance(fields, list) or len(fields) != _FIELDS:
        raise ProtocolError(f"msgpack command must be an array of {_FIELDS} fields")
    code, language, version, opaque, flag, remark, ext, body = fields
    if remark is not None and not isinstance(remark, str):
        raise ProtocolError("msgpack command field 'remark' must be a string or nil")
    if ext is not None and not (isinstance(ext, dict) and all(isinstance(k, str) and isinstance(v, str)
                                                               for k, v in ext.items())):
        raise ProtocolError("msgpack command field 'extFields' must map strings to strings")
    if body is not None and not isinstance(body, bytes):
        raise ProtocolError("msgpack command field 'body' must be binary or nil")
    return RemotingCommand(_int(code, "code"), language=_int(language, "language"), version=_int(version, "version"),
                           opaque=_int(opaque, "opaque"), flag=_int(flag, "flag"), remark=remark, ext_fields=ext,
                           body=body or None, serialize_type=SERIALIZE_MSGPACK, wire_size=len(frame))


__all__ = ["SERIALIZE_MSGPACK", "decode_msgpack", "encode_msgpack"]
