"""Ports shared by worker processes: SO_REUSEPORT sockets, and the supervisor's reservation of them.

Every worker binds its own listening socket to the same address with SO_REUSEPORT, and the kernel
spreads new connections over the listening sockets; ZeroMQ takes each over with ZMQ_USE_FD. The
supervisor holds one more socket on the port, bound but never listening, so the port stays theirs
while a worker restarts; before that, a plain exclusive bind checks that nobody else (another
namesrv included) holds the port, since SO_REUSEPORT alone would let two servers share it.
"""
from __future__ import annotations

import re
import socket

from namesrv.config import ConfigError

#: Tries at finding a free port for listenPort=0 (another process may take the one probed meanwhile).
RESERVE_ATTEMPTS = 5
_TCP_ENDPOINT = re.compile(r"tcp://(?P<host>\[[^\]]*\]|[^:/\[\]]+):(?P<port>\d+|\*)")


def socket_address(host: str, port: int) -> tuple[socket.AddressFamily, tuple]:
    """(family, sockaddr) of a numeric or resolvable host ("*" and "" are every IPv4 interface, as in ZeroMQ)."""
    host = host.strip("[]")
    if host in ("*", ""):
        host = "0.0.0.0"
    family, _, _, _, sockaddr = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0]
    return family, sockaddr


def shared_socket(host: str, port: int) -> socket.socket:
    """A TCP socket bound to host:port with SO_REUSEPORT (and SO_REUSEADDR, as ZeroMQ binds)."""
    family, sockaddr = socket_address(host, port)
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind(sockaddr)
    except OSError:
        sock.close()
        raise
    return sock


def reserve_port(host: str, port: int) -> socket.socket:
    """Hold host:port for the workers (0: a free port); OSError if anybody else holds it."""
    family, sockaddr = socket_address(host, port)
    attempts = 1 if port else RESERVE_ATTEMPTS
    while True:
        with socket.socket(family, socket.SOCK_STREAM) as probe:  # exclusive: fails while anyone listens there
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind(sockaddr)
            chosen = probe.getsockname()[1]
        try:
            return shared_socket(host, chosen)
        except OSError:
            attempts -= 1
            if not attempts:
                raise


def listening_fd(host: str, port: int, backlog: int, snd_buf: int = 0, rcv_buf: int = 0) -> int:
    """A listening, non-blocking SO_REUSEPORT socket's fd, for ZeroMQ to take over (ZMQ_USE_FD).

    ZeroMQ sets the buffer sizes on the listening sockets it creates (accepted connections inherit
    them) but not on one it is handed, so they are set here.
    """
    sock = shared_socket(host, port)
    try:
        if snd_buf:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, snd_buf)
        if rcv_buf:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcv_buf)
        sock.listen(backlog)
        sock.setblocking(False)
    except OSError:
        sock.close()
        raise
    return sock.detach()


def zmq_tcp_address(endpoint: str) -> tuple[str, int] | None:
    """(host, port; 0 for "*") of a tcp:// ZeroMQ endpoint the workers can share, None for another transport."""
    if not endpoint.startswith("tcp://"):
        return None
    match = _TCP_ENDPOINT.fullmatch(endpoint)
    if match is None:
        raise ConfigError("zmqListenAddress", f"with serverWorkerProcesses above 1 a tcp endpoint must be "
                                              f"tcp://HOST:PORT (PORT a number or *), got {endpoint!r}")
    return match["host"], 0 if match["port"] == "*" else int(match["port"])
