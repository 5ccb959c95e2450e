"""What TLS costs on the RocketMQ port, measured against plain connections to the same server in one run.

    .venv/bin/python -m bench.tls                        # 4 ABBA rounds of 3 s legs, then handshakes
    .venv/bin/python -m bench.tls --rounds 6 --workloads route,register-same --handshake-seconds 5

One namesrv in RocketMQ's default permissive mode (a self-signed certificate) serves both columns;
each round runs one leg plain and one over TLS, in ABBA order, with bench.throughput's closed-loop
generator (route: 4 connections x 32 in flight; register-same: 1 x 16), so the ratio TLS/plain is
the price of encryption alone. Then:
* handshakes per second: --handshake-clients processes each open a TLS connection, ask one route
  query and close, back to back, for --handshake-seconds (TLS 1.3, ECDHE P-256 with the server's
  EC key: the full handshake every time, no session resumption); the server's CPU per handshake;
* memory per connection: the server's RSS growth for --idle-connections plain connections, then as
  many TLS ones (each having answered one request), so OpenSSL's per-connection state shows.
"""
from __future__ import annotations

import argparse
import multiprocessing
import socket
import statistics
import sys
import time
from pathlib import Path

import psutil

if __package__ in (None, ""):  # run as a script: make `bench` and `namesrv` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.cli_help import HelpFormatter  # noqa: E402
from bench.storm.fleet import FleetShape  # noqa: E402
from bench.throughput import build_workload, leg_order, register_once, run_leg  # noqa: E402
from namesrv.client.remoting import client_tls_context  # noqa: E402
from namesrv.launcher import NamesrvProcess  # noqa: E402
from namesrv.protocol import FrameDecoder, RemotingCommand  # noqa: E402
from namesrv.protocol.codes import RequestCode, ResponseCode  # noqa: E402


def call_once(sock: socket.socket, code: int, ext: dict[str, str] | None = None, opaque: int = 1) -> RemotingCommand:
    """Send one request on a blocking socket (plain or TLS) and return the first frame back, decoded."""
    sock.sendall(RemotingCommand.request(code, ext, opaque=opaque).encode())
    decoder = FrameDecoder()
    frames: list[bytes] = []
    while not frames:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError("closed by the server")
        frames = decoder.feed(chunk)
    return RemotingCommand.decode(frames[0])


def _query(sock: socket.socket, opaque: int) -> int:
    return call_once(sock, RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "TopicTest0"}, opaque).code


def handshake_loop(address: tuple[str, int], seconds: float, start_at: float, out: multiprocessing.Queue) -> None:
    """One client process: connect, handshake, one query, close; as many times as fit in `seconds`."""
    context = client_tls_context()
    time.sleep(max(0.0, start_at - time.monotonic()))
    end = time.monotonic() + seconds
    done = failed = 0
    while time.monotonic() < end:
        try:
            with context.wrap_socket(socket.create_connection(address, timeout=5), server_hostname=address[0]) as sock:
                done += _query(sock, done + 1) in (ResponseCode.SUCCESS, ResponseCode.TOPIC_NOT_EXIST)
        except OSError:
            failed += 1
    out.put((done, failed))


def handshakes(address: str, pid: int, clients: int, seconds: float) -> tuple[float, float, int]:
    """(handshakes per second, server CPU ms per handshake, failures)."""
    host, port = address.rsplit(":", 1)
    out: multiprocessing.Queue = multiprocessing.Queue()
    start_at = time.monotonic() + 0.5
    procs = [multiprocessing.Process(target=handshake_loop, args=((host, int(port)), seconds, start_at, out),
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
    host, port = address.rsplit(":", 1)
    server = psutil.Process(pid)
    context = client_tls_context() if tls else None
    before = server.memory_info().rss
    socks = []
    try:
        for index in range(count):
            sock = socket.create_connection((host, int(port)), timeout=5)
            if context is not None:
                sock = context.wrap_socket(sock, server_hostname=host)
            _query(sock, index + 1)
            socks.append(sock)
        time.sleep(0.5)
        return (server.memory_info().rss - before) / count
    finally:
        for sock in socks:
            sock.close()
        time.sleep(1.0)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench.tls", description=__doc__.split("\n\n")[0],
                                     formatter_class=HelpFormatter)
    parser.add_argument("--workloads", default="route,register-same",
                        help="comma-separated bench.throughput workloads, each run plain and over TLS")
    parser.add_argument("--rounds", type=int, default=4, help="ABBA rounds per workload (medians over them); 1..20")
    parser.add_argument("--leg-seconds", type=float, default=3.0, help="measured seconds per leg; 0.5..60")
    parser.add_argument("--warmup-seconds", type=float, default=0.5, help="unmeasured seconds at a leg's start")
    parser.add_argument("--handshake-clients", type=int, default=2, help="client processes doing handshakes; 1..8")
    parser.add_argument("--handshake-seconds", type=float, default=4.0,
                        help="seconds of back-to-back handshakes; 0.5..60")
    parser.add_argument("--idle-connections", type=int, default=500,
                        help="connections opened for the memory figure (each kind: plain, then TLS); 1..5000")
    args = parser.parse_args(argv)
    if not 1 <= args.rounds <= 20 or not 0.5 <= args.leg_seconds <= 60 or not 1 <= args.handshake_clients <= 8 \
            or not 0.5 <= args.handshake_seconds <= 60 or not 1 <= args.idle_connections <= 5000:
        parser.error("rounds 1..20, leg seconds 0.5..60, handshake clients 1..8, handshake seconds 0.5..60, "
                     "idle connections 1..5000")
    fleet = FleetShape(brokers=1, topics_per_broker=100, queues_per_topic=8, clusters=1, slaves_per_master=0,
                       serialize="json")
    server = NamesrvProcess({"tlsMode": "permissive"}).start()
    try:
        print(f"namesrv {server.address} (tlsMode=permissive, self-signed certificate), {args.rounds} ABBA rounds "
              f"of {args.leg_seconds} s legs", flush=True)
        registration = None
        for index, name in enumerate(w for w in args.workloads.split(",") if w):
            workload = build_workload(name, fleet)
            previous, registration = registration, register_once(server.address, fleet)
            if previous is not None:
                previous.close()
            legs: dict[str, list] = {"plain": [], "tls": []}
            for round_index in range(args.rounds):
                for column in leg_order(index, round_index):
                    kind = "plain" if column == "ceiling" else "tls"
                    leg = run_leg(server.address, server.pid, workload, 1, args.warmup_seconds, args.leg_seconds,
                                  tls=kind == "tls")
                    legs[kind].append(leg)
                    print(f"  {name:14} {kind:5} {leg.rate:>10,.0f}/s  {leg.per_cpu_second:>10,.0f}/CPU-s  "
                          f"bad answers {leg.bad}", flush=True)
            plain = statistics.median(leg.rate for leg in legs["plain"])
            secure = statistics.median(leg.rate for leg in legs["tls"])
            print(f"{name:14} plain {plain:>10,.0f}/s  tls {secure:>10,.0f}/s  tls/plain {secure / plain:.3f}  "
                  f"(per CPU-s: plain {statistics.median(leg.per_cpu_second for leg in legs['plain']):,.0f}, "
                  f"tls {statistics.median(leg.per_cpu_second for leg in legs['tls']):,.0f})", flush=True)
        if registration is not None:
            registration.close()
        rate, cpu_ms, failed = handshakes(server.address, server.pid, args.handshake_clients, args.handshake_seconds)
        print(f"handshakes     {rate:,.0f}/s with {args.handshake_clients} client processes  server CPU "
              f"{cpu_ms:.2f} ms each  failures {failed}", flush=True)
        plain_rss = rss_per_connection(server.address, server.pid, args.idle_connections, tls=False)
        tls_rss = rss_per_connection(server.address, server.pid, args.idle_connections, tls=True)
        print(f"memory         {plain_rss / 1024:.1f} KiB per plain connection, {tls_rss / 1024:.1f} KiB per TLS "
              f"connection ({args.idle_connections} of each)", flush=True)
    finally:
        server.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
