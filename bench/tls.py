"""What TLS costs on the RocketMQ port, measured against plain connections to the same server in one run.

    python -m bench tls                        # 4 alternating rounds of 3 s legs, then handshakes
    python -m bench tls --rounds 6 --workloads route,register-same --handshake-seconds 5

One namesrv in RocketMQ's default permissive mode (a self-signed certificate) serves both columns;
each round runs one leg plain and one over TLS, in rotated order (bench/lib/rounds.py), with the
throughput verb's closed-loop generator (route: 4 connections x 32 in flight; register-same: 1 x 16),
so the ratio TLS/plain is the price of encryption alone, beside the server's CPU per request. Then:
* handshakes per second: --handshake-clients processes each open a TLS connection, ask one route
  query and close, back to back, for --handshake-seconds (TLS 1.3, ECDHE P-256 with the server's
  EC key: the full handshake every time, no session resumption); the server's CPU per handshake;
* memory per connection: the server's RSS growth for --idle-connections plain connections, then as
  many TLS ones (each having answered one request), so OpenSSL's per-connection state shows.
"""
from __future__ import annotations

import multiprocessing
import time

import psutil

from bench.lib import cli
from bench.lib.client import Client
from bench.lib.fleet import FleetShape
from bench.lib.output import Printed, write_results
from bench.lib.rounds import alternate, median
from bench.throughput import build_workload, register_once, run_leg
from namesrv.launcher import NamesrvProcess
from namesrv.protocol import RemotingCommand
from namesrv.protocol.codes import RequestCode, ResponseCode


def _query(client: Client, opaque: int) -> int:
    return client.call(RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "TopicTest0"},
                                               opaque=opaque)).code


def handshake_loop(address: str, seconds: float, start_at: float, out: multiprocessing.Queue) -> None:
    """One client process: connect, handshake, one query, close; as many times as fit in `seconds`."""
    time.sleep(max(0.0, start_at - time.monotonic()))
    end = time.monotonic() + seconds
    done = failed = 0
    while time.monotonic() < end:
        try:
            with Client(address, timeout=5, tls=True) as client:
                done += _query(client, done + 1) in (ResponseCode.SUCCESS, ResponseCode.TOPIC_NOT_EXIST)
        except (OSError, ConnectionError):
            failed += 1
    out.put((done, failed))


def handshakes(address: str, pid: int, clients: int, seconds: float) -> tuple[float, float, int]:
    """(handshakes per second, server CPU ms per handshake, failures)."""
    out: multiprocessing.Queue = multiprocessing.Queue()
    start_at = time.monotonic() + 0.5
    procs = [multiprocessing.Process(target=handshake_loop, args=(address, seconds, start_at, out),
                                     daemon=True) for _ in range(clients)]
    server = psutil.Process(pid)
    for proc in procs:
        proc.start()
    time.sleep(max(0.0, start_at - time.monotonic()))
    before = sum(server.cpu_times()[:2])
    results = [out.get(timeout=seconds + 30) for _ in procs]
    cpu = sum(server.cpu_times()[:2]) - before
    for proc in procs:
        proc.join(5)
    done = sum(r[0] for r in results)
    return done / seconds, 1000 * cpu / max(1, done), sum(r[1] for r in results)


def rss_per_connection(address: str, pid: int, count: int, tls: bool) -> float:
    """Server RSS growth per open connection (bytes), each having answered one request."""
    server = psutil.Process(pid)
    before = server.memory_info().rss
    clients = []
    try:
        for index in range(count):
            clients.append(Client(address, timeout=5, tls=tls))
            _query(clients[-1], index + 1)
        time.sleep(0.5)
        return (server.memory_info().rss - before) / count
    finally:
        for client in clients:
            client.close()
        time.sleep(1.0)


def main(argv: list[str] | None = None) -> int:
    parser = cli.parser("tls", __doc__)
    parser.add_argument("--workloads", default="route,register-same",
                        help="comma-separated throughput workloads, each run plain and over TLS")
    parser.add_argument("--rounds", type=int, default=4, help="alternating rounds per workload (medians over them); "
                        "1..20")
    cli.add_seconds(parser, 3.0, "measured seconds per leg; 0.5..60")
    parser.add_argument("--warmup-seconds", type=float, default=0.5, help="unmeasured seconds at a leg's start")
    parser.add_argument("--handshake-clients", type=int, default=2, help="client processes doing handshakes; 1..8")
    parser.add_argument("--handshake-seconds", type=float, default=4.0,
                        help="seconds of back-to-back handshakes; 0.5..60")
    parser.add_argument("--idle-connections", type=int, default=500,
                        help="connections opened for the memory figure (each kind: plain, then TLS); 1..5000")
    cli.add_out(parser)
    args = parser.parse_args(argv)
    if not 1 <= args.rounds <= 20 or not 0.5 <= args.seconds <= 60 or not 1 <= args.handshake_clients <= 8 \
            or not 0.5 <= args.handshake_seconds <= 60 or not 1 <= args.idle_connections <= 5000:
        parser.error("rounds 1..20, seconds 0.5..60, handshake clients 1..8, handshake seconds 0.5..60, "
                     "idle connections 1..5000")
    fleet = FleetShape(brokers=1, topics_per_broker=100, queues_per_topic=8, clusters=1, slaves_per_master=0,
                       serialize="json")
    say, results = Printed(), []
    with NamesrvProcess({"tlsMode": "permissive"}) as server:
        say(f"namesrv {server.address} (tlsMode=permissive, self-signed certificate), {args.rounds} alternating "
            f"rounds of {args.seconds:g} s legs")
        registration = None
        for index, name in enumerate(w for w in args.workloads.split(",") if w):
            workload = build_workload(name, fleet)
            previous, registration = registration, register_once(server.address, fleet)
            if previous is not None:
                previous.close()

            def leg(kind: str):
                result = run_leg(server.address, server.pid, workload, 1, args.warmup_seconds, args.seconds,
                                 tls=kind == "tls")
                say(f"  {name:14} {kind:5} {result.rate:>10,.0f}/s  {result.cpu_us_per_request:>6.2f} µs/request  "
                    f"bad answers {result.bad}")
                return result

            legs, _ = alternate(("plain", "tls"), args.rounds, leg, index)
            rates = {kind: median([leg.rate for leg in legs[kind]]) for kind in legs}
            cpu = {kind: median([leg.cpu_us_per_request for leg in legs[kind]]) for kind in legs}
            results += [{"workload": name, "column": kind, "per_s": rates[kind], "server_cpu_us_per_request": cpu[kind],
                         "bad_answers": sum(leg.bad for leg in legs[kind])} for kind in legs]
            say(f"{name:14} plain {rates['plain']:>10,.0f}/s ({cpu['plain']:.2f} µs/req)  tls {rates['tls']:>10,.0f}/s "
                f"({cpu['tls']:.2f} µs/req)  tls/plain {rates['tls'] / rates['plain']:.3f}")
        if registration is not None:
            registration.close()
        rate, cpu_ms, failed = handshakes(server.address, server.pid, args.handshake_clients, args.handshake_seconds)
        say(f"handshakes     {rate:,.0f}/s with {args.handshake_clients} client processes  server CPU "
            f"{cpu_ms:.2f} ms each  failures {failed}")
        plain_rss = rss_per_connection(server.address, server.pid, args.idle_connections, tls=False)
        tls_rss = rss_per_connection(server.address, server.pid, args.idle_connections, tls=True)
        say(f"memory         {plain_rss / 1024:.1f} KiB per plain connection, {tls_rss / 1024:.1f} KiB per TLS "
            f"connection ({args.idle_connections} of each)")
        results += [{"workload": "handshakes", "column": "tls", "per_s": rate, "server_cpu_ms_per_handshake": cpu_ms,
                     "failures": failed},
                    {"workload": "idle connections", "column": "plain", "rss_bytes_per_connection": plain_rss},
                    {"workload": "idle connections", "column": "tls", "rss_bytes_per_connection": tls_rss}]
    write_results(cli.out_dir(args, "tls"), "tls", results, say)
    return 0
