"""The reactor's parts in process, with real sockets and the real request layer: the bounded batch
executor, the reply outbox, the dispatcher's overload answers, and the connection table under a
connect/disconnect flood."""
from __future__ import annotations

import select
import socket
import struct
import threading
import time
from collections.abc import Iterator

import pytest

from namesrv.channel import Channel
from namesrv.config import NamesrvConfig
from namesrv.controller import NamesrvController
from namesrv.kvconfig import KVConfigManager
from namesrv.processor import RequestProcessor
from namesrv.processor.requests import POOL_OF
from namesrv.protocol import RemotingCommand, RequestCode, ResponseCode, SerializeType
from namesrv.protocol.codes import FLAG_RESPONSE
from namesrv.protocol.msgpack_codec import decode_msgpack
from namesrv.remoting import BoundedExecutor, Outbox, RequestDispatcher
from namesrv.remoting.dispatch import BUDGET_REMARK, OVERLOAD_REMARK
from namesrv.remoting.outbox import Close
from namesrv.routeinfo import RouteInfoManager

TCP = Channel("tcp", b"\x00\x01", "127.0.0.1:1")
ZMQ = Channel("zmq", b"peer", "127.0.0.1:2")


def wait_until(condition, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.01)


# ---- BoundedExecutor

def test_executor_accepts_up_to_its_capacity_and_runs_everything_it_accepted() -> None:
    release = threading.Event()
    batches: list[list[int]] = []

    def run(batch: list[int]) -> None:
        release.wait(5)
        batches.append(batch)

    executor = BoundedExecutor("T", threads=1, capacity=10, run_batch=run, take=4)
    assert executor.submit(list(range(7))) == 7
    assert executor.submit(list(range(7, 14))) == 3  # the queue holds 10 at most
    assert executor.queued == 10
    executor.start()
    release.set()
    assert executor.shutdown(5)
    assert [job for batch in batches for job in batch] == list(range(10))
    assert max(map(len, batches)) <= 4
    assert executor.submit([99]) == 0  # stopped: refuses


def test_executor_survives_a_failing_batch() -> None:
    done: list[int] = []

    def run(batch: list[int]) -> None:
        if 0 in batch:
            raise RuntimeError("boom")
        done.extend(batch)

    executor = BoundedExecutor("T", threads=2, capacity=100, run_batch=run, take=1)
    executor.start()
    executor.submit([0, 1, 2])
    assert executor.shutdown(5)
    assert sorted(done) == [1, 2]


def test_executor_wakes_the_most_recently_idle_worker() -> None:
    ran_on: list[str] = []
    done = threading.Semaphore(0)

    def run(batch: list[int]) -> None:
        ran_on.append(threading.current_thread().name)
        done.release()

    executor = BoundedExecutor("T", threads=4, capacity=10, run_batch=run)
    executor.start()
    for job in range(12):
        wait_until(lambda: len(executor._idle) == 4)  # every worker parked again
        executor.submit([job])
        assert done.acquire(timeout=5)
    assert executor.shutdown(5)
    assert len(set(ran_on)) == 1, ran_on  # FIFO wake-ups would rotate through all four


def test_executor_runs_other_jobs_while_one_is_slow() -> None:
    release, fast_done = threading.Event(), threading.Event()

    def run(batch: list[str]) -> None:
        for job in batch:
            if job == "slow":
                release.wait(5)
            else:
                fast_done.set()

    executor = BoundedExecutor("T", threads=2, capacity=10, run_batch=run)
    executor.start()
    executor.submit(["slow"])
    wait_until(lambda: executor.queued == 0)  # a worker holds it
    executor.submit(["fast"])
    assert fast_done.wait(5)  # the other worker took it
    release.set()
    assert executor.shutdown(5)


def test_executor_refuses_to_exist_without_threads_or_room() -> None:
    with pytest.raises(ValueError):
        BoundedExecutor("T", threads=0, capacity=1, run_batch=print)
    with pytest.raises(ValueError):
        BoundedExecutor("T", threads=1, capacity=0, run_batch=print)


# ---- Outbox

def readable(fd: int) -> bool:
    return bool(select.select([fd], [], [], 0)[0])


def test_outbox_wakes_once_and_drains_every_batch_in_order() -> None:
    outbox = Outbox()
    try:
        assert not readable(outbox.fileno())

        def produce(tag: int) -> None:
            for i in range(200):
                outbox.put([(TCP, bytes([tag, i]))])

        threads = [threading.Thread(target=produce, args=(tag,)) for tag in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        outbox.close_channel(ZMQ, "expired")
        assert readable(outbox.fileno())
        items = outbox.drain()
        assert not readable(outbox.fileno())  # one wake-up byte, consumed
        assert len(items) == 801 and items[-1] == (ZMQ, Close("expired"))
        for tag in range(4):
            assert [payload[1] for _, payload in items[:-1] if payload[:1] == bytes([tag])] == list(range(200))
        assert outbox.delivered_through == 0
        outbox.sent()
        assert outbox.delivered_through == 801  # every batch put so far was taken and sent
        assert outbox.drain() == []
    finally:
        outbox.close()


# ---- RequestDispatcher

@pytest.fixture
def dispatcher_parts(tmp_path) -> Iterator[tuple[RequestDispatcher, Outbox]]:
    config = NamesrvConfig.load(None, {"clientRequestThreadPoolNums": "1", "clientRequestThreadPoolQueueCapacity": "2",
                                       "defaultThreadPoolNums": "1", "defaultThreadPoolQueueCapacity": "2",
                                       "serverOnewaySemaphoreValue": "1"})
    routes = RouteInfoManager(config)
    processor = RequestProcessor(config, routes, KVConfigManager(tmp_path / "kv.json"))
    outbox = Outbox()
    dispatcher = RequestDispatcher(config, processor, outbox, pool_of=POOL_OF)
    yield dispatcher, outbox
    dispatcher.shutdown(5)
    outbox.close()


def test_full_queues_answer_system_busy_at_once_in_the_callers_codec(dispatcher_parts) -> None:
    dispatcher, outbox = dispatcher_parts  # executors not started: queues fill and stay full
    queries = [RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "T"}, opaque=i,
                                       serialize_type=SerializeType.ROCKETMQ if i % 2 else SerializeType.JSON)
               for i in range(5)]
    busy = dispatcher.dispatch([(TCP, q, 0.0) for q in queries] + [(ZMQ, RemotingCommand.request(999, opaque=77), 0.0)])
    answers = [(channel, RemotingCommand.decode(payload[4:])) for channel, payload in busy]
    assert [a.opaque for _, a in answers] == [2, 3, 4]  # two fit the route-query pool
    for _, answer in answers:
        assert (answer.code, answer.remark, answer.flag) == (ResponseCode.SYSTEM_BUSY, OVERLOAD_REMARK, FLAG_RESPONSE)
        assert answer.serialize_type == queries[answer.opaque].serialize_type
    # the unknown code went to the public pool, which had room
    more = dispatcher.dispatch([(ZMQ, RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, opaque=78), 0.0)])
    assert [(channel, decode_msgpack(payload).code) for channel, payload in more] == [(ZMQ, ResponseCode.SYSTEM_BUSY)]


def test_oneway_requests_are_bounded_in_flight_and_never_answered(dispatcher_parts) -> None:
    dispatcher, outbox = dispatcher_parts
    oneway = [RemotingCommand.request(RequestCode.PUT_KV_CONFIG, {"namespace": "N", "key": f"k{i}", "value": "v"},
                                      opaque=i, oneway=True) for i in range(3)]
    stray_response = RemotingCommand(0, opaque=50, flag=FLAG_RESPONSE)
    assert dispatcher.dispatch([(TCP, c, 0.0) for c in [*oneway, stray_response]]) == []  # 1 accepted, 2 dropped
    assert dispatcher.default_executor.queued == 1
    dispatcher.start()
    wait_until(lambda: dispatcher.default_executor.queued == 0)
    get = RemotingCommand.request(RequestCode.GET_KVLIST_BY_NAMESPACE, {"namespace": "N"}, opaque=9)
    assert dispatcher.dispatch([(TCP, get, 0.0)]) == []
    wait_until(lambda: readable(outbox.fileno()))
    (channel, payload), = outbox.drain()
    answer = RemotingCommand.decode(payload[4:])
    assert (channel, answer.opaque, answer.code) == (TCP, 9, ResponseCode.SUCCESS)
    assert answer.body == b'{"table":{"k0":"v"}}'
    # the bound was released: the next oneway is accepted again, runs, and posts nothing
    later = RemotingCommand.request(RequestCode.DELETE_KV_CONFIG, {"namespace": "N", "key": "k0"}, oneway=True)
    assert dispatcher.dispatch([(TCP, later, 0.0), (TCP, get, 0.0)]) == []
    wait_until(lambda: readable(outbox.fileno()))
    wait_until(lambda: dispatcher.default_executor.queued == 0)
    time.sleep(0.05)
    (channel, payload), = outbox.drain()  # one worker, in order: the delete ran, then the get answered
    assert RemotingCommand.decode(payload[4:]).body == b'{"table":{}}'


# ---- the reactor's connection table

def test_a_connect_disconnect_flood_leaves_the_connection_table_empty(tmp_path) -> None:
    config = NamesrvConfig.load(None, {"listenPort": "0", "bindAddress": "127.0.0.1", "zmqListenAddress": "",
                                       "httpListenAddress": "", "kvConfigPath": str(tmp_path / "kv.json")})
    controller = NamesrvController(config)
    controller.start()
    try:
        half_frame = RemotingCommand.request(RequestCode.GET_BROKER_CLUSTER_INFO).encode()[:9]
        held = socket.create_connection(("127.0.0.1", config.listen_port))
        for i in range(1500):
            with socket.create_connection(("127.0.0.1", config.listen_port)) as sock:
                if i % 3 == 1:
                    sock.sendall(half_frame)
                elif i % 3 == 2:
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # RST
        wait_until(lambda: controller.reactor.connection_counts() == {"tcp": 1})
        held.close()
        wait_until(lambda: controller.reactor.connection_counts() == {"tcp": 0})
    finally:
        controller.shutdown()


def test_request_bytes_past_the_in_flight_budget_answer_system_busy_until_answered(tmp_path) -> None:
    config = NamesrvConfig.load(None, {"maxFrameLength": "4096", "maxInFlightRequestBytes": "10000"})
    processor = RequestProcessor(config, RouteInfoManager(config), KVConfigManager(tmp_path / "kv.json"))
    outbox = Outbox()
    dispatcher = RequestDispatcher(config, processor, outbox, pool_of=POOL_OF)
    try:
        def put(i: int) -> RemotingCommand:  # a 3,000-byte frame
            frame = RemotingCommand.request(RequestCode.PUT_KV_CONFIG, {"namespace": "N", "key": f"k{i}",
                                                                        "value": "v" * 2900}, opaque=i).encode()
            return RemotingCommand.decode(frame[4:])
        requests = [put(i) for i in range(4)]
        assert all(3000 <= r.wire_size <= 3100 for r in requests)
        busy = dispatcher.dispatch([(TCP, r, 0.0) for r in requests])  # executors not started: nothing is answered
        (channel, payload), = busy
        answer = RemotingCommand.decode(payload[4:])
        assert (answer.opaque, answer.code, answer.remark) == (3, ResponseCode.SYSTEM_BUSY, BUDGET_REMARK)
        assert dispatcher.budget.queued == sum(r.wire_size for r in requests[:3])
        dispatcher.start()
        wait_until(lambda: dispatcher.budget.queued == 0)  # answered: released
        assert dispatcher.dispatch([(TCP, put(4), 0.0)]) == []
        wait_until(lambda: dispatcher.budget.queued == 0)
        assert sorted(RemotingCommand.decode(p[4:]).opaque for _, p in outbox.drain()) == [0, 1, 2, 4]
    finally:
        dispatcher.shutdown(5)
        outbox.close()
