"""maxTopicsPerRegistration (issue 8): a REGISTER_BROKER body with too many topics is refused
before it is decoded, in all three body forms, exactly at its edge.
"""
from __future__ import annotations

import struct
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_processor import BROKER, Namesrv

from namesrv.processor.limits import topic_count_beyond
from namesrv.protocol import DataVersion, RegisterBrokerBody, RequestCode, ResponseCode, TopicConfig
from namesrv.protocol import TopicConfigSerializeWrapper
from namesrv.protocol.codes import Version

LIMIT = 50
HEADER = {"brokerName": "broker-a", "brokerAddr": "10.0.0.1:10911", "clusterName": "C", "brokerId": "0"}
#: name -> (header extras, request version, encoder of a wrapper)
FORMS = {
    "json": ({}, 479, lambda wrapper: RegisterBrokerBody(wrapper, []).encode()),
    "compressed": ({"compressed": "true"}, 479,
                   lambda wrapper: RegisterBrokerBody(wrapper, []).encode(compressed=True)),
    "legacy wrapper (version < 3.0.11)": ({}, 36, lambda wrapper: wrapper.encode()),
}


def wrapper_of(count: int, attributes: dict | None = None) -> TopicConfigSerializeWrapper:
    return TopicConfigSerializeWrapper({f"T{i}": TopicConfig(f"T{i}", 4, 4, attributes=attributes)
                                        for i in range(count)}, DataVersion(1, 2, 0))


def register(ns: Namesrv, form: str, body: bytes):
    extra, version, _ = FORMS[form]
    return ns.call(RequestCode.REGISTER_BROKER, HEADER | extra, body, version=version, channel=BROKER)


@pytest.fixture
def ns(tmp_path) -> Namesrv:
    return Namesrv(tmp_path, max_topics_per_registration=LIMIT)


@pytest.mark.parametrize("form", sorted(FORMS))
def test_exactly_the_limit_is_accepted(ns, form):
    response = register(ns, form, FORMS[form][2](wrapper_of(LIMIT)))
    assert response.code == ResponseCode.SUCCESS, response.remark
    assert len(ns.routes.snapshot().topic_queue_table) == LIMIT


@pytest.mark.parametrize("form", sorted(FORMS))
def test_one_topic_more_is_refused_naming_the_limit_and_registers_nothing(ns, form):
    response = register(ns, form, FORMS[form][2](wrapper_of(LIMIT + 1)))
    assert (response.code, response.remark) == \
        (ResponseCode.SYSTEM_ERROR, "register broker failed: 51 topics exceed maxTopicsPerRegistration=50")
    assert response.ext_fields == {}
    tables = ns.routes.snapshot()
    assert tables.topic_queue_table == {} and tables.broker_addr_table == {} and tables.broker_live_table == {}


def bad_topics_json(count: int) -> bytes:
    """A body whose topics all fail to decode (perm is not an integer)."""
    table = ",".join(f'"T{i}":{{"topicName":"T{i}","perm":"rw"}}' for i in range(count))
    return f'{{"filterServerList":[],"topicConfigSerializeWrapper":{{"topicConfigTable":{{{table}}}}}}}'.encode()


def compressed_layout(count: int, topic: bytes = b"T 4 4 6 SINGLE_TAG ", blob: bytes | None = None) -> bytes:
    """Reference 3.6 by hand: DataVersion blob, topic count, topics, filter servers."""
    blob = DataVersion(1, 2, 0).encode() if blob is None else blob
    parts = [struct.pack(">i", len(blob)), blob, struct.pack(">i", count)]
    for i in range(count):
        text = topic.replace(b"T", b"T%d" % i, 1)
        parts += [struct.pack(">i", len(text)), text]
    parts += [struct.pack(">i", 2), b"[]"]
    return zlib.compress(b"".join(parts))


def test_the_limit_is_checked_before_the_body_is_decoded(ns):
    over = register(ns, "json", bad_topics_json(LIMIT + 1))
    assert over.remark == "register broker failed: 51 topics exceed maxTopicsPerRegistration=50"
    at = register(ns, "json", bad_topics_json(LIMIT))
    assert at.code == ResponseCode.SYSTEM_ERROR and "perm must be a 32-bit integer" in at.remark
    bad_compressed = compressed_layout(LIMIT + 1, topic=b"T 4 4 rw SINGLE_TAG ")
    assert register(ns, "compressed", bad_compressed).remark == \
        "register broker failed: 51 topics exceed maxTopicsPerRegistration=50"
    assert "non-integer" in register(ns, "compressed", compressed_layout(LIMIT, topic=b"T 4 4 rw SINGLE_TAG ")).remark


def test_a_compressed_body_is_judged_by_its_declared_count_without_inflating_the_rest(ns):
    huge_count = zlib.compress(b"".join([struct.pack(">i", 2), b"{}", struct.pack(">i", 2 ** 31 - 1)]))
    assert register(ns, "compressed", huge_count).remark == \
        "register broker failed: 2147483647 topics exceed maxTopicsPerRegistration=50"
    padded = b'{"counter":1' + b" " * 60_000 + b"}"  # valid JSON: the count sits far into the stream
    assert register(ns, "compressed", compressed_layout(LIMIT + 1, blob=padded)).remark == \
        "register broker failed: 51 topics exceed maxTopicsPerRegistration=50"
    assert register(ns, "compressed", compressed_layout(LIMIT, blob=padded)).code == ResponseCode.SUCCESS


def test_more_json_objects_than_the_limit_is_still_judged_by_topics(ns):
    """Each topic's attributes are objects too: the byte count of `{` only decides when to count exactly."""
    body = RegisterBrokerBody(wrapper_of(LIMIT, attributes={"+message.type": "NORMAL"}), []).encode()
    assert body.count(b"{") > 2 * LIMIT
    assert register(ns, "json", body).code == ResponseCode.SUCCESS


@pytest.mark.parametrize("form", sorted(FORMS))
def test_malformed_bodies_get_their_decode_error_not_the_limit(ns, form):
    extra, version, _ = FORMS[form]
    objects = b"[" + b"{}," * 60 + b"{}]"  # more objects than the limit, but no topic table
    for body in (b"{" * (LIMIT + 5), b'{"topicConfigTable":%s,"topicConfigSerializeWrapper":%s}' % (objects, objects),
                 b"\xff\x00garbage"):
        response = ns.call(RequestCode.REGISTER_BROKER, HEADER | extra, body, version=version, channel=BROKER)
        assert response.code == ResponseCode.SYSTEM_ERROR and "maxTopicsPerRegistration" not in response.remark


def test_zero_means_no_limit(tmp_path):
    ns = Namesrv(tmp_path, max_topics_per_registration=0)
    assert register(ns, "json", FORMS["json"][2](wrapper_of(300))).code == ResponseCode.SUCCESS


def test_the_repeat_of_an_accepted_registration_stays_accepted(ns):
    body = FORMS["compressed"][2](wrapper_of(LIMIT))
    for _ in range(3):
        assert register(ns, "compressed", body).code == ResponseCode.SUCCESS


@settings(max_examples=150, deadline=None)
@given(count=st.integers(0, 40), limit=st.integers(0, 45), form=st.sampled_from(sorted(FORMS)),
       attributes=st.sampled_from([None, {}, {"k": "{v}"}]))
def test_the_precount_agrees_with_the_decoder(count, limit, form, attributes):
    extra, version, encode = FORMS[form]
    body = encode(wrapper_of(count, attributes))
    compressed = "compressed" in extra
    decoded = RegisterBrokerBody.decode(body, compressed, version).wrapper.topic_config_table
    assert len(decoded) == count
    assert topic_count_beyond(limit, body, compressed, version) == (count if count > limit else None)


def test_no_body_and_an_empty_body_carry_no_topics():
    for body in (None, b""):
        assert topic_count_beyond(0, body, True, Version.V5_0_0) is None
        assert topic_count_beyond(0, body, False, Version.V5_0_0) is None
