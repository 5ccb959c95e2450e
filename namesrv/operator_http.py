"""The operator's HTTP port (httpListenAddress): health, readiness and RocketMQ's address service.

* `GET /health`: 200 `{"status": "UP"}` while the process serves (the port closes when it shuts
  down), for a liveness probe.
* `GET /ready`: 200 `{"status": "READY", ...}` once route queries are answered (after the
  needWaitForService window, which lets brokers re-register before clients are sent here), else
  503 `{"status": "NOT_READY", "reason": ...}`; both with the route table's sizes, for a readiness
  probe or a load balancer.
* `GET /metrics`: Prometheus's text format (namesrv.metrics).
* `GET /rocketmq/<subgroup>`: the `namesrvAddressList` as text/plain, what a RocketMQ client
  started without a name server address fetches from `http://{rocketmq.namesrv.domain}/rocketmq/
  {rocketmq.namesrv.domain.subgroup}` (MixAll.getWSAddr; subgroup `nsaddr` by default), so a fleet
  can point its clients at one URL. 404 when the list is not set.

Bounded like the other endpoints: at most MAX_CLIENTS connections are served at once (one more is
closed at once), each gets TIMEOUT seconds, and a request line or header is at most 64 KiB
(http.server's own bounds).
"""
from __future__ import annotations

import json
import logging
import socket
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from namesrv.config import split_address
from namesrv.metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from namesrv.remoting import BindError
from namesrv.remoting.reactor import HTTP_KEY

log = logging.getLogger(__name__)

MAX_CLIENTS = 32
TIMEOUT = 5.0
#: (ready, details): what /ready answers with.
Readiness = Callable[[], tuple[bool, dict[str, object]]]


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128  # the listen backlog (socketserver's 5 makes a burst of probes wait for SYN retries)

    def __init__(self, address: tuple[str, int], service: OperatorHttp) -> None:
        self.address_family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        self.service = service
        self._slots = threading.BoundedSemaphore(MAX_CLIENTS)
        super().__init__(address, _Handler)

    def process_request(self, request: socket.socket, client_address: object) -> None:
        if not self._slots.acquire(blocking=False):
            self.shutdown_request(request)  # MAX_CLIENTS are being served: closed at once
            return
        super().process_request(request, client_address)

    def process_request_thread(self, request: socket.socket, client_address: object) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    timeout = TIMEOUT
    server_version = "namesrv"

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        service = self.server.service
        path = self.path.split("?", 1)[0]
        if path == "/health":
            self._reply(200, "application/json", json.dumps({"status": "UP"}))
        elif path == "/ready":
            ready, details = service.readiness()
            status = {"status": "READY"} if ready else {"status": "NOT_READY"}
            self._reply(200 if ready else 503, "application/json", json.dumps({**status, **details}))
        elif path == "/metrics":
            self._reply(200, METRICS_CONTENT_TYPE, service.metrics())
        elif path.startswith("/rocketmq/") and "/" not in path[len("/rocketmq/"):]:
            addresses = service.addresses()
            if addresses:
                self._reply(200, "text/plain; charset=utf-8", addresses)
            else:
                self._reply(404, "text/plain; charset=utf-8", "namesrvAddressList is not set\n")
        else:
            self._reply(404, "text/plain; charset=utf-8",
                        "not found: /health, /ready, /metrics, /rocketmq/<subgroup>\n")

    def _reply(self, code: int, content_type: str, text: str | bytes) -> None:
        body = text.encode("utf-8") if isinstance(text, str) else text
        self.send_response(code)
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
                 metrics: Callable[[], bytes]) -> None:
        self._address = address
        self.readiness = readiness
        self.addresses = addresses
        self.metrics = metrics
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
