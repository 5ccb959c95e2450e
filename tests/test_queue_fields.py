"""The server's registration decode (`decode_registration`, `queue_fields` on both fast paths)
accepts, rejects and reads exactly what the full `RegisterBrokerBody.decode` does."""
from __future__ import annotations

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fastpath_cases import ANY_VALUE, ENTRY_FIELDS, IMPLEMENTATIONS, PLAIN_ENTRY, _fastpath, needs_extension
from namesrv.fastpath import pure
from namesrv.protocol import ProtocolError, RegisterBrokerBody, TopicConfig
from namesrv.protocol.codes import Version
from namesrv.protocol.topic import DataVersion, TopicConfigSerializeWrapper, TopicQueueTable, decode_registration

ENTRY = st.one_of(
    PLAIN_ENTRY,
    st.builds(lambda obj, replaced, removed: {**{k: v for k, v in obj.items() if k not in removed}, **replaced},
              PLAIN_ENTRY, st.dictionaries(st.sampled_from(ENTRY_FIELDS), ANY_VALUE, min_size=1, max_size=3),
              st.sets(st.sampled_from(ENTRY_FIELDS), max_size=2)),
    ANY_VALUE,
)
TABLE = st.dictionaries(st.text(max_size=4), ENTRY, max_size=6)


def outcome(read, *args):
    try:
        return read(*args)
    except ProtocolError as exc:
        return f"ProtocolError: {exc}"


def full_fields(table: dict) -> dict:
    return {key: TopicConfig.from_dict(obj, key).queue_fields() for key, obj in table.items()}


def fallback(obj, key):
    return TopicConfig.from_dict(obj, key).queue_fields()


@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
@settings(max_examples=400)
@given(table=TABLE)
def test_queue_fields_read_a_table_as_topic_config_does(impl, table):
    assert outcome(impl.queue_fields, table, fallback) == outcome(full_fields, table)


@needs_extension
@settings(max_examples=400)
@given(table=TABLE)
def test_both_fast_paths_agree_including_which_entries_fall_back(table):
    def tagged(obj, key):
        return ("fallback", key)

    assert _fastpath.queue_fields(table, tagged) == pure.queue_fields(table, tagged)


@settings(max_examples=300)
@given(table=TABLE, version=st.one_of(st.none(), ANY_VALUE, st.just({"counter": 3, "timestamp": 9})),
       mappings=st.sampled_from([None, {}, {"T": {"bname": "b1"}}, {"T": 1}, []]),
       servers=st.sampled_from([None, [], ["f:1"], [1], "x"]),
       codec=st.sampled_from([(False, Version.V5_3_3), (False, Version.V3_0_11 - 1), (True, Version.V5_3_3)]))
def test_decode_registration_matches_the_full_decode(table, version, mappings, servers, codec):
    wrapper = {"topicConfigTable": table, "dataVersion": version, "topicQueueMappingInfoMap": mappings}
    compressed, protocol_version = codec
    if compressed:
        try:
            data = RegisterBrokerBody(TopicConfigSerializeWrapper.from_dict(wrapper), servers).encode(True)
        except (ProtocolError, TypeError, AttributeError):
            return  # only well-formed tables have a compressed form
    elif protocol_version < Version.V3_0_11:
        data = orjson.dumps(wrapper)
    else:
        data = orjson.dumps({"topicConfigSerializeWrapper": wrapper, "filterServerList": servers})

    def full(data):
        body = RegisterBrokerBody.decode(data, compressed, protocol_version)
        return TopicQueueTable.of(body.wrapper), body.filter_server_list

    assert outcome(decode_registration, data, compressed, protocol_version) == outcome(full, data)


def test_an_empty_body_is_an_empty_table():
    assert decode_registration(None) == (TopicQueueTable({}, DataVersion(), {}), None)


def test_a_decoded_table_comes_back_whole_from_the_write_logs_round_trip():
    """A registration's change carries the decoded table through the write log as a msgpack
    array (namesrv.writelog.log.pack_write: the list of its fields); `from_fields` reads it back
    with every field, those a table's equality leaves out included."""
    from dataclasses import replace

    from namesrv.writelog.log import pack_write, unpack_write

    first, _ = decode_registration(orjson.dumps({"topicConfigSerializeWrapper": {
        "topicConfigTable": {"T1": {"topicName": "T1", "readQueueNums": 4, "writeQueueNums": 4, "perm": 6}},
        "dataVersion": {"counter": 3, "timestamp": 7, "stateVersion": 1}}, "filterServerList": []}))
    table = replace(first, entries=b"entries", omitted=2, omitted_since=b"since")
    back = TopicQueueTable.from_fields(unpack_write(pack_write(103, table))[1])
    assert type(back.data_version) is DataVersion and back.data_version == DataVersion(3, 7, 1)
    assert back.topics == {"T1": list(table.topics["T1"])}  # queue fields come back as lists
    assert (back.entries, back.omitted, back.omitted_since) == (b"entries", 2, b"since")
    assert back.facts == (None if table.facts is None else list(table.facts))
    assert table == first and table != TopicQueueTable({}, table.data_version, {})  # what it says, not the rest
    assert repr(table) == repr(first) and "entries" not in repr(table)
