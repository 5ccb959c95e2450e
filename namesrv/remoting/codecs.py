"""Commands to and from the bytes of each transport: the one place a frame becomes a command and back.

A RocketMQ TCP connection carries remoting frames (namesrv.protocol.command); a ZeroMQ peer one
msgpack command per ZeroMQ frame (namesrv.protocol.msgpack_codec). The reactor's endpoints split
their input into frames and hand them to a `Decode` (`decode_all`, or the inline answers of namesrv.processor.inline on
TCP); replies are encoded by `encode_reply`.
"""
from __future__ import annotations

from collections.abc import Callable

from namesrv.channel import Channel
from namesrv.protocol.command import RemotingCommand
from namesrv.protocol.msgpack_codec import decode_msgpack, encode_msgpack

#: Channel.transport of the two endpoints.
TCP_TRANSPORT = "tcp"
ZMQ_TRANSPORT = "zmq"

#: The frames of one received message, their connection and when the reactor took them
#: (time.monotonic()) in; (whole response frames answered without an executor, the requests to
#: dispatch) out. ProtocolError for bad input.
Decode = Callable[[list[bytes], Channel, float], tuple[list[bytes], list[RemotingCommand]]]


def decode_frame(channel: Channel, frame: bytes) -> RemotingCommand:
    """A command as one frame of its connection's transport (a remoting frame without its length prefix)."""
    return decode_msgpack(frame) if channel.transport == ZMQ_TRANSPORT else RemotingCommand.decode(frame)


def decode_all(frames: list[bytes], channel: Channel, arrived: float) -> tuple[list[bytes], list[RemotingCommand]]:
    """The `Decode` with no inline answers: every command goes to an executor."""
    return [], [decode_frame(channel, frame) for frame in frames]


def encode_reply(channel: Channel, response: RemotingCommand) -> bytes:
    """A response as its connection's transport carries it."""
    return encode_msgpack(response) if channel.transport == ZMQ_TRANSPORT else response.encode()

