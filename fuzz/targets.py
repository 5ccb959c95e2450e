"""What the fuzzers check: one function per target, each taking that target's payload bytes.

A check returns a short report (step -> "ok" or "ProtocolError: <message>") and raises
`Disagreement` when a property breaks; any other exception escaping is a crash as well.
Free of atheris, so `tests/test_fuzz_corpus.py` replays the corpus through the same code.
"""
from __future__ import annotations

import importlib
import struct
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import Any

from namesrv import fastpath
from namesrv.fastpath import pure
from namesrv.protocol import (
    BrokerMemberGroup,
    ClusterInfo,
    DataVersion,
    FrameDecoder,
    KVTable,
    LanguageCode,
    ProtocolError,
    RegisterBrokerBody,
    RemotingCommand,
    SerializeType,
    TopicConfig,
    TopicList,
    TopicRouteData,
    Version,
)
from namesrv.protocol.msgpack_codec import decode_msgpack, encode_msgpack
from namesrv.protocol.topic import TopicQueueTable, decode_registration

Report = dict[str, str]
_FASTPATH_FUNCTIONS = ("split_frames", "decode_binary_header", "encode_binary_header", "body_crc32", "queue_fields",
                       "scan_registration")
_LANGUAGES = frozenset(int(member) for member in LanguageCode)
_PREFIX = struct.Struct(">i")


class Disagreement(AssertionError):
    """Two implementations, or a decode and its re-encoding, disagree: a bug either way."""


def _implementations() -> dict[str, ModuleType]:
    """Pure Python always; the Cython extension when it is built (a harness may have swapped in
    an instrumented build under the same module name before this import)."""
    found = {"python": pure}
    try:
        found["cython"] = importlib.import_module("namesrv._fastpath")
    except ImportError:
        pass
    return found


IMPLEMENTATIONS = _implementations()


@contextmanager
def fast_path(impl: ModuleType) -> Iterator[None]:
    """Route `namesrv.fastpath` (which the codecs call through) to one implementation."""
    saved = {name: getattr(fastpath, name) for name in _FASTPATH_FUNCTIONS}
    for name in _FASTPATH_FUNCTIONS:
        setattr(fastpath, name, getattr(impl, name))
    try:
        yield
    finally:
        for name, function in saved.items():
            setattr(fastpath, name, function)


def _attempt(function: Callable[..., Any], *args: Any) -> tuple[Any, str | None]:
    """(value, None) or (None, the ProtocolError's message); anything else propagates."""
    try:
        return function(*args), None
    except ProtocolError as exc:
        return None, str(exc)


def _status(error: str | None) -> str:
    return "ok" if error is None else f"ProtocolError: {error}"


def _on_every_impl(what: str, call: Callable[[ModuleType], Any]) -> tuple[Any, str | None]:
    """Run `call` once per implementation; they must agree (repr tells bytes from bytearray)."""
    results = {name: _attempt(call, impl) for name, impl in IMPLEMENTATIONS.items()}
    shown = {name: (repr(value), error) for name, (value, error) in results.items()}
    if len(set(shown.values())) > 1:
        raise Disagreement(f"{what}: implementations disagree: {shown}"[:2000])
    return results["python"]


def _same(what: str, got: object, expected: object) -> None:
    if got != expected:
        raise Disagreement(f"{what}: got {got!r:.800}, expected {expected!r:.800}")


class Reader:
    """Deterministic arguments from payload bytes; reading past the end yields zeros/empties."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def take(self, size: int) -> bytes:
        chunk = self.data[self.pos:self.pos + size]
        self.pos += len(chunk)
        return chunk

    def byte(self) -> int:
        chunk = self.take(1)
        return chunk[0] if chunk else 0

    def integer(self) -> int:
        """A signed integer of 1, 2, 4 or 8 bytes (so out-of-range values come up too)."""
        return int.from_bytes(self.take(1 << (self.byte() & 3)), "big", signed=True)

    def text(self) -> str | None:
        """None, or up to 63 UTF-16 code units, lone surrogates allowed (as Java strings are)."""
        size = self.byte()
        if size >= 0xC0:
            return None
        units = self.take(2 * (size & 0x3F))
        return units[:len(units) & ~1].decode("utf-16-le", "surrogatepass")  # a cut-off last unit is dropped

    def rest(self) -> bytes:
        chunk = self.data[self.pos:]
        self.pos = len(self.data)
        return chunk


# --------------------------------------------------------------------------- frames

#: max_frame_length values worth trying; a selector past them means a small limit (0..).
_LIMITS = (16 * 1024 * 1024, 200, 8, 4, 0, -1, (1 << 31) - 1, 1 << 31, 1 << 40, -(1 << 40))
_WRAPS: tuple[Callable[[bytes], Any], ...] = (
    bytes,
    bytearray,
    lambda data: memoryview(b"\xa5" * 3 + data + b"\x5a" * 3)[3:3 + len(data)],  # reads must start at the offset
)


def _limit(selector: int) -> int:
    return _LIMITS[selector] if selector < len(_LIMITS) else selector - len(_LIMITS)


def _reference_split(stream: bytes, limit: int) -> tuple[list[bytes], int, bool]:
    """The framing rule spelled out plainly: (frames, bytes used, whether a bad length stopped it)."""
    frames, pos = [], 0
    while len(stream) - pos >= 4:
        total = _PREFIX.unpack_from(stream, pos)[0]
        if total < 4 or total + 4 > limit:
            return frames, pos, True
        if pos + 4 + total > len(stream):
            break
        frames.append(stream[pos + 4:pos + 4 + total])
        pos += 4 + total
    return frames, pos, False


def check_split_frames(payload: bytes) -> Report:
    """Payload: limit selector, buffer-type selector, stream."""
    reader = Reader(payload)
    limit, wrap = _limit(reader.byte()), _WRAPS[reader.byte() % len(_WRAPS)]
    stream = reader.rest()
    result, error = _on_every_impl("split_frames", lambda impl: impl.split_frames(wrap(stream), limit))
    expected_frames, expected_used, refused = _reference_split(stream, limit)
    _same("split_frames refused", error is not None, refused)
    if error is None:
        _same("split_frames", result, (expected_frames, expected_used))
    return {"split_frames": _status(error)}


def check_frame_decoder(payload: bytes) -> Report:
    """Payload: limit selector, chunk count (mod 9), that many chunk sizes, stream (the last chunk
    takes the rest). The frames must not depend on how the stream was cut."""
    reader = Reader(payload)
    limit = _limit(reader.byte())
    sizes = [reader.byte() for _ in range(reader.byte() % 9)]
    stream = reader.rest()
    chunks, pos = [], 0
    for size in sizes:
        chunks.append(stream[pos:pos + size])
        pos += len(chunks[-1])
    chunks.append(stream[pos:])

    def feed_all(impl: ModuleType) -> tuple[list[bytes], str | None, int]:
        decoder, frames = FrameDecoder(limit), []
        with fast_path(impl):
            for chunk in chunks:
                got, error = _attempt(decoder.feed, chunk)
                if error is not None:
                    return frames, error, decoder.buffered
                frames += got
        return frames, None, decoder.buffered

    (frames, error, buffered), _ = _on_every_impl("FrameDecoder", feed_all)
    expected_frames, used, refused = _reference_split(stream, limit)
    _same("FrameDecoder refused", error is not None, refused)
    if error is None:
        _same("FrameDecoder frames and buffered bytes", (frames, buffered), (expected_frames, len(stream) - used))
    else:
        _same("FrameDecoder frames before the refusal", frames, expected_frames[:len(frames)])
    return {"feed": _status(error)}


# --------------------------------------------------------------------------- headers and commands

def _normal_header(code: int, language: int, version: int, opaque: int, flag: int, remark: str | None,
                   ext: dict[str, str] | None) -> tuple:
    """What a binary header carrying these fields decodes to: empty strings travel as null."""
    kept = {key: value for key, value in (ext or {}).items() if key and value}
    return code, language, version, opaque, flag, remark or None, kept or None


def check_binary_header(payload: bytes) -> Report:
    """Payload: buffer-type selector, header. Whatever decodes re-encodes to the same fields."""
    reader = Reader(payload)
    wrap = _WRAPS[reader.byte() % len(_WRAPS)]
    data = reader.rest()
    fields, error = _on_every_impl("decode_binary_header", lambda impl: impl.decode_binary_header(wrap(data)))
    report = {"decode": _status(error)}
    if error is None:
        encoded, encode_error = _on_every_impl("encode_binary_header", lambda impl: impl.encode_binary_header(*fields))
        _same("encoding a decoded header", encode_error, None)
        again, _ = _on_every_impl("decode of re-encoded header", lambda impl: impl.decode_binary_header(encoded))
        _same("header round trip", again, _normal_header(*fields))
    return report


def check_encode_header(payload: bytes) -> Report:
    """Payload: encode_binary_header's arguments via `Reader` (any ints, text with lone surrogates)."""
    reader = Reader(payload)
    numbers = [reader.integer() for _ in range(5)]
    remark = reader.text()
    ext = None if reader.byte() & 1 else {reader.text(): reader.text() for _ in range(reader.byte() % 8)}
    args = (*numbers, remark, ext)
    encoded, error = _on_every_impl("encode_binary_header", lambda impl: impl.encode_binary_header(*args))
    if error is None:
        decoded, _ = _on_every_impl("decode of encoded header", lambda impl: impl.decode_binary_header(encoded))
        _same("encode/decode round trip", decoded, _normal_header(*args))
    return {"encode": _status(error)}


def _command_fields(command: RemotingCommand) -> tuple:
    return tuple(getattr(command, name) for name in RemotingCommand.WIRE_FIELDS)


def _expected_after_reencoding(command: RemotingCommand, serialize_type: int) -> tuple:
    if serialize_type == SerializeType.ROCKETMQ:
        code, language, version, opaque, flag, remark, ext = _normal_header(
            command.code, command.language, command.version, command.opaque, command.flag, command.remark,
            command.ext_fields)
    else:  # JSON names the language; a number with no name comes back as OTHER
        code, version, opaque, flag, remark, ext = (command.code, command.version, command.opaque, command.flag,
                                                    command.remark, command.ext_fields)
        language = command.language if command.language in _LANGUAGES else LanguageCode.OTHER
    return code, language, version, opaque, flag, remark, ext, command.body or None, serialize_type


def _reencode(command: RemotingCommand, report: Report) -> None:
    """Re-encode a decoded command in both header codecs: the implementations agree, and a frame
    that encodes decodes back to the same command (or the encoder refused with a ProtocolError)."""
    for serialize_type in (SerializeType.JSON, SerializeType.ROCKETMQ):
        copy = RemotingCommand(command.code, language=command.language, version=command.version,
                               opaque=command.opaque, flag=command.flag, remark=command.remark,
                               ext_fields=command.ext_fields, body=command.body, serialize_type=serialize_type)

        def encode(impl: ModuleType) -> bytes:
            with fast_path(impl):
                return copy.encode()

        name = serialize_type.name
        frame, error = _on_every_impl(f"encode as {name}", encode)
        report[f"encode {name}"] = _status(error)
        if error is None:
            _same(f"{name} frame length prefix", _PREFIX.unpack_from(frame)[0], len(frame) - 4)

            def decode(impl: ModuleType) -> tuple:
                with fast_path(impl):
                    return _command_fields(RemotingCommand.decode(frame[4:]))

            again, decode_error = _on_every_impl(f"decode of {name} re-encoding", decode)
            _same(f"decoding the {name} re-encoding", decode_error, None)
            _same(f"{name} round trip", again, _expected_after_reencoding(command, serialize_type))


def check_command(payload: bytes) -> Report:
    """Payload: one frame without its length prefix, as RemotingCommand.decode takes it."""
    def decode(impl: ModuleType) -> RemotingCommand:
        with fast_path(impl):
            return RemotingCommand.decode(payload)

    command, error = _on_every_impl("RemotingCommand.decode", decode)
    report = {"decode": _status(error)}
    if error is None:
        crc, _ = _on_every_impl("body_crc32", lambda impl: impl.body_crc32(command.body))
        _same("body_crc32", crc, zlib.crc32(command.body or b"") & 0x7FFFFFFF)
        _reencode(command, report)
    return report


def check_msgpack(payload: bytes) -> Report:
    """Payload: one ZeroMQ command frame."""
    command, error = _attempt(decode_msgpack, payload)
    report = {"decode": _status(error)}
    if error is None:
        _same("msgpack round trip", _command_fields(decode_msgpack(encode_msgpack(command))), _command_fields(command))
        _reencode(command, report)
    return report


# --------------------------------------------------------------------------- bodies

def _register_body_holds(body: RegisterBrokerBody) -> None:
    """An accepted body encodes in every form; the JSON forms read back the same topic table. The
    compressed layout cannot carry every table (a topic name with a space, a mapping without its
    "topic": Java fails on those too), so reading it back may fail, with a ProtocolError only."""
    forms = [(False, Version.V5_3_3), (True, Version.V5_3_3), (True, Version.V4_9_8), (False, 36)]
    for compressed, version in forms:
        data = body.encode(compressed=compressed, version=version)
        again, error = _attempt(RegisterBrokerBody.decode, data, compressed, version)
        if error is not None:
            _same(f"re-reading the {'compressed' if compressed else 'JSON'} form (version {version})", compressed, True)
            continue
        _same("DataVersion after re-encoding", again.wrapper.data_version, body.wrapper.data_version)
        if not compressed:
            _same("topic table after re-encoding", again.wrapper.topic_config_table, body.wrapper.topic_config_table)


def _route_holds(route: TopicRouteData) -> None:
    _same("TopicRouteData legacy re-encoding", TopicRouteData.decode(route.encode(False)), route)
    _same("TopicRouteData standard re-encoding", TopicRouteData.decode(route.encode(True)), route)


def _cluster_holds(info: ClusterInfo) -> None:
    again = ClusterInfo.decode(info.encode())
    _same("ClusterInfo brokers after re-encoding", again.broker_addr_table, info.broker_addr_table)
    _same("ClusterInfo clusters after re-encoding", again.cluster_addr_table,
          {name: sorted(names) for name, names in info.cluster_addr_table.items()})


def _reencodes(decode: Callable[[bytes], Any]) -> Callable[[Any], None]:
    return lambda value: _same(f"{type(value).__name__} after re-encoding", decode(value.encode()), value)


def _topic_config_text_holds(config: TopicConfig) -> None:
    again = TopicConfig.from_text(config.to_text())
    _same("text TopicConfig after re-encoding", (again.topic_name, again.read_queue_nums, again.write_queue_nums,
                                                  again.perm, again.topic_filter_type),
          (config.topic_name, config.read_queue_nums, config.write_queue_nums, config.perm, config.topic_filter_type))


def _body_check(decode: Callable[[bytes], Any], holds: Callable[[Any], None]) -> Callable[[bytes], Report]:
    def check(payload: bytes) -> Report:
        value, error = _attempt(decode, payload)
        if error is None:
            try:
                holds(value)
            except ProtocolError as exc:
                raise Disagreement(f"accepted {value!r:.400}, but its re-encoding is refused: {exc}") from exc
        return {"decode": _status(error)}
    return check


def _register(compressed: bool, version: int) -> Callable[[bytes], RegisterBrokerBody]:
    return lambda data: RegisterBrokerBody.decode(data, compressed=compressed, version=version)


def _register_json(version: int) -> Callable[[bytes], RegisterBrokerBody]:
    """A JSON body, also as the server reads it: `decode_registration` (scan_registration, then the lenient
    parser for what it leaves) on each implementation must read what the full decode reads, or
    fail with the same ProtocolError."""
    def decode(data: bytes) -> RegisterBrokerBody:
        body, error = _attempt(RegisterBrokerBody.decode, data, False, version)

        def server_read(impl: ModuleType) -> tuple[TopicQueueTable, list[str] | None]:
            with fast_path(impl):
                return decode_registration(data, False, version)

        read, read_error = _on_every_impl("decode_registration", server_read)
        _same("decode_registration's error", read_error, error)
        if error is not None:
            raise ProtocolError(error)
        _same("decode_registration", read, (TopicQueueTable.of(body.wrapper), body.filter_server_list))
        return body
    return decode


def _register_layout(version: int) -> Callable[[bytes], RegisterBrokerBody]:
    """The compressed form's inner layout: deflating here lets the fuzzer mutate what the parser reads."""
    return lambda raw: RegisterBrokerBody.decode(zlib.compress(raw, 1), compressed=True, version=version)


CHECKS: dict[str, Callable[[bytes], Report]] = {
    "split_frames": check_split_frames,
    "frame_decoder": check_frame_decoder,
    "binary_header": check_binary_header,
    "encode_header": check_encode_header,
    "command": check_command,
    "msgpack": check_msgpack,
    "DataVersion": _body_check(DataVersion.decode, _reencodes(DataVersion.decode)),
    "TopicRouteData": _body_check(TopicRouteData.decode, _route_holds),
    "ClusterInfo": _body_check(ClusterInfo.decode, _cluster_holds),
    "TopicList": _body_check(TopicList.decode, _reencodes(TopicList.decode)),
    "KVTable": _body_check(KVTable.decode, _reencodes(KVTable.decode)),
    "BrokerMemberGroup": _body_check(BrokerMemberGroup.decode, _reencodes(BrokerMemberGroup.decode)),
    "RegisterBrokerBody-json": _body_check(_register_json(Version.V5_3_3), _register_body_holds),
    "RegisterBrokerBody-old": _body_check(_register_json(36), _register_body_holds),
    "RegisterBrokerBody-compressed": _body_check(_register(True, Version.V5_3_3), _register_body_holds),
    "RegisterBrokerBody-layout": _body_check(_register_layout(Version.V5_3_3), _register_body_holds),
    "RegisterBrokerBody-layout-4.9.8": _body_check(_register_layout(Version.V4_9_8), _register_body_holds),
    "TopicConfig-text": _body_check(lambda data: TopicConfig.from_text(data.decode("utf-8", "replace")),
                                    _topic_config_text_holds),
}


# --------------------------------------------------------------------------- seeds and corpus files

def _seeds() -> dict[str, list[bytes]]:
    """Valid inputs per target, for the fuzzer to start from."""
    from namesrv.protocol import BrokerData, QueueData, RequestCode, TopicConfigSerializeWrapper

    commands = [
        RemotingCommand.request(RequestCode.REGISTER_BROKER, {"brokerName": "b", "brokerId": 0, "compressed": False},
                                b'{"filterServerList":[]}', opaque=7, language=LanguageCode.JAVA),
        RemotingCommand(17, flag=1, opaque=9, remark="No topic route info\n", ext_fields={"k": ""}),
        RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "T", "ns": "n"}, b"x", opaque=-3,
                                serialize_type=SerializeType.ROCKETMQ),
        RemotingCommand(0, flag=1, opaque=1, remark="ok é", serialize_type=SerializeType.ROCKETMQ),
    ]
    frames = [command.encode() for command in commands]
    json_headers = [  # what fastjson tolerates: numbers and booleans as strings, names or numbers for language
        b'{"code":"105","extFields":{"a":1,"b":true,"c":1.5,"d":null,"e":"x"},"flag":0,"language":"GO",'
        b'"opaque":-7,"remark":7,"serializeTypeCurrentRPC":"JSON","version":479}',
        b'{"code":0,"extFields":null,"language":99,"opaque":1,"remark":null}',
    ]
    frames += [_PREFIX.pack(4 + len(header)) + _PREFIX.pack(len(header)) + header + b"body" for header in json_headers]
    stream = b"".join(frames)
    headers = [command.encode_header() for command in commands if command.serialize_type == SerializeType.ROCKETMQ]
    wrapper = TopicConfigSerializeWrapper({"T": TopicConfig("T", 8, 8, 6, attributes={"a": "b"}),
                                           "U": TopicConfig("U", attributes=None)}, DataVersion(5, 1700000000000))
    register = RegisterBrokerBody(wrapper, ["fs:1"])
    mapping = b'{"bname":"b","currIdMap":{0:0},"epoch":1,"scope":"__global__","topic":"S","totalQueues":1}'
    layout = zlib.decompress(register.encode(compressed=True))
    layout_with_mapping = layout[:-4] + _PREFIX.pack(1) + _PREFIX.pack(len(mapping)) + mapping
    route = TopicRouteData([QueueData("b", 4, 4, 6, 1)], [BrokerData("c", "b", {0: "h:0", 1: "h:1"}, True, "z")],
                           {"h:0": ["fs"]}, "b:4", {"b": {"topic": "S"}})
    escapes = TopicRouteData([QueueData("b/é", 1, 1, 6)], [BrokerData("c", "b/é\x01\x7f😀", {-1: "h:1"})], {}, None,
                             {"b": {"10": [1, {"2": "x", "1": None}], "9": {}}})
    return {
        "split_frames": [bytes([0, wrap]) + stream for wrap in range(3)] + [bytes([1, 0]) + frames[0]],
        "frame_decoder": [bytes([0, 4, 3, 20, 1, 40]) + stream, bytes([0, 8, 1, 1, 1, 1, 1, 1, 1, 1]) + stream,
                          bytes([len(_LIMITS) + 60, 0]) + stream],
        "binary_header": [bytes([wrap]) + head for wrap in range(3) for head in headers],
        "encode_header": [bytes([1, 0, 105, 0, 0, 1, 1, 0xDF, 2, 0, 0, 0, 1, 0, 0, 2]) + "ok".encode("utf-16-le")
                          + bytes([0, 1, 1]) + "k".encode("utf-16-le") + b"\x01" + "v".encode("utf-16-le")],
        "command": [frame[4:] for frame in frames],
        "msgpack": [encode_msgpack(command) for command in commands],
        "DataVersion": [DataVersion(5, 1700000000000, 1).encode()],
        "TopicRouteData": [route.encode(True), route.encode(False), escapes.encode(True),
                           b'{"queueDatas":[{"brokerName":"b","topicSynFlag":"3","perm":"6"}]}'],
        "ClusterInfo": [ClusterInfo({"b": BrokerData("c", "b", {0: "h:0"})}, {"c": ["b"]}).encode()],
        "TopicList": [TopicList(["T", "U"], "h:0").encode()],
        "KVTable": [KVTable({"T": "b:4"}).encode()],
        "BrokerMemberGroup": [BrokerMemberGroup("c", "b", {0: "h:0", 2: "h:2"}).encode()],
        "RegisterBrokerBody-json": [register.encode(), b'{"topicConfigSerializeWrapper":{"mappingDataVersion":{"counter":'
                                    b'"1"},"topicConfigTable":{"T":{"order":"TRUE","topicFilterType":"X"}}}}'],
        "RegisterBrokerBody-old": [wrapper.encode()],
        "RegisterBrokerBody-compressed": [register.encode(compressed=True)],
        "RegisterBrokerBody-layout": [layout, layout_with_mapping],
        "RegisterBrokerBody-layout-4.9.8": [zlib.decompress(register.encode(compressed=True, version=Version.V4_9_8))],
        "TopicConfig-text": [b"T 8 8 6 SINGLE_TAG {}", b'T 8 8 6 MULTI_TAG {"a":"1"}'],
    }


SEEDS = _seeds()

CORPUS = Path(__file__).resolve().parents[1] / "tests" / "fuzz_corpus"
#: Corpus files with this suffix are stored deflated (large, repetitive inputs).
DEFLATED_SUFFIX = ".zlib"


def corpus_files() -> list[Path]:
    """Every regression input: tests/fuzz_corpus/<target>/<what it broke>[.zlib]."""
    return sorted(path for path in CORPUS.glob("*/*") if path.is_file())


def read_corpus_file(path: Path) -> bytes:
    data = path.read_bytes()
    return zlib.decompress(data) if path.name.endswith(DEFLATED_SUFFIX) else data
