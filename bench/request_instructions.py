"""CPU instructions per request on the reactor's inline path, counted by callgrind: a comparison
between two checkouts that this machine's noise cannot move.

    python -m bench request-instructions                       # this checkout only
    python -m bench request-instructions --against /tmp/base   # and another (ratio new/other)

The TCP benchmark (`python -m bench throughput`) measures what a client sees, but on a shared 2-core host its
legs of one server can differ by a factor of two, so a 5-20% change in per-request cost is below
its noise. Instructions do not depend on what else the machine runs. For each workload, frames
are rendered once here (bench/lib/fleet.py's broker of 100 topics) and replayed by a child Python
of each checkout (its own `namesrv` and built extension) under `valgrind --tool=callgrind`,
through `RequestProcessor(...).inline.answer_all`, one frame per call (what the reactor calls per
received chunk; a closed-loop client's chunk holds one request), or `--chunk N` frames per call (a
client pipelining N requests on one connection, as the throughput verb's do); what set-up made
is frozen out of the collector's walks first, as the server does, and a run of a fifth of the
requests is subtracted, so only the requests are counted. The checkout given with --against needs
its extension built (`python setup.py build_ext --inplace` in it).

With --timed the same replay also runs natively, three times, and the fastest gives microseconds a
request and instructions a microsecond: how fast this machine runs this code. The instructions carry
between machines unchanged; that speed is what moves the rates (README: Figures across machines).

With --server the whole server process is counted instead (`python -m namesrv` of each checkout
under callgrind: the reactor, the executors and libzmq's I/O threads, user space only): the frames
travel over real TCP on 127.0.0.1, --chunk at a time on each of --connections connections, every
answer awaited before the next round; a run with a fifth of the requests is subtracted, so start-up
and first sight of each header are not counted. It answers what the inline replay cannot: where a
request's cost goes between the socket and the inline answer. The bytes each way are printed too.

* route          GET_ROUTEINFO_BY_TOPIC of a registered topic, answered from the route cache;
* register-same  REGISTER_BROKER with the broker's unchanged body (the 30-second heartbeat);
* register-new   a new DataVersion in every request (the body is decoded; no topic changes);
* register-churn the same, and the write perm of two topics changes each time (the throughput
                 verb's register-churn: two routes change per registration);
* heartbeat      BROKER_HEARTBEAT (904) of the registered broker (a 5.x broker's liveness beat);
* data-version   QUERY_DATA_VERSION of the registered broker with its current DataVersion (a 4.x
                 broker asks before it re-registers).
"""
from __future__ import annotations

import os
import pickle
import shutil
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.lib import cli
from bench.lib.client import Client
from bench.lib.fleet import FleetShape, data_version_template, heartbeat_template, register_body, register_template, \
    route_template
from bench.lib.output import Printed, write_results
from namesrv.launcher import NamesrvProcess
from namesrv.protocol import DataVersion

WORKLOADS = ("route", "register-same", "register-new", "register-churn", "heartbeat", "data-version")
#: Registrations replayed before counting starts (and a route query per topic): the route table,
#: the route cache and the memos warm up in both runs.
WARM_UP = 50
_ROOT = Path(__file__).resolve().parent.parent

#: The child: replays the pickled frames of one workload, the first `WARM_UP` + `count` of them.
_REPLAY = """
import gc, inspect, pickle, sys, tempfile, time
from namesrv.channel import Channel
from namesrv.config import NamesrvConfig
from namesrv.kvconfig import KVConfigManager
from namesrv.processor import RequestProcessor
from namesrv.protocol import RemotingCommand
from namesrv.routeinfo import RouteInfoManager
setup, frames = pickle.load(open(sys.argv[1], "rb"))
count = int(sys.argv[2])
chunk = int(sys.argv[3]) if len(sys.argv) > 3 else 1
config = NamesrvConfig(kv_config_path=tempfile.mkdtemp() + "/kv.json")
processor = RequestProcessor(config, RouteInfoManager(config), KVConfigManager(config.kv_config_path))
inline = processor.inline
gc.collect()
gc.freeze()  # as the server does before it serves: collections walk only what requests make
channel = Channel("tcp", b"bench", "127.0.0.1:1")
# the poll round's time, for checkouts whose inline path counts its answers with their latency
arrival = (time.monotonic(),) if "arrived" in inspect.signature(inline.answer_all).parameters else ()
for frame in setup:  # what the reactor leaves to the executors (a route not cached yet) goes the regular way
    replies, commands = inline.answer_all([frame], channel, *arrival)
    for command in commands:
        processor.process(command, channel)
started = time.perf_counter()
if chunk == 1:  # the loop every count before --chunk was measured with
    for frame in frames[:count]:
        if len(inline.answer_all([frame], channel, *arrival)[0]) != 1:
            raise SystemExit("a frame was not answered inline")
for at in range(0, count if chunk > 1 else 0, chunk):
    sent = frames[at:min(at + chunk, count)]
    if len(inline.answer_all(sent, channel, *arrival)[0]) != len(sent):
        raise SystemExit("a frame was not answered inline")
print(time.perf_counter() - started)  # the requests' wall time (--timed runs this child without callgrind)
"""


def workload_frames(name: str, count: int) -> tuple[list[bytes], list[bytes]]:
    """(set-up frames, measured frames), without their length prefix as split_frames yields them."""
    fleet = FleetShape(brokers=1, topics_per_broker=100, queues_per_topic=8, clusters=1, slaves_per_master=0)
    broker = fleet.broker(0)
    first = register_template(fleet, broker, register_body(fleet, broker.cluster, DataVersion(1, 1)))
    setup = [first.render(i + 1)[4:] for i in range(WARM_UP)]
    if name == "route":
        topics = fleet.cluster_topics(broker.cluster)
        setup += [route_template(fleet, topic).render(i + 1)[4:] for i, topic in enumerate(topics)]
        frames = [route_template(fleet, topics[i % len(topics)]).render(i + 1)[4:] for i in range(count)]
    elif name == "register-same":
        frames = [first.render(i + 1)[4:] for i in range(count)]
    elif name == "heartbeat":
        template = heartbeat_template(fleet, broker)
        frames = [template.render(i + 1)[4:] for i in range(count)]
    elif name == "data-version":
        template = data_version_template(fleet, broker, DataVersion(1, 1))
        frames = [template.render(i + 1)[4:] for i in range(count)]
    elif name in ("register-new", "register-churn"):
        now = int(time.time() * 1000)
        topics = len(fleet.cluster_topics(broker.cluster))
        frames = [register_template(fleet, broker, register_body(
            fleet, broker.cluster, DataVersion(i + 2, now + i),
            read_only=i % topics if name == "register-churn" else None)).render(i + 1)[4:] for i in range(count)]
    else:
        raise ValueError(f"unknown workload {name!r}")
    return setup, frames


def _replay(tree: Path, frames_file: Path, count: int, chunk: int, wrapper: tuple[str, ...] = ()
            ) -> subprocess.CompletedProcess[str]:
    """The child of `tree` replaying `count` frames, `chunk` a call, under `wrapper` (callgrind) or natively."""
    env = {**os.environ, "PYTHONPATH": str(tree), "PYTHONHASHSEED": "0"}  # string hashes vary the count otherwise
    result = subprocess.run([*wrapper, sys.executable, "-c", _REPLAY, str(frames_file), str(count), str(chunk)],
                            cwd=tree, env=env, capture_output=True, text=True, timeout=900)
    if result.returncode != 0:
        raise RuntimeError(f"replay in {tree} failed: {result.stderr[-2000:]}")
    return result


def instructions(tree: Path, frames_file: Path, count: int, chunk: int = 1) -> int:
    """Instructions callgrind counts for the child of `tree` replaying `count` frames, `chunk` a call."""
    result = _replay(tree, frames_file, count, chunk, ("valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null"))
    for line in result.stderr.splitlines():
        if "Collected :" in line:
            return int(line.rsplit(":", 1)[1])
    raise RuntimeError(f"no instruction count from callgrind: {result.stderr[-2000:]}")


def replay_seconds(tree: Path, frames_file: Path, count: int, chunk: int = 1) -> float:
    """Wall time of the child of `tree` replaying `count` frames natively (no callgrind), set-up excluded."""
    return float(_replay(tree, frames_file, count, chunk).stdout.split()[-1])


def timed_per_request(tree: Path, frames_file: Path, count: int, chunk: int = 1, runs: int = 3) -> float:
    """Microseconds a request of the replay on this machine, the fastest of `runs` native runs: with the
    instructions per request, how fast this machine runs this code (instructions a microsecond), the
    figure that says why a rate measured elsewhere moved."""
    return min(replay_seconds(tree, frames_file, count, chunk) for _ in range(runs)) / count * 1e6


def per_request(tree: Path, frames_file: Path, count: int, chunk: int = 1) -> float:
    """`count` requests less a fifth of them: start-up, set-up and the first chunk cancel out, and
    the collector's passes land alike in both runs' share (counted from nothing, where a pass
    happened to land moved two trees of the same code apart: see 38f7ec2)."""
    base = count // 5
    return (instructions(tree, frames_file, count, chunk) - instructions(tree, frames_file, base, chunk)) / (count - base)


def _exchange(clients: list[Client], frames: list[bytes], chunk: int) -> tuple[int, int]:
    """Send `frames`, `chunk` per connection a round, each round's answers awaited; (bytes sent, received)."""
    sent = received = 0
    per_round = chunk * len(clients)
    for at in range(0, len(frames), per_round):
        waiting = []
        for index, client in enumerate(clients):
            part = frames[at + index * chunk:at + (index + 1) * chunk]
            if part:
                data = b"".join(struct.pack(">i", len(frame)) + frame for frame in part)
                client.send(data)
                sent += len(data)
                waiting.append((client, len(part)))
        for client, expected in waiting:
            while expected:
                answers = client.receive()
                expected -= len(answers)
                received += sum(4 + len(answer) for answer in answers)
    return sent, received


def server_instructions(tree: Path, setup: list[bytes], frames: list[bytes], chunk: int,
                        connections: int) -> tuple[int, int, int]:
    """(instructions of the whole server of `tree`, bytes sent, received) for `setup` then `frames`."""
    server = NamesrvProcess(source_root=tree, startup_timeout=300, wrapper=(
        "env", "PYTHONHASHSEED=0", "valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null"))
    try:
        server.start()
        clients = [Client(server.address, timeout=600) for _ in range(1 + connections)]
        _exchange(clients[:1], setup, 1)  # the broker's connection stays open: closing it unregisters the broker
        sent, received = _exchange(clients[1:], frames, chunk)
        for client in clients:
            client.close()
        server.stop(timeout=600)  # callgrind writes its count as the server exits
        log = server.log_text()
    finally:
        server.close()
    for line in log.splitlines():
        if "Collected :" in line:
            return int(line.rsplit(":", 1)[1]), sent, received
    raise RuntimeError(f"no instruction count from callgrind: {log[-2000:]}")


def server_per_request(tree: Path, name: str, count: int, chunk: int, connections: int) -> tuple[float, float, float]:
    """(instructions, bytes sent, bytes received) per request of the whole server: `count` requests less `count // 5`."""
    setup, frames = workload_frames(name, count)
    base = count // 5
    first, second = (server_instructions(tree, setup, frames[:n], chunk, connections) for n in (base, count))
    return tuple((after - before) / (count - base) for before, after in zip(first, second))


def main(argv: list[str] | None = None) -> int:
    parser = cli.parser("request-instructions", __doc__)
    parser.add_argument("--against", type=Path, metavar="TREE",
                        help="another checkout (its extension built) to compare with, ratio new/other (without it: "
                             "this checkout only)")
    parser.add_argument("--requests", type=int, default=2000,
                        help="requests per workload, a fifth of them subtracted (fewer than a thousand: where the "
                             "collector's passes land moves the count by several per cent)")
    parser.add_argument("--workloads", default=",".join(WORKLOADS),
                        help=f"comma-separated workloads to count, in order (of {', '.join(WORKLOADS)})")
    parser.add_argument("--chunk", type=int, default=1, choices=range(1, 257), metavar="N",
                        help="frames per answer_all call, 1..256: a client pipelining N requests (default: 1)")
    parser.add_argument("--server", action="store_true",
                        help="count the whole server process over TCP (see above), not the inline replay")
    parser.add_argument("--connections", type=int, default=4, choices=range(1, 65), metavar="N",
                        help="with --server: connections the requests are spread over, 1..64 (default: 4)")
    parser.add_argument("--timed", action="store_true",
                        help="also time each replay natively (the fastest of 3 runs): microseconds and instructions "
                             "per microsecond a request, this machine's speed for this code")
    cli.add_out(parser)
    args = parser.parse_args(argv)
    if args.timed and args.server:
        parser.error("--timed times the inline replay; with --server use `python -m bench throughput` (CPU µs a request)")
    if shutil.which("valgrind") is None:
        parser.error("valgrind is not installed (Debian: apt-get install -y valgrind)")
    trees = [_ROOT] + ([args.against.resolve()] if args.against else [])
    say, results = Printed(with_machine=False), []  # the lead's diffs read this format: unchanged
    if args.server:
        say(f"instructions per request of the whole server (callgrind, user space; {args.chunk} a round on each of "
            f"{args.connections} connections); " + ", ".join(str(tree) for tree in trees))
    else:
        say("instructions per request on the inline path (callgrind"
            + (f", {args.chunk} frames a call" if args.chunk > 1 else "") + "); " + ", ".join(str(tree) for tree in trees))
    with tempfile.TemporaryDirectory() as scratch:
        for name in args.workloads.split(","):
            traffic, timing = {}, {}  # --server: the bytes each way per request; --timed: µs a request
            if args.server:
                measured = [server_per_request(tree, name, args.requests, args.chunk, args.connections)
                            for tree in trees]
                counts = [count for count, _, _ in measured]
                traffic = {"bytes_in": measured[0][1], "bytes_out": measured[0][2]}
            else:
                frames_file = Path(scratch) / f"{name}.pickle"
                frames_file.write_bytes(pickle.dumps(workload_frames(name, args.requests)))
                counts = [per_request(tree, frames_file, args.requests, args.chunk) for tree in trees]
                if args.timed:
                    micros = [timed_per_request(tree, frames_file, args.requests, args.chunk) for tree in trees]
                    timing = {"micros": micros[0], **({"against_micros": micros[1]} if len(micros) == 2 else {})}
            ratio = f"  ratio {counts[0] / counts[1]:.3f}" if len(counts) == 2 else ""
            bytes_each_way = (f"  (bytes a request: {traffic['bytes_in']:,.0f} in, {traffic['bytes_out']:,.0f} out)"
                              if traffic else "")
            speed = ("  " + "  ".join(f"{micro:8.2f} µs ({count / micro:,.0f} a µs)" for count, micro in zip(
                counts, (timing.get("micros"), timing.get("against_micros")))) if timing else "")
            say(f"{name:14s} " + "  ".join(f"{count:10,.0f}" for count in counts) + ratio + bytes_each_way + speed)
            results.append({"workload": name, "instructions": counts[0], **traffic, **timing,
                            **({"against": counts[1], "ratio": counts[0] / counts[1]} if len(counts) == 2 else {})})
    write_results(cli.out_dir(args, "request-instructions"), "request-instructions", results, say,
                  trees=[str(tree) for tree in trees], chunk=args.chunk,
                  **({"server": True, "connections": args.connections} if args.server else {}))
    return 0
