"""RemotingCommand: one request or response of the remoting protocol, and its frame codec."""
from __future__ import annotations

import struct
from typing import Protocol, TypeVar

from namesrv import fastpath
from namesrv.protocol.codes import FLAG_ONEWAY, FLAG_RESPONSE, SERVER_VERSION, LanguageCode, SerializeType
from namesrv.errors import ProtocolError
from namesrv.protocol.json_header import decode_json_header, encode_json_header

_PREFIX = struct.Struct(">ii")  # totalLength, headerField
_new_command = object.__new__
_MAX_HEADER_LENGTH = 0xFFFFFF  # the header length shares its int32 with the serialize-type byte


class TypedHeader(Protocol):
    @classmethod
    def read(cls, request: RemotingCommand) -> TypedHeader: ...


H = TypeVar("H", bound=TypedHeader)


class RemotingCommand:
    """A decoded remoting command.

    Plain data: `ext_fields` holds the typed "custom header" flattened to strings exactly as it
    travels; `serialize_type` is the header codec it arrived in (a response keeps its
    request's, so callers are always answered in the codec they spoke).
    """

    #: What travels on the wire (equality compares these).
    WIRE_FIELDS = ("code", "language", "version", "opaque", "flag", "remark", "ext_fields", "body", "serialize_type")
    __slots__ = (*WIRE_FIELDS, "wire_size", "_body_crc32", "_typed_header")

    def __init__(
        self,
        code: int,
        *,
        language: int = LanguageCode.JAVA,
        version: int = SERVER_VERSION,
        opaque: int = 0,
        flag: int = 0,
        remark: str | None = None,
        ext_fields: dict[str, str] | None = None,
        body: bytes | None = None,
        serialize_type: int = SerializeType.JSON,
        wire_size: int = 0,
    ) -> None:
        """`wire_size`: the bytes of the frame it was decoded from (0 for a command made here), which a
        request is charged while it waits for its answer (namesrv.remoting.budget)."""
        self.code = code
        self.language = language
        self.version = version
        self.opaque = opaque
        self.flag = flag
        self.remark = remark
        self.ext_fields = ext_fields
        self.body = body
        self.serialize_type = serialize_type
        self.wire_size = wire_size
        self._body_crc32: tuple[bytes | None, int] | None = None
        self._typed_header: tuple[dict[str, str] | None, object] | None = None

    def body_crc32(self) -> int:
        """The masked CRC32 of the body (0 without one), computed once per body: the reactor's
        inline path checks it and the handler checks it again."""
        memo = self._body_crc32
        if memo is None or memo[0] is not self.body:
            memo = self._body_crc32 = (self.body, fastpath.body_crc32(self.body or b""))
        return memo[1]

    def typed_header(self, kind: type[H]) -> H:
        """`kind.read(self)`: a handler's typed reading of `ext_fields`, done once per request
        (the reactor's inline path reads a registration's header, the handler reuses it)."""
        memo = self._typed_header
        if memo is None or memo[0] is not self.ext_fields or type(memo[1]) is not kind:
            memo = self._typed_header = (self.ext_fields, kind.read(self))
        return memo[1]

    def keep_typed_header(self, header: object) -> None:
        """`header` is what `typed_header(type(header))` reads: keep it."""
        self._typed_header = (self.ext_fields, header)

    def derive(self, opaque: int, body: bytes | None, wire_size: int) -> RemotingCommand:
        """The command a frame decodes to whose header differs from this one's in the opaque only,
        with `body`, from a frame of `wire_size` bytes; the typed reading of the header is shared.
        (The reactor reads a peer's repeated header once: a copy of fields, not a constructor call.)"""
        command = _new_command(RemotingCommand)
        command.code = self.code
        command.language = self.language
        command.version = self.version
        command.opaque = opaque
        command.flag = self.flag
        command.remark = self.remark
        command.ext_fields = self.ext_fields
        command.body = body
        command.serialize_type = self.serialize_type
        command.wire_size = wire_size
        command._body_crc32 = None
        command._typed_header = self._typed_header
        return command

    @classmethod
    def request(
        cls,
        code: int,
        ext_fields: dict[str, str] | None = None,
        body: bytes | None = None,
        *,
        opaque: int = 0,
        oneway: bool = False,
        serialize_type: int = SerializeType.JSON,
        version: int = SERVER_VERSION,
        language: int = LanguageCode.PYTHON,
    ) -> RemotingCommand:
        """A request; ext_fields values are converted to their wire strings."""
        return cls(
            code,
            language=language,
            version=version,
            opaque=opaque,
            flag=FLAG_ONEWAY if oneway else 0,
            ext_fields=None if ext_fields is None else {k: wire_string(v) for k, v in ext_fields.items() if v is not None},
            body=body,
            serialize_type=serialize_type,
        )

    def make_response(
        self,
        code: int,
        remark: str | None = None,
        ext_fields: dict[str, str] | None = None,
        body: bytes | None = None,
    ) -> RemotingCommand:
        """The response to this request: same opaque and codec, flag = response bit only (every
        response is made here: its fields are stored, not passed through the constructor)."""
        response = _new_command(RemotingCommand)
        response.code = code
        response.language = LanguageCode.JAVA
        response.version = SERVER_VERSION
        response.opaque = self.opaque
        response.flag = FLAG_RESPONSE
        response.remark = remark
        response.ext_fields = ext_fields
        response.body = body
        response.serialize_type = self.serialize_type
        response.wire_size = 0
        response._body_crc32 = None
        response._typed_header = None
        return response

    @property
    def is_response(self) -> bool:
        return bool(self.flag & FLAG_RESPONSE)

    @property
    def is_oneway(self) -> bool:
        return bool(self.flag & FLAG_ONEWAY)

    def encode_header(self) -> bytes:
        fields = (self.code, self.language, self.version, self.opaque, self.flag, self.remark, self.ext_fields)
        if self.serialize_type == SerializeType.ROCKETMQ:
            return fastpath.encode_binary_header(*fields)
        if self.serialize_type == SerializeType.JSON:
            return encode_json_header(*fields)
        raise ProtocolError(f"unknown serialize type {self.serialize_type}")

    def encode(self) -> bytes:
        """The whole frame, length prefix included."""
        return b"".join(self.encode_parts())

    def encode_parts(self) -> tuple[bytes, bytes]:
        """The frame as (everything before the body, the body): a sender may write the two as they are,
        a large body shared by many frames without a copy."""
        header = self.encode_header()
        if len(header) > _MAX_HEADER_LENGTH:
            raise ProtocolError(f"header of {len(header)} bytes does not fit the 24-bit header-length field")
        body = self.body or b""
        return _PREFIX.pack(4 + len(header) + len(body), (self.serialize_type << 24) | len(header)) + header, body

    @classmethod
    def decode(cls, frame: bytes) -> RemotingCommand:
        """Decode one frame as `split_frames` yields it (without the 4-byte length prefix)."""
        if len(frame) < 4:
            raise ProtocolError(f"frame of {len(frame)} bytes has no header-length field")
        field = int.from_bytes(frame[:4], "big")
        serialize_type = field >> 24
        header_len = field & 0xFFFFFF
        if header_len > len(frame) - 4:
            raise ProtocolError(f"header length {header_len} exceeds the frame ({len(frame) - 4} bytes after the field)")
        header = frame[4:4 + header_len]
        if serialize_type == SerializeType.JSON:
            fields = decode_json_header(header)
        elif serialize_type == SerializeType.ROCKETMQ:
            fields = fastpath.decode_binary_header(header)
        else:
            raise ProtocolError(f"unknown serialize type {serialize_type}")
        code, language, version, opaque, flag, remark, ext = fields
        body = frame[4 + header_len:] or None
        return cls(code, language=language, version=version, opaque=opaque, flag=flag, remark=remark,
                   ext_fields=ext, body=body, serialize_type=serialize_type, wire_size=len(frame))

    def __repr__(self) -> str:
        kind = "response" if self.is_response else ("oneway" if self.is_oneway else "request")
        body = f"{len(self.body)} bytes" if self.body else "none"
        return (f"RemotingCommand({kind} code={self.code} opaque={self.opaque} remark={self.remark!r} "
                f"ext={self.ext_fields!r} body={body})")

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, RemotingCommand):
            return NotImplemented
        return all(getattr(self, name) == getattr(other, name) for name in self.WIRE_FIELDS)


def wire_string(value: object) -> str:
    """How Java's toString() writes a header field value (booleans lower-case)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
