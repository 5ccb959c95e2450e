"""Closed-loop throughput of namesrv as a fraction of the bare echo ceiling, measured in one run.

    .venv/bin/python -m bench.throughput                       # all workloads, 3 rounds, 3 s legs
    .venv/bin/python -m bench.throughput --workloads route --rounds 5 --leg-seconds 4
    NAMESRV_PURE_PYTHON=1 .venv/bin/python -m bench.throughput # both servers on the pure-Python fast path
    .venv/bin/python -m bench.throughput --namesrv-option serverWorkerProcesses=2

Two servers run side by side for the whole run: bench/ceiling.py (pyzmq STREAM, split frames and
echo them, nothing else) and a fresh namesrv (namesrv.launcher), or existing ones (--ceiling /
--namesrv). For each workload, every round runs one leg on each server and the order flips from
round to round and from workload to workload (ceiling, namesrv, namesrv, ceiling, ... — ABBA, so
drift on the shared 2-core machine, and whatever one leg leaves behind for the next, hits both
alike), each driven by independent load-generator processes (--generators) that keep a fixed
number of requests in flight per connection. The answers per second of each leg, the medians and
their ratio are printed, plus the server's answers per CPU-second (user + system of the server
process and its children; for --ceiling / --namesrv, of the process listening on that address
when it can be found).

The two columns are treated alike, so that the same server in both (an A/A run: --ceiling and
--namesrv pointing at two identical namesrv) gives a ratio of 1 up to noise: both get the route
workload's broker registered before each workload (the ceiling echoes the registration, which is
accepted as its answer), and the load generator does exactly the same work per answer on both.

With --java auto|on the Java NameServer 4.9.8 of ../shared/rocketmq-4.9.8 (bench/storm/java_namesrv.py)
joins as a third column in the same rounds, the order rotated so each column takes each place equally
often, and every workload also prints namesrv ÷ java: figures quoted against Java and the ceiling at once.

Workloads (the issue 7 set):
* route          GET_ROUTEINFO_BY_TOPIC, JSON header (or --serialize rocketmq), 4 connections x 32 in
                 flight, over the 100 topics of one registered broker;
* register-new   REGISTER_BROKER with a 100-topic body, 1 connection x 16 in flight, a new DataVersion
                 in every request (the body differs, so the server decodes every one);
* register-churn the same, and every registration also changes the write perm of two topics (one
                 topic read-only in turn, as a broker changing one topic per DataVersion), so two
                 routes change each time (not in the issue's set: it shows what changed topics cost);
* register-same  the same with an unchanged body (the periodic re-registration).

The generator is built to outrun the servers: every request is rendered in advance (a pool per
connection with distinct opaques, cycled, larger than the in-flight window), answers are only
counted by splitting frames, and each received chunk is refilled with one send. Nothing is
decoded inside the measured window (the client shares the cores with the servers, so checking
answers there would slow whichever column is checked); instead, on both columns, the last answer of
every chunk during the warm-up and every answer still in flight when the window closes (the leg
drains its connections before closing them) are decoded and checked: a response must be SUCCESS,
and on the ceiling column an echoed request counts as a good answer too.
"""
from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import selectors
import socket
import ssl
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import psutil

if __package__ in (None, ""):  # run as a script: make `bench` and `namesrv` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.cli_help import HelpFormatter  # noqa: E402
from bench.measure import tree_cpu_seconds  # noqa: E402
from bench.storm.fleet import FleetShape, register_body, register_template, route_template  # noqa: E402
from bench.storm.java_namesrv import DEFAULT_JAVA_OPTS, JavaNamesrvProcess, java_wanted  # noqa: E402
from namesrv.fastpath import split_frames  # noqa: E402
from namesrv.launcher import NamesrvProcess  # noqa: E402
from namesrv.client.remoting import client_tls_context  # noqa: E402
from namesrv.protocol import DataVersion, RemotingCommand, ResponseCode  # noqa: E402
from namesrv.protocol.codes import DEFAULT_MAX_FRAME_LENGTH  # noqa: E402
from namesrv.errors import ProtocolError  # noqa: E402

WORKLOADS = ("route", "register-new", "register-same", "register-churn")
_RECV_BYTES = 1 << 20
_ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Workload:
    """Per connection, a cycled pool of pre-rendered request frames; `in_flight` kept outstanding."""

    name: str
    pools: tuple[tuple[bytes, ...], ...]
    in_flight: int


@dataclass(frozen=True)
class LegResult:
    answers: int
    seconds: float
    bad: int
    server_cpu_s: float

    @property
    def rate(self) -> float:
        return self.answers / self.seconds

    @property
    def per_cpu_second(self) -> float:
        return self.answers / self.server_cpu_s if self.server_cpu_s > 0 else float("nan")


def build_workload(name: str, fleet: FleetShape) -> Workload:
    broker = fleet.broker(0)
    if name == "route":
        topics = fleet.cluster_topics(broker.cluster)
        return Workload(name, tuple(tuple(route_template(fleet, topics[i % len(topics)]).render(c * 100_000 + i)
                                          for i in range(1024)) for c in range(4)), 32)
    if name in ("register-new", "register-churn"):
        now = int(time.time() * 1000)
        topics = len(fleet.cluster_topics(broker.cluster))
        frames = tuple(register_template(fleet, broker, register_body(
            fleet, broker.cluster, DataVersion(i + 1, now + i),
            read_only=i % topics if name == "register-churn" else None)).render(i + 1) for i in range(256))
        return Workload(name, (frames,), 16)
    if name == "register-same":
        template = register_template(fleet, broker, register_body(fleet, broker.cluster, DataVersion(1, 1)))
        return Workload(name, (tuple(template.render(i + 1) for i in range(256)),), 16)
    raise ValueError(f"unknown workload {name!r} (known: {', '.join(WORKLOADS)})")


def answer_ok(frame: bytes, echo_ok: bool) -> bool:
    """A response must be SUCCESS; an echoed request (the ceiling's answer) is good where `echo_ok`."""
    try:
        command = RemotingCommand.decode(frame)
    except (ProtocolError, ValueError):
        return False
    return command.code == ResponseCode.SUCCESS if command.is_response else echo_ok


def drive(address: tuple[str, int], pools: tuple[tuple[bytes, ...], ...], in_flight: int, start_at: float,
          warmup_s: float, duration_s: float, echo_ok: bool, out: multiprocessing.Queue, tls: bool = False) -> None:
    """One generator process: keep `in_flight` requests outstanding per connection; count answers.

    Answers are checked outside the measured window only (see the module docstring), the same way
    whatever the server: the warm-up checks the last answer of each chunk, and once the window has
    closed every connection is drained of its `in_flight` outstanding answers, all checked.
    """
    selector = selectors.DefaultSelector()
    states = []
    for pool in pools:
        sock = socket.create_connection(address, timeout=5)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if tls:  # any certificate, as RocketMQ clients in test mode (bench/tls.py)
            sock = client_tls_context().wrap_socket(sock, server_hostname=address[0])
        state = [sock, pool, 0, b""]  # socket, frame pool, next index, partial frame
        states.append(state)
        selector.register(sock, selectors.EVENT_READ, state)
    time.sleep(max(0.0, start_at - time.monotonic()))
    for state in states:
        _send_next(state, in_flight)
    window_start = time.monotonic() + warmup_s
    end = window_start + duration_s
    answers = bad = 0
    now = time.monotonic()
    while now < window_start:  # warm-up: not counted, so the last answer of each chunk is checked
        for key, _ in selector.select(0.2):
            frames = _receive(key.data, address)
            if frames:
                _send_next(key.data, len(frames))
                if not answer_ok(frames[-1], echo_ok):
                    bad += 1
        now = time.monotonic()
    while now < end:  # the measured window: split, count, refill; nothing else
        for key, _ in selector.select(0.2):
            frames = _receive(key.data, address)
            if frames:
                _send_next(key.data, len(frames))
                answers += len(frames)
        now = time.monotonic()
    seconds = now - window_start
    bad += _drain(selector, states, in_flight, address, echo_ok)
    selector.close()
    for state in states:
        state[0].close()
    out.put((answers, seconds, bad))


def _receive(state: list, address: tuple[str, int]) -> list[bytes]:
    sock = state[0]
    data = sock.recv(_RECV_BYTES)
    if not data:
        raise ConnectionError(f"{address} closed the connection")
    if isinstance(sock, ssl.SSLSocket):  # decrypted bytes the selector cannot see
        while sock.pending():
            data += sock.recv(_RECV_BYTES)
    if state[3]:
        data = state[3] + data
    frames, consumed = split_frames(data, DEFAULT_MAX_FRAME_LENGTH)
    state[3] = data[consumed:]
    return frames


def _drain(selector: selectors.BaseSelector, states: list[list], in_flight: int, address: tuple[str, int],
           echo_ok: bool, timeout_s: float = 10.0) -> int:
    """Receive (without refilling) the `in_flight` answers still due on every connection; check them all.

    Returns the bad ones, counting an answer that did not come within `timeout_s` as bad. Draining
    also leaves the server idle before the next leg starts, whichever server that leg is on.
    """
    due = {id(state): in_flight for state in states}
    bad = 0
    deadline = time.monotonic() + timeout_s
    while any(due.values()) and time.monotonic() < deadline:
        for key, _ in selector.select(0.2):
            state = key.data
            frames = _receive(state, address)
            due[id(state)] -= len(frames)
            bad += sum(not answer_ok(frame, echo_ok) for frame in frames)
            if due[id(state)] <= 0:
                selector.unregister(state[0])
    return bad + sum(max(0, left) for left in due.values())


def _send_next(state: list, count: int) -> None:
    pool, index = state[1], state[2]
    stop = index + count
    if stop <= len(pool):
        chunk = pool[index:stop]
    else:
        chunk = pool[index:] + pool * ((stop - len(pool)) // len(pool)) + pool[:stop % len(pool)]
    state[2] = stop % len(pool)
    state[0].sendall(b"".join(chunk))


def run_leg(address: str, pid: int | None, workload: Workload, generators: int, warmup_s: float,
            duration_s: float, echo_ok: bool = False, tls: bool = False) -> LegResult:
    host, port = address.rsplit(":", 1)
    out: multiprocessing.Queue = multiprocessing.Queue()
    shares = [workload.pools[g::generators] for g in range(generators)]
    start_at = time.monotonic() + 0.3
    procs = [multiprocessing.Process(target=drive, args=((host, int(port)), share, workload.in_flight, start_at,
                                                          warmup_s, duration_s, echo_ok, out, tls), daemon=True)
             for share in shares if share]
    server = psutil.Process(pid) if pid else None
    for proc in procs:
        proc.start()
    time.sleep(max(0.0, start_at + warmup_s - time.monotonic()))
    # the server's CPU over the measured window only (not the drain), on both columns
    cpu_before = 0.0 if server is None else tree_cpu_seconds(server)
    time.sleep(max(0.0, start_at + warmup_s + duration_s - time.monotonic()))
    cpu_after = 0.0 if server is None else tree_cpu_seconds(server)
    results = [out.get(timeout=duration_s + warmup_s + 40) for _ in procs]
    for proc in procs:
        proc.join(5)
    return LegResult(sum(r[0] for r in results), max(r[1] for r in results), sum(r[2] for r in results),
                     cpu_after - cpu_before)


def listening_pid(address: str) -> int | None:
    """The process listening on HOST:PORT, if this user may see it (for --ceiling / --namesrv)."""
    host, port = address.rsplit(":", 1)
    try:
        for conn in psutil.net_connections(kind="tcp"):
            if (conn.status == psutil.CONN_LISTEN and conn.laddr and conn.laddr.port == int(port)
                    and conn.laddr.ip in (host, "0.0.0.0", "::") and conn.pid):
                return conn.pid
    except (psutil.Error, OSError, ValueError):
        pass
    return None


def register_once(address: str, fleet: FleetShape, *, echo_ok: bool = False) -> socket.socket:
    """Bring the route workload's broker up; it stays registered while the returned connection is open.

    With `echo_ok` (the ceiling column) an echo of the request is accepted as the answer.
    """
    broker = fleet.broker(0)
    frame = register_template(fleet, broker, register_body(fleet, broker.cluster, DataVersion(1, 1))).render(1)
    host, port = address.rsplit(":", 1)
    sock = socket.create_connection((host, int(port)), timeout=5)
    sock.sendall(frame)
    data = b""
    while True:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError("namesrv closed the connection during registration")
        data += chunk
        frames, _ = split_frames(data, DEFAULT_MAX_FRAME_LENGTH)
        if frames:
            if not answer_ok(frames[0], echo_ok):
                raise RuntimeError(f"registration failed: {RemotingCommand.decode(frames[0])}")
            return sock


class CeilingProcess:
    """bench/ceiling.py as a child process on a free port."""

    def __init__(self) -> None:
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, (str(_ROOT), os.environ.get("PYTHONPATH")))))
        self._proc = subprocess.Popen([sys.executable, "-m", "bench.ceiling", "--port", "0"], stdout=subprocess.PIPE,
                                      text=True, cwd=_ROOT, env=env)
        line = self._proc.stdout.readline()
        if not line.startswith("ceiling listening on "):
            self.close()
            raise RuntimeError(f"bench.ceiling did not start: {line!r}")
        self.address = line.split()[-1]
        self.pid = self._proc.pid

    def close(self) -> None:
        self._proc.terminate()
        try:
            self._proc.wait(10)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()


def leg_order(workload_index: int, round_index: int,
              columns: tuple[str, ...] = ("ceiling", "namesrv")) -> tuple[str, ...]:
    """The columns' order in one round: rotated by round and by workload, so every column takes every
    place equally often (two columns: ABBA; three: a Latin square), and a workload's first leg after
    the previous workload favours none."""
    shift = (workload_index + round_index) % len(columns)
    return columns[shift:] + columns[:shift]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench.throughput", description=__doc__.split("\n\n")[0],
                                     formatter_class=HelpFormatter)
    parser.add_argument("--workloads", default=",".join(WORKLOADS),
                        help=f"comma-separated workloads to run, in order (of {', '.join(WORKLOADS)})")
    parser.add_argument("--rounds", type=int, default=3,
                        help="rounds per workload, one leg per server each, in ABBA order (medians over them); 1..20")
    parser.add_argument("--leg-seconds", type=float, default=3.0, help="measured seconds per leg; 0.5..60")
    parser.add_argument("--warmup-seconds", type=float, default=0.5,
                        help="unmeasured seconds at the start of a leg, before the measured ones")
    parser.add_argument("--generators", type=int, default=1, help="load-generator processes per leg; 1..8")
    parser.add_argument("--serialize", choices=("json", "rocketmq"), default="json",
                        help="request header codec of every request sent")
    parser.add_argument("--ceiling", metavar="HOST:PORT",
                        help="use a running bench.ceiling at this address (without it: a fresh one is started)")
    parser.add_argument("--namesrv", metavar="HOST:PORT",
                        help="use a running namesrv at this address (without it: a fresh one is started)")
    parser.add_argument("--namesrv-option", action="append", default=[], metavar="KEY=VALUE",
                        help="configuration override for the namesrv started here (repeatable; without it: "
                             "the server's defaults)")
    parser.add_argument("--java", choices=("off", "auto", "on"), default="off",
                        help="add the Java NameServer 4.9.8 of ../shared as a third column in the same rotation "
                        "(auto: only when Java 17 is present, else say why it was skipped)")
    parser.add_argument("--java-opts", default=DEFAULT_JAVA_OPTS, help="JVM options for the Java NameServer")
    parser.add_argument("--java-warmup-seconds", type=float, default=10.0,
                        help="an unmeasured leg on the Java column before each workload's rounds, so its JIT has "
                        "compiled that workload's path (the other columns need none)")
    parser.add_argument("--json", metavar="FILE",
                        help="also write the results as JSON to this file (without it: printed only)")
    args = parser.parse_args(argv)
    workloads = [w for w in args.workloads.split(",") if w]
    if not 1 <= args.rounds <= 20 or not 0.5 <= args.leg_seconds <= 60 or not 1 <= args.generators <= 8:
        parser.error("rounds must be 1..20, leg seconds 0.5..60, generators 1..8")
    fleet = FleetShape(brokers=1, topics_per_broker=100, queues_per_topic=8, clusters=1, slaves_per_master=0,
                       serialize=args.serialize)
    built = [build_workload(name, fleet) for name in workloads]
    overrides = dict(option.split("=", 1) for option in args.namesrv_option)
    try:
        start_java, java_skipped = java_wanted(args.java)
    except ValueError as exc:
        parser.error(str(exc))
    java = JavaNamesrvProcess(args.java_opts).start() if start_java else None
    if java_skipped:
        print(java_skipped, flush=True)
    ceiling = None if args.ceiling else CeilingProcess()
    namesrv = None if args.namesrv else NamesrvProcess(overrides).start()
    registrations: dict[str, socket.socket] = {}
    try:
        ceiling_address, ceiling_pid = ((args.ceiling, listening_pid(args.ceiling)) if ceiling is None
                                        else (ceiling.address, ceiling.pid))
        namesrv_address, namesrv_pid = ((args.namesrv, listening_pid(args.namesrv)) if namesrv is None
                                        else (namesrv.address, namesrv.pid))
        # Both columns alike: address, pid, and whether an echoed request is a good answer.
        targets = {"ceiling": (ceiling_address, ceiling_pid, True), "namesrv": (namesrv_address, namesrv_pid, False)}
        if java is not None:
            targets["java"] = (java.address, java.pid, False)
        columns = tuple(targets)
        print(f"ceiling {ceiling_address}, namesrv {namesrv_address} ({overrides or 'defaults'}), "
              + (f"java {java.address} ({java.java_opts}), " if java is not None else "")
              + f"fast path {os.environ.get('NAMESRV_PURE_PYTHON') == '1' and 'pure Python' or 'default'}, "
              f"{args.generators} generator process(es), {args.rounds} rotated rounds of {args.leg_seconds} s legs")
        report = {}
        for index, workload in enumerate(built):
            # A registration workload's connection owns the broker when it closes: namesrv then
            # removes the broker, as RocketMQ does. Register it again for the next workload, on
            # both columns (the ceiling may be a namesrv too, as in an A/A run).
            for target, (address, _pid, echo_ok) in targets.items():
                registration, previous = register_once(address, fleet, echo_ok=echo_ok), registrations.get(target)
                registrations[target] = registration
                if previous is not None:
                    previous.close()
            if java is not None and args.java_warmup_seconds > 0:
                run_leg(java.address, java.pid, workload, args.generators, args.java_warmup_seconds, 0.5)
            legs: dict[str, list[LegResult]] = {column: [] for column in columns}
            order: list[str] = []
            for round_index in range(args.rounds):
                for target in leg_order(index, round_index, columns):
                    address, pid, echo_ok = targets[target]
                    leg = run_leg(address, pid, workload, args.generators, args.warmup_seconds, args.leg_seconds,
                                  echo_ok)
                    legs[target].append(leg)
                    order.append(target)
                    print(f"  {workload.name:14} {target:8} {leg.rate:>10,.0f}/s  "
                          f"{leg.per_cpu_second:>10,.0f}/CPU-s  bad answers {leg.bad}", flush=True)
            ceiling_rate = statistics.median(leg.rate for leg in legs["ceiling"])
            namesrv_rate = statistics.median(leg.rate for leg in legs["namesrv"])
            namesrv_cpu = statistics.median(leg.per_cpu_second for leg in legs["namesrv"])
            report[workload.name] = {"ceiling_per_s": ceiling_rate, "namesrv_per_s": namesrv_rate,
                                     "ratio": namesrv_rate / ceiling_rate, "namesrv_per_cpu_s": namesrv_cpu,
                                     "bad_answers": sum(leg.bad for leg in legs["namesrv"]),
                                     "ceiling_per_cpu_s": statistics.median(leg.per_cpu_second
                                                                            for leg in legs["ceiling"]),
                                     "ceiling_bad_answers": sum(leg.bad for leg in legs["ceiling"]),
                                     "order": order,
                                     "legs_per_s": {target: [leg.rate for leg in legs[target]] for target in legs}}
            line = (f"{workload.name:14} ceiling {ceiling_rate:>10,.0f}/s  namesrv {namesrv_rate:>10,.0f}/s  "
                    f"ratio {namesrv_rate / ceiling_rate:.3f}  namesrv {namesrv_cpu:,.0f}/CPU-s")
            if java is not None:
                java_rate = statistics.median(leg.rate for leg in legs["java"])
                java_cpu = statistics.median(leg.per_cpu_second for leg in legs["java"])
                report[workload.name].update(java_per_s=java_rate, java_per_cpu_s=java_cpu,
                                             java_bad_answers=sum(leg.bad for leg in legs["java"]),
                                             namesrv_over_java=namesrv_rate / java_rate)
                line += (f"  java {java_rate:>10,.0f}/s ({java_cpu:,.0f}/CPU-s)  namesrv ÷ java "
                         f"{namesrv_rate / java_rate:.2f}")
            print(line, flush=True)
        if args.json:
            Path(args.json).write_text(json.dumps(report, indent=2))
    finally:
        for registration in registrations.values():
            registration.close()
        if namesrv is not None:
            namesrv.close()
        if ceiling is not None:
            ceiling.close()
        if java is not None:
            java.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
