"""What a broker registers: DataVersion, TopicConfig and the RegisterBrokerBody (reference 3.2-3.6)."""
from __future__ import annotations

import struct
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple

from namesrv import fastpath
from namesrv.protocol import jsonbody
from namesrv.protocol.codes import INT32_MAX, INT32_MIN, PERM_READ, PERM_WRITE, V3_0_11, Version
from namesrv.errors import ProtocolError
from namesrv.fastpath.registration import QueueFacts
from namesrv.protocol.jsonbody import as_int, dumps, expect, get_bool, get_dict, get_int, get_list, get_str, string_list

_INT32 = struct.Struct(">i")
#: Every JSON integer of smaller magnitude is a Java long (one below -2**63 is too: get_int decides those).
_LONG_LIMIT = 1 << 63
#: TopicFilterType's names.
FILTER_TYPES = ("SINGLE_TAG", "MULTI_TAG")
#: One topic as the route table reads it: (topicName, readQueueNums, writeQueueNums, perm, topicSysFlag).
QueueFields = tuple[str, int, int, int, int]
#: A compressed body may inflate to at most this much: a real broker's 200,000 topics (the
#: maxTopicsPerRegistration default) take about 12 MiB in the compressed layout.
MAX_INFLATED_BODY = 64 * 1024 * 1024
#: One part of the compressed layout (a TopicConfig's text, the filterServerList, a mapping) may
#: declare at most this many bytes: real ones take tens to hundreds, and a part is parsed whole.
MAX_COMPRESSED_PART = 64 * 1024
#: The compressed layout is inflated this far ahead of the parts read.
INFLATE_STEP = 256 * 1024


class DataVersion(NamedTuple):
    """Version stamp of a broker's topic table; equal only if all three fields are equal. A tuple:
    every registration reads one and compares it with the broker's last."""

    counter: int = 0
    timestamp: int = 0
    state_version: int = 0

    def next_version(self, now_ms: int) -> DataVersion:
        return DataVersion(self.counter + 1, now_ms, self.state_version)

    def to_dict(self) -> dict[str, int]:
        return {"counter": self.counter, "stateVersion": self.state_version, "timestamp": self.timestamp}

    @classmethod
    def from_dict(cls, obj: Any, what: str = "DataVersion") -> DataVersion:
        expect(obj, dict, what)
        get = obj.get
        counter, timestamp, state = get("counter"), get("timestamp"), get("stateVersion")
        if type(counter) is int and type(timestamp) is int and type(state) is int and max(
                abs(counter), abs(timestamp), abs(state)) < _LONG_LIMIT:  # what every broker sends, read at once
            return cls(counter, timestamp, state)
        return cls(get_int(obj, "counter", 0, what), get_int(obj, "timestamp", 0, what),
                   get_int(obj, "stateVersion", 0, what))

    def encode(self) -> bytes:
        return dumps(self.to_dict())

    @classmethod
    def decode(cls, data: bytes) -> DataVersion:
        return cls.from_dict(jsonbody.loads(data, "DataVersion"))


def data_version_of(fields: list[int] | None) -> DataVersion | None:
    """The DataVersion whose fields are `fields` (None: none), as the write log carries one (a list):
    a change's revive (`WriteHandler.revive`) makes it again, so nothing else holds that form."""
    return None if fields is None else DataVersion(*fields)


@dataclass(slots=True)
class TopicConfig:
    """One topic of a broker's topic table."""

    topic_name: str
    read_queue_nums: int = 16
    write_queue_nums: int = 16
    perm: int = PERM_READ | PERM_WRITE
    topic_filter_type: str = "SINGLE_TAG"
    topic_sys_flag: int = 0
    order: bool = False
    attributes: dict[str, str] | None = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.attributes is not None:
            out["attributes"] = self.attributes
        out["order"] = self.order
        out["perm"] = self.perm
        out["readQueueNums"] = self.read_queue_nums
        out["topicFilterType"] = self.topic_filter_type
        out["topicName"] = self.topic_name
        out["topicSysFlag"] = self.topic_sys_flag
        out["writeQueueNums"] = self.write_queue_nums
        return out

    @classmethod
    def from_dict(cls, obj: Any, name: str | None = None) -> TopicConfig:
        plain = cls._from_plain_dict(obj)
        if plain is not None:
            return plain
        what = f"TopicConfig[{name}]"
        expect(obj, dict, what)
        topic = get_str(obj, "topicName", what) or name
        if not topic:
            raise ProtocolError(f"{what} has no topicName")
        attributes = obj.get("attributes")
        if attributes is not None:
            expect(attributes, dict, what, ".attributes")
        filter_type = get_str(obj, "topicFilterType", what)
        if filter_type not in FILTER_TYPES:
            filter_type = "SINGLE_TAG"  # fastjson reads an unknown enum name as null; the default is as harmless
        return cls(topic, get_int(obj, "readQueueNums", 16, what, 32), get_int(obj, "writeQueueNums", 16, what, 32),
                   get_int(obj, "perm", PERM_READ | PERM_WRITE, what, 32), filter_type,
                   get_int(obj, "topicSysFlag", 0, what, 32), get_bool(obj, "order", what), attributes)

    @classmethod
    def _from_plain_dict(cls, obj: Any) -> TopicConfig | None:
        """What a broker sends (every field present, of its JSON type, in range), read in one go;
        None for anything else, which `from_dict` reads field by field. A registration body holds
        thousands of these, so the per-field checks were most of its decode time."""
        if type(obj) is not dict:
            return None
        get = obj.get
        topic, read, write, perm = get("topicName"), get("readQueueNums"), get("writeQueueNums"), get("perm")
        sys_flag, filter_type, order, attributes = get("topicSysFlag"), get("topicFilterType"), get("order"), \
            get("attributes")
        if (type(topic) is str and topic and type(read) is int and type(write) is int and type(perm) is int
                and type(sys_flag) is int and type(order) is bool and type(filter_type) is str
                and filter_type in FILTER_TYPES and (attributes is None or type(attributes) is dict)
                and INT32_MIN <= read <= INT32_MAX and INT32_MIN <= write <= INT32_MAX
                and INT32_MIN <= perm <= INT32_MAX and INT32_MIN <= sys_flag <= INT32_MAX):
            return cls(topic, read, write, perm, filter_type, sys_flag, order, attributes)
        return None

    def queue_fields(self) -> QueueFields:
        return self.topic_name, self.read_queue_nums, self.write_queue_nums, self.perm, self.topic_sys_flag

    def to_text(self) -> str:
        """The space-separated form of compressed bodies (loses topicSysFlag and order, as Java's)."""
        text = f"{self.topic_name} {self.read_queue_nums} {self.write_queue_nums} {self.perm} {self.topic_filter_type} "
        if self.attributes is not None:
            text += dumps(self.attributes).decode()
        return text

    @classmethod
    def from_text(cls, text: str) -> TopicConfig:
        tokens = text.split(" ")
        while tokens and tokens[-1] == "":
            tokens.pop()  # Java's split drops trailing empty strings
        if len(tokens) < 5:
            raise ProtocolError(f"compressed TopicConfig {text[:80]!r} has {len(tokens)} fields, needs 5")
        read, write, perm = (as_int(token, 32) for token in tokens[1:4])  # Integer.parseInt
        if read is None or write is None or perm is None:
            raise ProtocolError(f"compressed TopicConfig {text[:80]!r} has a non-integer queue count or perm")
        if tokens[4] not in FILTER_TYPES:  # TopicFilterType.valueOf throws
            raise ProtocolError(f"compressed TopicConfig {text[:80]!r} has an unknown topicFilterType")
        attributes: dict[str, str] | None = None
        if len(tokens) >= 6:
            try:
                parsed = jsonbody.loads(tokens[5].encode(), "attributes")
                attributes = parsed if isinstance(parsed, dict) else None
            except ProtocolError:
                attributes = None  # 5.x ignores a 6th token it cannot parse
        return cls(tokens[0], read, write, perm, tokens[4], attributes=attributes)


@dataclass(slots=True)
class TopicConfigSerializeWrapper:
    """A broker's topic table with its DataVersion (and the 5.x static-topic mapping maps, kept raw)."""

    topic_config_table: dict[str, TopicConfig] = field(default_factory=dict)
    data_version: DataVersion = field(default_factory=DataVersion)
    mapping_data_version: DataVersion | None = None
    topic_queue_mapping_info_map: dict[str, Any] = field(default_factory=dict)
    topic_queue_mapping_detail_map: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"dataVersion": self.data_version.to_dict()}
        if self.mapping_data_version is not None:
            out["mappingDataVersion"] = self.mapping_data_version.to_dict()
        out["topicConfigTable"] = {name: config.to_dict() for name, config in self.topic_config_table.items()}
        out["topicQueueMappingDetailMap"] = self.topic_queue_mapping_detail_map
        out["topicQueueMappingInfoMap"] = self.topic_queue_mapping_info_map
        return out

    @classmethod
    def from_dict(cls, obj: Any) -> TopicConfigSerializeWrapper:
        what = "TopicConfigSerializeWrapper"
        expect(obj, dict, what)
        table = {name: TopicConfig.from_dict(config, name)
                 for name, config in get_dict(obj, "topicConfigTable", what).items()}
        return cls(table, *_wrapper_versions_and_mappings(obj, what))

    def queue_fields(self) -> dict[str, QueueFields]:
        return {name: config.queue_fields() for name, config in self.topic_config_table.items()}

    def encode(self) -> bytes:
        return dumps(self.to_dict())


def _wrapper_versions_and_mappings(obj: dict, what: str) -> tuple[DataVersion, DataVersion | None, dict, dict]:
    """A TopicConfigSerializeWrapper's fields after its topic table, read (and checked) in order."""
    data_version = DataVersion.from_dict(obj["dataVersion"], f"{what}.dataVersion") if obj.get("dataVersion") \
        is not None else DataVersion()
    mapping = obj.get("mappingDataVersion")
    infos = {topic: expect(info, dict, what, ".topicQueueMappingInfoMap[", topic, "]")
             for topic, info in get_dict(obj, "topicQueueMappingInfoMap", what).items() if info is not None}
    return (data_version, None if mapping is None else DataVersion.from_dict(mapping, f"{what}.mappingDataVersion"),
            infos, get_dict(obj, "topicQueueMappingDetailMap", what))


def _topic_config_queue_fields(obj: Any, name: str) -> QueueFields:
    return TopicConfig.from_dict(obj, name).queue_fields()


@dataclass(slots=True)
class TopicQueueTable:
    """A broker's topic table as the route table reads it: per topic only its queue fields.

    What the server decodes a registration into (`decode_registration`): a body of thousands of
    topics would otherwise build (and check field by field) a TopicConfig per topic only for the
    route table to copy five of its fields. Accepts and rejects exactly what
    TopicConfigSerializeWrapper does. `from_dict` takes topic entries as parsed JSON or as the
    queue-fields tuples `fastpath.scan_registration` makes of plain ones.

    A table decoded against the broker's previous registration (`decode_registration`'s
    `previous`) lacks the `omitted` entries that are byte for byte those of `omitted_since`;
    `entries` is what the next registration's decode takes as `previous` (None: nothing to offer),
    `facts` what its `topics` hold, summed up (None: look at each). Tables compare (and show)
    what they say, not these.

    A registration's change carries the decoded table as it is to the route table, and through
    the write log as the list of its fields (read back by `from_fields`). Slots, not a NamedTuple:
    a changed registration reads its fields about ten times, and Python 3.11 reads a slot with a
    specialised instruction but a NamedTuple's field through the generic attribute lookup. Never
    changed once made (`dataclasses.replace` makes another).
    """

    topics: dict[str, QueueFields]
    data_version: DataVersion
    topic_queue_mapping_info_map: dict[str, Any]
    entries: bytes | None = field(default=None, compare=False, repr=False)
    omitted: int = field(default=0, compare=False, repr=False)
    omitted_since: bytes | None = field(default=None, compare=False, repr=False)
    facts: QueueFacts | None = field(default=None, compare=False, repr=False)

    __hash__ = None  # type: ignore[assignment]  # its dicts are not hashable anyway

    @classmethod
    def from_fields(cls, fields: Any) -> TopicQueueTable:
        """The table whose fields are `fields` (a table after the write log's round trip: a list,
        its DataVersion a list too)."""
        topics, data_version, mappings, *rest = fields
        return cls(topics, data_version_of(data_version), mappings, *rest)

    @classmethod
    def from_dict(cls, obj: Any) -> TopicQueueTable:
        what = "TopicConfigSerializeWrapper"
        expect(obj, dict, what)
        topics = fastpath.queue_fields(get_dict(obj, "topicConfigTable", what), _topic_config_queue_fields)
        data_version, _, infos, _ = _wrapper_versions_and_mappings(obj, what)
        return cls(topics, data_version, infos)

    @classmethod
    def of(cls, wrapper: TopicConfigSerializeWrapper) -> TopicQueueTable:
        return cls(wrapper.queue_fields(), wrapper.data_version, wrapper.topic_queue_mapping_info_map)

    def queue_fields(self) -> dict[str, QueueFields]:
        return self.topics


@dataclass(slots=True)
class RegisterBrokerBody:
    """REGISTER_BROKER's body: topic table plus filter servers, as JSON or in the compressed layout."""

    wrapper: TopicConfigSerializeWrapper = field(default_factory=TopicConfigSerializeWrapper)
    filter_server_list: list[str] | None = field(default_factory=list)

    def encode(self, compressed: bool = False, version: int = Version.V5_3_3) -> bytes:
        if version < V3_0_11:
            return self.wrapper.encode()
        if not compressed:
            return dumps({"filterServerList": self.filter_server_list or [],
                          "topicConfigSerializeWrapper": self.wrapper.to_dict()})
        return zlib.compress(self._compressed_layout(version), 9)

    def _compressed_layout(self, version: int) -> bytes:
        parts = []

        def put(blob: bytes) -> None:
            parts.append(_INT32.pack(len(blob)))
            parts.append(blob)

        put(self.wrapper.data_version.encode())
        parts.append(_INT32.pack(len(self.wrapper.topic_config_table)))
        for config in self.wrapper.topic_config_table.values():
            put(config.to_text().encode())
        put(dumps(self.filter_server_list or []))
        if version >= Version.V5_0_0:
            mappings = self.wrapper.topic_queue_mapping_info_map
            parts.append(_INT32.pack(len(mappings)))
            for info in mappings.values():
                put(dumps(info))
        return b"".join(parts)

    @classmethod
    def decode(cls, data: bytes | None, compressed: bool = False, version: int = Version.V5_3_3) -> RegisterBrokerBody:
        """Decode any of the three forms; a missing body is an empty topic table with DataVersion 0."""
        if not data:
            return cls(TopicConfigSerializeWrapper(), None)
        if compressed and version >= V3_0_11:
            return cls._decode_compressed(data, version)
        return cls(*_decode_json_body(data, version, TopicConfigSerializeWrapper.from_dict))

    @classmethod
    def _decode_compressed(cls, data: bytes, version: int) -> RegisterBrokerBody:
        """The compressed layout (reference 3.6), inflated only as far as it is read, one part at a
        time: what is held is the objects built plus one part, never the whole inflated body, and
        each part's declared length is checked against its bound before it is inflated."""
        stream = _InflatedStream(data)
        data_version = DataVersion.decode(stream.blob("dataVersion"))
        count = stream.int32("topic count")
        if count < 0 or count > MAX_INFLATED_BODY // 4:
            raise ProtocolError(f"compressed RegisterBrokerBody: topic count {count} exceeds the body")
        table: dict[str, TopicConfig] = {}
        for _ in range(count):
            blob = stream.blob("TopicConfig")
            try:
                config = TopicConfig.from_text(blob.decode("utf-8"))
            except UnicodeDecodeError:
                raise ProtocolError("compressed RegisterBrokerBody: TopicConfig is not UTF-8") from None
            table[config.topic_name] = config
        servers = string_list(jsonbody.loads(stream.blob("filterServerList"), "filterServerList"), "filterServerList")
        mappings: dict[str, Any] = {}
        if version >= Version.V5_0_0 and stream.more():
            for _ in range(max(0, stream.int32("mapping count"))):
                info = expect(jsonbody.loads(stream.blob("TopicQueueMappingInfo"), "TopicQueueMappingInfo"), dict,
                              "TopicQueueMappingInfo")
                mappings[expect(info.get("topic"), str, "TopicQueueMappingInfo.topic")] = info
        wrapper = TopicConfigSerializeWrapper(table, data_version, topic_queue_mapping_info_map=mappings)
        return cls(wrapper, servers)


class _InflatedStream:
    """A zlib stream read front to back as the compressed layout's int32s and length-prefixed
    blobs, inflating at most INFLATE_STEP bytes ahead of what has been read."""

    __slots__ = ("_inflater", "_input", "_buffer", "_pos", "_inflated")

    def __init__(self, data: bytes) -> None:
        self._inflater = zlib.decompressobj()
        self._input = data
        self._buffer = b""
        self._pos = 0
        self._inflated = 0

    def _fill(self, size: int, what: str) -> bool:
        """Make `size` bytes available from the read position; False if the stream ends first."""
        inflater = self._inflater
        while len(self._buffer) - self._pos < size:
            if inflater.eof:
                return False
            try:
                chunk = inflater.decompress(self._input, INFLATE_STEP)
            except zlib.error as exc:
                raise ProtocolError(f"compressed RegisterBrokerBody does not inflate: {exc}") from None
            self._input = inflater.unconsumed_tail
            if not chunk:
                return False  # input used up before the stream's end: truncated
            self._inflated += len(chunk)
            if self._inflated > MAX_INFLATED_BODY:
                raise ProtocolError(f"compressed RegisterBrokerBody inflates past {MAX_INFLATED_BODY} bytes "
                                    f"(at {what})")
            self._buffer = self._buffer[self._pos:] + chunk
            self._pos = 0
        return True

    def int32(self, what: str) -> int:
        if not self._fill(4, what):
            raise ProtocolError(f"compressed RegisterBrokerBody truncated at {what}")
        value = _INT32.unpack_from(self._buffer, self._pos)[0]
        self._pos += 4
        return value

    def blob(self, what: str) -> bytes:
        size = self.int32(what)
        if size < 0:
            raise ProtocolError(f"compressed RegisterBrokerBody: {what} length {size} is negative")
        if size > MAX_COMPRESSED_PART:
            raise ProtocolError(f"compressed RegisterBrokerBody: {what} length {size} exceeds "
                                f"{MAX_COMPRESSED_PART} bytes")
        if not self._fill(size, what):
            raise ProtocolError(f"compressed RegisterBrokerBody: {what} length {size} exceeds the body")
        self._pos += size
        return self._buffer[self._pos - size:self._pos]

    def more(self) -> bool:
        """Is there anything left to read?"""
        return self._fill(1, "the end")


def compressed_topic_count(data: bytes) -> int | None:
    """The topic count a compressed body declares (the int32 after its DataVersion blob), inflating
    no further than that; None if the body is too malformed to say (its decode reports what)."""
    stream = _InflatedStream(data)
    try:
        stream.blob("dataVersion")
        return stream.int32("topic count")
    except ProtocolError:
        return None


#: Where a JSON registration body keeps its topic table: in the RegisterBrokerBody's wrapper since
#: 3.0.11; before, the wrapper was the whole body.
TABLE_PATH = ("topicConfigSerializeWrapper", "topicConfigTable")
LEGACY_TABLE_PATH = ("topicConfigTable",)


def table_path(version: int) -> tuple[str, ...]:
    """Where a JSON registration body sent by a broker of `version` keeps its topic table."""
    return LEGACY_TABLE_PATH if version < V3_0_11 else TABLE_PATH


def _decode_json_body(data: bytes, version: int, read_wrapper: Callable[[Any], Any],
                      scanned: Any = None) -> tuple[Any, list[str] | None]:
    """(wrapper, filter servers) of a JSON body: the wrapper alone before 3.0.11, else inside a RegisterBrokerBody.

    `scanned` is the body as `fastpath.scan_registration` parsed it (plain topic entries as
    queue-fields tuples, which only `TopicQueueTable.from_dict` reads); without it (None) the
    lenient parser reads the body, so errors read as they always did.
    """
    legacy = version < V3_0_11
    what = "TopicConfigSerializeWrapper" if legacy else "RegisterBrokerBody"
    obj = jsonbody.loads(data, what) if scanned is None else scanned
    if legacy:
        return read_wrapper(obj), None
    obj = expect(obj, dict, what)
    wrapper = read_wrapper(get_dict(obj, "topicConfigSerializeWrapper", what))
    return wrapper, string_list(get_list(obj, "filterServerList", what), f"{what}.filterServerList")


def decode_registration(data: bytes | None, compressed: bool = False, version: int = Version.V5_3_3,
                        previous: bytes | None = None) -> tuple[TopicQueueTable, list[str] | None]:
    """`RegisterBrokerBody.decode` as the server needs it: (topic table, filter servers). A JSON
    body's topics go straight to their queue fields; the rare compressed form decodes fully.

    `previous` (the `entries` of the broker's previous registration's table) lets the fast path
    leave out the topic entries unchanged since: a broker bumps its DataVersion when one topic of
    thousands changes, and only that one is then read (see TopicQueueTable).
    """
    if data and not (compressed and version >= V3_0_11):
        jsonbody.check_parse_cost(data, "RegisterBrokerBody" if version >= V3_0_11 else
                                  "TopicConfigSerializeWrapper")
        # None: not for the scanner; the lenient parser reads the body
        value, entries, omitted, facts = (fastpath.scan_registration(data, table_path(version), previous)
                                          or (None, None, 0, None))
        if type(value) is tuple:  # the plain form (fastpath.registration.plain_form): nothing left to check
            topics, counter, timestamp, state_version, servers = value
            return TopicQueueTable(topics, DataVersion(counter, timestamp, state_version), {}, entries, omitted,
                                   previous if omitted else None, facts), servers
        table, servers = _decode_json_body(data, version, TopicQueueTable.from_dict, value)
        return replace(table, entries=entries, omitted=omitted, omitted_since=previous if omitted else None,
                       facts=facts), servers
    body = RegisterBrokerBody.decode(data, compressed, version)
    return TopicQueueTable.of(body.wrapper), body.filter_server_list
