"""The operator's HTTP port (httpListenAddress): health, readiness and RocketMQ's address service.

* `GET /health`: 200 `{"status": "UP"}` while the process serves (the port closes when it shuts
  down), for a liveness probe.
* `GET /ready`: 200 `{"status": "READY", ...}` once route queries are answered (after the
  needWaitForService window, which lets brokers re-register before clients are sent here), else
  503 `{"status": "NOT_READY", "reason": ...}`; both with the route table's sizes, for a readiness
  probe or a load balancer.
* `GET /metrics`: Prometheus's text format (namesrv.metrics).
* `GET /`, `/status` and the status page's JSON: namesrv.status_page (unless statusPageEnable=false).
* `GET /rocketmq/<subgroup>`: the `namesrvAddressList` as text/plain, what a RocketMQ client
  started without a name server address fetches from `http://{rocketmq.namesrv.domain}/rocketmq/
  {rocketmq.namesrv.domain.subgroup}` (MixAll.getWSAddr; subgroup `nsaddr` by default), so a fleet
  can point its clients at one URL. 404 when the list is not set.

Bounded like the other endpoints: at most MAX_CLIENTS connections are served at once, each on a
thread of its own; a request (line and headers, at most 64 KiB each: http.server's own bounds)
must arrive whole within REQUEST_SECONDS of the connection, and the whole exchange end within
EXCHANGE_SECONDS, or the connection is closed. When MAX_CLIENTS are taken, a newcomer is served
and the connection that has waited longest for the rest of its request is closed instead (the
oldest of all if every one has its request): peers trickling requests byte by byte cannot keep
a liveness probe out, since a probe's request arrives whole at once.

What each path answers is the table `PAGES`, apart from the connection handling: an endpoint is
one function and one entry there.
"""
from __future__ import annotations

import json
import logging
import socket
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from namesrv.config import split_address
from namesrv.metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from namesrv.remoting import BindError
from namesrv.remoting.reactor import HTTP_KEY

log = logging.getLogger(__name__)

MAX_CLIENTS = 32
#: A connection's request must be whole this long after it was accepted; its answer sent this long after.
REQUEST_SECONDS = 5.0
EXCHANGE_SECONDS = 10.0
#: How often the accept loop looks for connections past their deadline.
SWEEP_SECONDS = 0.2
#: (ready, details): what /ready answers with.
Readiness = Callable[[], tuple[bool, dict[str, object]]]
#: (path, query, headers, client address) -> (status, content type, body), or None: not one of its paths.
StatusPages = Callable[[str, str, Mapping[str, str], str], "tuple[int, str, bytes] | None"]


#: (status, content type, body) of an answer.
Answer = tuple[int, str, "str | bytes"]
JSON = "application/json"
TEXT = "text/plain; charset=utf-8"


def _health(service: OperatorHttp, path: str) -> Answer:
    return 200, JSON, json.dumps({"status": "UP"})


def _ready(service: OperatorHttp, path: str) -> Answer:
    ready, details = service.readiness()
    status = {"status": "READY"} if ready else {"status": "NOT_READY"}
    return 200 if ready else 503, JSON, json.dumps({**status, **details})


def _metrics(service: OperatorHttp, path: str) -> Answer:
    return 200, METRICS_CONTENT_TYPE, service.metrics()


def _addresses(service: OperatorHttp, path: str) -> Answer:
    addresses = service.addresses()
    return (200, TEXT, addresses) if addresses else (404, TEXT, "namesrvAddressList is not set\n")


#: Path -> what answers it. A path ending in "/" answers every path one level below it
#: (`/rocketmq/<subgroup>`).
PAGES: dict[str, Callable[[OperatorHttp, str], Answer]] = {
    "/health": _health,
    "/ready": _ready,
    "/metrics": _metrics,
    "/rocketmq/": _addresses,
}


def answer(service: OperatorHttp, path: str, query: str = "", headers: Mapping[str, str] | None = None,
           client: str = "") -> Answer:
    """What `path` answers: PAGES' entry for it, else for its folder, else the status page's
    (namesrv.status_page, given the query, the request's headers and the client's address), else 404."""
    page = PAGES.get(path) or PAGES.get(path[:path.rfind("/") + 1] or "/")
    if page is not None:
        return page(service, path)
    if service.status is not None:
        found = service.status(path, query, headers or {}, client)
        if found is not None:
            return found
    return 404, TEXT, "not found: " + ", ".join(p + "<subgroup>" if p.endswith("/") else p for p in PAGES) + "\n"


@dataclass(slots=True)
class _Exchange:
    started: float
    request_whole: bool = False


class Connections:
    """The connections being served, oldest first, and those closed from here whose thread has not
    ended yet. The accept loop admits (closing one to make room) and sweeps deadlines; a handler
    thread reports its request whole and its connection closed. Shutting a socket down and closing
    it happen under one lock, so a descriptor is never shut down after its number was reused."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._lock = threading.Lock()
        self._open: dict[socket.socket, _Exchange] = {}
        self._closing: set[socket.socket] = set()
        #: Connections closed to make room for a newcomer, and for a deadline, since start.
        self.evicted = 0
        self.expired = 0

    def admit(self, sock: socket.socket, now: float) -> bool:
        """Take `sock` on, closing the connection that waited longest for its request (else the
        oldest) if `limit` are open; False (not taken) while as many are still closing."""
        with self._lock:
            if len(self._open) >= self.limit:
                if len(self._closing) >= self.limit:
                    return False
                oldest = next(iter(self._open))
                self._cut(next((s for s, exchange in self._open.items() if not exchange.request_whole), oldest))
                self.evicted += 1
            self._open[sock] = _Exchange(now)
            return True

    def request_whole(self, sock: socket.socket) -> None:
        with self._lock:
            exchange = self._open.get(sock)
            if exchange is not None:
                exchange.request_whole = True

    def sweep(self, now: float) -> None:
        """Close the connections past their deadline."""
        with self._lock:
            late = [sock for sock, exchange in self._open.items()
                    if now - exchange.started > (EXCHANGE_SECONDS if exchange.request_whole else REQUEST_SECONDS)]
            for sock in late:
                self._cut(sock)
            self.expired += len(late)

    def close(self, sock: socket.socket, close: Callable[[socket.socket], None]) -> None:
        """The handler is done with `sock`: `close` it and forget it."""
        with self._lock:
            if self._open.pop(sock, None) is None:
                self._closing.discard(sock)
            close(sock)

    def __len__(self) -> int:
        return len(self._open)

    def _cut(self, sock: socket.socket) -> None:
        """Shut `sock` down: its handler's read or write fails at once and the thread ends."""
        del self._open[sock]
        self._closing.add(sock)
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128  # the listen backlog (socketserver's 5 makes a burst of probes wait for SYN retries)

    def __init__(self, address: tuple[str, int], service: OperatorHttp) -> None:
        self.address_family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        self.service = service
        self.connections = Connections(MAX_CLIENTS)
        self._next_sweep = 0.0
        super().__init__(address, _Handler)

    def process_request(self, request: socket.socket, client_address: object) -> None:
        if not self.connections.admit(request, time.monotonic()):
            super().shutdown_request(request)  # as many connections are still closing: refused at once
            return
        super().process_request(request, client_address)

    def shutdown_request(self, request: socket.socket) -> None:
        self.connections.close(request, super().shutdown_request)

    def service_actions(self) -> None:
        """The accept loop's turn between polls: close the connections past their deadline."""
        now = time.monotonic()
        if now >= self._next_sweep:
            self._next_sweep = now + SWEEP_SECONDS
            self.connections.sweep(now)


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    timeout = REQUEST_SECONDS  # per read, besides the deadlines
    server_version = "namesrv"

    def parse_request(self) -> bool:
        whole = super().parse_request()
        self.server.connections.request_whole(self.connection)
        return whole

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        path, _, query = self.path.partition("?")
        status, content_type, text = answer(self.server.service, path, query, self.headers, self.client_address[0])
        body = text.encode("utf-8") if isinstance(text, str) else text
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - http.server's signature
        log.debug("http %s: " + format, self.address_string(), *args)


def _bound(address: str, service: OperatorHttp | None) -> _Server:
    try:
        return _Server(split_address(address), service)
    except (OSError, ValueError) as exc:
        raise BindError(address, HTTP_KEY, getattr(exc, "strerror", None) or str(exc)) from None


def check_bindable(address: str) -> None:
    """Bind `address` and let it go at once, BindError if it cannot be bound: how a supervisor of worker
    processes tells a port in use before worker 0 binds it, in the same one line as the other ports."""
    _bound(address, None).server_close()


class OperatorHttp:
    """The HTTP port, served on a thread of its own (its answers never wait on the reactor)."""

    def __init__(self, address: str, readiness: Readiness, addresses: Callable[[], str],
                 metrics: Callable[[], bytes], status: StatusPages | None = None) -> None:
        self._address = address
        self.readiness = readiness
        self.addresses = addresses
        self.metrics = metrics
        self.status = status
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        #: "host:port" actually bound (after bind()).
        self.bound = ""

    def bind(self) -> None:
        """Bind now (in the caller's thread, so a port in use is reported before the server starts)."""
        self._server = _bound(self._address, self)
        host, port = self._server.server_address[:2]
        self.bound = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"

    def start(self) -> None:
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.2},
                                        name="NamesrvHttp", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop answering (probes then fail: a shutting-down server is neither live nor ready)."""
        if self._server is None:
            return
        if self._thread is not None:
            self._server.shutdown()
        self._server.server_close()
        self._server = None
