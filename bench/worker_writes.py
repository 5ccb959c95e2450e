"""What a write costs each process of a namesrv with worker processes: the worker that took it,
its siblings, and the supervisor's sequencer, in CPU microseconds per write.

    python -m bench worker-writes                      # 2 workers, 3 s per workload
    python -m bench worker-writes --workers 3 --seconds 5

A fresh namesrv (namesrv.launcher, serverWorkerProcesses=N) takes writes on one connection, so
one worker is the origin of all of them: 16 in flight, closed loop, frames rendered in advance
(bench/lib/fleet.py's broker of 100 topics). The CPU time (user + system, all threads) of every
process over the timed window, divided by the writes answered, gives each one's cost; "sibling
share" is a sibling's cost over the origin's.

* register-same   REGISTER_BROKER with the broker's unchanged body (the 30-second heartbeat);
* register-new    a new DataVersion every time (the body differs: decoded everywhere);
* put-kv          PUT_KV_CONFIG of one of 1000 keys (persisted by the sequencer).
"""
from __future__ import annotations

import time

import psutil

from bench.lib import cli
from bench.lib.client import Client
from bench.lib.fleet import FleetShape, register_body, register_template
from bench.lib.output import Printed, write_results
from namesrv.launcher import NamesrvProcess
from namesrv.protocol import DataVersion, RemotingCommand, RequestCode, ResponseCode

WORKLOADS = ("register-same", "register-new", "put-kv")
IN_FLIGHT = 16


def frames_for(workload: str, fleet: FleetShape, count: int) -> list[bytes]:
    broker = fleet.broker(0)
    if workload == "register-same":
        template = register_template(fleet, broker, register_body(fleet, broker.cluster, DataVersion(1, 1)))
        return [template.render(i + 1) for i in range(count)]
    if workload == "register-new":
        now = int(time.time() * 1000)
        return [register_template(fleet, broker, register_body(fleet, broker.cluster, DataVersion(i + 2, now + i)))
                .render(i + 1) for i in range(count)]
    if workload == "put-kv":
        return [RemotingCommand.request(RequestCode.PUT_KV_CONFIG, {"namespace": "BENCH", "key": f"k{i % 1000}",
                                                                     "value": f"v{i}"}, opaque=i + 1).encode()
                for i in range(count)]
    raise ValueError(f"unknown workload {workload!r}")


def origin_of(workers: list[psutil.Process], client: Client) -> psutil.Process:
    port = client.sock.getsockname()[1]
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        for worker in workers:
            if any(c.raddr and c.raddr.port == port for c in worker.net_connections("tcp")):
                return worker
        time.sleep(0.01)
    raise RuntimeError("no worker holds the bench's connection")


def cpu(process: psutil.Process) -> float:
    times = process.cpu_times()
    return times.user + times.system


def run(frames: list[bytes], seconds: float, processes: list[psutil.Process],
        client: Client) -> tuple[int, float, list[float]]:
    """Closed loop for `seconds`, longer if need be (up to 10 times) until every process's CPU time has
    moved: the kernel counts it in clock ticks (10 ms), and a process that took 3 ms in a short window
    on a busy machine reads 0. (writes answered, seconds timed, CPU seconds of each process meanwhile)."""
    answered = 0
    client.send(b"".join(frames[i % len(frames)] for i in range(IN_FLIGHT)))
    sent = IN_FLIGHT
    before = [cpu(p) for p in processes]
    started = time.monotonic()
    end, last_end = started + seconds, started + 10 * seconds
    while True:
        now = time.monotonic()
        if now >= end:
            if now >= last_end or all(cpu(p) > b for p, b in zip(processes, before)):
                break
            end = now + 0.05  # look again a little later
        got = client.receive()
        for frame in got:
            if RemotingCommand.decode(frame).code != ResponseCode.SUCCESS:
                raise RuntimeError(f"a write failed: {RemotingCommand.decode(frame)}")
        answered += len(got)
        client.send(b"".join(frames[(sent + i) % len(frames)] for i in range(len(got))))
        sent += len(got)
    after = [cpu(p) for p in processes]
    timed = time.monotonic() - started
    while answered < sent:  # drain the window
        answered += len(client.receive())
    return answered - IN_FLIGHT, timed, [b - a for a, b in zip(before, after)]


def main(argv: list[str] | None = None) -> int:
    parser = cli.parser("worker-writes", __doc__)
    parser.add_argument("--workers", type=int, default=2,
                        help="worker processes of the namesrv (serverWorkerProcesses)")
    cli.add_seconds(parser, 3.0, "timed seconds per workload")
    parser.add_argument("--workloads", default=",".join(WORKLOADS),
                        help=f"comma-separated workloads to time, in order (of {', '.join(WORKLOADS)})")
    cli.add_out(parser)
    args = parser.parse_args(argv)
    fleet = FleetShape(brokers=1, topics_per_broker=100, queues_per_topic=8, clusters=1, slaves_per_master=0)
    say, results = Printed(), []
    with NamesrvProcess({"serverWorkerProcesses": str(args.workers), "zmqListenAddress": ""}) as server:
        supervisor = psutil.Process(server.pid)
        workers = supervisor.children()
        while len(workers) < args.workers:  # the supervisor forks them as it boots
            time.sleep(0.05)
            workers = supervisor.children()
        with Client(server.address) as client:
            origin = origin_of(workers, client)
            siblings = [w for w in workers if w.pid != origin.pid]
            processes = [origin, *siblings, supervisor]
            say(f"{args.workers} workers; per write, CPU microseconds of each process ({args.seconds:g} s per "
                "workload, longer until each process's CPU time moved)")
            say(f"{'workload':15s} {'writes/s':>9s} {'origin':>8s} {'sibling':>8s} {'sequencer':>9s} "
                f"{'sibling share':>13s}")
            for workload in args.workloads.split(","):
                writes, timed, spent = run(frames_for(workload, fleet, 512), args.seconds, processes, client)
                per = [s / writes * 1e6 for s in spent]
                sibling = sum(per[1:-1]) / len(siblings)
                say(f"{workload:15s} {writes / timed:9,.0f} {per[0]:8.1f} {sibling:8.1f} {per[-1]:9.1f} "
                    f"{sibling / per[0]:13.2f}")
                results.append({"workload": workload, "writes_per_s": writes / timed, "origin_cpu_us": per[0],
                                "sibling_cpu_us": sibling, "sequencer_cpu_us": per[-1],
                                "sibling_share": sibling / per[0]})
    write_results(cli.out_dir(args, "worker-writes"), "worker-writes", results, say)
    return 0
