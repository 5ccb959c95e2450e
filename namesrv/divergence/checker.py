"""The continuous divergence check: this server's route table against its peers', over and over.

With `peerDivergencePeers` set, a thread of its own (never the reactor) runs the same comparison
as `namesrv-admin diff` (namesrv.divergence.fetch) between this server's own tables, read
directly, and each peer, read through RocketMQ's standard requests, at most
`peerDivergenceRoutesPerSecond` route queries per peer per second; `peerDivergenceIntervalSeconds`
after one pass ends the next starts (0 pauses it). The last pass's result is kept for the status
page, and `/metrics` reports it (`families`). With worker processes only worker 0 runs it: every
worker holds the same tables.
"""
from __future__ import annotations

import asyncio
import logging
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import psutil
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from namesrv.client.remoting import AsyncRemotingClient
from namesrv.config import NamesrvConfig, split_address
from namesrv.divergence.fetch import LocalSource, RemoteSource, compare
from namesrv.routeinfo import RouteInfoManager

log = logging.getLogger(__name__)

#: The peer-list value that means "the address service's list" (namesrvAddressList).
ADDRESS_SERVICE = "namesrvAddressList"
#: Differences kept of each kind for the status page (the counts are always complete).
MAX_ITEMS = 200
#: Per-request timeout towards a peer.
PEER_TIMEOUT_SECONDS = 5.0


def local_addresses() -> set[str]:
    """This host's interface addresses (a peer list may name this server by any of them)."""
    found = {"127.0.0.1", "::1", "0.0.0.0", "::", "localhost", socket.gethostname()}
    try:
        for addresses in psutil.net_if_addrs().values():
            found.update(address.address.split("%")[0] for address in addresses)
    except (OSError, psutil.Error):
        pass
    return found


def peer_addresses(config: NamesrvConfig) -> list[str]:
    """The peers to compare with: peerDivergencePeers, or the address service's list without this server."""
    value = config.peer_divergence_peers.strip()
    if value == ADDRESS_SERVICE:
        mine = local_addresses()
        listed = [a.strip() for a in config.namesrv_address_list.split(";") if a.strip()]
        return [a for a in listed if not (split_address(a)[1] == config.listen_port and split_address(a)[0] in mine)]
    return [address.strip() for address in value.split(";") if address.strip()]


class PeerDivergence:
    """`start()`, then a pass every peerDivergenceIntervalSeconds until `stop()`; `status()` and
    `families()` read the last pass."""

    def __init__(self, config: NamesrvConfig, routes: RouteInfoManager) -> None:
        self._config = config
        self._routes = routes
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name="NamesrvDivergence", daemon=True)
        self._lock = threading.Lock()
        #: The last finished pass's report (namesrv.divergence.compare), and when it ended (ms).
        self.last: dict[str, Any] | None = None
        self.last_at_ms = 0
        #: Passes since start, by result: agree, differ, failed (a peer could not be read).
        self.passes = {"agree": 0, "differ": 0, "failed": 0}
        self.running_since: float | None = None

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stopped.set()
        if self._thread.ident is not None:
            self._thread.join(10)

    @property
    def me(self) -> str:
        host = self._config.bind_address
        return f"{'127.0.0.1' if host in ('0.0.0.0', '::', '') else host}:{self._config.listen_port} (this server)"

    def _run(self) -> None:
        try:
            asyncio.run(self._passes())
        except Exception:  # noqa: BLE001 - the check is an observer: it must never take the server down
            log.exception("the divergence check stopped")

    async def _passes(self) -> None:
        while not self._stopped.is_set():
            interval = self._config.peer_divergence_interval_seconds
            if interval <= 0:  # paused
                await self._sleep(1.0)
                continue
            await self.run_once()
            await self._sleep(interval)

    async def _sleep(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while not self._stopped.is_set() and time.monotonic() < deadline:
            await asyncio.sleep(min(0.2, deadline - time.monotonic()))

    async def run_once(self) -> dict[str, Any]:
        """One pass over every peer; its report is kept and returned."""
        peers = peer_addresses(self._config)
        client = AsyncRemotingClient(timeout=PEER_TIMEOUT_SECONDS, connect_timeout=PEER_TIMEOUT_SECONDS)
        started = time.monotonic()
        self.running_since = started
        try:
            sources = [LocalSource(self._routes, self.me), *(RemoteSource(client, peer) for peer in peers)]
            rate = self._config.peer_divergence_routes_per_second or None
            comparison = await compare(sources, routes_per_second=rate, max_items=MAX_ITEMS,
                                       stopped=self._stopped.is_set)
        finally:
            await client.close()
            self.running_since = None
        report = comparison.report(time.monotonic() - started)
        result = "failed" if report["unreachable"] else "agree" if report["agree"] else "differ"
        with self._lock:
            self.last, self.last_at_ms = report, int(time.time() * 1000)
            self.passes[result] += 1
        if result != "agree":
            log.warning("route tables differ from the peers' (%s): %s", result, "; ".join(report["summary"][:5]))
        return report

    def status(self) -> dict[str, Any]:
        """What the status page shows."""
        with self._lock:
            return {"peers": peer_addresses(self._config), "intervalSeconds": self._config.peer_divergence_interval_seconds,
                    "routesPerSecond": self._config.peer_divergence_routes_per_second, "passes": dict(self.passes),
                    "lastAt": self.last_at_ms or None, "last": self.last,
                    "runningFor": None if self.running_since is None else time.monotonic() - self.running_since}


def divergence_families(checker: PeerDivergence | None) -> Iterator[Metric]:
    """`namesrv_peer_divergence_*` (declared even when the check is off, with no samples)."""
    with_peer = {name: GaugeMetricFamily(f"namesrv_peer_divergence_{name}", doc, labels=["peer"]) for name, doc in (
        ("brokers", "Brokers this server and the peer list differently, as of the last pass."),
        ("topics", "Topics one of this server and the peer has a route for and the other not, as of the last pass."),
        ("queue_datas", "Queue entries (a group's queues of a topic) that differ, as of the last pass."),
        ("peer_up", "1 if the peer answered every request of the last pass, else 0."))}
    passes = CounterMetricFamily("namesrv_peer_divergence_passes", "Comparisons with the peers since start, by "
                                 "result: agree, differ, failed (a peer could not be read).", labels=["result"])
    last = GaugeMetricFamily("namesrv_peer_divergence_last_pass_timestamp_seconds", "When the last comparison "
                             "with the peers ended (0: none yet).", labels=[])
    took = GaugeMetricFamily("namesrv_peer_divergence_last_pass_seconds", "How long the last comparison took.",
                             labels=[])
    if checker is not None:
        with checker._lock:
            report, at, counts = checker.last, checker.last_at_ms, dict(checker.passes)
        for result, count in counts.items():
            passes.add_metric([result], count)
        last.add_metric([], at / 1000)
        if report is not None:
            took.add_metric([], report["seconds"] or 0.0)
            for peer in report["namesrvs"][1:]:
                against = report["againstReference"].get(peer, {})
                with_peer["brokers"].add_metric([peer], against.get("brokers", 0))
                with_peer["topics"].add_metric([peer], against.get("topics", 0))
                with_peer["queue_datas"].add_metric([peer], against.get("queueDatas", 0))
                with_peer["peer_up"].add_metric([peer], 0 if peer in report["unreachable"] else 1)
    yield from with_peer.values()
    yield passes
    yield last
    yield took
