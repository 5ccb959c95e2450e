"""What the fast-path tests share: both implementations as pytest parameters, and topic entries.

A topic entry is one member of a registration's topicConfigTable; "plain" is what brokers send
(every field present, of its JSON type, ints within int32), the shape the fast paths read in one go.
"""
from __future__ import annotations

import functools
import os
from typing import Any

import orjson
import pytest
from hypothesis import strategies as st

from namesrv.fastpath import pure

#: `make test` sets NAMESRV_REQUIRE_EXTENSION=1 after building the extension: then a missing or broken
#: build fails every test that imports this module, instead of skipping the parity tests.
REQUIRED = os.environ.get("NAMESRV_REQUIRE_EXTENSION") == "1"
try:
    from namesrv import _fastpath
except ImportError:  # extension not built in this checkout
    if REQUIRED:
        raise
    _fastpath = None

NOT_BUILT = "namesrv._fastpath is not built (run: python setup.py build_ext --inplace)"
needs_extension = pytest.mark.skipif(_fastpath is None, reason=NOT_BUILT)
#: `pytest.mark.parametrize("impl", IMPLEMENTATIONS)`: a test over each implementation module.
IMPLEMENTATIONS = [
    pytest.param(pure, id="python"),
    pytest.param(_fastpath, id="cython", marks=needs_extension),
]

INT32_MIN, INT32_MAX = -(2 ** 31), 2 ** 31 - 1
INT32 = st.integers(INT32_MIN, INT32_MAX)
#: The members of a topic entry, as Java's TopicConfig writes them.
ENTRY_FIELDS = ("topicName", "readQueueNums", "writeQueueNums", "perm", "topicSysFlag", "order", "topicFilterType",
                "attributes")
#: Any JSON value a member may hold instead, near misses of the plain types included.
ANY_VALUE = st.one_of(st.none(), st.booleans(), st.integers(-(2 ** 40), 2 ** 40), st.text(max_size=6),
                      st.sampled_from(["SINGLE_TAG", "MULTI_TAG", "7", "-3", "true", ""]), st.just({}), st.just([]),
                      st.just(2 ** 31), st.just(-(2 ** 31) - 1), st.floats(allow_nan=False, width=32))
PLAIN_ENTRY = st.fixed_dictionaries({
    "topicName": st.text(min_size=1, max_size=8), "readQueueNums": INT32, "writeQueueNums": INT32, "perm": INT32,
    "topicSysFlag": INT32, "order": st.booleans(), "topicFilterType": st.sampled_from(["SINGLE_TAG", "MULTI_TAG"]),
    "attributes": st.one_of(st.none(), st.dictionaries(st.text(max_size=3), st.text(max_size=3), max_size=2)),
})


# ---- the registration scanners' contract, written from it and not from either twin

FILTER_TYPES = ("SINGLE_TAG", "MULTI_TAG")


def plain_fields(entry: Any) -> tuple | None:
    """A topic entry's queue fields when every member is as brokers write it, else None."""
    if type(entry) is not dict:
        return None
    numbers = [entry.get(key) for key in ("readQueueNums", "writeQueueNums", "perm", "topicSysFlag")]
    name, attributes = entry.get("topicName"), entry.get("attributes")
    if (type(name) is str and name and all(type(n) is int and INT32_MIN <= n <= INT32_MAX for n in numbers)
            and type(entry.get("order")) is bool and entry.get("topicFilterType") in FILTER_TYPES
            and (attributes is None or type(attributes) is dict)):
        return name, *numbers
    return None


def reference(data: bytes, path: tuple[str, ...]) -> object:
    """What scan_registration's value must be: orjson.loads(data), the plain entries of the object at
    `path` (from the top; the top object itself for ()) as their queue-field tuples; None where orjson
    refuses the bytes."""
    try:
        value = orjson.loads(data)
    except orjson.JSONDecodeError:
        return None
    table = at_path(value, path)
    if type(table) is dict:
        table.update({key: fields for key, entry in table.items() if (fields := plain_fields(entry)) is not None})
    return plain_body(value, path) or value


INT64 = range(-(2 ** 63), 2 ** 63)


def plain_version(obj: Any) -> tuple | None:
    """A DataVersion's (counter, timestamp, stateVersion) when it is absent, null or an object of
    JSON integers within int64 (each may be absent or null: 0), else None."""
    if obj is None:
        return 0, 0, 0
    if type(obj) is not dict:
        return None
    fields = [0 if obj.get(key) is None else obj.get(key) for key in ("counter", "timestamp", "stateVersion")]
    return tuple(fields) if all(type(n) is int and n in INT64 for n in fields) else None


def plain_body(value: Any, path: tuple[str, ...]) -> tuple | None:
    """What scan_registration's value must be instead of the parsed body when the body is of the
    plain form: (table, counter, timestamp, stateVersion, filterServerList or None), else None."""
    if len(path) not in (1, 2) or type(value) is not dict:
        return None
    wrapper = value if len(path) == 1 else value.get(path[0])
    servers = None if len(path) == 1 else value.get("filterServerList", [])
    servers = [] if servers is None and len(path) == 2 else servers
    if type(wrapper) is not dict or (servers is not None and (type(servers) is not list
                                                              or not all(type(s) is str for s in servers))):
        return None
    table, version = wrapper.get(path[-1]), plain_version(wrapper.get("dataVersion"))
    if (type(table) is not dict or not all(type(entry) is tuple for entry in table.values()) or version is None
            or plain_version(wrapper.get("mappingDataVersion")) is None
            or wrapper.get("topicQueueMappingInfoMap") not in (None, {})
            or type(wrapper.get("topicQueueMappingDetailMap")) not in (type(None), dict)):
        return None
    return table, *version, servers


def reference_facts(rows: list[object]) -> tuple | None:
    """What scan_registration's facts must be for a table whose read entries are `rows`: None
    unless there are some, all queue-fields tuples."""
    if not rows or any(type(row) is not tuple for row in rows):
        return None
    names = [row[0] for row in rows]
    return ("".join(sorted(set("".join(names)))), min(map(len, names)), max(map(len, names)),
            min(min(row[1], row[2]) for row in rows), max(max(row[1], row[2]) for row in rows),
            functools.reduce(lambda bits, row: bits | row[3], rows, 0))


def check_facts(impl: object, result: tuple, path: tuple[str, ...]) -> None:
    """A scan_registration result's facts are the reference's for the entries it read (the
    extension may answer None), and None when it offers no entries."""
    value, entries, _, facts = result
    table = scanned_table(value, path)
    expected = reference_facts(list(table.values())) if entries is not None and type(table) is dict else None
    if facts is not None or impl is pure:
        assert facts == expected, (facts, expected)


def reference_count(data: bytes, path: tuple[str, ...]) -> int | None:
    """What count_entries promises: the members of the object at a non-empty path, None otherwise."""
    try:
        table = at_path(orjson.loads(data), path)
    except orjson.JSONDecodeError:
        return None
    return len(table) if type(table) is dict and path else None


def scanned_table(value: object, path: tuple[str, ...]) -> object:
    """The topic table of a scan_registration value: the plain form's first member, else at `path`."""
    return value[0] if type(value) is tuple else at_path(value, path)


def at_path(value: object, path: tuple[str, ...]) -> object:
    """The object at `path` from `value` (`value` itself for ()); None past a step that is not an object."""
    return functools.reduce(lambda node, step: node.get(step) if type(node) is dict else None, path, value)
