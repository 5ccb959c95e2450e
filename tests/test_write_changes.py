"""A write prepared once and applied anywhere is the write processed in one place (sans-IO).

Worker processes split every write (`WriteHandler`): the worker that received it prepares a
`Change`, the write log carries it as msgpack, and every worker applies it. Three twins are set
up alike for each example: one processes the request whole (`RequestProcessor.process`, what a
single process does); one applies the change it prepared itself; one applies that change after
the write log's round trip (`pack_write` / `unpack_write`: tuples become lists; the worker revives
it, `WriteHandler.revive`, as `RequestProcessor.apply(..., logged=True)` does). All three must
answer the same bytes and end with equal route tables, KV tables and config.

Parametrized over the request table's write codes: a write row without an example fails here.
A change prepared against hints that no longer hold where it lands (an unchanged body, unchanged
topic entries) must be applied nowhere (RETRY, tables untouched) and, prepared again without
hints, apply alike everywhere.
"""
from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from namesrv.channel import Channel
from namesrv.config import NamesrvConfig
from namesrv.fastpath import body_crc32
from namesrv.kvconfig import KVConfigManager
from namesrv.processor import RequestProcessor
from namesrv.processor.context import RETRY, Hints
from namesrv.processor.requests import WRITE_CODES
from namesrv.protocol import (DataVersion, QueueData, RegisterBrokerBody, RemotingCommand, RequestCode, ResponseCode,
                              TopicConfig, TopicConfigSerializeWrapper, TopicRouteData)
from namesrv.protocol.codes import PERM_READ
from namesrv.routeinfo import RouteInfoManager
from namesrv.writelog.log import pack_write, unpack_write

BROKER = Channel("tcp", b"broker-1", "10.0.0.1:50000")
ADMIN = Channel("tcp", b"admin-1", "127.0.0.1:50001")
NOW = 1_700_000_000_000
MASTER = {"clusterName": "C", "brokerName": "b1", "brokerAddr": "10.0.0.1:10911", "brokerId": "0",
          "haServerAddr": "10.0.0.1:10912"}
SLAVE = {**MASTER, "brokerAddr": "10.0.0.2:10911", "brokerId": "1", "haServerAddr": "10.0.0.2:10912"}
_opaque = itertools.count(1)


def request(code: int, ext: dict | None = None, body: bytes | None = None) -> RemotingCommand:
    """As a client sends it: through the frame codec."""
    frame = RemotingCommand.request(code, ext, body, opaque=next(_opaque)).encode()
    return RemotingCommand.decode(frame[4:])


def body(topics: int = 20, counter: int = 1, read_only: int | None = None) -> bytes:
    wrapper = TopicConfigSerializeWrapper(
        {f"T{i}": TopicConfig(f"T{i}", 4, 4, PERM_READ if i == read_only else 6) for i in range(topics)},
        DataVersion(counter, NOW + counter))
    return RegisterBrokerBody(wrapper, ["10.0.0.9:7777"]).encode()


def registration(header: dict = MASTER, data: bytes | None = None) -> RemotingCommand:
    data = body() if data is None else data
    return request(RequestCode.REGISTER_BROKER, {**header, "bodyCrc32": str(body_crc32(data))}, data)


def topic_route(*queues: QueueData) -> bytes:
    return TopicRouteData(queue_datas=list(queues)).encode()


@dataclass(frozen=True)
class Example:
    setup: tuple[RemotingCommand, ...]
    write: RemotingCommand
    #: What the prepared change must be (a registration's kind), if it matters.
    check: Callable[[object], bool] = lambda change: True


EXAMPLES: dict[int, list[Example]] = {
    RequestCode.REGISTER_BROKER: [
        Example((), registration(), lambda change: change.table is not None),
        Example((registration(),), registration(), lambda change: change.table is None),
        # A new DataVersion changing one topic: the unchanged entries are left out (and must be found
        # equal, by value, in a twin that got its entries through msgpack).
        Example((registration(),), registration(data=body(counter=2, read_only=3)),
                lambda change: change.table is not None and change.table.omitted == 19),
        Example((registration(),), registration(SLAVE)),
        Example((), registration(data=body(topics=1)),
                lambda change: change.table.topics and change.table.omitted == 0),
        Example((), request(RequestCode.REGISTER_BROKER, {**MASTER})),  # no body at all
    ],
    RequestCode.UNREGISTER_BROKER: [
        Example((registration(), registration(SLAVE)), request(RequestCode.UNREGISTER_BROKER, MASTER)),
    ],
    RequestCode.QUERY_DATA_VERSION: [
        Example((registration(),), request(RequestCode.QUERY_DATA_VERSION, MASTER,
                                           DataVersion(1, NOW + 1).encode())),
        Example((registration(),), request(RequestCode.QUERY_DATA_VERSION, MASTER, DataVersion(7, 7).encode())),
        Example((), request(RequestCode.QUERY_DATA_VERSION, MASTER)),
        Example((registration(),), request(RequestCode.QUERY_DATA_VERSION, MASTER)),  # no version: changed
    ],
    RequestCode.BROKER_HEARTBEAT: [
        Example((registration(),), request(RequestCode.BROKER_HEARTBEAT, MASTER)),
    ],
    RequestCode.WIPE_WRITE_PERM_OF_BROKER: [
        Example((registration(),), request(RequestCode.WIPE_WRITE_PERM_OF_BROKER, {"brokerName": "b1"})),
    ],
    RequestCode.ADD_WRITE_PERM_OF_BROKER: [
        Example((registration(data=body(read_only=2)),),
                request(RequestCode.ADD_WRITE_PERM_OF_BROKER, {"brokerName": "b1"})),
    ],
    RequestCode.DELETE_TOPIC_IN_NAMESRV: [
        Example((registration(),), request(RequestCode.DELETE_TOPIC_IN_NAMESRV, {"topic": "T4"})),
        Example((registration(),), request(RequestCode.DELETE_TOPIC_IN_NAMESRV, {"topic": "T5", "clusterName": "C"})),
    ],
    RequestCode.REGISTER_TOPIC_IN_NAMESRV: [
        Example((registration(),), request(RequestCode.REGISTER_TOPIC_IN_NAMESRV, {"topic": "NEW"},
                                           topic_route(QueueData("b1", 2, 2, 6, 0)))),
    ],
    RequestCode.PUT_KV_CONFIG: [
        Example((), request(RequestCode.PUT_KV_CONFIG, {"namespace": "NS", "key": "k", "value": "v\u00e9"})),
        Example((), request(RequestCode.PUT_KV_CONFIG, {"namespace": "NS", "key": "k"})),
    ],
    RequestCode.DELETE_KV_CONFIG: [
        Example((request(RequestCode.PUT_KV_CONFIG, {"namespace": "NS", "key": "k", "value": "v"}),),
                request(RequestCode.DELETE_KV_CONFIG, {"namespace": "NS", "key": "k"})),
    ],
    RequestCode.UPDATE_NAMESRV_CONFIG: [
        Example((), request(RequestCode.UPDATE_NAMESRV_CONFIG, body=b"orderMessageEnable=true\n")),
        Example((), request(RequestCode.UPDATE_NAMESRV_CONFIG, body=b"orderMessageEnable=maybe\n")),
    ],
}


class Twin:
    """One process's tables and processor, on a fixed clock."""

    def __init__(self, workdir: Path, name: str) -> None:
        store = workdir / name
        store.mkdir()
        self.config = NamesrvConfig(kv_config_path=str(store / "kv.json"), config_store_path=str(store / "ns.conf"))
        self.routes = RouteInfoManager(self.config, clock=lambda: NOW)
        self.kv = KVConfigManager(self.config.kv_config_path)
        self.processor = RequestProcessor(self.config, self.routes, self.kv, lambda: NOW, persist=False)

    def state(self) -> tuple:
        """Route and KV tables, and the config but for the twin's own file paths."""
        config = {key: value for key, value in self.config.to_properties().items()
                  if key not in ("configStorePath", "kvConfigPath")}
        return self.routes.snapshot(), self.kv.export_table(), config

    def run(self, *requests: RemotingCommand, channel: Channel = BROKER) -> None:
        for setup in requests:
            assert self.processor.process(setup, channel).code == ResponseCode.SUCCESS


@pytest.fixture
def twins(tmp_path: Path) -> Callable[[int], list[Twin]]:
    return lambda count: [Twin(tmp_path, f"twin{i}") for i in range(count)]


def test_every_write_code_has_an_example():
    assert set(EXAMPLES) == set(WRITE_CODES)


def _cases() -> list:
    return [pytest.param(code, example, id=f"{RequestCode(code).name}-{i}")
            for code, examples in EXAMPLES.items() for i, example in enumerate(examples)]


@pytest.mark.parametrize("code, example", _cases())
def test_a_change_through_the_log_applies_as_the_whole_request(twins, code, example):
    whole, local, shipped = twins(3)
    channel = ADMIN if code in (RequestCode.PUT_KV_CONFIG, RequestCode.DELETE_KV_CONFIG) else BROKER
    for twin in (whole, local, shipped):
        twin.run(*example.setup, channel=channel)
    before = whole.state()
    assert local.state() == shipped.state() == before

    expected = whole.processor.process(example.write, channel).encode()
    change = local.processor.prepare(example.write, channel)
    assert type(change) is not RemotingCommand, change
    assert example.check(change), change
    answers = []
    for twin, arriving, logged in ((local, change, False), (shipped, unpack_write(pack_write(code, change))[1], True)):
        outcome = twin.processor.apply(code, arriving, channel, logged)
        assert outcome is not RETRY
        answers.append(twin.processor.answer(example.write, outcome).encode())
    assert answers == [expected, expected]
    assert local.state() == shipped.state() == whole.state()


@pytest.mark.parametrize("stale", ["refresh", "omitted entries"])
def test_a_change_whose_hint_went_stale_applies_nowhere_then_again_without_hints(twins, stale):
    """Another write lands between a registration's prepare and its apply (here: a topic of the broker
    deleted): the hinted change must change nothing anywhere, and its unhinted one apply alike."""
    origin, sibling = twins(2)
    for twin in (origin, sibling):
        twin.run(registration())
    write = registration() if stale == "refresh" else registration(data=body(counter=2, read_only=3))
    change = origin.processor.prepare(write, BROKER)
    assert (change.table is None) == (stale == "refresh") and (stale == "refresh" or change.table.omitted)
    deletion = request(RequestCode.DELETE_TOPIC_IN_NAMESRV, {"topic": "T4"})
    for twin in (origin, sibling):
        twin.run(deletion, channel=ADMIN)
    before = origin.state()
    shipped = unpack_write(pack_write(RequestCode.REGISTER_BROKER, change))[1]
    assert origin.processor.apply(RequestCode.REGISTER_BROKER, change, BROKER) is RETRY
    assert sibling.processor.apply(RequestCode.REGISTER_BROKER, shipped, BROKER, logged=True) is RETRY
    assert origin.state() == sibling.state() == before

    full = origin.processor.prepare(write, BROKER, Hints.NONE)
    assert full.table is not None and full.table.omitted == 0
    outcomes = [origin.processor.apply(RequestCode.REGISTER_BROKER, full, BROKER),
                sibling.processor.apply(RequestCode.REGISTER_BROKER,
                                        unpack_write(pack_write(RequestCode.REGISTER_BROKER, full))[1], BROKER,
                                        logged=True)]
    assert RETRY not in outcomes
    assert origin.state() == sibling.state()
    assert origin.routes.pickup_topic_route("T4") is not None  # the body restored the deleted topic


def test_prepare_refuses_without_a_change(twins):
    """Bad input and refusals are answered where they arrive: nothing goes into the log."""
    (twin,) = twins(1)
    before = twin.state()
    data = body()
    bad_crc = request(RequestCode.REGISTER_BROKER, {**MASTER, "bodyCrc32": str(body_crc32(data) ^ 1)}, data)
    cases = [(bad_crc, "crc32 not match"),
             (request(RequestCode.PUT_KV_CONFIG, {"key": "k", "value": "v"}), "namespace or key is null"),
             (request(RequestCode.UNREGISTER_BROKER, {"clusterName": "C"}), "brokerAddr"),
             (request(RequestCode.UPDATE_NAMESRV_CONFIG, body=b"listenPort=1\n"), "listenPort")]
    for write, remark in cases:
        answer = twin.processor.prepare(write, BROKER)
        assert type(answer) is RemotingCommand and answer.code != ResponseCode.SUCCESS, (write, answer)
        assert remark in answer.remark
    assert twin.state() == before
