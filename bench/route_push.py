"""Route-change push under load: how fast a broker's departure reaches 1,000 subscribers, and what it costs.

    python -m bench route-push                         # both scenarios
    python -m bench route-push --subscribers 200 --all-topics 2000

* leave: `subscribers` connections, each subscribed to 4 topics of a broker of 20 topics (a mix over
  them); the broker's connection is closed at t0. Propagation latency is t0 to each subscriber
  receiving the route change (CLOCK_MONOTONIC is one clock for every process here): p50, p99, max.
* all: `subscribers` connections subscribed to every topic; a broker of `all-topics` topics leaves.
  Every subscriber must receive every topic's change with the version after the one it was last
  pushed (none missed); the time until the last subscriber has all of them, the server's RSS growth
  and its CPU seconds for the round are printed.

The subscribers run in GENERATORS processes (selectors over bench/lib/client.py's connections);
the server is a fresh namesrv (namesrv.launcher).
"""
from __future__ import annotations

import json
import multiprocessing
import selectors
import time

import psutil

from bench.lib import cli
from bench.lib.client import Client
from bench.lib.output import Printed, write_results
from bench.lib.servers import percentile
from namesrv.fastpath import body_crc32
from namesrv.launcher import NamesrvProcess
from namesrv.protocol import (DataVersion, RegisterBrokerBody, RemotingCommand, RequestCode, ResponseCode,
                              TopicConfig, TopicConfigSerializeWrapper)

GENERATORS = 2


def register(client: Client, name: str, topics: list[str]) -> None:
    table = {topic: TopicConfig(topic, 4, 4) for topic in topics}
    body = RegisterBrokerBody(TopicConfigSerializeWrapper(table, DataVersion(1, int(time.time() * 1000), 0))).encode()
    header = {"brokerName": name, "brokerAddr": f"127.0.0.1:{10000 + len(topics)}", "clusterName": "PushBench",
              "brokerId": 0, "haServerAddr": "127.0.0.1:1", "bodyCrc32": body_crc32(body)}
    answer = client.call(RemotingCommand.request(RequestCode.REGISTER_BROKER, header, body))
    if answer.code != ResponseCode.SUCCESS:
        raise RuntimeError(f"registration failed: {answer}")


def run_scenario(server: NamesrvProcess, subscribers: int, topics_of: list[str | None], broker_topics: list[str],
                 expected: int) -> dict[str, object]:
    ctx = multiprocessing.get_context("spawn")  # a forked child would hold the broker's connection open
    ready, results, go = ctx.Queue(), ctx.Queue(), ctx.Event()
    broker = Client(server.address, timeout=30)
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
        client = Client(address, timeout=30)
        topics = topics_of[i % len(topics_of)]
        ext = {"all": "true"} if topics is None else {"topics": topics}
        answer = client.call(RemotingCommand.request(RequestCode.SUBSCRIBE_ROUTE_CHANGES, ext, opaque=1))
        if answer.code != ResponseCode.SUCCESS:
            raise RuntimeError(f"subscription refused: {answer}")
        known = {r["topic"]: r["version"] for r in json.loads(answer.body)["routes"]}
        client.sock.setblocking(False)
        state = {"client": client, "known": known, "changed": set(), "done": None, "missed": 0}
        selector.register(client.sock, selectors.EVENT_READ, state)
        states.append(state)
    ready.put(count)
    go.wait()
    open_ = count
    deadline = time.monotonic() + 120
    while open_ and time.monotonic() < deadline:
        for key, _ in selector.select(1.0):
            state = key.data
            try:
                frames = state["client"].read()
            except BlockingIOError:
                continue
            now = time.monotonic()
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
                selector.unregister(state["client"].sock)
                open_ -= 1
    results.put(([s["done"] for s in states if s["done"] is not None], sum(s["missed"] for s in states)))
    for state in states:
        state["client"].close()


def report(name: str, result: dict[str, object], subscribers: int) -> str:
    dones = result["dones"]
    return (f"{name}: {len(dones)} of {subscribers} subscribers had the change; propagation p50 "
            f"{percentile(dones, 50) * 1000:.1f} ms, p99 {percentile(dones, 99) * 1000:.1f} ms, max "
            f"{(dones[-1] if dones else float('nan')) * 1000:.1f} ms; versions missed {result['missed']}; server CPU "
            f"{result['cpu_s']:.2f} s; server RSS growth {result['rss_growth'] / 2**20:.1f} MiB")


def main(argv: list[str] | None = None) -> int:
    parser = cli.parser("route-push", __doc__)
    parser.add_argument("--subscribers", type=int, default=1000,
                        help="subscriber connections waiting for route-change pushes")
    parser.add_argument("--all-topics", type=int, default=10_000,
                        help="topics of the departing broker in the 'all' scenario (every subscriber has them all)")
    parser.add_argument("--scenarios", default="leave,all",
                        help="comma-separated scenarios to run, in order (of leave, all; each on a fresh server)")
    cli.add_out(parser)
    args = parser.parse_args(argv)
    say, results = Printed(), []
    for scenario in args.scenarios.split(","):
        with NamesrvProcess({"zmqListenAddress": "", "maxConnections": args.subscribers + 100}) as server:
            if scenario == "leave":
                topics = [f"Leave{i}" for i in range(20)]
                mix = [";".join(topics[i:i + 4]) for i in range(0, 20, 4)]
                result = run_scenario(server, args.subscribers, mix, topics, 4)
                title = "leave (broker of 20 topics, subscribers to 4 each)"
            else:
                topics = [f"All{i}" for i in range(args.all_topics)]
                result = run_scenario(server, args.subscribers, [None], topics, len(topics))
                title = f"all ({len(topics)} topics, subscribers to every topic)"
        say(report(title, result, args.subscribers))
        dones = result["dones"]
        results.append({"scenario": scenario, "subscribers": args.subscribers, "had_the_change": len(dones),
                        "p50_ms": percentile(dones, 50) * 1000, "p99_ms": percentile(dones, 99) * 1000,
                        "max_ms": dones[-1] * 1000 if dones else None, "versions_missed": result["missed"],
                        "server_cpu_s": result["cpu_s"], "server_rss_growth_bytes": result["rss_growth"]})
    write_results(cli.out_dir(args, "route-push"), "route-push", results, say)
    return 0
