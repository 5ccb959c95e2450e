"""Closed-loop throughput of namesrv beside the bare echo ceiling (and Java), with the server's CPU per request.

    python -m bench throughput                                  # every workload, 3 rounds, 3 s legs
    python -m bench throughput --workloads route --rounds 5 --seconds 4
    NAMESRV_PURE_PYTHON=1 python -m bench throughput            # both servers on the pure-Python fast path
    python -m bench throughput --server-set serverWorkerProcesses=2 --java auto

Two servers run side by side for the whole run: the ceiling (bench/lib/servers.Ceiling: pyzmq
STREAM, split frames and echo them, nothing else) and a fresh namesrv, or existing ones (--ceiling /
--namesrv). For each workload, every round runs one leg on each server, the order rotated from round
to round and from workload to workload (bench/lib/rounds.py: ABBA, so drift on a shared host, and
whatever one leg leaves behind for the next, hits both alike), each driven by independent
load-generator processes (--generators) that keep a fixed number of requests in flight per
connection. Every rate is printed beside the server's CPU microseconds per answered request (user
+ system of the server process and its children over the measured window; for --ceiling /
--namesrv, of the process listening on that port when it can be found) and the share of it spent
in the kernel, and the run starts with the machine: CPU model, Python version and build flags. A
rate moves between machines; CPU per request on a named CPU and Python build explains how much of
that is the machine, and the kernel's share whether it was the system calls or the interpreter.

The two columns are treated alike, so that the same server in both (an A/A run: --ceiling and
--namesrv pointing at two identical namesrv) gives a ratio of 1 up to noise: both get the
workloads' broker registered before each workload (the ceiling echoes the registration, which is
accepted as its answer), and the load generator does exactly the same work per answer on both.

With --java auto|on the Java NameServer 4.9.8 of ../shared/rocketmq-4.9.8 joins as a third column in
the same rounds, the order rotated so each column takes each place equally often, and every workload
also prints namesrv ÷ java: figures quoted against Java and the ceiling at once.

Workloads:
* route          GET_ROUTEINFO_BY_TOPIC, JSON header (or --serialize rocketmq), 4 connections x 32 in
                 flight, over the 100 topics of one registered broker;
* register-new   REGISTER_BROKER with a 100-topic body, 1 connection x 16 in flight, a new DataVersion
                 in every request (the body differs, so the server decodes every one);
* register-churn the same, and every registration also changes the write perm of two topics (one
                 topic read-only in turn, as a broker changing one topic per DataVersion), so two
                 routes change each time;
* register-same  the same with an unchanged body (the periodic re-registration);
* heartbeat      BROKER_HEARTBEAT of the registered broker (a 5.x broker's liveness beat; Java 4.9.8
                 does not know it, so its column sits this one out);
* data-version   QUERY_DATA_VERSION of the registered broker with its current DataVersion (a 4.x
                 broker asks before it re-registers).

The generator is built to outrun the servers: every request is rendered in advance (a pool per
connection with distinct opaques, cycled, larger than the in-flight window), answers are only
counted by splitting frames, and each received chunk is refilled with one send. Nothing is
decoded inside the measured window (the client shares the cores with the servers, so checking
answers there would slow whichever column is checked); instead, on every column, the last answer
of every chunk during the warm-up and every answer still in flight when the window closes (the leg
drains its connections before closing them) are decoded and checked: a response must be SUCCESS,
and on the ceiling column an echoed request counts as a good answer too.
"""
from __future__ import annotations

import contextlib
import multiprocessing
import os
import selectors
import time
from dataclasses import dataclass

import psutil

from bench.lib import cli
from bench.lib.client import Client
from bench.lib.fleet import FleetShape, data_version_template, heartbeat_template, register_body, register_template, \
    route_template
from bench.lib.output import Printed, write_results
from bench.lib.rounds import alternate, median
from bench.lib.servers import Ceiling, JavaNamesrvProcess, listening_pid, tree_cpu_split, java_wanted
from namesrv.errors import ProtocolError
from namesrv.launcher import NamesrvProcess
from namesrv.protocol import DataVersion, RemotingCommand, ResponseCode

WORKLOADS = ("route", "register-new", "register-same", "register-churn", "heartbeat", "data-version")
#: Workloads the Java NameServer 4.9.8 never answers (5.x request codes).
NOT_JAVA = ("heartbeat",)
#: The registered broker's DataVersion (the data-version workload asks about it).
REGISTERED = DataVersion(1, 1)


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
    #: Of `server_cpu_s`, the seconds spent in the kernel (system calls: sockets, ZeroMQ's I/O threads).
    server_system_s: float

    @property
    def rate(self) -> float:
        return self.answers / self.seconds

    @property
    def cpu_us_per_request(self) -> float:
        """The server's CPU microseconds per answered request (NaN when its process is unknown)."""
        return self.server_cpu_s * 1e6 / self.answers if self.server_cpu_s > 0 and self.answers else float("nan")

    @property
    def kernel_share(self) -> float:
        """The share of the server's CPU spent in the kernel (NaN when its process is unknown): what a
        machine's system calls cost moves it, what its interpreter speed costs moves the rest, so a
        rate that moved between machines says which of the two it was."""
        return self.server_system_s / self.server_cpu_s if self.server_cpu_s > 0 else float("nan")


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
        template = register_template(fleet, broker, register_body(fleet, broker.cluster, REGISTERED))
        return Workload(name, (tuple(template.render(i + 1) for i in range(256)),), 16)
    if name in ("heartbeat", "data-version"):
        template = (heartbeat_template(fleet, broker) if name == "heartbeat"
                    else data_version_template(fleet, broker, REGISTERED))
        return Workload(name, tuple(tuple(template.render(c * 100_000 + i) for i in range(256)) for c in range(4)), 32)
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
        client = Client(f"{address[0]}:{address[1]}", timeout=5, tls=tls)  # (TLS: the tls verb)
        state = [client, pool, 0]  # connection, frame pool, next index
        states.append(state)
        selector.register(client.sock, selectors.EVENT_READ, state)
    time.sleep(max(0.0, start_at - time.monotonic()))
    for state in states:
        _send_next(state, in_flight)
    window_start = time.monotonic() + warmup_s
    end = window_start + duration_s
    answers = bad = 0
    now = time.monotonic()
    while now < window_start:  # warm-up: not counted, so the last answer of each chunk is checked
        for key, _ in selector.select(0.2):
            frames = key.data[0].read()
            if frames:
                _send_next(key.data, len(frames))
                if not answer_ok(frames[-1], echo_ok):
                    bad += 1
        now = time.monotonic()
    while now < end:  # the measured window: split, count, refill; nothing else
        for key, _ in selector.select(0.2):
            frames = key.data[0].read()
            if frames:
                _send_next(key.data, len(frames))
                answers += len(frames)
        now = time.monotonic()
    seconds = now - window_start
    bad += _drain(selector, states, in_flight, echo_ok)
    selector.close()
    for state in states:
        state[0].close()
    out.put((answers, seconds, bad))


def _drain(selector: selectors.BaseSelector, states: list[list], in_flight: int, echo_ok: bool,
           timeout_s: float = 10.0) -> int:
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
            frames = state[0].read()
            due[id(state)] -= len(frames)
            bad += sum(not answer_ok(frame, echo_ok) for frame in frames)
            if due[id(state)] <= 0:
                selector.unregister(state[0].sock)
    return bad + sum(max(0, left) for left in due.values())


def _send_next(state: list, count: int) -> None:
    pool, index = state[1], state[2]
    stop = index + count
    if stop <= len(pool):
        chunk = pool[index:stop]
    else:
        chunk = pool[index:] + pool * ((stop - len(pool)) // len(pool)) + pool[:stop % len(pool)]
    state[2] = stop % len(pool)
    state[0].sock.sendall(b"".join(chunk))


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
    cpu_before = (0.0, 0.0) if server is None else tree_cpu_split(server)
    time.sleep(max(0.0, start_at + warmup_s + duration_s - time.monotonic()))
    cpu_after = (0.0, 0.0) if server is None else tree_cpu_split(server)
    results = [out.get(timeout=duration_s + warmup_s + 40) for _ in procs]
    for proc in procs:
        proc.join(5)
    return LegResult(sum(r[0] for r in results), max(r[1] for r in results), sum(r[2] for r in results),
                     sum(cpu_after) - sum(cpu_before), cpu_after[1] - cpu_before[1])


def register_once(address: str, fleet: FleetShape, *, echo_ok: bool = False) -> Client:
    """Bring the workloads' broker up; it stays registered while the returned connection is open.

    With `echo_ok` (the ceiling column) an echo of the request is accepted as the answer.
    """
    broker = fleet.broker(0)
    frame = register_template(fleet, broker, register_body(fleet, broker.cluster, REGISTERED)).render(1)
    client = Client(address, timeout=5)
    frames = (client.send(frame), client.receive())[1]
    if not answer_ok(frames[0], echo_ok):
        client.close()
        raise RuntimeError(f"registration failed: {RemotingCommand.decode(frames[0])}")
    return client


def build_parser():
    parser = cli.parser("throughput", __doc__)
    parser.add_argument("--workloads", default=",".join(WORKLOADS),
                        help=f"comma-separated workloads to run, in order (of {', '.join(WORKLOADS)})")
    parser.add_argument("--rounds", type=int, default=3,
                        help="rounds per workload, one leg per server each, rotated (medians over them); 1..20")
    cli.add_seconds(parser, 3.0, "measured seconds per leg; 0.5..60")
    parser.add_argument("--warmup-seconds", type=float, default=0.5,
                        help="unmeasured seconds at the start of a leg, before the measured ones")
    parser.add_argument("--generators", type=int, default=1, help="load-generator processes per leg; 1..8")
    parser.add_argument("--serialize", choices=("json", "rocketmq"), default="json",
                        help="request header codec of every request sent")
    parser.add_argument("--ceiling", metavar="HOST:PORT",
                        help="use this server as the ceiling column, say a second namesrv for an A/A run (without "
                        "it: a fresh echo ceiling is started)")
    cli.add_namesrv(parser, launch_flag=False)
    cli.add_java(parser)
    parser.add_argument("--java-warmup-seconds", type=float, default=10.0,
                        help="an unmeasured leg on the Java column before each workload's rounds, so its JIT has "
                        "compiled that workload's path (the other columns need none)")
    cli.add_out(parser)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    workloads = [w for w in args.workloads.split(",") if w]
    if not 1 <= args.rounds <= 20 or not 0.5 <= args.seconds <= 60 or not 1 <= args.generators <= 8:
        parser.error("rounds must be 1..20, seconds 0.5..60, generators 1..8")
    fleet = FleetShape(brokers=1, topics_per_broker=100, queues_per_topic=8, clusters=1, slaves_per_master=0,
                       serialize=args.serialize)
    try:
        built = [build_workload(name, fleet) for name in workloads]
        start_java, java_skipped = java_wanted(args.java)
        overrides = cli.parse_overrides(args.server_set)
    except ValueError as exc:
        parser.error(str(exc))
    say = Printed()
    if java_skipped:
        say(java_skipped)
    results: list[dict] = []
    with contextlib.ExitStack() as stack:
        # Every column alike: address, pid, and whether an echoed request is a good answer.
        if args.ceiling:
            targets = {"ceiling": (args.ceiling, listening_pid(int(args.ceiling.rsplit(":", 1)[1])), True)}
        else:
            ceiling = stack.enter_context(Ceiling())
            targets = {"ceiling": (ceiling.address, ceiling.pid, True)}
        if args.namesrv:
            targets["namesrv"] = (args.namesrv, listening_pid(int(args.namesrv.rsplit(":", 1)[1])), False)
        else:
            server = stack.enter_context(NamesrvProcess(overrides))
            targets["namesrv"] = (server.address, server.pid, False)
        if start_java:
            java = stack.enter_context(JavaNamesrvProcess(args.java_opts))
            targets["java"] = (java.address, java.pid, False)
        say(", ".join(f"{name} {address}" for name, (address, _, _) in targets.items())
            + f" ({overrides or 'namesrv defaults'}); fast path "
            + f"{'pure Python' if os.environ.get('NAMESRV_PURE_PYTHON') == '1' else 'default'}, {args.generators} "
            f"generator process(es), {args.rounds} rotated rounds of {args.seconds:g} s legs")
        registrations: dict[str, Client] = {}
        stack.callback(lambda: [client.close() for client in registrations.values()])
        for index, workload in enumerate(built):
            columns = tuple(name for name in targets if not (name == "java" and workload.name in NOT_JAVA))
            if len(columns) < len(targets):
                say(f"  {workload.name}: the Java NameServer 4.9.8 does not answer it; its column sits this one out")
            # A registration's connection owns the broker: when it closes, namesrv removes the broker, as
            # RocketMQ does. Register it again for every workload, on every column (the ceiling may be a
            # namesrv too, as in an A/A run).
            for name, (address, _pid, echo_ok) in targets.items():
                previous, registrations[name] = registrations.get(name), register_once(address, fleet, echo_ok=echo_ok)
                if previous is not None:
                    previous.close()
            if "java" in columns and args.java_warmup_seconds > 0:
                run_leg(targets["java"][0], targets["java"][1], workload, args.generators, args.java_warmup_seconds,
                        0.5)

            def leg(name: str) -> LegResult:
                address, pid, echo_ok = targets[name]
                result = run_leg(address, pid, workload, args.generators, args.warmup_seconds, args.seconds, echo_ok)
                say(f"  {workload.name:14} {name:8} {result.rate:>10,.0f}/s  {result.cpu_us_per_request:>6.2f} "
                    f"µs/request ({result.kernel_share:.0%} kernel)  bad answers {result.bad}")
                return result

            legs, order = alternate(columns, args.rounds, leg, index)
            rates = {name: median([leg.rate for leg in legs[name]]) for name in columns}
            cpu = {name: median([leg.cpu_us_per_request for leg in legs[name]]) for name in columns}
            kernel = {name: median([leg.kernel_share for leg in legs[name]]) for name in columns}
            for name in columns:
                results.append({"workload": workload.name, "column": name, "per_s": rates[name],
                                "server_cpu_us_per_request": cpu[name], "server_kernel_share": kernel[name],
                                "bad_answers": sum(leg.bad for leg in legs[name]),
                                "legs_per_s": [leg.rate for leg in legs[name]],
                                "ratio_to_ceiling": rates[name] / rates["ceiling"], "order": order})
            line = (f"{workload.name:14} " + "  ".join(f"{name} {rates[name]:>10,.0f}/s ({cpu[name]:.2f} µs/req, "
                                                       f"{kernel[name]:.0%} kernel)" for name in columns)
                    + f"  namesrv ÷ ceiling {rates['namesrv'] / rates['ceiling']:.3f}")
            if "java" in columns:
                line += f"  namesrv ÷ java {rates['namesrv'] / rates['java']:.2f}"
            say(line)
    write_results(cli.out_dir(args, "throughput"), "throughput", results, say)
    return 0
