"""TopicConfig.from_dict's one-go reading of a plain topic gives what the field-by-field reading gives."""
from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fastpath_cases import ANY_VALUE, ENTRY_FIELDS, PLAIN_ENTRY
from namesrv.protocol import ProtocolError, TopicConfig


def field_by_field(obj: object, name: str | None) -> TopicConfig | str:
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(TopicConfig, "_from_plain_dict", classmethod(lambda cls, obj: None))
        try:
            return TopicConfig.from_dict(obj, name)
        except ProtocolError as exc:
            return f"ProtocolError: {exc}"


def either_way(obj: object, name: str | None) -> TopicConfig | str:
    try:
        return TopicConfig.from_dict(obj, name)
    except ProtocolError as exc:
        return f"ProtocolError: {exc}"


@given(PLAIN_ENTRY)
def test_a_plain_topic_is_read_in_one_go_and_the_same(obj):
    assert TopicConfig._from_plain_dict(obj) is not None
    assert either_way(obj, "key") == field_by_field(obj, "key")


@given(PLAIN_ENTRY, st.dictionaries(st.sampled_from(ENTRY_FIELDS), ANY_VALUE, max_size=3),
       st.sets(st.sampled_from(ENTRY_FIELDS), max_size=2))
def test_any_other_topic_reads_as_before(obj, replaced, removed):
    obj = {**{k: v for k, v in obj.items() if k not in removed}, **replaced}
    assert either_way(obj, "key") == field_by_field(obj, "key")
