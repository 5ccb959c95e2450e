"""The same connection API over ZeroMQ: a DEALER socket talking msgpack commands to the ROUTER endpoint.

Commands queued in one event-loop turn leave as one multipart message (one frame per command);
each frame of a reply message is one response. ZeroMQ reconnects by itself, so a server that
goes away shows up as timeouts rather than as a dropped connection. With `CurveClientKeys` the
socket speaks CURVE (encrypted, authenticated by key); a server that refuses the key answers
nothing, so that too shows up as timeouts.
"""
from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from pathlib import Path

import zmq
import zmq.asyncio
import zmq.auth

from namesrv.client.connection import BaseConnection
from namesrv.client.errors import RemotingConnectError
from namesrv.protocol.command import RemotingCommand
from namesrv.errors import ProtocolError
from namesrv.protocol.msgpack_codec import SERIALIZE_MSGPACK, decode_msgpack, encode_msgpack

log = logging.getLogger(__name__)

#: Commands sent together in one ZeroMQ message up to this many bytes.
BATCH_BYTES = 1024 * 1024


def zmq_endpoint(address: str) -> str:
    """The ZeroMQ endpoint for "host:port" (a full endpoint such as "tcp://h:p" is kept)."""
    return address if "://" in address else f"tcp://{address}"


@dataclass(frozen=True, slots=True)
class CurveClientKeys:
    """A DEALER's CURVE key pair and the server public key it trusts (z85, as zmq.auth key files hold them)."""

    public_key: bytes
    secret_key: bytes
    server_public_key: bytes

    @classmethod
    def from_files(cls, client_secret_file: str | Path, server_public_file: str | Path) -> CurveClientKeys:
        """From the client's `.key_secret` file and the server's public `.key` file (zmq.auth.create_certificates)."""
        public_key, secret_key = zmq.auth.load_certificate(client_secret_file)
        if secret_key is None:
            raise ValueError(f"{client_secret_file} holds no secret key (give the .key_secret file)")
        server_public_key, _ = zmq.auth.load_certificate(server_public_file)
        return cls(public_key, secret_key, server_public_key)

    def apply(self, socket: zmq.Socket) -> None:
        """Make `socket` a CURVE client (before it connects)."""
        socket.curve_publickey = self.public_key
        socket.curve_secretkey = self.secret_key
        socket.curve_serverkey = self.server_public_key


class ZmqRemotingConnection(BaseConnection):
    """A DEALER socket connected to one namesrv ZeroMQ endpoint."""

    def __init__(self, address: str, socket: zmq.asyncio.Socket) -> None:
        super().__init__(address, SERIALIZE_MSGPACK)
        self._socket = socket
        self._reader = self._loop.create_task(self._read_loop())

    @classmethod
    async def open(cls, address: str, *, context: zmq.asyncio.Context | None = None,
                   send_high_water_mark: int = 0, curve: CurveClientKeys | None = None) -> ZmqRemotingConnection:
        socket = (context or zmq.asyncio.Context.instance()).socket(zmq.DEALER)
        socket.setsockopt(zmq.LINGER, 0)
        if curve is not None:
            curve.apply(socket)
        if send_high_water_mark:
            socket.setsockopt(zmq.SNDHWM, send_high_water_mark)
        try:
            socket.connect(zmq_endpoint(address))
        except zmq.ZMQError as exc:
            socket.close()
            raise RemotingConnectError(f"cannot connect to {address}: {exc}") from None
        return cls(address, socket)

    def _encode(self, request: RemotingCommand) -> bytes:
        return encode_msgpack(request)

    def _send(self, out: list[bytes]) -> None:
        """One loop turn's commands, one frame each, in messages of at most BATCH_BYTES (a larger
        command alone): the server refuses a message larger than its maxFrameLength in all."""
        start, size = 0, 0
        for end, frame in enumerate(out):
            if end > start and size + len(frame) > BATCH_BYTES:
                self._socket.send_multipart(out[start:end]).add_done_callback(self._sent)
                start, size = end, 0
            size += len(frame)
        self._socket.send_multipart(out[start:]).add_done_callback(self._sent)

    def _sent(self, future: asyncio.Future) -> None:
        if not future.cancelled() and future.exception() is not None:
            self._fail_all(RemotingConnectError(f"send to {self.address} failed: {future.exception()}"))

    async def _read_loop(self) -> None:
        try:
            while True:
                for frame in await self._socket.recv_multipart():
                    if not frame:
                        continue  # an empty delimiter frame, if the peer adds one
                    try:
                        command = decode_msgpack(frame)
                    except ProtocolError as exc:
                        log.warning("dropping undecodable frame from %s: %s", self.address, exc)
                        continue
                    if command.is_response:
                        self._complete(command)
                    else:
                        self._server_request(command)
        except zmq.ZMQError as exc:
            self._fail_all(RemotingConnectError(f"connection to {self.address} failed: {exc}"))

    async def drain(self) -> None:
        if self._closed_error is not None:
            raise self._closed_error

    def close(self) -> None:
        self._fail_all(RemotingConnectError(f"connection to {self.address} closed by the client"))
        self._reader.cancel()
        self._socket.close(linger=0)
