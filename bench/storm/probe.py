"""What the storm records about its target before the run: the server's own answer to
GET_NAMESRV_CONFIG (thread pools, selector threads; works against Apache RocketMQ's NameServer
too) and the version ordinal it stamps on responses."""
from __future__ import annotations

import logging
import socket
from dataclasses import dataclass, field

from namesrv.config import parse_properties
from namesrv.protocol import FrameDecoder, RemotingCommand, RequestCode, ResponseCode, Version

log = logging.getLogger(__name__)


@dataclass
class ServerFacts:
    version_ordinal: int | None = None
    version: str | None = None
    config: dict[str, str] = field(default_factory=dict)
    problem: str | None = None


def probe_server(host: str, port: int, timeout: float = 5.0) -> ServerFacts:
    """Ask once, synchronously; a server that cannot answer yields facts with `problem` set."""
    request = RemotingCommand.request(RequestCode.GET_NAMESRV_CONFIG, opaque=1)
    decoder = FrameDecoder()
    try:
        with socket.create_connection((host, port), timeout=timeout) as sock:
            sock.sendall(request.encode())
            while True:
                chunk = sock.recv(65536)
                if not chunk:
                    return ServerFacts(problem="the server closed the connection without answering")
                frames = decoder.feed(chunk)
                if frames:
                    response = RemotingCommand.decode(frames[0])
                    break
    except OSError as exc:
        return ServerFacts(problem=f"cannot reach {host}:{port}: {exc}")
    facts = ServerFacts(version_ordinal=response.version)
    try:
        facts.version = Version(response.version).name
    except ValueError:
        facts.version = f"ordinal {response.version}"
    if response.code == ResponseCode.SUCCESS and response.body:
        facts.config = parse_properties(response.body.decode("utf-8", errors="replace"))
    else:
        facts.problem = f"GET_NAMESRV_CONFIG answered code {response.code}: {response.remark}"
    return facts
