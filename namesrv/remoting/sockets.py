"""What the endpoints do with ZeroMQ's own connection descriptors: read a peer's address, the bytes
the kernel has received from it and those written to it, and reset a connection ZeroMQ cannot
close by itself.

The descriptors belong to libzmq: each is borrowed for one call and handed back (detached), never
closed here, and a reset first checks that the descriptor still holds the peer expected, since a
closed connection's descriptor number is reused.
"""
from __future__ import annotations

import fcntl
import socket
import struct
import termios
from collections.abc import Iterator
from contextlib import contextmanager

#: struct tcp_info: tcpi_bytes_acked (Linux 4.1+) and tcpi_bytes_received (4.1+), native-endian u64s.
_U64 = struct.Struct("=Q")
_BYTES_ACKED_AT = 120
_BYTES_RECEIVED_AT = 128
_TCP_INFO_LENGTH = 256
#: SIOCOUTQ: the bytes in a TCP socket's send queue, not yet acknowledged by the peer.
_SIOCOUTQ = termios.TIOCOUTQ
_LINGER_RESET = struct.pack("ii", 1, 0)  # SO_LINGER on, 0 s: close sends RST


@contextmanager
def _borrowed(fd: int) -> Iterator[socket.socket | None]:
    """A socket object over libzmq's descriptor `fd`, detached (not closed) afterwards; None if the
    descriptor is no longer open."""
    try:
        sock = socket.socket(fileno=fd)
    except OSError:
        yield None
        return
    try:
        yield sock
    finally:
        sock.detach()


def peer_address(fd: int) -> str | None:
    """"host:port" of the connected TCP socket `fd` (None: gone, or not an inet socket)."""
    with _borrowed(fd) as sock:
        return _peer_of(sock)


def _peer_of(sock: socket.socket | None) -> str | None:
    try:
        peer = None if sock is None else sock.getpeername()
    except OSError:
        return None
    return f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else None


def bytes_received(fd: int) -> int | None:
    """The bytes read so far from the TCP connection `fd` (None: not a TCP socket, or gone)."""
    with _borrowed(fd) as sock:
        info = _tcp_info(sock)
    return None if info is None else _U64.unpack_from(info, _BYTES_RECEIVED_AT)[0]


def bytes_written(fd: int, peer: str) -> int | None:
    """The bytes written so far to the TCP connection `fd` (acknowledged by the peer, or still in the
    kernel's send queue), if it is still the one to `peer`; None otherwise."""
    with _borrowed(fd) as sock:
        if sock is None or _peer_of(sock) != peer:
            return None
        info = _tcp_info(sock)
        try:
            queued = struct.unpack("i", fcntl.ioctl(sock.fileno(), _SIOCOUTQ, b"\0\0\0\0"))[0]
        except OSError:
            return None
    return None if info is None else _U64.unpack_from(info, _BYTES_ACKED_AT)[0] + queued


def _tcp_info(sock: socket.socket | None) -> bytes | None:
    try:
        info = b"" if sock is None else sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, _TCP_INFO_LENGTH)
    except OSError:
        return None
    return info if len(info) >= _BYTES_RECEIVED_AT + 8 else None


def abort_connection(fd: int, peer: str) -> bool:
    """Reset the TCP connection on `fd` if it is still the one to `peer`: its buffers are freed and
    ZeroMQ, seeing it fail, drops it. For a peer that does not read (its output would never drain,
    so ZeroMQ's own close would wait for ever) or that holds too much inside ZeroMQ."""
    if peer_address(fd) != peer:
        return False
    with _borrowed(fd) as sock:
        if sock is None:
            return False
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _LINGER_RESET)
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            return False
    return True
