"""Route-change push under load: how fast a broker's departure reaches 1,000 subscribers, and what it costs.

    .venv/bin/python -m bench.route_push                         # both scenarios
    .venv/bin/python -m bench.route_push --subscribers 200 --all-topics 2000

* leave: `subscribers` connections, each subscribed to 4 topics of a broker of 20 topics (a mix over
  them); the broker's connection is closed at t0. Propagation latency is t0 to each subscriber
  receiving the route change (CLOCK_MONOTONIC is one clock for every process here): p50, p99, max.
* all: `subscribers` connections subscribed to every topic; a broker of `all-topics` topics leaves.
  Every subscriber must receive every topic's change with the version after the one it was last
  pushed (none missed); the time until the last subscriber has all of them, the server's RSS growth
  and its CPU seconds for the round are printed.

The subscribers run in GENERATORS processes (selectors over raw sockets, frames decoded by
namesrv.protocol); the server is a fresh namesrv (namesrv.launcher).
"""
from __future__ import annotations

import argparse
import json
import multiprocessing
import selectors
import socket
import sys
import time
import zlib
from pathlib import Path

import psutil

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.cli_help import HelpFormatter  # noqa: E402
from bench.measure import percentile  # noqa: E402
from namesrv.fastpath import split_frames  # noqa: E402
from namesrv.launcher import NamesrvProcess  # noqa: E402
from namesrv.protocol import (DataVersion, RegisterBrokerBody, RemotingCommand, RequestCode,  # noqa: E402
                              ResponseCode, TopicConfig, TopicConfigSerializeWrapper)
from namesrv.protocol.codes import DEFAULT_MAX_FRAME_LENGTH  # noqa: E402

GENERATORS = 2


def connect(address: str) -> socket.socket:
    host, port = address.rsplit(":", 1)
    sock = socket.create_connection((host, int(port)), timeout=30)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def call(sock: socket.socket, command: RemotingCommand) -> RemotingCommand:
    sock.sendall(command.encode())
    data = b""
    while True:
        frames, consumed = split_frames(data, DEFAULT_MAX_FRAME_LENGTH)
        if frames:
            return RemotingCommand.decode(frames[0])
        data += sock.recv(1 << 20)


def register(sock: socket.socket, name: str, topics: list[str]) -> None:
    table = {topic: TopicConfig(topic, 4, 4) for topic in topics}
    body = RegisterBrokerBody(TopicConfigSerializeWrapper(table, DataVersion(1, int(time.time() * 1000), 0))).encode()
    header = {"brokerName": name, "brokerAddr": f"127.0.0.1:{10000 + len(topics)}", "clusterName": "PushBench",
              "brokerId": 0, "haServerAddr": "127.0.0.1:1", "bodyCrc32": zlib.crc32(body) & 0x7FFFFFFF}
    answer = call(sock, RemotingCommand.request(RequestCode.REGISTER_BROKER, header, body))
    if answer.code != ResponseCode.SUCCESS:
        raise RuntimeError(f"registration failed: {answer}")


def run_scenario(server: NamesrvProcess, subscribers: int, topics_of: list[str | None], broker_topics: list[str],
                 expected: int) -> dict[str, object]:
    ctx = multiprocessing.get_context("spawn")  # a forked child would hold the broker's connection open
    ready, results, go = ctx.Queue(), ctx.Queue(), ctx.Event()
    broker = connect(server.address)
    register(broker, "push-victim", broker_topics)
    per = [subscribers // GENERATORS + (1 if i < subscribers % GENERATORS else 0) for i in range(GENERATORS)]
    processes = [ctx.Process(target=_subscribers, args=(server.address, n, topics_of, expected, ready, go,
                                                               results)) for n in per]
    for process in processes:
        process.start()
    for _ in processes:
        ready.get(timeout=120)
    server_process = psutil.Process(server.pid)
    rss_before = server_process.memory_info().rss
    cpu_before = sum(server_process.cpu_times()[:2])
    go.set()
    time.sleep(0.2)
    t0 = time.monotonic()
    broker.close()  # the change: the broker's connection closes
    peak_rss = rss_before
    collected = []
    while len(collected) < len(processes):
        peak_rss = max(peak_rss, server_process.memory_info().rss)
        try:
            collected.append(results.get(timeout=0.01))
        except Exception:  # noqa: BLE001 - queue.Empty: keep sampling
            continue
    cpu = sum(server_process.cpu_times()[:2]) - cpu_before
    for process in processes:
        process.join(10)
    dones = sorted(t - t0 for batch in collected for t in batch[0])
    return {"dones": dones, "missed": sum(batch[1] for batch in collected), "cpu_s": cpu,
            "rss_growth": peak_rss - rss_before}


def _subscribers(address: str, count: int, topics_of: list[str | None], expected: int, ready, go, results) -> None:
    """`count` subscriptions (topics_of[i]: `;`-joined topics, None: all); after `go`, read pushes until
    each has `expected` topic changes; put (the times each had all of them, versions missed) on `results`."""
    selector = selectors.DefaultSelector()
    states = []
    for i in range(count):
        sock = connect(address)
        topics = topics_of[i % len(topics_of)]
        ext = {"all": "true"} if topics is None else {"topics": topics}
        answer = call(sock, RemotingCommand.request(RequestCode.SUBSCRIBE_ROUTE_CHANGES, ext, opaque=1))
        if answer.code != ResponseCode.SUCCESS:
            raise RuntimeError(f"subscription refused: {answer}")
        known = {r["topic"]: r["version"] for r in json.loads(answer.body)["routes"]}
        sock.setblocking(False)
        state = {"sock": sock, "buffer": b"", "known": known, "changed": set(), "done": None, "missed": 0}
        selector.register(sock, selectors.EVENT_READ, state)
        states.append(state)
    ready.put(count)
    go.wait()
    open_ = count
    deadline = time.monotonic() + 120
    while open_ and time.monotonic() < deadline:
        for key, _ in selector.select(1.0):
            state = key.data
            try:
                data = state["sock"].recv(1 << 22)
            except BlockingIOError:
                continue
            now = time.monotonic()
            buffer = state["buffer"] + data
            frames, consumed = split_frames(buffer, DEFAULT_MAX_FRAME_LENGTH)
            state["buffer"] = buffer[consumed:]
            for frame in frames:
                command = RemotingCommand.decode(frame)
                if command.code != RequestCode.ROUTE_CHANGED or command.body is None:
                    continue
                for change in json.loads(command.body)["changes"]:
                    if change["version"] != state["known"].get(change["topic"], 0) + 1:
                        state["missed"] += 1  # a topic not named was at 0 when the subscription began
                    state["known"][change["topic"]] = change["version"]
                    state["changed"].add(change["topic"])
            if state["done"] is None and len(state["changed"]) >= expected:
                state["done"] = now
                selector.unregister(state["sock"])
                open_ -= 1
    results.put(([s["done"] for s in states if s["done"] is not None], sum(s["missed"] for s in states)))
    for state in states:
        state["sock"].close()


def report(name: str, result: dict[str, object], subscribers: int) -> None:
    dones = result["dones"]
    print(f"{name}: {len(dones)} of {subscribers} subscribers had the change; propagation p50 "
          f"{percentile(dones, 50) * 1000:.1f} ms, p99 {percentile(dones, 99) * 1000:.1f} ms, max "
          f"{(dones[-1] if dones else float('nan')) * 1000:.1f} ms; versions missed {result['missed']}; server CPU "
          f"{result['cpu_s']:.2f} s; server RSS growth {result['rss_growth'] / 2**20:.1f} MiB")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=HelpFormatter)
    parser.add_argument("--subscribers", type=int, default=1000,
                        help="subscriber connections waiting for route-change pushes")
    parser.add_argument("--all-topics", type=int, default=10_000,
                        help="topics of the departing broker in the 'all' scenario (every subscriber has them all)")
    parser.add_argument("--scenarios", default="leave,all",
                        help="comma-separated scenarios to run, in order (of leave, all; each on a fresh server)")
    args = parser.parse_args(argv)
    for scenario in args.scenarios.split(","):
        with NamesrvProcess({"zmqListenAddress": "", "maxConnections": args.subscribers + 100}) as server:
            if scenario == "leave":
                topics = [f"Leave{i}" for i in range(20)]
                mix = [";".join(topics[i:i + 4]) for i in range(0, 20, 4)]
                result = run_scenario(server, args.subscribers, mix, topics, 4)
                report("leave (broker of 20 topics, subscribers to 4 each)", result, args.subscribers)
            else:
                topics = [f"All{i}" for i in range(args.all_topics)]
                result = run_scenario(server, args.subscribers, [None], topics, len(topics))
                report(f"all ({len(topics)} topics, subscribers to every topic)", result, args.subscribers)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
