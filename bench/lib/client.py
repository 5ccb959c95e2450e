"""The one small blocking remoting client of the benchmarks: frames out, frames in, nothing hidden.

Leaner than namesrv.client on purpose: no futures, no reconnect policy, no decoding unless asked,
so a benchmark sees exactly the bytes it sends and the server answers. `call` sends one request and
returns the first answer decoded; `send`/`receive` move raw frames for the loops that keep many in
flight; `read` is one read for loops that wait on a selector (`sock`). Plain TCP or TLS (any
certificate, as RocketMQ clients in test mode).
"""
from __future__ import annotations

import socket
import ssl

from namesrv.client.remoting import client_tls_context
from namesrv.protocol import FrameDecoder, RemotingCommand

_RECV_BYTES = 1 << 20


class Client:
    """One connection to `address` (HOST:PORT), TCP_NODELAY; closed by `close` or its `with` block."""

    def __init__(self, address: str, *, timeout: float = 10.0, tls: bool = False) -> None:
        host, port = address.rsplit(":", 1)
        sock = socket.create_connection((host, int(port)), timeout=timeout)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock: socket.socket = client_tls_context().wrap_socket(sock, server_hostname=host) if tls else sock
        self._decoder = FrameDecoder()
        self._frames: list[bytes] = []

    def send(self, data: bytes | RemotingCommand) -> None:
        """One request (a RemotingCommand, encoded here) or pre-rendered frames, length prefixes included."""
        self.sock.sendall(data.encode() if isinstance(data, RemotingCommand) else data)

    def read(self) -> list[bytes]:
        """The frames (without their length prefix) one read of the socket completes, possibly none: for
        the loops that wait on a selector. ConnectionError when the server closed the connection."""
        data = self.sock.recv(_RECV_BYTES)
        if not data:
            raise ConnectionError("the server closed the connection")
        if isinstance(self.sock, ssl.SSLSocket):  # decrypted bytes a selector cannot see
            while self.sock.pending():
                data += self.sock.recv(_RECV_BYTES)
        return self._decoder.feed(data)

    def receive(self) -> list[bytes]:
        """The frames the next reads complete; at least one (blocking)."""
        while not self._frames:
            self._frames = self.read()
        frames, self._frames = self._frames, []
        return frames

    def call(self, request: bytes | RemotingCommand) -> RemotingCommand:
        """Send one request and return the next frame that comes back, decoded."""
        self.send(request)
        frames = self.receive()
        self._frames = frames[1:]
        return RemotingCommand.decode(frames[0])

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
