"""A namesrv restart under load, warm (routeSnapshotEnable) and cold: what route clients see, and how
long until every route is served again.

    .venv/bin/python -m bench.warm_restart                        # 300 brokers x 1,000 topics
    .venv/bin/python -m bench.warm_restart --brokers 30 --topics 100 --register-period 5

A fresh namesrv (namesrv.launcher) takes `brokers` full registrations of `topics` topics each
(bench.storm.fleet; by default every broker is a cluster of its own with its own topics, so
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

import argparse
import json
import re
import socket
import sys
import tempfile
import threading
import time
import urllib.request
from collections import Counter
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.cli_help import HelpFormatter  # noqa: E402
from bench.storm.fleet import FleetShape, register_body, register_template, route_template  # noqa: E402
from namesrv.fastpath import split_frames  # noqa: E402
from namesrv.launcher import NamesrvProcess  # noqa: E402
from namesrv.protocol import DataVersion, RemotingCommand, ResponseCode  # noqa: E402
from namesrv.protocol.codes import DEFAULT_MAX_FRAME_LENGTH  # noqa: E402

ROUTE_CLIENTS = 4
_RESTORED = re.compile(r"restored the routes held .* in (?P<seconds>[\d.]+) s")


class Connection:
    """One blocking remoting connection: `call(frame)` -> the response's code (None: no server)."""

    def __init__(self, address: str) -> None:
        self._address = address
        self._sock: socket.socket | None = None
        self._pending = b""

    def call(self, frame: bytes) -> int | None:
        try:
            if self._sock is None:
                host, port = self._address.rsplit(":", 1)
                self._sock = socket.create_connection((host, int(port)), timeout=10)
                self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                self._pending = b""
            self._sock.sendall(frame)
            while True:
                frames, consumed = split_frames(self._pending, DEFAULT_MAX_FRAME_LENGTH)
                if frames:
                    self._pending = self._pending[consumed:]
                    return RemotingCommand.decode(frames[0]).code
                data = self._sock.recv(1 << 20)
                if not data:
                    raise ConnectionError("closed")
                self._pending += data
        except OSError:
            self.close()
            return None

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None


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
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=HelpFormatter)
    parser.add_argument("--brokers", type=int, default=300, help="brokers registered before the restart")
    parser.add_argument("--topics", type=int, default=1000, help="topics per broker")
    parser.add_argument("--clusters", type=int,
                        help="clusters (brokers of one share its topics; without it: one per broker)")
    parser.add_argument("--register-period", type=float, default=30.0,
                        help="seconds over which the fleet registers again after the restart")
    parser.add_argument("--modes", default="warm,cold",
                        help="comma-separated restarts to measure, in order (warm: routeSnapshotEnable; cold: without)")
    args = parser.parse_args(argv)
    fleet = FleetShape(brokers=args.brokers, slaves_per_master=0, topics_per_broker=args.topics,
                       clusters=args.clusters or args.brokers)
    version = DataVersion(1, int(time.time() * 1000), 0)
    bodies = {cluster: register_body(fleet, cluster, version)
              for cluster in {fleet.broker(i).cluster for i in range(fleet.brokers)}}
    registrations = [register_template(fleet, broker, bodies[broker.cluster]).render(i + 1)
                     for i, broker in enumerate(map(fleet.broker, range(fleet.brokers)))]
    routes = [route_template(fleet, topic).render(i + 1) for i, topic in enumerate(fleet.all_topics())]
    print(f"{fleet.brokers} brokers x {fleet.topics_per_broker} topics in {fleet.clusters} clusters "
          f"({fleet.brokers * fleet.topics_per_broker:,} queue entries); the fleet registers again over "
          f"{args.register_period:g} s after the restart")
    print(f"{'mode':5s} {'stop s':>7s} {'snapshot':>10s} {'serving s':>9s} {'restore s':>9s} {'full s':>7s}  "
          "route answers after the restart")
    for mode in args.modes.split(","):
        result = one_mode(mode == "warm", fleet, registrations, routes, args.register_period)
        restore = "-" if result["restore_s"] is None else f"{result['restore_s']:.3f}"
        print(f"{result['mode']:5s} {result['stop_s']:7.2f} {result['snapshot_bytes']:10,d} "
              f"{result['serving_s']:9.2f} {restore:>9s} {result['full_routes_s']:7.2f}  "
              + ", ".join(f"{name} {count:,}" for name, count in sorted(result["after"].items())))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
