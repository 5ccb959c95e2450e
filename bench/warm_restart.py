"""A namesrv restart under load, warm (routeSnapshotEnable) and cold: what route clients see, and how
long until every route is served again.

    python -m bench warm-restart                        # 300 brokers x 1,000 topics
    python -m bench warm-restart --brokers 30 --topics 100 --register-period 5

A fresh namesrv (namesrv.launcher) takes `brokers` full registrations of `topics` topics each
(bench/lib/fleet.py; by default every broker is a cluster of its own with its own topics, so
brokers x topics topics and queue entries; `--clusters` fewer: brokers of a cluster share topics).
Route clients then query live topics in a closed loop while the server is stopped (SIGTERM) and
started again on the same port and work directory, and the fleet goes on registering every
`register-period` seconds, spread evenly, as brokers do. Per mode the bench prints:

* stop: seconds SIGTERM took (the final save included) and the snapshot's size;
* serving: seconds from the start command to the boot line (the port answers);
* full routes: seconds from the start command until the route table holds every queue entry again
  (polled through /ready), and, of that, how long restoring the file took (the server's log);
* TOPIC_NOT_EXIST: answers for live topics the clients got after the restart (every one is a
  client told that a live topic does not exist), and the other answers.

Cold is RocketMQ's behaviour: the table is empty until each broker's next registration.
"""
from __future__ import annotations

import json
import re
import tempfile
import threading
import time
import urllib.request
from collections import Counter
from pathlib import Path

from bench.lib import cli
from bench.lib.client import Client
from bench.lib.fleet import FleetShape, register_body, register_template, route_template
from bench.lib.output import Printed, write_results
from namesrv.launcher import NamesrvProcess
from namesrv.protocol import DataVersion, ResponseCode

ROUTE_CLIENTS = 4
_RESTORED = re.compile(r"restored the routes held .* in (?P<seconds>[\d.]+) s")


class Connection:
    """One blocking connection that comes back after the server does: `call(frame)` -> the response's code
    (None: no server, and the next call connects again)."""

    def __init__(self, address: str) -> None:
        self._address = address
        self._client: Client | None = None

    def call(self, frame: bytes) -> int | None:
        try:
            if self._client is None:
                self._client = Client(self._address, timeout=10)
            return self._client.call(frame).code
        except (OSError, ConnectionError):
            self.close()
            return None

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None


class RouteClients:
    """Closed-loop route queries of live topics on ROUTE_CLIENTS threads; answers counted per phase."""

    def __init__(self, address: str, frames: list[bytes]) -> None:
        self._address = address
        self._frames = frames
        self.phase = "before"
        self.answers: Counter[tuple[str, str]] = Counter()
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run, args=(i,), daemon=True) for i in range(ROUTE_CLIENTS)]

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join()

    def _run(self, index: int) -> None:
        conn = Connection(self._address)
        frames = self._frames
        i = index
        while not self._stop.is_set():
            code = conn.call(frames[i % len(frames)])
            i += ROUTE_CLIENTS
            name = "no server" if code is None else ResponseCode(code).name
            self.answers[self.phase, name] += 1
            if code is None:
                time.sleep(0.01)
        conn.close()


def register_all(conn: Connection, frames: list[bytes], period: float = 0.0) -> None:
    """Every broker's registration on `conn`, spread evenly over `period` seconds (0: at once). The
    connection stays open: closing it would unregister the brokers, as a broker's close does."""
    started = time.monotonic()
    for i, frame in enumerate(frames):
        if period:
            time.sleep(max(0.0, started + period * i / len(frames) - time.monotonic()))
        while conn.call(frame) != ResponseCode.SUCCESS:
            time.sleep(0.05)


def queue_datas(server: NamesrvProcess) -> int:
    with urllib.request.urlopen(server.http_url + "/ready", timeout=5) as response:
        return json.load(response)["queueDatas"]


def one_mode(warm: bool, fleet: FleetShape, registrations: list[bytes], routes: list[bytes],
             register_period: float) -> dict[str, object]:
    workdir = Path(tempfile.mkdtemp(prefix="warm-restart-"))
    options = {"routeSnapshotEnable": str(warm).lower(), "zmqListenAddress": ""}
    servers = [NamesrvProcess(options, workdir=workdir)]
    connections: list[Connection] = []
    clients = None
    try:
        server = servers[0].start()
        expected = fleet.brokers * fleet.topics_per_broker
        connections.append(Connection(server.address))
        register_all(connections[-1], registrations)
        held = queue_datas(server)
        assert held == expected, f"the fleet did not register whole: {held} of {expected} queue entries"
        clients = RouteClients(server.address, routes)
        clients.start()
        time.sleep(1.0)
        clients.phase = "down"
        started = time.monotonic()
        server.stop()
        stop_s = time.monotonic() - started
        snapshot = workdir / "routes.snapshot"
        size = snapshot.stat().st_size if snapshot.exists() else 0
        port = server.address.rsplit(":", 1)[1]
        started = time.monotonic()
        servers.append(NamesrvProcess({**options, "listenPort": port}, workdir=workdir))
        restarted = servers[-1].start()
        serving_s = time.monotonic() - started
        clients.phase = "after"
        connections.append(Connection(restarted.address))
        fleet_thread = threading.Thread(target=register_all, args=(connections[-1], registrations, register_period))
        fleet_thread.start()
        while queue_datas(restarted) < expected:
            time.sleep(0.01)
        full_s = time.monotonic() - started
        fleet_thread.join()
        time.sleep(1.0)
        clients.stop()
        restored = _RESTORED.search(restarted.log_text())
    finally:
        if clients is not None:
            clients.stop()
        for server in servers:
            server.stop()
        for conn in connections:
            conn.close()
    after = {name: count for (phase, name), count in clients.answers.items() if phase == "after"}
    return {"mode": "warm" if warm else "cold", "stop_s": stop_s, "snapshot_bytes": size, "serving_s": serving_s,
            "full_routes_s": full_s, "restore_s": float(restored["seconds"]) if restored else None,
            "after": after}


def main(argv: list[str] | None = None) -> int:
    parser = cli.parser("warm-restart", __doc__)
    parser.add_argument("--brokers", type=int, default=300, help="brokers registered before the restart")
    parser.add_argument("--topics", type=int, default=1000, help="topics per broker")
    parser.add_argument("--clusters", type=int,
                        help="clusters (brokers of one share its topics; without it: one per broker)")
    parser.add_argument("--register-period", type=float, default=30.0,
                        help="seconds over which the fleet registers again after the restart")
    parser.add_argument("--modes", default="warm,cold",
                        help="comma-separated restarts to measure, in order (warm: routeSnapshotEnable; cold: without)")
    cli.add_out(parser)
    args = parser.parse_args(argv)
    fleet = FleetShape(brokers=args.brokers, slaves_per_master=0, topics_per_broker=args.topics,
                       clusters=args.clusters or args.brokers)
    version = DataVersion(1, int(time.time() * 1000), 0)
    bodies = {cluster: register_body(fleet, cluster, version)
              for cluster in {fleet.broker(i).cluster for i in range(fleet.brokers)}}
    registrations = [register_template(fleet, broker, bodies[broker.cluster]).render(i + 1)
                     for i, broker in enumerate(map(fleet.broker, range(fleet.brokers)))]
    routes = [route_template(fleet, topic).render(i + 1) for i, topic in enumerate(fleet.all_topics())]
    say, results = Printed(), []
    say(f"{fleet.brokers} brokers x {fleet.topics_per_broker} topics in {fleet.clusters} clusters "
        f"({fleet.brokers * fleet.topics_per_broker:,} queue entries); the fleet registers again over "
        f"{args.register_period:g} s after the restart")
    say(f"{'mode':5s} {'stop s':>7s} {'snapshot':>10s} {'serving s':>9s} {'restore s':>9s} {'full s':>7s}  "
        "route answers after the restart")
    for mode in args.modes.split(","):
        result = one_mode(mode == "warm", fleet, registrations, routes, args.register_period)
        results.append(result)
        restore = "-" if result["restore_s"] is None else f"{result['restore_s']:.3f}"
        say(f"{result['mode']:5s} {result['stop_s']:7.2f} {result['snapshot_bytes']:10,d} "
            f"{result['serving_s']:9.2f} {restore:>9s} {result['full_routes_s']:7.2f}  "
            + ", ".join(f"{name} {count:,}" for name, count in sorted(result["after"].items())))
    write_results(cli.out_dir(args, "warm-restart"), "warm-restart", results, say)
    return 0
