"""The answer tallies behind `/metrics` (namesrv.request_stats) and the merge of worker processes' views
(namesrv.metrics), driven directly."""
from __future__ import annotations

import threading
import time
import zlib

from inline_harness import InlineServer
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

from namesrv.channel import Channel
from namesrv.metrics import merge_families, pack_families, unpack_families
from namesrv.protocol import (DataVersion, RegisterBrokerBody, RemotingCommand, RequestCode, ResponseCode, TopicConfig,
                              TopicConfigSerializeWrapper)
from namesrv.request_stats import (EXECUTOR, FAST_PATH, LATENCY_BOUNDS, NO_RESPONSE, OTHER_CODE, RequestStats,
                                   RequestTally, request_name, response_name)

CLIENT = Channel("tcp", b"client", "127.0.0.1:50000")
ROUTE = RequestCode.GET_ROUTEINFO_BY_TOPIC


def test_a_latency_on_a_bound_counts_in_that_bucket_and_past_the_last_in_inf() -> None:
    tally = RequestTally()
    tally.add(ROUTE, ResponseCode.SUCCESS, FAST_PATH, 1e-05)  # le="1e-05" is inclusive, as in Prometheus
    tally.add(ROUTE, ResponseCode.SUCCESS, FAST_PATH, 1.1e-05, count=3)
    tally.add(ROUTE, ResponseCode.SYSTEM_BUSY, EXECUTOR, 11.0)
    buckets = tally.latency[ROUTE]
    assert len(buckets) == len(LATENCY_BOUNDS) + 2
    assert (buckets[0], buckets[1], buckets[-2]) == (1, 3, 1) and sum(buckets[:-1]) == 5
    assert abs(buckets[-1] - (1e-05 + 3 * 1.1e-05 + 11.0)) < 1e-12
    assert {key: slot.count for key, slot in tally.slots.items()} == {(ROUTE, 0, FAST_PATH): 4, (ROUTE, 2, EXECUTOR): 1}


def test_codes_the_server_does_not_know_share_one_entry_so_a_peer_cannot_grow_the_tally() -> None:
    tally = RequestTally()
    for code in range(1000, 3000):
        tally.add(code, ResponseCode.REQUEST_CODE_NOT_SUPPORTED, EXECUTOR, 0.001)
    assert {key: slot.count for key, slot in tally.slots.items()} == {
        (OTHER_CODE, ResponseCode.REQUEST_CODE_NOT_SUPPORTED, EXECUTOR): 2000}
    assert list(tally.latency) == [OTHER_CODE]
    assert (request_name(OTHER_CODE), request_name(103)) == ("OTHER", "REGISTER_BROKER")
    assert (response_name(NO_RESPONSE), response_name(17), response_name(4242)) == ("NONE", "TOPIC_NOT_EXIST", "4242")


def test_each_thread_counts_in_its_own_tally_and_the_totals_lose_nothing() -> None:
    stats = RequestStats()
    per_thread = 20_000

    def count() -> None:
        tally = stats.tally()
        assert stats.tally() is tally
        for _ in range(per_thread):
            tally.add(ROUTE, 0, EXECUTOR, 0.0002)

    threads = [threading.Thread(target=count) for _ in range(4)]
    for thread in threads:
        thread.start()
    while any(thread.is_alive() for thread in threads):
        stats.totals()  # scraping meanwhile neither fails nor disturbs the counting
    totals = stats.totals()
    assert totals.answers == {(ROUTE, 0, EXECUTOR): 4 * per_thread}
    assert totals.latency[ROUTE][LATENCY_BOUNDS.index(0.00025)] == 4 * per_thread


def test_the_inline_path_counts_a_chunk_of_cached_route_answers_with_their_latency(tmp_path) -> None:
    server = InlineServer(tmp_path)
    body = RegisterBrokerBody(TopicConfigSerializeWrapper({t: TopicConfig(t, 4, 4) for t in "TU"}, DataVersion(1, 1, 0))).encode()
    header = {"brokerName": "broker-a", "brokerAddr": "127.0.0.1:10911", "clusterName": "C", "brokerId": 0,
              "haServerAddr": "127.0.0.1:10912", "bodyCrc32": zlib.crc32(body) & 0x7FFFFFFF}
    answer = server.processor.process(RemotingCommand.request(RequestCode.REGISTER_BROKER, header, body=body), CLIENT)
    assert answer.code == ResponseCode.SUCCESS
    query = RemotingCommand.request(ROUTE, {"topic": "T"}, opaque=1).encode()[4:]
    assert server.inline(query, CLIENT) is None  # not cached yet: the executors' work, which caches it
    server.regular(query, CLIENT)
    assert type(server.inline(query, CLIENT)) is bytes
    tally = server.processor.inline.tally
    arrived = time.monotonic() - 0.003  # taken off the socket 3 ms ago
    replies, commands = server.processor.inline.answer_all([query] * 5, CLIENT, arrived)
    assert (len(replies), commands) == (5, [])
    # counted once per chunk: the lone answer before it too, as answered with this chunk
    assert {key: slot.count for key, slot in tally.slots.items()} == {(ROUTE, ResponseCode.SUCCESS, FAST_PATH): 6}
    buckets = tally.latency[ROUTE]
    assert buckets[LATENCY_BOUNDS.index(0.005)] == 6  # 3 ms after arrival: in (2.5 ms, 5 ms]


def _view(requests: int, threads: int, brokers: int, started: float) -> list:
    answers = CounterMetricFamily("namesrv_requests", "d", labels=["request", "response", "path"])
    answers.add_metric(["REGISTER_BROKER", "SUCCESS", "executor"], requests)
    latency = HistogramMetricFamily("namesrv_request_duration_seconds", "d", labels=["request"])
    latency.add_metric(["REGISTER_BROKER"], [("0.001", requests - 1), ("+Inf", requests)], requests * 0.002)
    return [answers, latency, GaugeMetricFamily("namesrv_threads", "d", value=threads),
            GaugeMetricFamily("namesrv_brokers", "d", value=brokers),
            GaugeMetricFamily("process_start_time_seconds", "d", value=started)]


def test_worker_views_merge_into_one_server_summed_except_what_every_worker_holds_alike() -> None:
    views = [unpack_families(pack_families(_view(10, 30, 4, 1000.0))), _view(5, 20, 4, 990.0), _view(1, 25, 3, 995.0)]
    merged = {family.name: {(sample.name, tuple(sorted(sample.labels.items()))): sample.value
                            for sample in family.samples} for family in merge_families(views)}
    assert merged["namesrv_requests"] == {
        ("namesrv_requests_total", (("path", "executor"), ("request", "REGISTER_BROKER"), ("response", "SUCCESS"))): 16}
    assert merged["namesrv_request_duration_seconds"] == {
        ("namesrv_request_duration_seconds_bucket", (("le", "0.001"), ("request", "REGISTER_BROKER"))): 13,
        ("namesrv_request_duration_seconds_bucket", (("le", "+Inf"), ("request", "REGISTER_BROKER"))): 16,
        ("namesrv_request_duration_seconds_count", (("request", "REGISTER_BROKER"),)): 16,
        ("namesrv_request_duration_seconds_sum", (("request", "REGISTER_BROKER"),)): 16 * 0.002}
    assert merged["namesrv_threads"] == {("namesrv_threads", ()): 75}
    assert merged["namesrv_brokers"] == {("namesrv_brokers", ()): 4}  # replicated: worker 0's, not 11
    assert merged["process_start_time_seconds"] == {("process_start_time_seconds", ()): 990.0}


def test_the_inline_path_counts_each_write_as_it_answers_it_alone_or_among_route_queries(tmp_path) -> None:
    """A broker's write is counted in its own slot as it is answered, with its latency: alone in its
    chunk (answered without the route path), or among route queries (answered in the per-frame
    loop); the answer is the same bytes either way."""
    server = InlineServer(tmp_path)
    body = RegisterBrokerBody(TopicConfigSerializeWrapper({t: TopicConfig(t, 4, 4) for t in "TU"},
                                                     DataVersion(1, 1, 0))).encode()
    broker = {"brokerName": "broker-a", "brokerAddr": "127.0.0.1:10911", "clusterName": "C", "brokerId": 0,
              "haServerAddr": "127.0.0.1:10912", "bodyCrc32": zlib.crc32(body) & 0x7FFFFFFF}
    answer = server.processor.process(RemotingCommand.request(RequestCode.REGISTER_BROKER, broker, body=body), CLIENT)
    assert answer.code == ResponseCode.SUCCESS
    query = RemotingCommand.request(ROUTE, {"topic": "T"}, opaque=1).encode()[4:]
    server.regular(query, CLIENT)  # cached from now on
    inline = server.processor.inline
    key = {"clusterName": "C", "brokerAddr": "127.0.0.1:10911"}

    def beat(opaque: int) -> bytes:
        return RemotingCommand.request(RequestCode.BROKER_HEARTBEAT, key, opaque=opaque).encode()[4:]

    asked = RemotingCommand.request(RequestCode.QUERY_DATA_VERSION, key, DataVersion(1, 1, 0).encode(),
                                    opaque=9).encode()[4:]
    assert type(inline.answer(beat(2), CLIENT, time.monotonic())) is bytes  # its header is known from now on
    arrived = time.monotonic() - 0.003
    alone = [inline.answer_all([beat(opaque)], CLIENT, arrived) for opaque in (3, 4)]
    mixed = inline.answer_all([query, beat(3), asked, query, beat(4)], CLIENT, arrived)
    assert [replies for replies, _ in alone] == [mixed[0][1:2], mixed[0][4:5]] and mixed[1] == []
    assert RemotingCommand.decode(mixed[0][2][4:]).ext_fields == {"changed": "false"}
    counts = {key: slot.count for key, slot in inline.tally.slots.items() if slot.count}
    assert counts == {(RequestCode.BROKER_HEARTBEAT, ResponseCode.SUCCESS, FAST_PATH): 5,
                      (RequestCode.QUERY_DATA_VERSION, ResponseCode.SUCCESS, FAST_PATH): 1,
                      (ROUTE, ResponseCode.SUCCESS, FAST_PATH): 2}
    assert inline.tally.latency[RequestCode.BROKER_HEARTBEAT][LATENCY_BOUNDS.index(0.005)] == 4
