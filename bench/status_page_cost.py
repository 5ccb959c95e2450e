"""Are route queries served as fast with the status page open and the divergence check running?

    .venv/bin/python -m bench.status_page_cost --rounds 4 --leg-seconds 3

One namesrv (A) serves bench.throughput's route workload (4 connections x 32 in flight) in legs
of two kinds, in ABBA order (bench.throughput.leg_order), on the same server in the same run:
* quiet     nobody looks at the page, the divergence check is paused (peerDivergenceEnable=false);
* observed  a page is open: /status.json and /status/events.json every second (the page polls
            every two), a topic search every 5 s; and the divergence check runs against a peer
            namesrv (B, holding the same fleet) one pass after another, 1 s apart, at
            peerDivergenceRoutesPerSecond (--divergence-rate), switched on through
            UPDATE_NAMESRV_CONFIG (peerDivergenceEnable) before the leg and off after it.
Both servers hold a fleet (--brokers brokers of --topics topics over --clusters clusters), so the
page and the comparison have a real table to walk. Printed: each leg's answers per second and per
CPU-second of A (its children, the divergence passes, included), the medians, observed / quiet,
and what the observer did (page answers, the route queries the check sent the peer).
"""
from __future__ import annotations

import argparse
import json
import socket
import statistics
import sys
import threading
import time
import urllib.request
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.cli_help import HelpFormatter  # noqa: E402
from bench.storm.fleet import FleetShape, register_body, register_template  # noqa: E402
from bench.throughput import build_workload, leg_order, run_leg  # noqa: E402
from namesrv.client import RemotingClient  # noqa: E402
from namesrv.fastpath import split_frames  # noqa: E402
from namesrv.launcher import NamesrvProcess  # noqa: E402
from namesrv.protocol import DataVersion  # noqa: E402
from namesrv.protocol.codes import DEFAULT_MAX_FRAME_LENGTH  # noqa: E402

KINDS = ("quiet", "observed")


def register_fleet(address: str, fleet: FleetShape) -> list[socket.socket]:
    """Every broker of `fleet` registered over a connection of its own (kept open: a closed one
    removes its broker)."""
    host, port = address.rsplit(":", 1)
    held = []
    for index in range(fleet.brokers):
        broker = fleet.broker(index)
        frame = register_template(fleet, broker, register_body(fleet, broker.cluster, DataVersion(1, 1))).render(1)
        sock = socket.create_connection((host, int(port)), timeout=30)
        sock.sendall(frame)
        data = b""
        while not split_frames(data, DEFAULT_MAX_FRAME_LENGTH)[0]:
            chunk = sock.recv(1 << 16)
            if not chunk:
                raise ConnectionError(f"{address} closed the connection of broker {index}")
            data += chunk
        held.append(sock)
    return held


class Observer:
    """The open page and the running divergence check, for the length of one leg."""

    def __init__(self, server: NamesrvProcess, client: RemotingClient, page: bool, divergence: bool) -> None:
        self._server = server
        self._client = client
        self._page = page
        self._divergence = divergence
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.page_answers = 0

    def __enter__(self) -> Observer:
        if self._divergence:
            self._client.update_namesrv_config(self._server.address, {"peerDivergenceEnable": "true"})
        self._stop.clear()
        self._thread = threading.Thread(target=self._poll, daemon=True)
        if self._page:
            self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        if self._page:
            self._thread.join(10)
        if self._divergence:
            self._client.update_namesrv_config(self._server.address, {"peerDivergenceEnable": "false"})
            time.sleep(0.5)  # a pass under way sees the pause at its next page and ends

    def _poll(self) -> None:
        turn = 0
        while not self._stop.wait(1.0):
            paths = ["/status.json", "/status/events.json?after=0"] + (["/status/topics.json?q=1"] if turn % 5 == 0
                                                                      else [])
            for path in paths:
                with urllib.request.urlopen(self._server.http_url + path, timeout=10) as answer:
                    answer.read()
                    self.page_answers += 1
            turn += 1


def route_queries(server: NamesrvProcess) -> float:
    """Route queries `server` answered so far (for the peer: the divergence check's)."""
    with urllib.request.urlopen(server.http_url + "/metrics", timeout=10) as answer:
        lines = answer.read().decode().splitlines()
    return sum(float(line.rsplit(" ", 1)[1]) for line in lines
               if line.startswith("namesrv_requests_total{") and 'request="GET_ROUTEINFO_BY_TOPIC"' in line)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench.status_page_cost", description=__doc__.split("\n\n")[0],
                                     formatter_class=HelpFormatter)
    parser.add_argument("--rounds", type=int, default=4, help="rounds, one leg of each kind each (ABBA); 1..20")
    parser.add_argument("--leg-seconds", type=float, default=3.0, help="measured seconds per leg; 0.5..60")
    parser.add_argument("--warmup-seconds", type=float, default=0.5, help="unmeasured seconds at a leg's start")
    parser.add_argument("--brokers", type=int, default=100, help="brokers of the fleet both servers hold")
    parser.add_argument("--topics", type=int, default=1000, help="topics per cluster")
    parser.add_argument("--clusters", type=int, default=10, help="clusters of the fleet")
    parser.add_argument("--divergence-rate", type=int, default=2000,
                        help="peerDivergenceRoutesPerSecond of A during observed legs")
    parser.add_argument("--observe", choices=("both", "page", "divergence"), default="both",
                        help="what runs during observed legs: the open page, the divergence check, or both")
    args = parser.parse_args(argv)
    if not 1 <= args.rounds <= 20 or not 0.5 <= args.leg_seconds <= 60:
        parser.error("rounds must be 1..20, leg seconds 0.5..60")
    fleet = FleetShape(brokers=args.brokers, topics_per_broker=args.topics, queues_per_topic=8,
                       clusters=args.clusters, slaves_per_master=0)
    workload = build_workload("route", fleet)
    with NamesrvProcess() as peer:
        options = {"peerDivergencePeers": peer.address, "peerDivergenceEnable": False, "peerDivergenceIntervalSeconds": 1,
                   "peerDivergenceRoutesPerSecond": args.divergence_rate}
        with NamesrvProcess(options) as server, RemotingClient(timeout=10) as client:
            held = register_fleet(server.address, fleet) + register_fleet(peer.address, fleet)
            print(f"namesrv {server.address} (pid {server.pid}) and its peer {peer.address}, each holding "
                  f"{args.brokers} brokers x {args.topics} topics in {args.clusters} clusters; {args.rounds} "
                  f"rounds of {args.leg_seconds} s legs", flush=True)
            legs: dict[str, list] = {kind: [] for kind in KINDS}
            observer = Observer(server, client, args.observe != "divergence", args.observe != "page")
            checked = route_queries(peer)
            for round_index in range(args.rounds):
                for kind in leg_order(0, round_index, KINDS):
                    if kind == "observed":
                        with observer:
                            leg = run_leg(server.address, server.pid, workload, 1, args.warmup_seconds,
                                          args.leg_seconds)
                    else:
                        leg = run_leg(server.address, server.pid, workload, 1, args.warmup_seconds, args.leg_seconds)
                    legs[kind].append(leg)
                    print(f"  {kind:9} {leg.rate:>10,.0f}/s  {leg.per_cpu_second:>10,.0f}/CPU-s  bad answers {leg.bad}",
                          flush=True)
            checked = route_queries(peer) - checked
            for sock in held:
                sock.close()
    quiet = statistics.median(leg.rate for leg in legs["quiet"])
    observed = statistics.median(leg.rate for leg in legs["observed"])
    quiet_cpu = statistics.median(leg.per_cpu_second for leg in legs["quiet"])
    observed_cpu = statistics.median(leg.per_cpu_second for leg in legs["observed"])
    print(f"route queries: quiet {quiet:,.0f}/s, observed {observed:,.0f}/s: observed / quiet {observed / quiet:.3f}; "
          f"per CPU-second {quiet_cpu:,.0f} and {observed_cpu:,.0f} ({observed_cpu / quiet_cpu:.3f})")
    observed_seconds = args.rounds * (args.warmup_seconds + args.leg_seconds)
    print(f"the observer: {observer.page_answers} page answers; the divergence check asked the peer {checked:,.0f} "
          f"route queries in about {observed_seconds:.0f} s of observed legs")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
