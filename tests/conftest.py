"""Shared fixtures: `namesrv_factory` starts real namesrv processes on 127.0.0.1 (stopped after the test);
`raw_connect` opens plain TCP connections that speak the remoting protocol."""
from __future__ import annotations

import importlib
import os
import socket
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import zmq
from hypothesis import settings

from namesrv import fastpath
from namesrv.launcher import NamesrvProcess
from namesrv.protocol import FrameDecoder, RemotingCommand


# Speed is measured, not asserted: no hypothesis example fails for taking long (its default deadline,
# 200 ms, is a window a busy shared machine overruns: one example took 300 ms in a full run, 0.16 ms again).
settings.register_profile("namesrv", deadline=None)
settings.load_profile("namesrv")


def cython_skip_reason() -> str | None:
    """Why the Cython fast path cannot be tested here, or None when it can."""
    if os.environ.get("NAMESRV_PURE_PYTHON") == "1":
        return "NAMESRV_PURE_PYTHON=1 forces the pure-Python fast path"
    try:
        importlib.import_module("namesrv._fastpath")
    except ImportError as exc:
        if os.environ.get("NAMESRV_REQUIRE_EXTENSION") == "1":
            raise  # `make test` built it: a missing extension is a failure, not a skip
        return f"Cython extension not built ({exc})"
    return None


@pytest.fixture(scope="module", params=[
    pytest.param("namesrv.fastpath.pure", id="python"),
    pytest.param("namesrv._fastpath", id="cython",
                 marks=pytest.mark.skipif(cython_skip_reason() is not None, reason=str(cython_skip_reason()))),
])
def each_fastpath(request: pytest.FixtureRequest) -> Iterator[object]:
    """Route namesrv.fastpath to each implementation in turn (use with `pytest.mark.usefixtures`)."""
    module = importlib.import_module(request.param)
    with pytest.MonkeyPatch.context() as patch:
        for name in fastpath.__all__:
            if name != "IMPLEMENTATION":
                patch.setattr(fastpath, name, getattr(module, name))
        yield module


@pytest.fixture
def zmq_context() -> Iterator[zmq.Context]:
    """A ZeroMQ context for test sockets, destroyed without linger after the test."""
    context = zmq.Context()
    yield context
    context.destroy(linger=0)


@pytest.fixture
def stream_socket() -> Iterator[tuple[zmq.Socket, int]]:
    """A ZeroMQ STREAM socket as the server sets one up (connects and disconnects announced, no
    linger), bound to a free port on 127.0.0.1: (socket, port)."""
    context = zmq.Context()
    sock = context.socket(zmq.STREAM)
    sock.setsockopt(zmq.STREAM_NOTIFY, 1)
    sock.setsockopt(zmq.LINGER, 0)
    port = sock.bind_to_random_port("tcp://127.0.0.1")
    yield sock, port
    sock.close()
    context.term()


@pytest.fixture
def namesrv_factory(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[..., NamesrvProcess]]:
    """`namesrv_factory(config_file=None, log_config=None, **overrides)` -> a started NamesrvProcess.

    Overrides are configuration keys (`scanNotActiveBrokerInterval=200`); each server gets its own
    work directory (KV file, config store, `namesrv.log`) and is stopped (SIGTERM) at teardown.
    """
    started: list[NamesrvProcess] = []

    def start(config_file: str | Path | None = None, log_config: str | Path | None = None,
              **overrides: object) -> NamesrvProcess:
        process = NamesrvProcess(overrides, workdir=tmp_path_factory.mktemp("namesrv"), config_file=config_file,
                                 log_config=log_config)
        started.append(process)
        return process.start()

    yield start
    for process in started:
        process.stop()


class RawConnection:
    """A plain TCP socket speaking the remoting protocol through namesrv.protocol's codecs only,
    so wire tests see exactly the bytes the server sends."""

    def __init__(self, address: str, timeout: float = 5.0) -> None:
        host, port = address.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._decoder = FrameDecoder()
        self._frames: list[bytes] = []
        self._opaque = 0

    def request(self, code: int, ext: dict[str, object] | None = None, body: bytes | None = None,
                **options: object) -> RemotingCommand:
        """A request with the next opaque (options: serialize_type, version, oneway, language)."""
        self._opaque += 1
        return RemotingCommand.request(code, ext, body, opaque=self._opaque, **options)  # type: ignore[arg-type]

    def send(self, *commands: RemotingCommand) -> None:
        self.sock.sendall(b"".join(command.encode() for command in commands))

    def recv(self, timeout: float = 5.0) -> RemotingCommand:
        """The next frame from the server, decoded (socket.timeout if none comes)."""
        self.sock.settimeout(timeout)
        while not self._frames:
            chunk = self.sock.recv(1 << 20)
            if not chunk:
                raise ConnectionError("closed by the server")
            self._frames += self._decoder.feed(chunk)
        return RemotingCommand.decode(self._frames.pop(0))

    def call(self, command: RemotingCommand, timeout: float = 5.0) -> RemotingCommand:
        self.send(command)
        response = self.recv(timeout)
        assert response.opaque == command.opaque and response.is_response, response
        return response

    def closed_by_server(self, timeout: float = 5.0) -> bool:
        """True once the server closes the connection (anything it sends meanwhile is ignored)."""
        self.sock.settimeout(timeout)
        try:
            while self.sock.recv(1 << 20):
                pass
        except (socket.timeout, TimeoutError):
            return False
        except ConnectionResetError:
            pass
        return True

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def raw_connect() -> Iterator[Callable[..., RawConnection]]:
    """`raw_connect(address)` -> an open RawConnection, closed at teardown."""
    opened: list[RawConnection] = []

    def connect(address: str, timeout: float = 5.0) -> RawConnection:
        connection = RawConnection(address, timeout)
        opened.append(connection)
        return connection

    yield connect
    for connection in opened:
        connection.close()
