"""What a write costs each process of a namesrv with worker processes: the worker that took it,
its siblings, and the supervisor's sequencer, in CPU microseconds per write.

    .venv/bin/python -m bench.worker_write_cost                      # 2 workers, 3 s per workload
    .venv/bin/python -m bench.worker_write_cost --workers 3 --seconds 5

A fresh namesrv (namesrv.launcher, serverWorkerProcesses=N) takes writes on one connection, so
one worker is the origin of all of them: 16 in flight, closed loop, frames rendered in advance
(bench.storm.fleet's broker of 100 topics). The CPU time (user + system, all threads) of every
process over the timed window, divided by the writes answered, gives each one's cost; "sibling
share" is a sibling's cost over the origin's.

* register-same   REGISTER_BROKER with the broker's unchanged body (the 30-second heartbeat);
* register-new    a new DataVersion every time (the body differs: decoded everywhere);
* put-kv          PUT_KV_CONFIG of one of 1000 keys (persisted by the sequencer).
"""
from __future__ import annotations

import argparse
import socket
import sys
import time
from pathlib import Path

import psutil

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.cli_help import HelpFormatter  # noqa: E402
from bench.storm.fleet import FleetShape, register_body, register_template  # noqa: E402
from namesrv.fastpath import split_frames  # noqa: E402
from namesrv.launcher import NamesrvProcess  # noqa: E402
from namesrv.protocol import DataVersion, RemotingCommand, RequestCode, ResponseCode  # noqa: E402
from namesrv.protocol.codes import DEFAULT_MAX_FRAME_LENGTH  # noqa: E402

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


def origin_of(workers: list[psutil.Process], sock: socket.socket) -> psutil.Process:
    port = sock.getsockname()[1]
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


def run(address: str, frames: list[bytes], seconds: float, processes: list[psutil.Process],
        sock: socket.socket) -> tuple[int, float, list[float]]:
    """Closed loop for `seconds`, longer if need be (up to 10 times) until every process's CPU time has
    moved: the kernel counts it in clock ticks (10 ms), and a process that took 3 ms in a short window
    on a busy machine reads 0. (writes answered, seconds timed, CPU seconds of each process meanwhile)."""
    sent = answered = 0
    pending = b""
    for _ in range(IN_FLIGHT):
        sock.sendall(frames[sent % len(frames)])
        sent += 1
    before = [cpu(p) for p in processes]
    started = time.monotonic()
    end, last_end = started + seconds, started + 10 * seconds
    while True:
        now = time.monotonic()
        if now >= end:
            if now >= last_end or all(cpu(p) > b for p, b in zip(processes, before)):
                break
            end = now + 0.05  # look again a little later
        data = pending + sock.recv(1 << 20)
        got, consumed = split_frames(data, DEFAULT_MAX_FRAME_LENGTH)
        pending = data[consumed:]
        for frame in got:
            if RemotingCommand.decode(frame).code != ResponseCode.SUCCESS:
                raise RuntimeError(f"a write failed: {RemotingCommand.decode(frame)}")
        answered += len(got)
        if got:
            sock.sendall(b"".join(frames[(sent + i) % len(frames)] for i in range(len(got))))
            sent += len(got)
    after = [cpu(p) for p in processes]
    timed = time.monotonic() - started
    while answered < sent:  # drain the window
        data = pending + sock.recv(1 << 20)
        got, consumed = split_frames(data, DEFAULT_MAX_FRAME_LENGTH)
        pending = data[consumed:]
        answered += len(got)
    return answered - IN_FLIGHT, timed, [b - a for a, b in zip(before, after)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=HelpFormatter)
    parser.add_argument("--workers", type=int, default=2,
                        help="worker processes of the namesrv (serverWorkerProcesses)")
    parser.add_argument("--seconds", type=float, default=3.0, help="timed seconds per workload")
    parser.add_argument("--workloads", default=",".join(WORKLOADS),
                        help=f"comma-separated workloads to time, in order (of {', '.join(WORKLOADS)})")
    args = parser.parse_args(argv)
    fleet = FleetShape(brokers=1, topics_per_broker=100, queues_per_topic=8, clusters=1, slaves_per_master=0)
    server = NamesrvProcess({"serverWorkerProcesses": str(args.workers), "zmqListenAddress": ""}).start()
    try:
        supervisor = psutil.Process(server.pid)
        workers = supervisor.children()
        while len(workers) < args.workers:  # the supervisor forks them as it boots
            time.sleep(0.05)
            workers = supervisor.children()
        host, port = server.address.rsplit(":", 1)
        sock = socket.create_connection((host, int(port)), timeout=10)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        origin = origin_of(workers, sock)
        siblings = [w for w in workers if w.pid != origin.pid]
        processes = [origin, *siblings, supervisor]
        print(f"{args.workers} workers; per write, CPU microseconds of each process ({args.seconds:g} s per workload, "
              "longer until each process's CPU time moved)")
        print(f"{'workload':15s} {'writes/s':>9s} {'origin':>8s} {'sibling':>8s} {'sequencer':>9s} {'sibling share':>13s}")
        for workload in args.workloads.split(","):
            frames = frames_for(workload, fleet, 512)
            writes, timed, spent = run(server.address, frames, args.seconds, processes, sock)
            per = [s / writes * 1e6 for s in spent]
            sibling = sum(per[1:-1]) / len(siblings)
            print(f"{workload:15s} {writes / timed:9,.0f} {per[0]:8.1f} {sibling:8.1f} {per[-1]:9.1f} "
                  f"{sibling / per[0]:13.2f}")
        sock.close()
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
