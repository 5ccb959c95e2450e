"""One `/metrics` for all worker processes: siblings answer worker 0's scrape with their own families.

Only worker 0 serves the operator's HTTP port. Every other worker runs a `MetricsPeer`: a thread
with a ZeroMQ ROUTER socket on the server's bus (the abstract socket namespace, as the write log's
sockets), answering each request with its families, packed (namesrv.metrics.pack_families). On a
scrape worker 0 asks every sibling at once and waits at most PEER_TIMEOUT_SECONDS in all; a
sibling that does not answer by then (restarting, say) is left out of that scrape, which
`namesrv_worker_processes_reporting` shows. The merge is namesrv.metrics.merge_families.

The status page asks the same way (`STATUS`) for what only each worker knows: its connections' TLS
and its route-change subscribers (namesrv.status_page.local_facts).
"""
from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

import zmq
from prometheus_client.core import GaugeMetricFamily, Metric

from namesrv.metrics import merge_families, pack_families, unpack_families
from namesrv.writelog.replication import WorkerRole

log = logging.getLogger(__name__)

#: How long a scrape waits for the siblings' answers, all together.
PEER_TIMEOUT_SECONDS = 1.0
#: What worker 0 asks: the families, or the status page's facts.
METRICS = b"metrics"
STATUS = b"status"
#: How often the peer thread looks whether it should stop.
STOP_POLL_MS = 100


def peer_endpoint(role: WorkerRole, index: int) -> str:
    return role.endpoint(f"metrics-{index}")


class MetricsPeer:
    """A sibling's end: `start()`, then it answers until `stop()`."""

    def __init__(self, role: WorkerRole, families: Callable[[], list[Metric]],
                 status: Callable[[], bytes] | None = None) -> None:
        self._families = families
        self._status = status
        self._context = zmq.Context(io_threads=1)
        self._socket = self._context.socket(zmq.ROUTER)
        self._socket.setsockopt(zmq.LINGER, 0)
        self._endpoint = peer_endpoint(role, role.index)
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name="NamesrvMetricsPeer", daemon=True)

    def start(self) -> None:
        self._socket.bind(self._endpoint)
        self._thread.start()

    def stop(self) -> None:
        self._stopping = True
        if self._thread.ident is not None:
            self._thread.join(5)
        self._socket.close(0)
        self._context.term()

    def _run(self) -> None:
        sock = self._socket
        while not self._stopping:
            try:
                if not sock.poll(STOP_POLL_MS):
                    continue
                requester, *question = sock.recv_multipart()
                if question == [STATUS] and self._status is not None:
                    sock.send_multipart([requester, self._status()])
                else:
                    sock.send_multipart([requester, pack_families(self._families())])
            except Exception:  # noqa: BLE001 - a failed answer leaves this worker out of one scrape only
                log.exception("answering a metrics scrape failed")


class MetricsGatherer:
    """Worker 0's end: `families()` is worker 0's own merged with every sibling that answers in time."""

    def __init__(self, role: WorkerRole, local: Callable[[], list[Metric]]) -> None:
        self._role = role
        self._local = local
        self._context = zmq.Context(io_threads=1)
        self._lock = threading.Lock()

    def families(self) -> list[Metric]:
        views = [self._local(), *map(unpack_families, self.ask(METRICS))]
        merged = merge_families(views)
        merged.append(GaugeMetricFamily("namesrv_worker_processes_reporting", "Worker processes whose metrics this "
                                        "scrape includes (serverWorkerProcesses when all answered).",
                                        value=len(views)))
        return merged

    def close(self) -> None:
        self._context.term()

    def ask(self, question: bytes) -> list[bytes]:
        """Every sibling's answer to `question` that comes in time (one question at a time: the
        HTTP port serves several clients)."""
        with self._lock:
            return self._ask_siblings(question)

    def _ask_siblings(self, question: bytes) -> list[bytes]:
        role = self._role
        sockets = []
        poller = zmq.Poller()
        try:
            for index in range(1, role.workers):
                sock = self._context.socket(zmq.DEALER)
                sock.setsockopt(zmq.LINGER, 0)
                sock.connect(peer_endpoint(role, index))
                sock.send(question, zmq.NOBLOCK)
                poller.register(sock, zmq.POLLIN)
                sockets.append(sock)
            views: list[bytes] = []
            waiting = set(sockets)
            deadline = time.monotonic() + PEER_TIMEOUT_SECONDS
            while waiting:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                for sock, _ in poller.poll(remaining * 1000):
                    views.append(sock.recv())
                    poller.unregister(sock)
                    waiting.discard(sock)
            if waiting:
                log.warning("%d of %d sibling workers sent no %s within %.1f s", len(waiting), len(sockets),
                            question.decode(), PEER_TIMEOUT_SECONDS)
            return views
        finally:
            for sock in sockets:
                sock.close(0)
