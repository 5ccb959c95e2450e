"""A TCP connection's replies leave through pyzmq's base send with int flags (namesrv.remoting.endpoints
`_transmit`): the same bytes arrive as through `zmq.Socket.send`, the general path, for a small
joined reply and for a large one cut into zero-copy slices. StreamEndpoint over a real ZeroMQ
STREAM socket and a real TCP client on 127.0.0.1."""
from __future__ import annotations

import socket
import time

import zmq

from namesrv.remoting.endpoints import MAX_MESSAGE_BYTES, StreamEndpoint

MAX_FRAME_LENGTH = 16 * 1024 * 1024


def receive_exactly(client: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = client.recv(size - len(data))
        assert chunk, "the connection closed early"
        data += chunk
    return data


def test_replies_arrive_as_the_general_send_delivers_them(stream_socket) -> None:
    sock, port = stream_socket
    endpoint = StreamEndpoint(sock, 1 << 24, lambda channel: None, MAX_FRAME_LENGTH)
    client = socket.create_connection(("127.0.0.1", port), timeout=3)
    deadline = time.monotonic() + 3
    while not endpoint.connections:
        assert time.monotonic() < deadline, "the connection never arrived"
        endpoint.read(10, time.monotonic(), [])
        time.sleep(0.01)
    ident = next(iter(endpoint.connections))
    small = [b"\x00\x00\x00\x05hello", b"\x00\x00\x00\x03abc"]
    large = [bytes(range(256)) * (MAX_MESSAGE_BYTES // 128 + 3)]  # cut into three slices of itself
    for payloads in (small, large):
        expected = b"".join(payloads)
        sock.send(ident, zmq.SNDMORE)  # the general path: zmq.Socket.send, enum flags, one message
        sock.send(expected)
        assert receive_exactly(client, len(expected)) == expected
        endpoint.send(ident, payloads, time.monotonic())  # the reactor's path
        assert receive_exactly(client, len(expected)) == expected
    assert endpoint.connections[ident].backlog_bytes == 0
    client.close()
