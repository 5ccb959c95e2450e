"""A TCP connection is reset at the socket only while the descriptor is its own: a peer gone before
its arrival was read leaves its descriptor to the next connection, which must not pay for it; a
live peer that does not read is still reset. StreamEndpoint over a real ZeroMQ STREAM socket and
real TCP clients on 127.0.0.1."""
from __future__ import annotations

import socket
import time
from collections.abc import Callable

import pytest
import zmq

from namesrv.protocol import RemotingCommand, RequestCode
from namesrv.remoting.endpoints import StreamEndpoint

MAX_FRAME_LENGTH = 16 * 1024 * 1024
BAD_FRAME = b"\x00\x00\x00\x05\x02\x00\x00\x01garbage"  # header length 0x02000001: far past the frame


@pytest.fixture
def stream(stream_socket) -> tuple[zmq.Socket, int]:
    sock, _ = stream_socket
    sock.setsockopt(zmq.SNDHWM, 4)  # applies to the connections made from now on: a peer that does not read fills it soon
    return stream_socket


def read_until(endpoint: StreamEndpoint, done: Callable[[], object], jobs: list | None = None,
               seconds: float = 3.0) -> None:
    """Let the endpoint read (its requests into `jobs`) until `done()`."""
    deadline = time.monotonic() + seconds
    while not done():
        assert time.monotonic() < deadline, "the endpoint never got there"
        endpoint.read(100, time.monotonic(), [] if jobs is None else jobs)
        time.sleep(0.01)


def test_a_peer_gone_before_its_arrival_is_read_leaves_the_next_connection_alone(stream) -> None:
    sock, port = stream
    closed = []
    endpoint = StreamEndpoint(sock, 1 << 20, closed.append, MAX_FRAME_LENGTH)
    gone = socket.create_connection(("127.0.0.1", port), timeout=3)
    gone.sendall(BAD_FRAME)
    gone.shutdown(socket.SHUT_WR)
    assert gone.recv(100) == b""  # libzmq has read it all and closed its side: the descriptor is free
    gone.close()
    newcomer = socket.create_connection(("127.0.0.1", port), timeout=3)
    time.sleep(0.1)  # its arrival is queued behind the gone peer's, on the descriptor the gone peer had
    for _ in range(10):  # the gone peer's arrival, bad frame (closed) and end; the newcomer's arrival
        endpoint.read(100, time.monotonic(), [])
        time.sleep(0.01)
    assert endpoint.cut["bad_input"] == 1
    assert len(endpoint.connections) == 1
    newcomer.settimeout(0.3)
    with pytest.raises(socket.timeout):
        newcomer.recv(100)  # neither reset nor closed
    request = RemotingCommand.request(RequestCode.GET_BROKER_CLUSTER_INFO).encode()
    newcomer.sendall(request)
    jobs: list = []
    read_until(endpoint, lambda: jobs, jobs)
    assert len(jobs) == 1


def test_a_live_peer_that_does_not_read_is_still_reset(stream) -> None:
    sock, port = stream
    endpoint = StreamEndpoint(sock, 256 * 1024, lambda channel: None, MAX_FRAME_LENGTH)
    silent = socket.socket()
    silent.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    silent.connect(("127.0.0.1", port))
    read_until(endpoint, lambda: endpoint.connections)
    ident = next(iter(endpoint.connections))
    deadline = time.monotonic() + 10
    while ident in endpoint.connections:  # replies it never reads, until its output passes the bound
        assert time.monotonic() < deadline
        endpoint.send(ident, [b"x" * 60_000], time.monotonic())
        endpoint.flush_blocked()
    assert endpoint.cut["slow_reader"] == 1 and ident in endpoint.resets
    read_until(endpoint, lambda: not endpoint.resets)
    silent.settimeout(3)
    try:  # its end, reset or (if the close's FIN arrived first) end of file; a timeout fails
        while silent.recv(1 << 20):
            pass
    except ConnectionResetError:
        pass
