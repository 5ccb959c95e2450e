"""`python -m bench VERB [options]` (or `namesrv-bench VERB`): every benchmark of namesrv, one entry point.

The flags every verb shares mean the same thing everywhere (bench/lib/cli.py): --namesrv HOST:PORT,
--launch, --server-set KEY=VALUE, --java off|auto|on, --out DIR, --seconds S. Every verb writes a
run directory (bench/lib/output.py) that `python -m bench report` reads. `python -m bench VERB -h`
describes a verb's options with their defaults. The heartbeat storm also keeps its own command
line, `python bench/heartbeat_storm.py`.
"""
from __future__ import annotations

import importlib
import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a file (spark-submit bench/__main__.py report ...): make `bench` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

#: verb -> (module with main(argv), what it measures). Add a verb here: a module under bench/ with a main.
VERBS = {
    "knee": ("bench.knee", "the highest load within a p99 SLO, namesrv and Java 4.9.8 searched alternately "
                           "(`make bench`)"),
    "storm": ("bench.heartbeat_storm", "one storm: a fleet registering, heartbeating, querying routes; open or "
                                       "closed loop; route-change subscribers and flapping brokers"),
    "sweep": ("bench.sweep", "server settings on a grid, a fresh server and a knee (or one rate) per point, the best "
                             "point by the same rule as the report"),
    "report": ("bench.spark_report", "the Spark report over run directories of every verb: verdict, knee chart, "
                                     "client beside server latency, tables"),
    "throughput": ("bench.throughput", "closed loop, rotated rounds: namesrv against the echo ceiling (and Java), "
                                       "server CPU µs per request beside every rate"),
    "request-instructions": ("bench.request_instructions", "CPU instructions per request on the reactor's inline "
                                                           "path (callgrind), this checkout against --against TREE"),
    "cache-value": ("bench.cache_value", "each cache of namesrv/caches.py on and off, alternating: what it saves"),
    "worker-writes": ("bench.worker_writes", "with worker processes: CPU per write of the worker that took it, its "
                                             "siblings and the sequencer"),
    "tls": ("bench.tls", "TLS against plain on one server, alternating; handshakes per second; memory per "
                         "connection"),
    "route-push": ("bench.route_push", "route-change push: a broker leaving, to 1,000 subscribers; a 10,000-topic "
                                       "broker leaving, to subscribers of every topic"),
    "warm-restart": ("bench.warm_restart", "a restart under load, warm and cold: time to full routes, "
                                           "TOPIC_NOT_EXIST answers"),
    "scale": ("bench.scale", "the route table at RocketMQ issue #4245's scale: in process, or over TCP (--wire) "
                             "against Java"),
    "soak": ("bench.soak", "steady load for minutes with faults on a schedule: registrations lost, RSS trend"),
    "attacks": ("bench.attacks", "hostile peers, a fresh server each: peak RSS growth, worst stall of a "
                                 "well-behaved client, an answer after"),
    "status-page-cost": ("bench.status_page_cost", "route queries with the status page open and the divergence check "
                                                   "running against quiet legs, alternating on one server"),
    "codec": ("bench.codec_bench", "codec micro-benchmarks: the Cython fast path against the pure-Python twin"),
    "report-scale": ("bench.report_scale", "does the report scale: a synthetic sweep of N runs of S seconds, "
                                           "reported and timed"),
}


def usage() -> str:
    width = max(map(len, VERBS))
    return ("usage: python -m bench VERB [options]   (python -m bench VERB -h: the verb's options)\n\nverbs:\n"
            + "\n".join(f"  {verb:<{width}}  {what}" for verb, (_, what) in VERBS.items()))


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help"):
        print(usage())
        return 0 if argv else 2
    verb, rest = argv[0], argv[1:]
    if verb not in VERBS:
        print(f"python -m bench: unknown verb {verb!r}\n\n{usage()}", file=sys.stderr)
        return 2
    sys.argv = [f"python -m bench {verb}", *rest]  # what -h and error messages call the command
    return importlib.import_module(VERBS[verb][0]).main(rest)


if __name__ == "__main__":
    raise SystemExit(main())
