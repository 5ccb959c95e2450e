"""The cache layer: every memo is listed in namesrv.caches and bounded in entries and bytes, also
under a hostile peer's flood of distinct, large headers."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

import namesrv
from namesrv import caches
from namesrv.caches import ENTRY_OVERHEAD, BoundedMemo
from namesrv.processor.inline import read_header
from namesrv.processor.seen_headers import JSON_FIELD, ROCKETMQ_FIELD, SeenHeaders
from namesrv.protocol.codes import RequestCode, SerializeType
from namesrv.protocol.command import RemotingCommand

PACKAGE = Path(namesrv.__file__).parent


def test_a_memo_keeps_to_its_entry_bound():
    memo: BoundedMemo[int, int] = BoundedMemo(max_entries=3, max_bytes=1 << 20)
    for key in range(3):
        assert memo.remember(key, key, 10)
    assert len(memo) == 3 and memo.bytes == 3 * (10 + ENTRY_OVERHEAD)
    memo.remember(3, 3, 10)  # full: emptied, then holds the newcomer
    assert memo.table == {3: 3} and memo.resets == 1 and memo.bytes == 10 + ENTRY_OVERHEAD


def test_a_memo_keeps_to_its_byte_bound_and_charges_a_key_once():
    memo: BoundedMemo[str, str] = BoundedMemo(max_entries=1000, max_bytes=8 * (100 + ENTRY_OVERHEAD))
    for i in range(8):
        memo.remember(f"k{i}", "v", 100)
        memo.remember(f"k{i}", "w", 100)  # held again: no second charge
    assert len(memo) == 8 and memo.bytes == memo.max_bytes
    memo.remember("k8", "v", 100)
    assert memo.table == {"k8": "v"} and memo.resets == 1 and memo.bytes == 100 + ENTRY_OVERHEAD


def test_an_entry_over_an_eighth_of_the_bound_is_not_held():
    memo: BoundedMemo[str, str] = BoundedMemo(max_entries=1000, max_bytes=8000)
    memo.remember("small", "v", 10)
    assert not memo.remember("huge", "v", 1000)
    assert memo.table == {"small": "v"}


def _route_query_header(serialize_field: int, topic: str, padding: int, opaque: int) -> bytes:
    ext = {"topic": topic, "pad": "x" * padding}
    command = RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, ext, opaque=opaque,
                                      serialize_type=serialize_field >> 24)
    return command.encode_header()


@pytest.mark.parametrize("serialize_field", [JSON_FIELD, ROCKETMQ_FIELD])
def test_a_flood_of_distinct_large_headers_costs_at_most_the_byte_bound(serialize_field):
    """A peer sending ever new 20 KB headers: the memo is emptied as often as it fills, its bytes
    never pass the bound, and every header still reads as its parse says."""
    max_bytes = 1 << 20
    seen: SeenHeaders = SeenHeaders(read_header, bound=10_000, max_bytes=max_bytes)
    for i in range(400):
        header = _route_query_header(serialize_field, f"T{i}", 20_000, i)
        assert seen.read(serialize_field, header) == read_header(serialize_field, header)
        for memo in (seen.json, seen.binary):
            assert memo.bytes <= max_bytes
            assert sum(2 * len(key) + ENTRY_OVERHEAD for key in memo.table) <= max_bytes
    memo = seen.json if serialize_field == JSON_FIELD else seen.binary
    assert memo.resets >= 400 * 40_000 // max_bytes - 1
    header = _route_query_header(serialize_field, "T399", 20_000, 7)
    assert seen.read(serialize_field, header) == (7, read_header(serialize_field, header)[1])  # still remembered


def test_a_header_too_large_to_hold_is_still_read_but_never_remembered():
    seen: SeenHeaders = SeenHeaders(read_header, max_bytes=1 << 16)
    header = _route_query_header(JSON_FIELD, "T", 100_000, 1)
    assert seen.read(JSON_FIELD, header) == read_header(JSON_FIELD, header)
    assert len(seen.json) == 0 and seen.json.bytes == 0


def _memo_owners() -> set[str]:
    """Dotted names (without `namesrv.`) of the modules that construct a BoundedMemo."""
    owners = set()
    for path in PACKAGE.rglob("*.py"):
        if path.name == "caches.py":
            continue
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name | ast.Attribute)
                    and getattr(node.func, "id", getattr(node.func, "attr", None)) == "BoundedMemo"):
                owners.add(".".join(path.relative_to(PACKAGE).with_suffix("").parts))
    return owners


def test_every_memo_is_listed_in_the_cache_module():
    owners = _memo_owners()
    assert {"processor.seen_headers", "processor.write_fast_path"} <= owners
    for owner in owners:
        assert f"`{owner}." in caches.__doc__, f"{owner} keeps a BoundedMemo not listed in namesrv.caches"


def test_the_route_body_cache_is_listed_with_its_byte_bound():
    from namesrv.routeinfo.cache import DEFAULT_MAX_BYTES
    assert "`routeinfo.cache.RouteBodyCache`" in caches.__doc__
    assert f"{DEFAULT_MAX_BYTES >> 20} MiB (DEFAULT_MAX_BYTES)" in caches.__doc__


def test_binary_and_json_headers_of_one_query_say_the_same():
    for serialize_type in (SerializeType.JSON, SerializeType.ROCKETMQ):
        header = _route_query_header(int(serialize_type) << 24, "TopicA", 0, 5)
        assert read_header(int(serialize_type) << 24, header)[1].topic == "TopicA"


def test_the_cache_value_bench_runs_every_comparison(capsys, tmp_path):
    from bench import cache_value
    assert cache_value.main(["--rounds", "1", "--seconds", "0.02", "--out", str(tmp_path / "run")]) == 0
    lines = capsys.readouterr().out.splitlines()
    names = [line.split(" with ")[0].strip() for line in lines[2:]]
    assert names == ["seen headers: route query", "seen headers: unchanged re-registration",
                     "registration answers: unchanged re-registration", "route bodies: route query"]
    assert all(" ratio " in line for line in lines[2:])
