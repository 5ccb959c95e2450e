"""Registration bodies: read straight to the route table's queue fields, only changed topic entries read.

Pure twin of `namesrv/fastpath/registration.pxi` (same functions, features and results; see
namesrv.fastpath). Here the body is parsed by orjson and its topic entries are then located by
regular expressions over the (now known valid) bytes; the twin reads it in one pass. Either may
answer None for "parse it yourself" (the twin where orjson would read floats, very deep nesting
and the like), never a different value.
"""
from __future__ import annotations

import re
import struct
from collections.abc import Callable, Collection

import orjson
from xxhash import xxh3_64_intdigest

_INT32_MIN, _INT32_MAX = -(1 << 31), (1 << 31) - 1
_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1

#: TopicFilterType's names (as `namesrv.protocol.topic.FILTER_TYPES`).
_FILTER_TYPES = ("SINGLE_TAG", "MULTI_TAG")


# Twin of `_plain_fields` in namesrv/_fastpath.pyx: the one definition of a "plain" topic entry.
def _plain_queue_fields(obj: object) -> tuple | None:
    """(topicName, readQueueNums, writeQueueNums, perm, topicSysFlag) of a topic entry as brokers
    send it (a dict with every field present, of its JSON type, ints within int32); None otherwise."""
    if type(obj) is not dict:
        return None
    get = obj.get
    topic, read, write, perm, sys_flag = (get("topicName"), get("readQueueNums"), get("writeQueueNums"),
                                          get("perm"), get("topicSysFlag"))
    filter_type, order, attributes = get("topicFilterType"), get("order"), get("attributes")
    if (type(topic) is str and topic and type(read) is int and type(write) is int and type(perm) is int
            and type(sys_flag) is int and type(order) is bool and type(filter_type) is str
            and filter_type in _FILTER_TYPES and (attributes is None or type(attributes) is dict)
            and _INT32_MIN <= read <= _INT32_MAX and _INT32_MIN <= write <= _INT32_MAX
            and _INT32_MIN <= perm <= _INT32_MAX and _INT32_MIN <= sys_flag <= _INT32_MAX):
        return topic, read, write, perm, sys_flag
    return None


def queue_fields(table: dict, fallback: Callable[[object, str], tuple]) -> dict[str, tuple]:
    """A parsed topicConfigTable as the route table reads it: key -> (topicName, readQueueNums,
    writeQueueNums, perm, topicSysFlag), without a TopicConfig per topic.

    A plain entry (see `_plain_queue_fields`) is read here, and one `scan_registration` read (a
    tuple, which JSON never yields) is kept; any other entry is `fallback(entry, key)`, which reads
    (or rejects) it field by field as `TopicConfig.from_dict` does.
    """
    out = table.copy()  # a clone of the hash table: cheaper than inserting key by key
    for key, obj in table.items():
        if type(obj) is not tuple:
            fields = _plain_queue_fields(obj)
            out[key] = fallback(obj, key) if fields is None else fields
    return out


def entry_digest(data: bytes | bytearray | memoryview) -> int:
    """XXH3 (64 bits, seed 0) of `data`, 0 read as 1 (the twin's sets mark empty slots with 0): what
    tells a topic entry from the broker's own previous one. Not cryptographic: only an accident
    can collide, and a broker can only ever mislead itself."""
    return xxh3_64_intdigest(data) or 1


#: One remembered topic entry, as the twin's `_Entry` struct lays it out (native order): the digest
#: of its bytes (key to closing brace), and its key's digest's top 40 bits over its length in bytes
#: (0 past 24 bits: such an entry is never stepped over). A run's record has the same layout: the
#: digest of its bytes (first key to last closing brace) and their length (both 0 when one of its
#: entries is never stepped over, and so neither is the run).
_ENTRY = struct.Struct("=QQ")
ENTRY_LENGTH_BITS = 24
_LENGTH_MASK = (1 << ENTRY_LENGTH_BITS) - 1
#: Entries are remembered one by one and also in runs of this many, in table order (`entries`: each
#: entry's record, then each run's): a run whose bytes are those of the previous registration's run
#: at its place is stepped over at once, so an unchanged table costs a digest per run, not per entry.
RUN_ENTRIES = 16

_STRING = rb'"(?:[^"\\]++|\\.)*+"'
_FLAT = rb'[\[{](?:[^"\[\]{}]++|' + _STRING + rb')*+[\]}]'
_NESTED = rb'[\[{](?:[^"\[\]{}]++|' + _STRING + rb'|' + _FLAT + rb')*+[\]}]'
#: A string; a container nested at most three deep (a topic entry and its attributes); a scalar;
#: whitespace; any string or bracket (to walk deeper containers). Valid JSON only.
_STRING_AT = re.compile(_STRING)
_CONTAINER_AT = re.compile(rb'[\[{](?:[^"\[\]{}]++|' + _STRING + rb'|' + _NESTED + rb')*+[\]}]')
_SCALAR_AT = re.compile(rb'[^ \t\n\r,\]}]++')
_WS_AT = re.compile(rb'[ \t\n\r]*+')
_TOKEN = re.compile(_STRING + rb'|[\[\]{}]')


class _NotForMe(Exception):
    """An entry of `previous` that is only a prefix of this one (a number that grew): the twin
    leaves such a body to the caller's parser, and so does this one."""


#: What the topic entries a registration's decode read hold, for namesrv.routeinfo.route_input's
#: rules: (the distinct characters of their topic names, sorted; the names' shortest and longest
#: lengths; the fewest and most read or write queues; their perms or-ed together).
QueueFacts = tuple[str, int, int, int, int, int]


def scan_registration(data: bytes | bytearray | memoryview, table_path: tuple[str, ...],
                      previous: bytes | None) -> tuple[object, bytes | None, int, QueueFacts | None] | None:
    """(value, entries, omitted, facts): `value` is `orjson.loads(data)`, except that in the object at
    `table_path` (keys from the top; `()` for none) every plain topic entry is replaced by its
    queue-fields tuple, and the entries unchanged since `previous` are left out; None if `data` is
    not strict JSON (the caller then parses it leniently). When that object and the body around it
    are of the plain form (`plain_form`), `value` is that form instead.

    `entries` stands for this table's topic entries, to be passed as `previous` with the broker's
    next registration: each entry whose bytes are those of the entry at the same place in
    `previous` is left out of the value (the route table holds it already; brokers list their
    topics in a stable order, so a registration that changed a few topics has only those read),
    and `omitted` counts them. `entries` is None when it cannot stand for the table: no single
    topic table, a repeated key, or a key with escapes (several spellings of one key); then
    nothing is left out either.

    `facts` sums up the topic entries read (those left in the table), so that a large table is
    checked against the route table's rules without a look at each entry: None when `entries`
    is, when no entry was read, or when one of them is not plain. The twin may also answer None
    (a topic name it read is not ASCII: it sums up names as ASCII), never other facts.
    """
    if isinstance(data, str):  # orjson would take it; the twin reads buffers only
        raise TypeError("scan_registration needs a bytes-like object, not 'str'")
    if previous is not None:
        if type(previous) is not bytes:
            raise TypeError(f"previous: expected bytes, got {type(previous).__name__}")
        if len(previous) % _ENTRY.size or _entry_count(len(previous) // _ENTRY.size) is None:
            raise ValueError("previous: not the entries of a scan_registration")
    try:
        obj = orjson.loads(data)
    except orjson.JSONDecodeError:
        return None
    table = obj
    for step in table_path:
        if type(table) is not dict:
            return obj, None, 0, None
        table = table.get(step)
    if type(table) is not dict:
        return plain_form(obj, table_path) or obj, None, 0, None
    for key, entry in table.items():
        fields = _plain_queue_fields(entry)
        if fields is not None:
            table[key] = fields  # replacing values (not keys) while iterating is safe
    buf = data if type(data) is bytes else bytes(data)
    found: list[int] = []
    start = _WS_AT.match(buf).end()
    if table_path and buf[start:start + 1] == b"{":
        _find_tables(buf, start, table_path, 0, found)
    if len(found) != 1:
        return plain_form(obj, table_path) or obj, None, 0, None
    try:
        read = _read_table(buf, found[0], previous)
    except _NotForMe:
        return None
    if read is None:
        return plain_form(obj, table_path) or obj, None, 0, None
    entries, omitted = read
    for key in omitted:
        del table[key]
    return plain_form(obj, table_path) or obj, entries, len(omitted), queue_facts(table.values())


#: A registration body's plain form: (topic table, dataVersion's counter, timestamp and
#: stateVersion, filterServerList; None for a body that is the wrapper itself).
PlainForm = tuple[dict, int, int, int, "list[str] | None"]


def plain_form(value: object, table_path: tuple[str, ...]) -> PlainForm | None:
    """A scanned registration body (`value`, its topic table at `table_path`, of one or two steps)
    as brokers send it, read at once; None for anything else, which the caller reads field by field.

    Plain: every topic entry plain (a queue-fields tuple); the wrapper's (the table's object's)
    dataVersion, and mappingDataVersion, absent, null or an object whose counter, timestamp and
    stateVersion are each absent, null or a JSON integer within int64; its
    topicQueueMappingInfoMap absent, null or empty, its topicQueueMappingDetailMap absent, null or
    an object; and with two steps the body's filterServerList absent, null or an array of strings.
    The one definition of the plain form (the extension reads the same off the body's bytes,
    without making the objects around the table: `_plain_body`).
    """
    if len(table_path) == 1:
        wrapper, servers = value, None
    elif len(table_path) == 2 and type(value) is dict:
        wrapper, servers = value.get(table_path[0]), value.get("filterServerList")
        if servers is None:
            servers = []
        elif type(servers) is not list or any(type(server) is not str for server in servers):
            return None
    else:
        return None
    if type(wrapper) is not dict:
        return None
    table, infos, details = wrapper.get(table_path[-1]), wrapper.get("topicQueueMappingInfoMap"), \
        wrapper.get("topicQueueMappingDetailMap")
    version = _plain_version(wrapper.get("dataVersion"))
    if (type(table) is not dict or any(type(entry) is not tuple for entry in table.values()) or version is None
            or _plain_version(wrapper.get("mappingDataVersion")) is None
            or not (infos is None or (type(infos) is dict and not infos))
            or not (details is None or type(details) is dict)):
        return None
    return table, *version, servers


def _plain_version(obj: object) -> tuple[int, int, int] | None:
    """(counter, timestamp, stateVersion) of a plain DataVersion (absent: zeros); None if not plain."""
    if obj is None:
        return 0, 0, 0
    if type(obj) is not dict:
        return None
    fields = tuple(0 if field is None else field
                   for field in (obj.get("counter"), obj.get("timestamp"), obj.get("stateVersion")))
    if all(type(field) is int and _INT64_MIN <= field <= _INT64_MAX for field in fields):
        return fields
    return None


def queue_facts(rows: Collection[object]) -> QueueFacts | None:
    """QueueFacts of queue-fields tuples (topic names str, the rest ints); None if there are none,
    or anything else among them. The one definition of the facts (the twin's scanner sums up the
    same as it reads)."""
    if not rows or any(type(row) is not tuple for row in rows):
        return None
    names = [row[0] for row in rows]
    counts = [count for row in rows for count in (row[1], row[2])]
    perm_bits = 0
    for row in rows:
        perm_bits |= row[3]
    lengths = [len(name) for name in names]
    return "".join(sorted(set("".join(names)))), min(lengths), max(lengths), min(counts), max(counts), perm_bits


def _key(token: bytes) -> str:
    return orjson.loads(token) if b"\\" in token else token[1:-1].decode()


def _value_end(buf: bytes, pos: int) -> int:
    """Where the (valid) JSON value at `pos` ends."""
    c = buf[pos]
    if c == 0x22:
        return _STRING_AT.match(buf, pos).end()
    if c != 0x7B and c != 0x5B:
        return _SCALAR_AT.match(buf, pos).end()
    match = _CONTAINER_AT.match(buf, pos)
    if match is not None:
        return match.end()
    depth = 0
    for token in _TOKEN.finditer(buf, pos):
        c = buf[token.start()]
        if c == 0x7B or c == 0x5B:
            depth += 1
        elif c == 0x7D or c == 0x5D:
            depth -= 1
            if depth == 0:
                return token.end()
    raise AssertionError("unbalanced brackets in JSON orjson accepted")


def _next_member(buf: bytes, pos: int) -> int | None:
    """After a member: the start of the next one, or None past the object's closing brace."""
    pos = _WS_AT.match(buf, pos).end()
    if buf[pos] == 0x7D:
        return None
    return _WS_AT.match(buf, pos + 1).end()


def _find_tables(buf: bytes, pos: int, path: tuple[str, ...], step: int, found: list[int]) -> int:
    """At an object's '{': note in `found` where each object along path[step:] starts (as the twin
    reaches it: every member with that key whose value is an object); the object's end."""
    member = _WS_AT.match(buf, pos + 1).end()
    if buf[member] == 0x7D:
        return member + 1
    while member is not None:
        key_end = _STRING_AT.match(buf, member).end()
        at = _WS_AT.match(buf, _WS_AT.match(buf, key_end).end() + 1).end()  # past the ':'
        if buf[at] == 0x7B and _key(buf[member:key_end]) == path[step]:
            if step + 1 == len(path):
                found.append(at)
                end = _value_end(buf, at)
            else:
                end = _find_tables(buf, at, path, step + 1, found)
        else:
            end = _value_end(buf, at)
        member = _next_member(buf, end)
    return _WS_AT.match(buf, end).end() + 1


def _entry_count(records: int) -> int | None:
    """How many entries `records` records (the entries', then their runs') stand for; None if no count fits."""
    count = records - -(-records // (RUN_ENTRIES + 1))
    return count if count + -(-count // RUN_ENTRIES) == records else None


def _read_table(buf: bytes, pos: int, previous: bytes | None) -> tuple[bytes, list[str]] | None:
    """At the topic table's '{': (its entries, the keys of those unchanged since `previous`), or
    None when the entries cannot stand for it (a key with escapes, a repeated key)."""
    records: list[tuple[int, int]] = []
    bounds: list[tuple[int, int]] = []  # where each entry's bytes start and end
    omitted: list[str] = []
    count = _entry_count(len(previous) // _ENTRY.size) if previous else 0
    view = memoryview(buf)
    member = _WS_AT.match(buf, pos + 1).end()
    if buf[member] == 0x7D:
        member = None
    while member is not None:
        index = len(records)
        if index % RUN_ENTRIES == 0 and index < count:
            digest, span = _ENTRY.unpack_from(previous, (count + index // RUN_ENTRIES) * _ENTRY.size)
            if 0 < span <= len(buf) - member and entry_digest(view[member:member + span]) == digest:
                for at in range(index, min(index + RUN_ENTRIES, count)):  # the bytes of before: entries in place
                    records.append(_ENTRY.unpack_from(previous, at * _ENTRY.size))
                    end = member + (records[-1][1] & _LENGTH_MASK)
                    bounds.append((member, end))
                    omitted.append(_key(buf[member:_STRING_AT.match(buf, member).end()]))
                    member = _next_unchanged(buf, end)
                continue
        if index < count:
            digest, key_length = _ENTRY.unpack_from(previous, index * _ENTRY.size)
            span = key_length & _LENGTH_MASK
            if 0 < span <= len(buf) - member and entry_digest(view[member:member + span]) == digest:
                records.append((digest, key_length))
                bounds.append((member, member + span))
                omitted.append(_key(buf[member:_STRING_AT.match(buf, member).end()]))
                member = _next_unchanged(buf, member + span)
                continue
        key_end = _STRING_AT.match(buf, member).end()
        if b"\\" in buf[member:key_end]:
            return None
        end = _value_end(buf, _WS_AT.match(buf, _WS_AT.match(buf, key_end).end() + 1).end())
        span = end - member
        records.append((entry_digest(view[member:end]),
                        (entry_digest(view[member + 1:key_end - 1]) >> ENTRY_LENGTH_BITS << ENTRY_LENGTH_BITS)
                        | (span if span <= _LENGTH_MASK else 0)))
        bounds.append((member, end))
        member = _next_member(buf, end)
    if len({(key_length >> ENTRY_LENGTH_BITS) | 1 for _, key_length in records}) != len(records):
        return None
    runs = [_run_record(view, records, bounds, first) for first in range(0, len(records), RUN_ENTRIES)]
    return b"".join(_ENTRY.pack(*record) for record in records + runs), omitted


def _next_unchanged(buf: bytes, end: int) -> int | None:
    """`_next_member` after an entry stepped over as unchanged, which must end where its member does."""
    after = _WS_AT.match(buf, end).end()
    if buf[after:after + 1] not in (b",", b"}"):
        raise _NotForMe
    return _next_member(buf, end)


def _run_record(view: memoryview, records: list[tuple[int, int]], bounds: list[tuple[int, int]],
                first: int) -> tuple[int, int]:
    """The record of the run of entries from `first`."""
    last = min(first + RUN_ENTRIES, len(records)) - 1
    if any(key_length & _LENGTH_MASK == 0 for _, key_length in records[first:last + 1]):
        return 0, 0
    start, end = bounds[first][0], bounds[last][1]
    return entry_digest(view[start:end]), end - start


def count_entries(data: bytes | bytearray | memoryview, table_path: tuple[str, ...]) -> int | None:
    """How many members the object at `table_path` (keys from the top) has in `orjson.loads(data)`,
    or None: not strict JSON, or no object there (the caller's lenient parser then decides).

    The reference the Cython twin is tested against: it may return None where this does not (a
    repeated key, a key with escapes, floats...), never another count.
    """
    try:
        obj = orjson.loads(data)
    except orjson.JSONDecodeError:
        return None
    for step in table_path:
        if type(obj) is not dict:
            return None
        obj = obj.get(step)
    return len(obj) if type(obj) is dict and table_path else None


def count_containers(data: bytes | bytearray) -> int:
    """How many `[` and `{` bytes `data` holds (inside strings too): an upper bound of the JSON
    arrays and objects parsing it builds (namesrv.protocol.jsonbody.check_parse_cost)."""
    data = bytes(data)  # a memoryview has no count()
    return data.count(b"[") + data.count(b"{")
