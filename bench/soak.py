"""Soak: a real namesrv under steady load for N minutes, with faults injected on a schedule.

    python -m bench soak --seconds 180

Load: a light stream of route queries and KV reads/writes (--rate requests/s). Every --fault-every
seconds the next fault of the cycle is injected: a SIGKILL of a simulated broker process (a fresh
broker replaces it), a connection flood (open, half-send, drop), garbage frames, and once per run,
a quarter into the run, a crash and restart of the server (SIGKILL, then start on the same port and work
directory). After each fault settles it checks that every broker that stayed up is still routable
(registrations lost: must be 0) and that killed brokers are gone. The server's RSS is sampled
throughout; the report gives a least-squares trend per server life and says whether it grows
(judged on the longest life: the restart comes early so that one is long).
Light on CPU by design: one load thread, a handful of broker processes.
"""
from __future__ import annotations

import argparse
import asyncio
import os
import random
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from collections import Counter
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from bench.lib import cli
from bench.lib.output import Printed, write_results
from namesrv.client import AsyncRemotingClient, RemotingError
from namesrv.launcher import NamesrvProcess
from namesrv.protocol import RemotingCommand, RequestCode, ResponseCode

MAX_SECONDS = 1800
FAULTS = ("broker_kill", "connection_flood", "garbage_frames", "server_restart")
TOPICS_PER_BROKER = 4
#: How long a fault may take to settle before its check counts a broker as lost.
SETTLE_SECONDS = 10.0
#: Longer than the server's heap-trim period (namesrv.controller.HEAP_TRIM_PERIOD_SECONDS = 10 s).
FLOOR_WINDOW_SECONDS = 12.0
#: Simulated brokers re-register this often (ms), so a restarted server learns them again quickly.
BROKER_PERIOD_MS = 1000


# ---- simulated brokers

@dataclass
class Broker:
    name: str
    process: subprocess.Popen[bytes]

    @property
    def topics(self) -> list[str]:
        return [f"{self.name}-T{i}" for i in range(TOPICS_PER_BROKER)]


def start_broker(address: str, serial: int) -> Broker:
    name = f"soak-b{serial}"
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parent.parent))
    process = subprocess.Popen(
        [sys.executable, "-m", "namesrv.client.broker_process", "-n", address, "--cluster", "SoakCluster",
         "--broker-name", name, "--broker-addr", f"127.0.0.1:{41000 + serial}", "--topics", str(TOPICS_PER_BROKER),
         "--topic-prefix", f"{name}-T", "--period-override-ms", str(BROKER_PERIOD_MS), "--timeout", "2"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
    line = process.stdout.readline()  # the "registered" event
    if not line:
        raise RuntimeError(f"broker {name} exited before registering")
    return Broker(name, process)


def stop_broker(broker: Broker, sig: int = signal.SIGTERM) -> None:
    if broker.process.poll() is None:
        broker.process.send_signal(sig)
    try:
        broker.process.wait(10)
    except subprocess.TimeoutExpired:
        broker.process.kill()
        broker.process.wait()
    broker.process.stdout.close()


# ---- load and checks (one event loop in a thread)

@dataclass
class Tally:
    requests: int = 0
    codes: Counter[str] = field(default_factory=Counter)
    errors: Counter[str] = field(default_factory=Counter)


class Load:
    """A steady request stream at `rate` per second, in batches every 100 ms."""

    def __init__(self, address: str, rate: int, topics: list[str]) -> None:
        self.address = address
        self.rate = rate
        self.topics = topics  # replaced by the main thread as brokers come and go
        self.tally = Tally()
        self._stop = threading.Event()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="soak-load", daemon=True)
        self._client = AsyncRemotingClient(timeout=2.0, connect_timeout=1.0)
        self._running: Future[None] | None = None

    def start(self) -> None:
        self._thread.start()
        self._running = asyncio.run_coroutine_threadsafe(self._run(), self._loop)

    def call(self, coroutine, timeout: float = 30.0):
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(timeout)

    def stop(self) -> None:
        self._stop.set()
        if self._running is not None:
            self._running.result(10)  # the stream notices the flag within one batch
        self.call(self._client.close())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    def _requests(self, count: int, rng: random.Random) -> list[RemotingCommand]:
        requests = []
        for i in range(count):
            kind = rng.random()
            if kind < 0.7 and self.topics:
                requests.append(self._client.request(RequestCode.GET_ROUTEINFO_BY_TOPIC,
                                                     {"topic": rng.choice(self.topics)}))
            elif kind < 0.85:
                requests.append(self._client.request(RequestCode.PUT_KV_CONFIG, {
                    "namespace": "SOAK", "key": f"k{rng.randrange(200)}", "value": f"v{rng.randrange(10**6)}"}))
            else:
                requests.append(self._client.request(RequestCode.GET_KV_CONFIG,
                                                     {"namespace": "SOAK", "key": f"k{rng.randrange(200)}"}))
        return requests

    async def _run(self) -> None:
        rng = random.Random(7)
        per_batch = max(1, self.rate // 10)
        next_at = time.monotonic()
        while not self._stop.is_set():
            next_at += 0.1
            try:
                answers = await self._client.invoke_many(self.address, self._requests(per_batch, rng), timeout=2.0)
            except RemotingError as exc:  # could not even connect
                answers = [exc] * per_batch
            tally = self.tally
            tally.requests += len(answers)
            for answer in answers:
                if isinstance(answer, BaseException):
                    tally.errors[type(answer).__name__] += 1
                else:
                    tally.codes[ResponseCode(answer.code).name if answer.code in ResponseCode._value2member_map_
                                else str(answer.code)] += 1
            await asyncio.sleep(max(0.0, next_at - time.monotonic()))

    async def routable(self, topics: list[str]) -> set[str]:
        """The topics among `topics` the server has a route for."""
        requests = [self._client.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": t}) for t in topics]
        try:
            answers = await self._client.invoke_many(self.address, requests, timeout=2.0)
        except RemotingError:
            return set()
        return {topic for topic, answer in zip(topics, answers)
                if not isinstance(answer, BaseException) and answer.code == ResponseCode.SUCCESS}


# ---- faults

def connection_flood(port: int, count: int) -> None:
    """Open `count` connections at once; a third send half a frame, a third RST; then drop them all."""
    half = RemotingCommand.request(RequestCode.GET_BROKER_CLUSTER_INFO).encode()[:9]
    socks = []
    for _ in range(count):
        try:
            socks.append(socket.create_connection(("127.0.0.1", port), timeout=2))
        except OSError:
            break
    for i, sock in enumerate(socks):
        try:
            if i % 3 == 1:
                sock.sendall(half)
            elif i % 3 == 2:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        except OSError:
            pass
        sock.close()


def garbage_frames(port: int, count: int, rng: random.Random) -> None:
    """`count` connections each sending something that is not a valid frame."""
    for i in range(count):
        if i % 3 == 0:
            data = rng.randbytes(rng.randrange(1, 512))
        elif i % 3 == 1:
            header = rng.randbytes(rng.randrange(1, 64))
            data = struct.pack(">ii", 4 + len(header), len(header)) + header
        else:
            data = struct.pack(">i", 0x7FFFFFF0)  # a hostile length
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=2) as sock:
                sock.sendall(data)
                sock.shutdown(socket.SHUT_WR)
                sock.settimeout(2)
                while sock.recv(65536):
                    pass
        except OSError:
            pass


# ---- RSS trend

def slope_mb_per_min(samples: list[tuple[float, float]]) -> float:
    """Least-squares slope of (seconds, MB) samples, in MB per minute."""
    n = len(samples)
    if n < 3:
        return 0.0
    mean_t = sum(t for t, _ in samples) / n
    mean_m = sum(m for _, m in samples) / n
    var = sum((t - mean_t) ** 2 for t, _ in samples)
    if var == 0:
        return 0.0
    return 60 * sum((t - mean_t) * (m - mean_m) for t, m in samples) / var


def floor(samples: list[tuple[float, float]], window: float) -> list[tuple[float, float]]:
    """Each sample replaced by the lowest RSS of the `window` seconds from it on (samples whose window
    runs past the end are dropped): what the server keeps, without the transient peak of a flood
    that the heap trim hands back within HEAP_TRIM_PERIOD_SECONDS."""
    end = samples[-1][0]
    return [(t, min(m for u, m in samples if t <= u <= t + window)) for t, _ in samples if t + window <= end]


def trend(samples: list[tuple[float, float]]) -> dict[str, object]:
    """The RSS trend of one server life, and a verdict (both on the floor of the samples, see `floor`).

    `flat`: over the last third of the life RSS would rise by at most 2 MB or 2 % of its mean.
    `levelling off`: it still rises, but at under half the life's overall rate: the allocator
    approaching its high-water mark (freed connection buffers are kept, not returned to the OS).
    `grows`: it rises at the overall rate or faster, as a leak does.
    """
    kept = floor(samples, FLOOR_WINDOW_SECONDS)
    if len(kept) < 3:
        kept = samples
    last = kept[-max(3, len(kept) // 3):]
    overall, late = slope_mb_per_min(kept), slope_mb_per_min(last)
    span_min = (last[-1][0] - last[0][0]) / 60
    mean = sum(m for _, m in last) / len(last)
    if late * span_min <= max(2.0, 0.02 * mean):
        verdict = "flat"
    elif late < overall / 2:
        verdict = "levelling off"
    else:
        verdict = "grows"
    return {"first_mb": round(kept[0][1], 1), "last_mb": round(kept[-1][1], 1),
            "max_mb": round(max(m for _, m in samples), 1), "seconds": round(samples[-1][0] - samples[0][0]),
            "slope_mb_per_min": round(overall, 2), "last_third_slope_mb_per_min": round(late, 2),
            "verdict": verdict, "samples": [(round(t, 1), round(m, 1)) for t, m in samples]}


# ---- the run

def run(args: argparse.Namespace) -> dict[str, object]:
    rng = random.Random(args.seed)
    started = time.monotonic()
    deadline = started + args.seconds
    namesrv = NamesrvProcess({"zmqListenAddress": ""}).start()
    overrides: dict[str, object] = {"zmqListenAddress": "", "listenPort": namesrv.port}
    address = namesrv.address
    serial = 0
    brokers: list[Broker] = []
    for _ in range(args.brokers):
        brokers.append(start_broker(address, serial))
        serial += 1
    load = Load(address, args.rate, [t for b in brokers for t in b.topics])
    load.start()
    lives: list[list[tuple[float, float]]] = [[]]
    faults: list[dict[str, object]] = []
    restarted = False
    cycle = [kind for kind in FAULTS if kind in args.faults and kind != "server_restart"]
    next_fault = time.monotonic() + args.fault_every
    next_sample = time.monotonic()
    try:
        while time.monotonic() < deadline:
            now = time.monotonic()
            if now >= next_sample:
                lives[-1].append((now - started, psutil.Process(namesrv.pid).memory_info().rss / 2**20))
                next_sample = now + args.sample_every
            if now < next_fault:
                time.sleep(min(next_fault, next_sample) - now)
                continue
            if not restarted and "server_restart" in args.faults and now - started >= args.seconds / 4:
                kind = "server_restart"
            elif not cycle:
                next_fault = deadline
                continue
            else:
                kind = cycle[len([f for f in faults if f["kind"] != "server_restart"]) % len(cycle)]
            killed: list[Broker] = []
            if kind == "broker_kill":
                victim = brokers.pop(rng.randrange(len(brokers)))
                stop_broker(victim, signal.SIGKILL)
                killed.append(victim)
                brokers.append(start_broker(address, serial))
                serial += 1
                load.topics = [t for b in brokers for t in b.topics]
            elif kind == "connection_flood":
                connection_flood(namesrv.port, args.flood)
            elif kind == "garbage_frames":
                garbage_frames(namesrv.port, args.garbage, rng)
            else:
                namesrv.kill()
                namesrv = NamesrvProcess(overrides, workdir=namesrv.workdir).start()
                lives.append([])
                restarted = True
            faults.append(settle(load, kind, now - started, brokers, killed))
            next_fault = time.monotonic() + args.fault_every
    finally:
        load.stop()
        for broker in brokers:
            stop_broker(broker)
        namesrv.close()
    tally = load.tally
    result: dict[str, object] = {
        "seconds": args.seconds, "brokers": args.brokers, "rate": args.rate,
        "requests": tally.requests, "codes": dict(tally.codes), "errors": dict(tally.errors),
        "faults": faults,
        "registrations_lost": sum(f["lost"] for f in faults),
        "killed_still_routable": sum(f["killed_still_routable"] for f in faults),
        "rss": [trend(life) for life in lives if len(life) >= 3],
    }
    longest = max(result["rss"], key=lambda life: life["seconds"], default=None)
    result["rss_verdict"] = longest["verdict"] if longest else "too short to tell"
    return result


def settle(load: Load, kind: str, at: float, brokers: list[Broker], killed: list[Broker]) -> dict[str, object]:
    """Wait until every surviving broker's topics are routable and killed brokers' are not (up to
    SETTLE_SECONDS); what is still wrong then counts as lost (or as a phantom)."""
    topics = [t for b in brokers for t in b.topics]
    dead = [t for b in killed for t in b.topics]
    began = time.monotonic()
    while True:
        present = load.call(load.routable(topics + dead))
        missing = [t for t in topics if t not in present]
        phantoms = [t for t in dead if t in present]
        if (not missing and not phantoms) or time.monotonic() - began > SETTLE_SECONDS:
            break
        time.sleep(0.2)
    lost = {t.rsplit("-T", 1)[0] for t in missing}
    return {"kind": kind, "at_s": round(at, 1), "settled_s": round(time.monotonic() - began, 2),
            "lost": len(lost), "killed_still_routable": len({t.rsplit("-T", 1)[0] for t in phantoms})}


def report(result: dict[str, object]) -> str:
    lines = [f"soak: {result['seconds']:g} s, {result['brokers']} brokers, ~{result['rate']} req/s",
             f"requests {result['requests']}; answers by code {result['codes']}; errors {result['errors'] or 'none'}",
             f"faults {Counter(f['kind'] for f in result['faults'])}; settle times (s) "
             f"{[f['settled_s'] for f in result['faults']]}",
             "registrations lost (surviving brokers not routable after a fault settled): "
             f"{result['registrations_lost']}",
             f"killed brokers still routable: {result['killed_still_routable']}"]
    for life, rss in enumerate(result["rss"]):
        lines.append(f"RSS floor, server life {life + 1}: {rss['first_mb']} -> {rss['last_mb']} MB "
                     f"(peak {rss['max_mb']} during floods), "
                     f"over {rss['seconds']} s; slope {rss['slope_mb_per_min']} MB/min, last third "
                     f"{rss['last_third_slope_mb_per_min']} MB/min: {rss['verdict']}")
    lines.append(f"RSS verdict (longest server life): {result['rss_verdict']}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = cli.parser("soak", __doc__)
    cli.add_seconds(parser, 120.0, f"how long the soak lasts, seconds (at most {MAX_SECONDS})")
    parser.add_argument("--brokers", type=int, default=6, help="simulated broker processes kept alive")
    parser.add_argument("--rate", type=int, default=200, help="requests per second of the load stream")
    parser.add_argument("--fault-every", type=float, default=5.0, help="seconds between faults")
    parser.add_argument("--flood", type=int, default=1000, help="connections per connection flood")
    parser.add_argument("--garbage", type=int, default=100, help="connections per garbage-frame round")
    parser.add_argument("--sample-every", type=float, default=2.0, help="seconds between RSS samples")
    parser.add_argument("--faults", default=",".join(FAULTS),
                        help=f"comma-separated fault kinds to inject (of {', '.join(FAULTS)}; empty: none)")
    parser.add_argument("--seed", type=int, default=1,
                        help="seed of the fault schedule's random choices (which broker is killed, the garbage "
                             "bytes), for a repeatable run")
    cli.add_out(parser)
    args = parser.parse_args(argv)
    if not 0 < args.seconds <= MAX_SECONDS:
        parser.error(f"--seconds must be in (0, {MAX_SECONDS}]")
    if args.brokers < 1:
        parser.error("--brokers must be at least 1")
    args.faults = [kind for kind in args.faults.split(",") if kind]
    if set(args.faults) - set(FAULTS):
        parser.error(f"unknown fault kinds {sorted(set(args.faults) - set(FAULTS))}")
    say = Printed()
    result = run(args)
    for line in report(result).splitlines():
        say(line)
    write_results(cli.out_dir(args, "soak"), "soak", [{k: v for k, v in result.items() if k != "rss"}], say,
                  rss=result["rss"])
    failed = result["registrations_lost"] or result["killed_still_routable"] or result["rss_verdict"] == "grows"
    return 1 if failed else 0
