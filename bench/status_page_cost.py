"""Are route queries served as fast with the status page open and the divergence check running?

    python -m bench status-page-cost --rounds 4 --seconds 3

One namesrv (A) serves the throughput verb's route workload (4 connections x 32 in flight) in legs
of two kinds, in ABBA order (bench/lib/rounds.py), on the same server in the same run:
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

import threading
import time
import urllib.request

from bench.lib import cli
from bench.lib.client import Client
from bench.lib.fleet import FleetShape, register_command, register_body
from bench.lib.output import Printed, write_results
from bench.lib.rounds import alternate, median
from bench.throughput import LegResult, build_workload, run_leg
from namesrv.client import RemotingClient
from namesrv.launcher import NamesrvProcess
from namesrv.protocol import DataVersion, ResponseCode

KINDS = ("quiet", "observed")


def register_fleet(address: str, fleet: FleetShape) -> list[Client]:
    """Every broker of `fleet` registered over a connection of its own (kept open: a closed one
    removes its broker)."""
    held = []
    for index in range(fleet.brokers):
        broker = fleet.broker(index)
        client = Client(address, timeout=30)
        held.append(client)
        answer = client.call(register_command(fleet, broker, register_body(fleet, broker.cluster, DataVersion(1, 1))))
        if answer.code != ResponseCode.SUCCESS:
            raise RuntimeError(f"{address} refused broker {index}: {answer.code} {answer.remark}")
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
    parser = cli.parser("status-page-cost", __doc__)
    parser.add_argument("--rounds", type=int, default=4, help="rounds, one leg of each kind each (ABBA); 1..20")
    cli.add_seconds(parser, 3.0, "measured seconds per leg; 0.5..60")
    parser.add_argument("--warmup-seconds", type=float, default=0.5, help="unmeasured seconds at a leg's start")
    parser.add_argument("--brokers", type=int, default=100, help="brokers of the fleet both servers hold")
    parser.add_argument("--topics", type=int, default=1000, help="topics per cluster")
    parser.add_argument("--clusters", type=int, default=10, help="clusters of the fleet")
    parser.add_argument("--divergence-rate", type=int, default=2000,
                        help="peerDivergenceRoutesPerSecond of A during observed legs")
    parser.add_argument("--observe", choices=("both", "page", "divergence"), default="both",
                        help="what runs during observed legs: the open page, the divergence check, or both")
    cli.add_out(parser)
    args = parser.parse_args(argv)
    if not 1 <= args.rounds <= 20 or not 0.5 <= args.seconds <= 60:
        parser.error("rounds must be 1..20, seconds 0.5..60")
    fleet = FleetShape(brokers=args.brokers, topics_per_broker=args.topics, queues_per_topic=8,
                       clusters=args.clusters, slaves_per_master=0)
    workload = build_workload("route", fleet)
    say = Printed()
    with NamesrvProcess() as peer:
        options = {"peerDivergencePeers": peer.address, "peerDivergenceEnable": False, "peerDivergenceIntervalSeconds": 1,
                   "peerDivergenceRoutesPerSecond": args.divergence_rate}
        with NamesrvProcess(options) as server, RemotingClient(timeout=10) as client:
            held = register_fleet(server.address, fleet) + register_fleet(peer.address, fleet)
            say(f"namesrv {server.address} (pid {server.pid}) and its peer {peer.address}, each holding "
                f"{args.brokers} brokers x {args.topics} topics in {args.clusters} clusters; {args.rounds} "
                f"rounds of {args.seconds:g} s legs")
            observer = Observer(server, client, args.observe != "divergence", args.observe != "page")
            checked = route_queries(peer)

            def leg(kind: str) -> LegResult:
                if kind == "observed":
                    with observer:
                        result = run_leg(server.address, server.pid, workload, 1, args.warmup_seconds, args.seconds)
                else:
                    result = run_leg(server.address, server.pid, workload, 1, args.warmup_seconds, args.seconds)
                say(f"  {kind:9} {result.rate:>10,.0f}/s  {result.cpu_us_per_request:>6.2f} µs/request  "
                    f"bad answers {result.bad}")
                return result

            legs, order = alternate(KINDS, args.rounds, leg)
            checked = route_queries(peer) - checked
            for held_client in held:
                held_client.close()
    rates = {kind: median([result.rate for result in legs[kind]]) for kind in KINDS}
    cpu = {kind: median([result.cpu_us_per_request for result in legs[kind]]) for kind in KINDS}
    say(f"route queries: quiet {rates['quiet']:,.0f}/s ({cpu['quiet']:.2f} µs/request), observed "
        f"{rates['observed']:,.0f}/s ({cpu['observed']:.2f} µs/request): observed / quiet "
        f"{rates['observed'] / rates['quiet']:.3f}")
    observed_seconds = args.rounds * (args.warmup_seconds + args.seconds)
    say(f"the observer: {observer.page_answers} page answers; the divergence check asked the peer {checked:,.0f} "
        f"route queries in about {observed_seconds:.0f} s of observed legs")
    results = [{"kind": kind, "per_s": rates[kind], "server_cpu_us_per_request": cpu[kind],
                "legs_per_s": [result.rate for result in legs[kind]], "order": order} for kind in KINDS]
    write_results(cli.out_dir(args, "status-page-cost"), "status-page-cost", results, say,
                  page_answers=observer.page_answers, divergence_route_queries=checked)
    return 0
