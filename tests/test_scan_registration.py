"""`scan_registration` against a previous registration: which topic entries it leaves out.

Both twins digest every topic entry and, given the entries of the broker's previous registration,
leave out each entry whose bytes are those of the previous entry at the same place (the route
table holds it already). What they leave out must be exactly such entries, what they keep must
read as the full parse reads it, and wherever digests could confuse two keys (a repeated key, a
key with escapes, two topic tables) they must offer no entries and leave nothing out. Every test
runs over each twin, and the twins must agree. Parsing itself is tested in test_scan_json.py.
"""
from __future__ import annotations

import json
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fastpath_cases import (IMPLEMENTATIONS, _fastpath, check_facts, needs_extension, reference, reference_facts,
                            scanned_table)
from namesrv.fastpath import pure, registration
from namesrv.protocol.topic import DataVersion, decode_registration

TABLE_PATH = ("topicConfigSerializeWrapper", "topicConfigTable")
PROPERTY = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def entry(name: str, perm: int = 6, queues: int = 8, attributes: str = "{}") -> str:
    """One topic entry as a broker writes it (fastjson: compact, keys sorted)."""
    return (f'"{name}":{{"attributes":{attributes},"order":false,"perm":{perm},"readQueueNums":{queues},'
            f'"topicFilterType":"SINGLE_TAG","topicName":"{name}","topicSysFlag":0,"writeQueueNums":{queues}}}')


def body(entries: list[str], counter: int = 1) -> bytes:
    return ('{"filterServerList":[],"topicConfigSerializeWrapper":{"dataVersion":{"counter":%d,"stateVersion":0,'
            '"timestamp":1700000000000},"topicConfigTable":{%s}}}' % (counter, ",".join(entries))).encode()


def table(value: object) -> dict:
    return scanned_table(value, TABLE_PATH)


def full(data: bytes) -> dict:
    """The reference: every entry, as the contract reads them (fastpath_cases.reference)."""
    return table(reference(data, TABLE_PATH))


@pytest.fixture(scope="module", params=IMPLEMENTATIONS)
def twin(request: pytest.FixtureRequest) -> object:
    return request.param


def scan(twin: object, data: bytes, previous: bytes | None = None) -> tuple[object, bytes | None, int]:
    """(value, entries, omitted), the facts checked (fastpath_cases.check_facts)."""
    result = twin.scan_registration(data, TABLE_PATH, previous)
    assert result is not None
    check_facts(twin, result, TABLE_PATH)
    return result[:3]


TOPICS = [entry(f"topic-{i}") for i in range(50)]


def test_a_repeated_table_leaves_every_entry_out_and_offers_the_same_entries(twin):
    first = body(TOPICS, counter=1)
    value, entries, omitted = scan(twin, first)
    assert omitted == 0 and entries is not None
    assert table(value) == full(first)
    again, entries_again, omitted_again = scan(twin, body(TOPICS, counter=2), entries)
    assert omitted_again == len(TOPICS)
    assert table(again) == {}
    assert again[1] == 2  # the rest is read as ever (here the plain form's counter)
    assert entries_again == entries


def test_only_the_changed_entries_are_read(twin):
    _, entries, _ = scan(twin, body(TOPICS))
    changed = list(TOPICS)
    changed[7] = entry("topic-7", perm=2)
    changed[31] = entry("topic-31", queues=16)
    data = body(changed, counter=2)
    value, entries_now, omitted = scan(twin, data, entries)
    assert omitted == len(TOPICS) - 2
    assert table(value) == {name: fields for name, fields in full(data).items() if name in ("topic-7", "topic-31")}
    assert entries_now == scan(twin, data)[1]  # the same entries as a scan without a previous registration


def test_an_added_or_moved_entry_is_read_and_the_rest_still_match_in_place(twin):
    _, entries, _ = scan(twin, body(TOPICS))
    grown = TOPICS + [entry("topic-new")]
    value, _, omitted = scan(twin, body(grown, counter=2), entries)
    assert omitted == len(TOPICS) and list(table(value)) == ["topic-new"]
    inserted = TOPICS[:10] + [entry("topic-new")] + TOPICS[10:]
    value, _, omitted = scan(twin, body(inserted, counter=2), entries)
    assert omitted == 10  # entries match by place: everything after the insertion is read again
    assert table(value) == {name: fields for name, fields in full(body(inserted)).items()
                            if name == "topic-new" or int(name.split("-")[1]) >= 10}


def test_whitespace_changes_an_entry_s_bytes_so_it_is_read(twin):
    _, entries, _ = scan(twin, body(TOPICS[:3]))
    spaced = [TOPICS[0], TOPICS[1].replace(":", ": ", 1), TOPICS[2]]
    value, _, omitted = scan(twin, body(spaced, 2), entries)
    assert omitted == 2 and list(table(value)) == ["topic-1"]


@pytest.mark.parametrize("case, entries", [
    ("a repeated key", [entry("a"), entry("b"), entry("a", perm=2)]),
    ("a key with escapes", [entry("a"), '"\\u0062":' + entry("b").split(":", 1)[1]]),
])
def test_no_entries_where_digests_could_confuse_keys(twin, case, entries):
    data = body(entries)
    value, offered, omitted = scan(twin, data)
    assert offered is None and omitted == 0, case
    assert table(value) == full(data)


@pytest.mark.parametrize("count", [1, 6, 7, 191, 192, 193, 400])  # the set of keys: on the stack to 192, then not
def test_a_repeated_key_is_found_in_a_table_of_any_size(twin, count):
    names = [f"t{i}" for i in range(count)]
    assert scan(twin, body([entry(name) for name in names]))[1] is not None
    for repeated in (names[0], names[-1]):
        data = body([entry(name) for name in names] + [entry(repeated, perm=2)])
        value, offered, omitted = scan(twin, data)
        assert offered is None and omitted == 0
        assert table(value) == full(data) and table(value)[repeated][3] == 2


def test_a_repeated_key_against_a_previous_registration_reads_everything(twin):
    # "a" unchanged in place 0 would be left out, but a later "a" overrides it: the scan must
    # read the whole table again, as the full parse keeps the last "a".
    _, entries, _ = scan(twin, body([entry("a"), entry("b")]))
    data = body([entry("a"), entry("b"), entry("a", perm=2)], counter=2)
    value, offered, omitted = scan(twin, data, entries)
    assert offered is None and omitted == 0
    assert table(value) == full(data) and table(value)["a"][3] == 2


@pytest.mark.parametrize("size", [3, 40, 300])
def test_values_changed_in_place_offer_entries_and_a_key_taken_twice_does_not(twin, size):
    # Every key where the previous registration had it, values changed here and there: the keys
    # are that registration's, told apart then (the extension asks no set again). One changed
    # entry taking another's key is a repeated key, found whatever the sizes.
    names = [f"topic-{i}" for i in range(size)]
    _, entries, _ = scan(twin, body([entry(name) for name in names]))
    changed = {0, size // 2, size - 1}
    data = body([entry(name, perm=2 if i in changed else 6) for i, name in enumerate(names)], counter=2)
    value, offered, omitted = scan(twin, data, entries)
    assert offered is not None and omitted == size - len(changed) and table(value) == {
        name: row for name, row in full(data).items() if names.index(name) in changed}
    taken = body([entry(names[1] if i == size - 1 else name, perm=2 if i in changed else 6)
                  for i, name in enumerate(names)], counter=3)
    value, offered, omitted = scan(twin, taken, offered)
    assert offered is None and omitted == 0 and table(value) == full(taken)


def test_two_topic_tables_offer_no_entries(twin):
    data = (b'{"topicConfigSerializeWrapper":{"topicConfigTable":{%s},"topicConfigTable":{%s}}}'
            % (TOPICS[0].encode(), TOPICS[1].encode()))
    value, offered, omitted = scan(twin, data)
    assert offered is None and omitted == 0
    _, single, _ = scan(twin, body(TOPICS[:2]))
    value, offered, omitted = scan(twin, data, single)
    assert offered is None and omitted == 0 and table(value) == full(data)


def test_two_topic_tables_read_in_runs_offer_no_entries(twin):
    """As above, with tables past GIL_FREE_BYTES (the pre-scan's runs) and the previous entries
    matching each table in turn."""
    rows = [entry(f"topic-{i}") for i in range(400)]
    _, single, _ = scan(twin, body(rows))
    tables = ",".join(rows).encode()
    data = b'{"topicConfigSerializeWrapper":{"topicConfigTable":{%s},"topicConfigTable":{%s}}}' % (tables, tables)
    value, offered, omitted = scan(twin, data, single)
    assert offered is None and omitted == 0 and table(value) == full(data)


def test_a_body_that_is_not_json_is_still_not_for_the_scanner(twin):
    _, entries, _ = scan(twin, body(TOPICS))
    truncated = body(TOPICS, 2)[:-3]
    assert twin.scan_registration(truncated, TABLE_PATH, entries) is None
    broken = body(TOPICS, 2).replace(b'"topic-49"', b'"topic-49', 1)
    assert twin.scan_registration(broken, TABLE_PATH, entries) is None


def test_an_entry_past_the_length_a_record_holds_is_always_read(twin):
    huge = entry("big", attributes='{"pad":"%s"}' % ("x" * (1 << 24)))
    data = body([TOPICS[0], huge])
    _, entries, _ = scan(twin, data)
    value, _, omitted = scan(twin, body([TOPICS[0], huge], 2), entries)
    assert omitted == 1 and list(table(value)) == ["big"]


def test_previous_must_come_from_the_scanner(twin):
    for length in (15, 16, 18 * 16):  # not whole records; one record (no entry, no run); 18 (no count has 18)
        with pytest.raises(ValueError):
            twin.scan_registration(body(TOPICS), TABLE_PATH, b"\x00" * length)
    with pytest.raises(TypeError):
        twin.scan_registration(body(TOPICS), TABLE_PATH, bytearray(16))


def test_decode_registration_carries_what_was_left_out():
    first, _ = decode_registration(body(TOPICS))
    assert first.entries is not None and first.omitted == 0 and len(first.topics) == len(TOPICS)
    second, servers = decode_registration(body(TOPICS, 2), previous=first.entries)
    assert second.omitted == len(TOPICS) and second.topics == {} and second.omitted_since is first.entries
    assert second.data_version == DataVersion(2, 1700000000000, 0) and servers == []
    assert second.entries == first.entries


names = st.sampled_from([f"t{i}" for i in range(8)] + ["é", "a b", "t0x"])
tables = st.lists(st.tuples(names, st.sampled_from([2, 4, 6]), st.sampled_from([1, 8])), max_size=8)


@PROPERTY
@given(tables, tables, st.randoms())
def test_left_out_entries_are_exactly_those_the_route_table_already_holds(twin, before, after, rnd):
    """For any two tables (repeated keys included): every entry kept reads as the full parse reads
    it, and every key the full parse has but the scan left out maps, in the previous table, to
    the same fields."""
    def render(rows: list[tuple[str, int, int]], counter: int) -> bytes:
        return body([entry(name, perm, queues).replace(f'"{name}"', json.dumps(name, ensure_ascii=rnd.random() < 0.8))
                     for name, perm, queues in rows], counter)

    old, new = render(before, 1), render(after, 2)
    _, entries, _ = scan(twin, old)
    value, offered, omitted = scan(twin, new, entries)
    expected = full(new)
    kept = table(value)
    assert all(kept[name] == expected[name] for name in kept)
    left_out = [name for name in expected if name not in kept]
    previous = full(old)
    assert all(previous.get(name) == expected[name] for name in left_out)
    assert omitted >= len(left_out)
    if offered is None:
        assert omitted == 0
    else:
        assert offered == scan(twin, new)[1]


def test_random_registrations_of_one_broker_converge_on_the_full_parse(twin):
    """A broker changing a few topics per registration, many times: applying each scan's kept
    entries over the previous state always gives the full parse."""
    rnd = random.Random(7)
    rows = [[f"topic-{i}", 6, 8] for i in range(40)]
    state: dict = {}
    entries = None
    for counter in range(1, 60):
        for row in rnd.sample(rows, 3):
            row[1], row[2] = rnd.choice([2, 4, 6]), rnd.choice([4, 8, 16])
        if rnd.random() < 0.2:
            rows.insert(rnd.randrange(len(rows) + 1), [f"new-{counter}", 6, 8])
        data = body([entry(name, perm, queues) for name, perm, queues in rows], counter)
        value, entries, omitted = scan(twin, data, entries)
        state.update(table(value))
        assert state == full(data)
        assert omitted + len(table(value)) == len(rows)


@PROPERTY
@given(tables, tables, st.randoms(), st.sampled_from(["", " ", "\n  "]))
def test_the_twins_agree_on_value_entries_and_what_they_leave_out(before, after, rnd, space):
    """The pure twin is the reference: for any two registrations (repeated keys, escaped and
    non-ASCII keys, whitespace included) the extension gives the same (value, entries, omitted)."""
    if _fastpath is None:
        pytest.skip("namesrv._fastpath is not built")

    def render(rows: list[tuple[str, int, int]], counter: int) -> bytes:
        return body([entry(name, perm, queues).replace(f'"{name}"', json.dumps(name, ensure_ascii=rnd.random() < 0.8))
                     .replace(",", "," + space, rnd.randrange(3)) for name, perm, queues in rows], counter)

    old, new = render(before, 1), render(after, 2)
    expected_old = pure.scan_registration(old, TABLE_PATH, None)
    assert agree(_fastpath.scan_registration(old, TABLE_PATH, None), expected_old)
    previous = expected_old[1]
    assert agree(_fastpath.scan_registration(new, TABLE_PATH, previous), pure.scan_registration(new, TABLE_PATH, previous))


def agree(extension: tuple | None, pure_result: tuple | None) -> bool:
    """The extension's result is the pure twin's, except that its facts may be None."""
    if extension is None or pure_result is None:
        return extension is pure_result
    return extension[:3] == pure_result[:3] and extension[3] in (None, pure_result[3])


def test_an_entry_that_grew_past_its_previous_bytes_is_left_to_the_caller(twin):
    """A previous entry's bytes can be a prefix of the new one only when a number grew: the body is
    then left to the lenient parser (None) by both twins, never misread."""
    data = b'{"topicConfigSerializeWrapper":{"topicConfigTable":{"a":1,"b":2}}}'
    _, entries, _ = scan(twin, data)
    assert twin.scan_registration(data.replace(b'"a":1', b'"a":12'), TABLE_PATH, entries) is None
    assert twin.scan_registration(data.replace(b'"b":2', b'"b":23'), TABLE_PATH, entries) is None  # a run's last


# ---------------------------------------------------------------- the pre-scan without the interpreter lock

#: Members the extension's pre-scan does not read (it stops there, and the rest of the table is
#: read with the lock held, as before): each must still give the full parse.
UNUSUAL = [
    entry("neg", perm=-1),
    entry("esc").replace('"topicName":"esc"', '"topicName":"e\\u0073c"'),
    entry("extra").replace('"order"', '"other":[1,{"x":null}],"order"'),
    entry("attrs", attributes='{"+message.type":"NORMAL","b":"c"}'),
    entry("nested", attributes='{"a":{"b":[]}}'),
    entry("float").replace('"readQueueNums":8', '"readQueueNums":8.0'),
    entry("big", queues=2_000_000_000),
    entry("unsorted").replace('"order":false,"perm":6', '"perm":6,"order":false'),
    entry("repeated").replace('"perm":6', '"perm":6,"perm":4'),
    '"no-name":{"attributes":{},"order":false,"perm":6,"readQueueNums":8,"topicFilterType":"SINGLE_TAG",'
    '"topicSysFlag":0,"writeQueueNums":8}',
    '"empty":{}',
    '"number":7',
    entry("spaced").replace(":", " : ").replace(",", " ,\n "),
    entry("zero", queues=0, perm=0),
    entry("wide-filter").replace("SINGLE_TAG", "MULTI_TAG"),
    entry("no-attributes").replace('"attributes":{},', ''),  # the first field's key not where it is looked for
    entry("longer-key").replace('"readQueueNums"', '"readQueueNumsX":8,"readQueueNums"'),  # the next key's a prefix
    entry("key-split").replace('"perm":', '"perm"\n:'),  # the key whole, its colon after a line break
]


@pytest.mark.parametrize("size", [40, 800])  # 800 entries: past GIL_FREE_BYTES, read without the lock
@pytest.mark.parametrize("unusual", range(len(UNUSUAL)))
def test_a_member_the_pre_scan_does_not_read_is_read_as_before(twin, size, unusual):
    topics = [entry(f"topic-{i}", perm=(2, 4, 6)[i % 3], queues=i % 17) for i in range(size)]
    topics.insert(size // 2, UNUSUAL[unusual])
    data = body(topics)
    if twin.scan_registration(data, TABLE_PATH, None) is None:
        assert twin is not pure  # floats: the extension's licence, "parse it yourself"
        return
    value, entries, omitted = scan(twin, data)
    assert table(value) == full(data) and omitted == 0
    changed = topics[:]
    changed[size // 3] = entry("changed-one")
    value, _, omitted = scan(twin, body(changed, 2), entries)
    assert omitted == size  # all but the changed one, before and after the unusual member
    assert list(table(value)) == ["changed-one"]


def test_the_extension_sums_up_a_broker_s_table_it_read_without_the_lock():
    """The form brokers send is read by the pre-scan whole, so its facts are there (a body that
    only the lock-held reading handled would still be right, but the check would look at every
    entry again)."""
    if _fastpath is None:
        pytest.skip("namesrv._fastpath is not built")
    topics = [entry(f"T%{i}|x", perm=(2, 4, 6)[i % 3], queues=i % 17) for i in range(800)]
    value, entries, omitted, facts = _fastpath.scan_registration(body(topics), TABLE_PATH, None)
    assert facts == reference_facts(list(table(value).values())) == ("%0123456789Tx|", 5, 7, 0, 16, 6)
    changed = topics[:]
    changed[5] = entry("only-this", perm=7, queues=1000)
    value, _, omitted, facts = _fastpath.scan_registration(body(changed, 2), TABLE_PATH, entries)
    assert omitted == 799 and facts == ("-hilnosty", 9, 9, 1000, 1000, 7)
    spaced = body([topic.replace(",", ", ") for topic in topics])
    assert _fastpath.scan_registration(spaced, TABLE_PATH, None)[3] == facts_of(spaced)


def test_the_extension_sums_up_the_entries_of_a_small_table_it_read_with_the_lock_held():
    """A table below GIL_FREE_BYTES is read in one pass with the lock held: its entries are summed
    up as they are read, so a changed registration's few entries are checked on the facts too (a
    name that is not ASCII is not summed up: no facts, and the check walks the entries)."""
    if _fastpath is None:
        pytest.skip("namesrv._fastpath is not built")
    topics = [entry(f"T%{i}|x", perm=(2, 4, 6)[i % 3], queues=i % 17) for i in range(40)]
    assert len(body(topics)) < 64 * 1024
    value, entries, omitted, facts = _fastpath.scan_registration(body(topics), TABLE_PATH, None)
    assert facts == reference_facts(list(table(value).values())) == ("%0123456789Tx|", 5, 6, 0, 16, 6)
    changed = topics[:]
    changed[5], changed[30] = entry("only-this", perm=7, queues=1000), entry("and-that", perm=-1, queues=3)
    value, _, omitted, facts = _fastpath.scan_registration(body(changed, 2), TABLE_PATH, entries)
    assert omitted == 38 and facts == reference_facts(list(table(value).values())) == (
        "-adhilnosty", 8, 9, 3, 1000, -1)
    changed[30] = entry("café")
    assert _fastpath.scan_registration(body(changed, 2), TABLE_PATH, entries)[3] is None


def facts_of(data: bytes) -> tuple | None:
    return reference_facts(list(full(data).values()))


def test_members_shorter_than_a_note_are_read_with_the_lock_held(twin):
    """The pre-scan stops at a member shorter than what it notes of one, so its notes stay within
    the body's size whatever the body; the members are then read as before."""
    tiny = [f'"k{i}":{i % 10}' for i in range(20_000)]  # past GIL_FREE_BYTES
    data = body(tiny)
    value, entries, _ = scan(twin, data)
    assert table(value) == full(data)
    value, _, omitted = scan(twin, body(tiny, 2), entries)
    assert omitted == len(tiny) and table(value) == {}


# ------------------------------------------------------- runs: unchanged entries stepped over RUN_ENTRIES at a time

RUN = registration.RUN_ENTRIES


def _changed(rows: list[str], change: str) -> list[str]:
    """`rows` with one kind of change (at a run's boundaries, inside one, or to the count)."""
    rows = list(rows)
    at = {"first": 0, "last": len(rows) - 1, "a run's first": RUN, "a run's last": RUN - 1, "inside a run": RUN + 5,
          "the last run's first": (len(rows) - 1) // RUN * RUN}
    if change in at:
        if 0 <= at[change] < len(rows):
            rows[at[change]] = rows[at[change]].replace('"perm":6', '"perm":2')
    elif change == "appended":
        rows.append(entry("appended"))
    elif change == "removed last":
        rows = rows[:-1]
    elif change == "removed first":
        rows = rows[1:]
    elif change == "inserted at a run's first":
        rows.insert(min(RUN, len(rows)), entry("inserted"))
    elif change == "swapped":
        if len(rows) > RUN + 3:
            rows[2], rows[RUN + 3] = rows[RUN + 3], rows[2]
    elif change != "none":
        raise AssertionError(change)
    return rows


CHANGES = ["none", "first", "last", "a run's first", "a run's last", "inside a run", "the last run's first", "appended",
           "removed last", "removed first", "inserted at a run's first", "swapped"]


@pytest.mark.parametrize("size", [0, 1, RUN - 1, RUN, RUN + 1, 2 * RUN - 1, 2 * RUN, 2 * RUN + 1, 100, 255, 256, 257,
                                  400])  # 400 entries: past GIL_FREE_BYTES, stepped over by the pre-scan
@pytest.mark.parametrize("change", CHANGES)
def test_entries_left_out_in_runs_are_exactly_those_unchanged_in_place(twin, size, change):
    """Whatever changed, where: an entry is left out exactly when its bytes are the previous
    registration's entry's at its place, the rest read as the full parse reads them; and the
    entries offered depend on the body alone, not on what was left out."""
    rows = [entry(f"topic-{i}", perm=6, queues=i % 9) for i in range(size)]
    _, entries, _ = scan(twin, body(rows))
    assert len(entries) == 16 * (size + -(-size // RUN))  # each entry's record, then each run's
    new_rows = _changed(rows, change)
    data = body(new_rows, counter=2)
    value, offered, omitted = scan(twin, data, entries)
    unchanged = [i for i, row in enumerate(new_rows) if i < len(rows) and rows[i] == row]
    assert omitted == len(unchanged)
    kept = {row.split('"')[1] for i, row in enumerate(new_rows) if i not in unchanged}
    assert table(value) == {name: fields for name, fields in full(data).items() if name in kept}
    assert offered == scan(twin, data)[1]


@needs_extension
@pytest.mark.parametrize("size", [RUN, 3 * RUN + 7, 400])
@pytest.mark.parametrize("change", CHANGES)
def test_the_twins_agree_on_runs(size, change):
    rows = [entry(f"topic-{i}", perm=6, queues=i % 9) for i in range(size)]
    previous = pure.scan_registration(body(rows), TABLE_PATH, None)[1]
    assert _fastpath.scan_registration(body(rows), TABLE_PATH, None)[1] == previous
    data = body(_changed(rows, change), counter=2)
    assert agree(_fastpath.scan_registration(data, TABLE_PATH, previous),
                 pure.scan_registration(data, TABLE_PATH, previous))


#: Bodies around a topic table (`{T}`) that the extension's plain walk must read as the general
#: path does (the pure twin): members named twice (the last value counts), keys spelled with
#: escapes, members of another form before and after the table (read again as any JSON, with the
#: digests noted before forgotten), unknown members, whitespace, and the legacy layout.
AROUND_TABLE = [
    '{"filterServerList":[],"topicConfigSerializeWrapper":{"dataVersion":{"counter":2},"topicConfigTable":{T}}}',
    '{"topicConfigSerializeWrapper":{"dataVersion":{"counter":2},"dataVersion":"x","topicConfigTable":{T}}}',
    '{"topicConfigSerializeWrapper":{"dataVersion":"x","dataVersion":{"counter":2},"topicConfigTable":{T}}}',
    '{"topicConfigSerializeWrapper":{"dataVersion":{"counter":"x","counter":5,"timestamp":null},"topicConfigTable":{T}}}',
    '{"topicConfigSerializeWrapper":{"dataVersion":{"counter":5,"counter":true},"topicConfigTable":{T}}}',
    '{"topicConfigSerializeWrapper":{"dataVersion":{"x":[1,{"y":2}],"stateVersion":-3},"topicConfigTable":{T}}}',
    '{"topicConfigSerializeWrapper":{"dataVersion":null,"mappingDataVersion":{"counter":1},"topicConfigTable":{T}}}',
    '{"topicConfigSerializeWrapper":{"topicConfigTable":{T},"mappingDataVersion":{"timestamp":false}}}',
    '{"topicConfigSerializeWrapper":{"topicConfigTable":{T},"topicQueueMappingInfoMap":{"t":{}}}}',
    '{"topicConfigSerializeWrapper":{"topicQueueMappingInfoMap":{"t":{}},"topicConfigTable":{T},'
    '"topicQueueMappingInfoMap":{}}}',
    '{"topicConfigSerializeWrapper":{"topicConfigTable":{T},"topicQueueMappingDetailMap":[]}}',
    '{"topicConfigSerializeWrapper":{"topicConfigTable":{T},"topicQueueMappingDetailMap":{"t":[null]}}}',
    '{"topicConfigSerializeWrapper":{"\\u0064ataVersion":{"counter":7},"topicConfigTable":{T}}}',
    '{"topicConfigSerializeWrapper":{"\\u0064ataVersion":7,"topicConfigTable":{T}}}',
    '{"topicConfig\\u0053erializeWrapper":{"dataVersion":{"counter":2},"topicConfigTable":{T}}}',
    '{"topicConfigSerializeWrapper":{"topicConfig\\u0054able":{T}}}',
    '{"filterServerList":[1],"filterServerList":["a:1"],"topicConfigSerializeWrapper":{"topicConfigTable":{T}}}',
    '{"filterServerList":["a:1"],"topicConfigSerializeWrapper":{"topicConfigTable":{T}},"filterServerList":[2]}',
    '{"filterServerList":null,"topicConfigSerializeWrapper":{"topicConfigTable":{T}},"x":{"y":[1,{"z":null}]}}',
    '{"filterServerList":{},"topicConfigSerializeWrapper":{"topicConfigTable":{T}}}',
    '{"topicConfigSerializeWrapper":{"topicConfigTable":{T}},"topicConfigSerializeWrapper":{"topicConfigTable":{T}}}',
    '{"topicConfigSerializeWrapper":null}',
    '{"topicConfigSerializeWrapper":{"dataVersion":{"counter":1}}}',
    '{"topicConfigSerializeWrapper":{"topicConfigTable":null}}',
    '{"topicConfigSerializeWrapper":{"topicConfigTable":[{T}]}}',
    '{"topicConfigSerializeWrapper":{}}',
    '{}',
    ' { "filterServerList" : [ ] , "topicConfigSerializeWrapper" : { "dataVersion" : { "counter" : 2 } , '
    '"topicConfigTable" : {T} } } ',
    '{"topicConfigSerializeWrapper":{"dataVersion":{"counter":1},"topicConfigTable":{T}},',
    '{"topicConfigSerializeWrapper":{"dataVersion":{"counter":1}"topicConfigTable":{T}}}',
]
#: ... and bodies beyond the extension's scanner (a float, an integer past 64 bits), which it
#: leaves to the caller (None) wherever they stand, as its licence allows.
BEYOND_THE_SCANNER = [
    '{"topicConfigSerializeWrapper":{"dataVersion":{"counter":1.5},"topicConfigTable":{T}}}',
    '{"topicConfigSerializeWrapper":{"topicConfigTable":{T},"dataVersion":{"counter":99999999999999999999}}}',
    '{"topicConfigSerializeWrapper":{"topicConfigTable":{T}},"x":-0.5}',
]


def wrapper_of(around: str) -> str | None:
    """The value of the body's first wrapper object (braces matched), None if it has none."""
    at = around.find('"topicConfigSerializeWrapper":{')
    if at < 0:
        return None
    start = end = around.index("{", at)
    depth = 0
    for end in range(start, len(around)):
        depth += {"{": 1, "}": -1}.get(around[end], 0)
        if depth == 0:
            break
    return around[start:end + 1]


#: (body around `{T}`, table path): each body, and in the legacy layout (the body is the wrapper,
#: the table at the top) each wrapper object of them.
AROUND_CASES = [(around, TABLE_PATH) for around in AROUND_TABLE + BEYOND_THE_SCANNER] + [
    (wrapper_of(around), ("topicConfigTable",)) for around in AROUND_TABLE + BEYOND_THE_SCANNER
    if wrapper_of(around) is not None]


@needs_extension
@pytest.mark.parametrize("around, path", AROUND_CASES)
@pytest.mark.parametrize("size", [3, 400])  # 400 entries: past GIL_FREE_BYTES, read by the pre-scan
def test_the_members_around_the_table_read_as_the_general_path_reads_them(around, path, size):
    """The extension walks the members around the topic table without making their objects when
    they are of the plain form, and reads the body as any JSON when they are not (its table as
    the walk read it): either way its answer (value, entries, left out) is the pure twin's,
    against a previous registration or none. A float or an integer past 64 bits anywhere is
    beyond the extension's scanner: it leaves that body to the caller (None)."""
    rows = ",".join(entry(f"topic-{i}", queues=i % 9) for i in range(size))
    data = around.replace("{T}", "{" + rows + "}").encode()
    before = ("{%s}" if len(path) == 1 else '{"topicConfigSerializeWrapper":{"topicConfigTable":{%s}}}') % rows
    previous = pure.scan_registration(before.encode(), path, None)[1]
    for prior in (None, previous):
        got = _fastpath.scan_registration(data, path, prior)
        if any(number in data for number in (b"1.5", b"99999999999999999999", b"-0.5")):
            assert got is None
        else:
            assert agree(got, pure.scan_registration(data, path, prior)), (around, prior is not None)
