"""Replay tests/fuzz_corpus/: inputs that once broke the protocol layer, each named for what it broke.

Every file goes through its target's fuzz check (`fuzz.targets`), which runs the fast-path parts on
both the Cython and the pure-Python implementation and demands the same result or the same
ProtocolError message, a round trip for whatever decodes, and no other exception. Where the
outcome is known it is pinned below. A file is `tests/fuzz_corpus/<target>/<what-it-broke>`
(`.zlib`: stored deflated); `python -m fuzz.run --promote` files new ones from fuzz crashes.
"""
from __future__ import annotations

import re

import pytest

from fuzz import targets
from fuzz.fuzz_bodies import TARGETS as BODY_TARGETS
from fuzz.fuzz_commands import TARGETS as COMMAND_TARGETS
from fuzz.fuzz_frames import TARGETS as FRAME_TARGETS

FILES = targets.corpus_files()

#: "<target>/<file>" -> {report step: regex the step's outcome must fully match}.
EXPECTED: dict[str, dict[str, str]] = {
    # jsonbody's string splitter restarted at every quote of an unterminated string: O(n²), hours for 1 MB.
    "TopicRouteData/quadratic-regex-on-unterminated-string.zlib": {
        "decode": r"ProtocolError: TopicRouteData is not valid JSON: unexpected end of data.*"},
    # Counters past a Java long were accepted, then failed to encode (orjson writes 64 bits at most).
    "DataVersion/counter-past-64-bits-as-string": {
        "decode": r"ProtocolError: DataVersion.counter must be a 64-bit integer, got '99999999999999999999999'"},
    "DataVersion/counter-past-signed-64-bits-as-number": {  # orjson reads up to 2**64-1; Java's long stops at 2**63-1
        "decode": r"ProtocolError: DataVersion.counter must be a 64-bit integer, got 18446744073709551615"},
    "RegisterBrokerBody-layout/dataversion-counter-past-64-bits": {
        "decode": r"ProtocolError: DataVersion.counter must be a 64-bit integer, got '99999999999999999999999'"},
    # Non-string list items were accepted as broker names / server addresses (ClusterInfo then failed to sort them).
    "ClusterInfo/cluster-broker-names-with-a-number": {
        "decode": r"ProtocolError: ClusterInfo.clusterAddrTable\[c\]\[\] must be str, got int"},
    "TopicRouteData/filter-servers-with-a-number": {
        "decode": r"ProtocolError: TopicRouteData.filterServerTable\[h:0\]\[\] must be str, got int"},
    "RegisterBrokerBody-json/filter-server-list-with-a-number": {
        "decode": r"ProtocolError: RegisterBrokerBody.filterServerList\[\] must be str, got int"},
    # A falsy non-object wrapper was silently read as an empty topic table.
    "RegisterBrokerBody-json/wrapper-is-an-array": {
        "decode": r"ProtocolError: RegisterBrokerBody.topicConfigSerializeWrapper must be dict, got list"},
    "RegisterBrokerBody-json/wrapper-is-zero": {
        "decode": r"ProtocolError: RegisterBrokerBody.topicConfigSerializeWrapper must be dict, got int"},
    "RegisterBrokerBody-json/wrapper-is-an-empty-string": {
        "decode": r"ProtocolError: RegisterBrokerBody.topicConfigSerializeWrapper must be dict, got str"},
    # A compressed body's TopicQueueMappingInfo without "topic" was filed under the topic "None".
    "RegisterBrokerBody-layout/mapping-info-without-topic": {
        "decode": r"ProtocolError: TopicQueueMappingInfo.topic must be str, got NoneType"},
    "RegisterBrokerBody-compressed/mapping-info-without-topic": {
        "decode": r"ProtocolError: TopicQueueMappingInfo.topic must be str, got NoneType"},
    # "T 8 8 6  8": an empty topicFilterType was kept, and its text form no longer read back (Java's valueOf throws).
    "TopicConfig-text/empty-filter-type": {
        "decode": r"ProtocolError: compressed TopicConfig 'T 8 8 6  8' has an unknown topicFilterType"},
    "RegisterBrokerBody-layout/topic-config-with-empty-filter-type": {
        "decode": r"ProtocolError: compressed TopicConfig 'T 8 8 6  8' has an unknown topicFilterType"},
    # Lone surrogates escaped as UnicodeEncodeError from the binary header encoder.
    "encode_header/lone-surrogate-in-remark": {
        "encode": re.escape("ProtocolError: binary header: remark is not encodable as UTF-8 "
                            "(surrogates not allowed at index 2)")},
    "encode_header/lone-surrogate-in-ext-key": {
        "encode": re.escape("ProtocolError: binary header: extFields key is not encodable as UTF-8 "
                            "(surrogates not allowed at index 0)")},
    "encode_header/lone-surrogate-in-ext-value": {
        "encode": re.escape("ProtocolError: binary header: extFields value is not encodable as UTF-8 "
                            "(surrogates not allowed at index 1)")},
    # The pure-Python decoder called .decode() on memoryview slices (AttributeError).
    "binary_header/memoryview-with-remark-and-ext-strings": {"decode": "ok"},
    # A header past 16 MiB silently overflowed the 24-bit header-length field into the serialize type.
    "command/json-reencoding-of-header-past-16MiB.zlib": {
        "decode": "ok", "encode ROCKETMQ": "ok",
        "encode JSON": r"ProtocolError: header of 18874475 bytes does not fit the 24-bit header-length field"},
    "msgpack/header-past-16MiB-in-both-codecs.zlib": {
        "decode": "ok",
        "encode JSON": r"ProtocolError: header of 17825899 bytes does not fit the 24-bit header-length field",
        "encode ROCKETMQ": r"ProtocolError: header of 17825813 bytes does not fit the 24-bit header-length field"},
}


def corpus_id(path) -> str:
    return f"{path.parent.name}/{path.name}"


@pytest.mark.timeout(60)
@pytest.mark.parametrize("path", FILES, ids=corpus_id)
def test_corpus_input_is_handled(path):
    report = targets.CHECKS[path.parent.name](targets.read_corpus_file(path))
    for step, pattern in EXPECTED.get(corpus_id(path), {}).items():
        assert re.fullmatch(pattern, report[step]), f"{step}: {report[step]!r} does not match {pattern!r}"


def test_both_implementations_are_replayed():
    if "cython" not in targets.IMPLEMENTATIONS:
        pytest.skip("namesrv._fastpath is not built: only the pure-Python fast path was replayed")
    assert set(targets.IMPLEMENTATIONS) == {"python", "cython"}


def test_every_corpus_file_names_a_target_and_every_expectation_a_file():
    assert {path.parent.name for path in FILES} <= set(targets.CHECKS)
    assert set(EXPECTED) <= {corpus_id(path) for path in FILES}


def test_every_target_is_fuzzed_by_exactly_one_harness_and_has_seeds():
    harnessed = [*FRAME_TARGETS, *COMMAND_TARGETS, *BODY_TARGETS]
    assert sorted(harnessed) == sorted(targets.CHECKS)
    for name, check in targets.CHECKS.items():
        assert targets.SEEDS[name], name
        for seed in targets.SEEDS[name]:
            check(seed)  # a seed that trips its own check would only make the fuzzer report itself
