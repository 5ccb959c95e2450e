"""The ceiling: a bare pyzmq STREAM server that splits RocketMQ frames and echoes them, nothing else.

    .venv/bin/python -m bench.ceiling --port 0          # prints "ceiling listening on 127.0.0.1:PORT"

It does what namesrv's reactor must do at the least for any request — take TCP bytes from ZeroMQ,
find the frame boundaries (namesrv.fastpath.split_frames), send bytes back to the same peer — so
the rate one load generator reaches against it bounds what any Python/pyzmq server can reach on
this machine. bench/throughput.py measures namesrv as a fraction of it.
"""
from __future__ import annotations

import argparse
import signal
import sys

import zmq

from bench.cli_help import HelpFormatter
from namesrv.fastpath import split_frames
from namesrv.protocol.codes import DEFAULT_MAX_FRAME_LENGTH
from namesrv.errors import ProtocolError


def serve(sock: zmq.Socket, stop: list[bool]) -> None:
    """Echo every complete frame back to its connection, one send per received chunk."""
    partial: dict[bytes, bytes] = {}
    dropped: set[bytes] = set()  # peers whose echo could not be sent: their stream is out of step
    poller = zmq.Poller()
    poller.register(sock, zmq.POLLIN)
    while not stop[0]:
        if not poller.poll(200):
            continue
        while True:
            try:
                ident = sock.recv(zmq.NOBLOCK)
            except zmq.Again:
                break
            data = sock.recv()
            if not data:  # connect or disconnect notification
                partial.pop(ident, None)
                dropped.discard(ident)
                continue
            if ident in dropped:
                continue
            held = partial.get(ident)
            if held:
                data = held + data
            try:
                _frames, consumed = split_frames(data, DEFAULT_MAX_FRAME_LENGTH)
                if consumed:  # (an empty message would close the connection)
                    sock.send(ident, zmq.SNDMORE | zmq.NOBLOCK)
                    sock.send(data if consumed == len(data) else data[:consumed], zmq.NOBLOCK, copy=False)
            except (zmq.ZMQError, ProtocolError):  # the peer is gone, does not read, or sent garbage
                partial.pop(ident, None)
                dropped.add(ident)
                continue
            partial[ident] = data[consumed:]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench.ceiling", description=__doc__.split("\n\n")[0],
                                     formatter_class=HelpFormatter)
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on")
    parser.add_argument("--port", type=int, default=0,
                        help="TCP port to listen on (0 picks a free one; the address is printed)")
    args = parser.parse_args(argv)
    context = zmq.Context()
    sock = context.socket(zmq.STREAM)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.STREAM_NOTIFY, 1)
    sock.bind(f"tcp://{args.host}:{args.port or '*'}")
    stop = [False]

    def on_signal(_signum: int, _frame: object) -> None:
        stop[0] = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    endpoint = sock.getsockopt_string(zmq.LAST_ENDPOINT).removeprefix("tcp://")
    print(f"ceiling listening on {endpoint}", flush=True)
    serve(sock, stop)
    sock.close(0)
    context.term()
    return 0


if __name__ == "__main__":
    sys.exit(main())
