"""The continuous divergence check: this server's route table against its peers', over and over.

With `peerDivergencePeers` set, each pass is `namesrv-admin diff --json` of this server and its
peers (namesrv.divergence.fetch: RocketMQ's standard requests, at most
`peerDivergenceRoutesPerSecond` route queries per NameServer per second), run as a process of its
own, started and waited for by a thread of its own: neither the reactor nor the interpreter lock
of the server pays for decoding the peers' routes (measured: a thread in the server took 13% of
its route queries, a child process none: `python -m bench status-page-cost`); this server answers its share
like any client's. `peerDivergenceIntervalSeconds` after one pass ends the next starts;
`peerDivergenceEnable=false` (updatable) pauses it and ends a pass under way. The last pass's
report is kept for the status page, and `/metrics` reports it (`divergence_families`). With
worker processes only worker 0 runs it: every worker holds the same tables.
"""
from __future__ import annotations

import json
import logging
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import psutil
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from namesrv.config import NamesrvConfig, split_address

log = logging.getLogger(__name__)

#: The peer-list value that means "the address service's list" (namesrvAddressList).
ADDRESS_SERVICE = "namesrvAddressList"
#: Differences kept of each kind for the status page (the counts are always complete).
MAX_ITEMS = 200
#: Per-request timeout of a pass.
PEER_TIMEOUT_SECONDS = 5


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
    `divergence_families` read the last pass."""

    def __init__(self, config: NamesrvConfig) -> None:
        self._config = config
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name="NamesrvDivergence", daemon=True)
        self._lock = threading.Lock()
        #: The last finished pass's report (namesrv.divergence.compare), and when it ended (ms).
        self.last: dict[str, Any] | None = None
        self.last_at_ms = 0
        #: Passes since start, by result: agree, differ, failed (a NameServer could not be read).
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
        """This server's RocketMQ address, as the pass reaches it."""
        host = self._config.bind_address
        return f"{'127.0.0.1' if host in ('0.0.0.0', '::', '') else host}:{self._config.listen_port}"

    def _halted(self) -> bool:
        """Stopping, or paused (peerDivergenceEnable=false): a pass under way ends unfinished."""
        return self._stopped.is_set() or not self._config.peer_divergence_enable

    def _run(self) -> None:
        while not self._stopped.is_set():
            if not self._config.peer_divergence_enable:  # paused
                self._stopped.wait(0.5)
                continue
            try:
                self.run_once()
            except Exception:  # noqa: BLE001 - the check is an observer: it must never take the server down
                log.exception("a divergence pass failed")
            ended = time.monotonic()
            while not self._stopped.is_set() and \
                    time.monotonic() - ended < self._config.peer_divergence_interval_seconds:
                self._stopped.wait(0.5)

    def command(self) -> list[str]:
        """The pass: `namesrv-admin diff` of this server and its peers, in a process of its own."""
        config = self._config
        command = [sys.executable, "-m", "namesrv.admin", "diff", "-n", ";".join([self.me, *peer_addresses(config)]),
                   "--json", "--max-items", str(MAX_ITEMS), "--timeout", str(PEER_TIMEOUT_SECONDS),
                   "--rate", str(config.peer_divergence_routes_per_second)]
        return command + (["--tls"] if config.tls_mode.lower() == "enforcing" else [])

    def run_once(self) -> dict[str, Any] | None:
        """One pass; its report is kept and returned (None: halted before the end, or no peer)."""
        if not peer_addresses(self._config):
            return None
        self.running_since = time.monotonic()
        try:
            child = subprocess.Popen(self.command(), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE)
            while True:
                try:
                    out, err = child.communicate(timeout=0.5)
                    break
                except subprocess.TimeoutExpired:
                    if self._halted():
                        child.kill()
                        child.communicate()
                        return None  # unfinished: its differences are not the tables'
        finally:
            self.running_since = None
        if child.returncode not in (0, 1, 3):
            log.error("the divergence pass exited with %s: %s", child.returncode, err.decode(errors="replace")[-500:])
            return None
        report = json.loads(out)
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
            return {"self": self.me, "peers": peer_addresses(self._config),
                    "enabled": self._config.peer_divergence_enable,
                    "intervalSeconds": self._config.peer_divergence_interval_seconds,
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
