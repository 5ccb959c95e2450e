"""Abuse limits at their edges, each on a real namesrv process: maxConnections (exactly the limit is
served, one more is closed at once and logged, a freed slot is usable again), maxFrameLength on both
endpoints (a frame of exactly the limit is served, one byte more closes the connection), and
maxConnectionOutputBytes (a peer that does not read is closed only once its unsent replies pass the
limit). The default-limit frame edge and the never-reading peer's effect on others are in
tests/test_wire_bad_input.py."""
from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Iterator

import pytest
import zmq

from namesrv.client.zmq_connection import ZmqRemotingConnection
from namesrv.protocol import RemotingCommand, RequestCode, ResponseCode
from namesrv.protocol.msgpack_codec import decode_msgpack, encode_msgpack


def served(conn) -> bool:
    return conn.call(conn.request(RequestCode.GET_BROKER_CLUSTER_INFO)).code == ResponseCode.SUCCESS


def eventually(condition, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.05)


@pytest.fixture
def context() -> Iterator[zmq.Context]:
    context = zmq.Context()
    yield context
    context.destroy(linger=0)


def test_exactly_max_connections_are_served_and_one_more_is_closed_at_once(namesrv_factory, raw_connect) -> None:
    namesrv = namesrv_factory(maxConnections=3)
    admitted = [raw_connect(namesrv.address) for _ in range(3)]
    assert all(served(conn) for conn in admitted)
    ports = []
    for _ in range(20):  # refused newcomers must not take a slot, not even briefly
        extra = raw_connect(namesrv.address)
        ports.append(extra.sock.getsockname()[1])
        assert extra.closed_by_server(3)
        extra.close()
    # logged, but at most once a second with a running count: a flood must not flood the log
    namesrv.wait_for_log(rf"WARNING .*refused tcp connection 127\.0\.0\.1:{ports[0]}: maxConnections \(3\) are "
                         r"open \(1 refused so far\)")
    assert all(served(conn) for conn in admitted)
    admitted.pop().close()

    def a_freed_slot_admits() -> bool:  # the server learns of the close asynchronously
        newcomer = raw_connect(namesrv.address)
        try:
            return served(newcomer)
        except ConnectionError:
            return False
    eventually(a_freed_slot_admits)


def test_zero_max_connections_means_no_limit(namesrv_factory, raw_connect) -> None:
    namesrv = namesrv_factory(maxConnections=0)
    assert all(served(raw_connect(namesrv.address)) for _ in range(50))


def test_max_connections_bounds_zmq_peers_until_they_expire(namesrv_factory, context) -> None:
    namesrv = namesrv_factory(maxConnections=2, serverChannelMaxIdleTimeSeconds=2)
    request = encode_msgpack(RemotingCommand.request(RequestCode.GET_BROKER_CLUSTER_INFO, opaque=1))

    def dealer() -> zmq.Socket:
        sock = context.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.connect(namesrv.zmq_address)
        return sock

    def answered(sock: zmq.Socket, timeout_ms: int) -> bool:
        sock.send(request)
        if not sock.poll(timeout_ms):
            return False
        return decode_msgpack(sock.recv()).code == ResponseCode.SUCCESS

    first, second, third = dealer(), dealer(), dealer()
    assert answered(first, 5000) and answered(second, 5000)
    assert not answered(third, 1000)  # a ROUTER cannot close a DEALER: its messages go unanswered
    namesrv.wait_for_log(r"WARNING .*refused zmq connection 127\.0\.0\.1:\d+: maxConnections \(2\) are open")
    assert answered(first, 5000)
    third.close()
    # peers silent for serverChannelMaxIdleTimeSeconds leave the table and free their slots
    fourth = dealer()
    eventually(lambda: answered(fourth, 500), timeout=8)


def sized_put(total: int) -> RemotingCommand:
    """A PUT_KV_CONFIG whose whole frame (length prefix included) is exactly `total` bytes."""
    def put(value_length: int) -> RemotingCommand:
        return RemotingCommand.request(RequestCode.PUT_KV_CONFIG, {"namespace": "NS", "key": "k",
                                                                   "value": "v" * value_length}, opaque=5)
    command = put(total - len(put(0).encode()))
    assert len(command.encode()) == total
    return command


def test_a_frame_of_exactly_max_frame_length_is_served_and_one_byte_more_closes(namesrv_factory,
                                                                                 raw_connect) -> None:
    namesrv = namesrv_factory(maxFrameLength=4096)
    exact = raw_connect(namesrv.address)
    assert exact.call(sized_put(4096)).code == ResponseCode.SUCCESS
    over = raw_connect(namesrv.address)
    over.send(sized_put(4097))
    assert over.closed_by_server(3)
    namesrv.wait_for_log(r"exceeds the maximum frame length 4096")
    assert served(exact)


def sized_msgpack_put(total: int) -> bytes:
    """A msgpack PUT_KV_CONFIG frame of exactly `total` bytes."""
    def put(value_length: int) -> bytes:
        return encode_msgpack(RemotingCommand.request(RequestCode.PUT_KV_CONFIG, {
            "namespace": "NS", "key": "k", "value": "v" * value_length}, opaque=9))
    overhead = len(put(1000)) - 1000  # a value of 1000 bytes takes the same msgpack str16 header as ours
    frame = put(total - overhead)
    assert len(frame) == total
    return frame


@pytest.mark.parametrize("served_sizes, dropped_sizes", [([4096], [4097]), ([2048, 2048], [2048, 2049])],
                         ids=["one frame", "a message of two"])
def test_a_zmq_message_of_exactly_max_frame_length_is_served_and_one_byte_more_is_dropped(
        namesrv_factory, context, served_sizes, dropped_sizes) -> None:
    """A frame past the limit: libzmq drops the connection (ZMQ_MAXMSGSIZE); frames under it that
    pass it together: the server drops the message and resets the connection."""
    namesrv = namesrv_factory(maxFrameLength=4096)
    sock = context.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(namesrv.zmq_address)
    sock.send_multipart([sized_msgpack_put(size) for size in served_sizes])
    assert sock.poll(5000)
    assert [decode_msgpack(frame).code for frame in sock.recv_multipart()] == [ResponseCode.SUCCESS] * len(served_sizes)
    sock.send_multipart([sized_msgpack_put(size) for size in dropped_sizes])
    assert not sock.poll(1000)
    if len(dropped_sizes) > 1:
        namesrv.wait_for_log(r"a message of 4097 bytes, more than maxFrameLength \(4096\) in all its frames")
    sock.send(sized_msgpack_put(4096))  # the DEALER reconnected
    assert sock.poll(5000) and decode_msgpack(sock.recv()).code == ResponseCode.SUCCESS


def invoke_over_zmq(address: str, requests: list[RemotingCommand], timeout: float) -> list[RemotingCommand]:
    """`requests` written in one loop turn on one ZeroMQ connection of the project's client."""
    async def scenario() -> list[RemotingCommand]:
        connection = await ZmqRemotingConnection.open(address)
        try:
            return await connection.invoke_many(requests, timeout=timeout)
        finally:
            connection.close()
    return asyncio.run(scenario())


def kv_puts(count: int, value_length: int, keys: int) -> list[RemotingCommand]:
    return [RemotingCommand.request(RequestCode.PUT_KV_CONFIG, {"namespace": "N", "key": f"k{i % keys}",
                                                                "value": "v" * value_length}, opaque=i + 1)
            for i in range(count)]


def test_the_client_sends_commands_in_zmq_messages_within_the_servers_limit(namesrv_factory) -> None:
    namesrv = namesrv_factory(maxFrameLength=2 << 20)
    # 4.2 MB: too much for one message. Each put rewrites the KV file (up to 4.2 MB, flushed to disk):
    # the timeout is not a speed bound (a loaded CI host once took more than 10 s).
    responses = invoke_over_zmq(namesrv.zmq_address, kv_puts(6, 700_000, 6), 60)
    assert [response.code for response in responses] == [ResponseCode.SUCCESS] * 6


def test_a_zmq_client_streaming_many_large_commands_is_never_taken_for_one_holding_bytes_back(namesrv_factory) -> None:
    """The intake watch allows for ZeroMQ's framing: 2,000 commands of 60 KB (120 MB) pipelined on
    one connection are all answered and nothing is reset."""
    namesrv = namesrv_factory()
    codes = {response.code for response in invoke_over_zmq(namesrv.zmq_address, kv_puts(2000, 60_000, 10), 60)}
    assert codes <= {ResponseCode.SUCCESS, ResponseCode.SYSTEM_BUSY} and ResponseCode.SUCCESS in codes
    assert "reset zmq connection" not in namesrv.log_text()


OUTPUT_LIMIT = 1 << 20
#: writeBufferHighWaterMark messages of up to 64 KiB may sit inside ZeroMQ; the rest of the limit is
#: namesrv's own backlog, so a non-reading peer is closed somewhere in (LIMIT - HWM * 64 KiB, LIMIT].
HIGH_WATER_MARK = 4
NEVER_CLOSED_BELOW = OUTPUT_LIMIT - HIGH_WATER_MARK * 64 * 1024


@pytest.mark.parametrize("answers, closed", [(NEVER_CLOSED_BELOW // 61_000, False), (3 * OUTPUT_LIMIT // 61_000, True)])
def test_a_peer_that_does_not_read_is_closed_only_past_max_connection_output_bytes(namesrv_factory, raw_connect,
                                                                                   answers, closed) -> None:
    namesrv = namesrv_factory(maxConnectionOutputBytes=OUTPUT_LIMIT, writeBufferHighWaterMark=HIGH_WATER_MARK,
                              serverSocketSndBufSize=4096)
    writer = raw_connect(namesrv.address)
    value = "x" * 60_000
    assert writer.call(writer.request(RequestCode.PUT_KV_CONFIG, {"namespace": "NS", "key": "big",
                                                                  "value": value})).code == ResponseCode.SUCCESS
    reader = socket.socket()
    reader.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    reader.connect(("127.0.0.1", namesrv.port))
    port = reader.getsockname()[1]
    get = RemotingCommand.request(RequestCode.GET_KV_CONFIG, {"namespace": "NS", "key": "big"}).encode()
    try:
        reader.sendall(get * answers)  # about 61 KB of answer each, none read for now
        verdict = rf"closed tcp connection 127\.0\.0\.1:{port}: \d+ unsent reply bytes exceed maxConnectionOutputBytes"
        if closed:
            namesrv.wait_for_log(verdict, timeout=10)
        else:
            assert served(writer)  # the server has long answered everything
            time.sleep(1.0)
            assert f"127.0.0.1:{port}: " not in namesrv.log_text()
            received = bytearray()
            reader.settimeout(5)
            while received.count(value.encode()) < answers:
                chunk = reader.recv(1 << 20)
                assert chunk, "closed by the server"
                received += chunk
    finally:
        reader.close()
    assert served(writer)
