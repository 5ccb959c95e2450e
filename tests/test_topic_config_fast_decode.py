"""TopicConfig.from_dict's one-go reading of a plain topic gives what the field-by-field reading gives."""
from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from namesrv.protocol import ProtocolError, TopicConfig

INT32 = st.integers(-(2 ** 31), 2 ** 31 - 1)
ANY_VALUE = st.one_of(st.none(), st.booleans(), st.integers(-(2 ** 40), 2 ** 40), st.text(max_size=6),
                      st.sampled_from(["SINGLE_TAG", "MULTI_TAG", "7", "true"]), st.just({}), st.just([]))
PLAIN = st.fixed_dictionaries({
    "topicName": st.text(min_size=1, max_size=8), "readQueueNums": INT32, "writeQueueNums": INT32, "perm": INT32,
    "topicSysFlag": INT32, "order": st.booleans(), "topicFilterType": st.sampled_from(["SINGLE_TAG", "MULTI_TAG"]),
    "attributes": st.one_of(st.none(), st.dictionaries(st.text(max_size=3), st.text(max_size=3), max_size=2)),
})
KEYS = ["topicName", "readQueueNums", "writeQueueNums", "perm", "topicSysFlag", "order", "topicFilterType",
        "attributes"]


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


@given(PLAIN)
def test_a_plain_topic_is_read_in_one_go_and_the_same(obj):
    assert TopicConfig._from_plain_dict(obj) is not None
    assert either_way(obj, "key") == field_by_field(obj, "key")


@given(PLAIN, st.dictionaries(st.sampled_from(KEYS), ANY_VALUE, max_size=3), st.sets(st.sampled_from(KEYS), max_size=2))
def test_any_other_topic_reads_as_before(obj, replaced, removed):
    obj = {**{k: v for k, v in obj.items() if k not in removed}, **replaced}
    assert either_way(obj, "key") == field_by_field(obj, "key")
