"""Pre-encoded request frames: encode a request once, then stamp a new opaque per send.

A storm sends the same few thousand requests again and again; re-encoding headers and bodies
per send would make the generator, not the server, the bottleneck. The template is produced by
the protocol's own encoder, so what goes on the wire is exactly what `RemotingCommand.encode`
writes, only with a different opaque.
"""
from __future__ import annotations

import struct

from namesrv.protocol import RemotingCommand, SerializeType

_PREFIX = struct.Struct(">ii")
_INT32 = struct.Struct(">i")
_SENTINEL = 2_059_198_193  # any int32 whose JSON form cannot appear elsewhere in the header
_BINARY_OPAQUE_OFFSET = 5  # code (2) + language (1) + version (2)


class FrameTemplate:
    """`render(opaque)` -> the whole frame (length prefix included) of the template's command."""

    __slots__ = ("code", "_head", "_tail", "_body", "_serialize_type", "_fixed_len")

    def __init__(self, command: RemotingCommand) -> None:
        self.code = command.code
        self._serialize_type = command.serialize_type
        self._body = command.body or b""
        probe = RemotingCommand(command.code, language=command.language, version=command.version,
                                opaque=_SENTINEL, flag=command.flag, remark=command.remark,
                                ext_fields=command.ext_fields, serialize_type=command.serialize_type)
        header = probe.encode_header()
        if command.serialize_type == SerializeType.JSON:
            marker = b'"opaque":%d' % _SENTINEL
            if header.count(marker) != 1:
                raise ValueError("cannot locate the opaque in the JSON header")
            at = header.index(marker) + len(b'"opaque":')
            self._head, self._tail = header[:at], header[at + len(str(_SENTINEL)):]
        else:
            at = _BINARY_OPAQUE_OFFSET
            if header[at:at + 4] != _INT32.pack(_SENTINEL):
                raise ValueError("cannot locate the opaque in the binary header")
            self._head, self._tail = header[:at], header[at + 4:]
        self._fixed_len = len(self._head) + len(self._tail)

    def render(self, opaque: int) -> bytes:
        if self._serialize_type == SerializeType.JSON:
            stamp = b"%d" % opaque
        else:
            stamp = _INT32.pack(opaque)
        header_len = self._fixed_len + len(stamp)
        prefix = _PREFIX.pack(4 + header_len + len(self._body), (self._serialize_type << 24) | header_len)
        return b"".join((prefix, self._head, stamp, self._tail, self._body))
