"""Does the Spark report scale? A synthetic sweep of storm run directories, then the report over it, timed.

    python -m bench report-scale                      # 50 runs x 600 s, local[*]
    python -m bench report-scale --runs 10 --seconds 60 --out /tmp/scale
    python -m bench report-scale --master spark://127.0.0.1:7077

The run directories have the shape bench/lib/output.RunRecorder writes (same parquet schemas,
row order and meta.json keys, a sweep point's meta["sweep"]), with realistic per-second HDR
interval histograms: Poisson request counts per second at the storm fleet's rates
(GET_ROUTEINFO_BY_TOPIC at thousands per second, REGISTER_BROKER, BROKER_HEARTBEAT), log-normal
latencies whose median drifts per second with a rare stall and a slow tail, a per-configuration
speed, send delays of every request sent, a few TOPIC_NOT_EXIST answers and unanswered requests,
and generator and server resource samples every second. Samples are bucketed exactly as
HdrHistogram (1 us .. 1 h, 3 significant digits) buckets them, vectorised with numpy, so a route
interval holds hundreds of non-empty buckets as a real one does.

The root directory also gets totals.json: per run, the answered, requested and error counts per
request kind that were synthesized, to check a report against.

Not written: the hdr/*.hlog interval logs (the report never reads them; writing 100,000s of
encoded histograms would only slow the generator down) and /metrics scrapes (meta.json says no
URL was given, as a storm without --metrics-url does, so the report notes "no server metrics").
"""
from __future__ import annotations

import json
import os
import resource
import shutil
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import psutil
import pyarrow as pa
import pyarrow.parquet as pq

from bench.lib import cli
from bench.lib.hdr import HIGHEST_US, new_histogram
from bench.lib.output import (
    HISTOGRAM_SCHEMA,
    METRICS,
    NO_RESPONSE,
    RESOURCE_SCHEMA,
    RESPONSE_SCHEMA,
    Printed,
    request_name,
    write_results,
)
from namesrv.protocol import RequestCode, ResponseCode

MAX_RUNS = 200
MAX_SECONDS = 3600
#: A run's samples are drawn in memory at once: 20,000/s x 3600 s is ~1 GiB of numpy arrays.
MAX_ROUTE_RATE = 20_000
#: The swept setting and its values (configuration i of a sweep takes value i).
SWEEP_KEY = "defaultThreadPoolNums"
SWEEP_VALUES = ("4", "8", "12", "16", "20", "24", "32", "48", "64", "96")
#: How much slower (latency factor) configuration i is: a sweep whose heatmap has something to show.
CONFIG_SPEED = (1.25, 1.0, 0.92, 0.97, 1.1, 1.15, 1.2, 1.3, 1.4, 1.5)
TOPIC_NOT_EXIST = int(ResponseCode.TOPIC_NOT_EXIST)


@dataclass(frozen=True, slots=True)
class Kind:
    """One request kind of the synthetic storm: its rate and latency distribution."""

    code: int
    rate_per_s: float
    median_us: float
    sigma: float
    error_share: float  # answered with TOPIC_NOT_EXIST (still in the latency histogram, as the storm records it)
    unanswered_share: float  # no response: in responses.parquet (-1) and send_delay only


def kinds(route_rate: float) -> tuple[Kind, ...]:
    return (Kind(int(RequestCode.GET_ROUTEINFO_BY_TOPIC), route_rate, 800.0, 0.45, 0.002, 0.0001),
            Kind(int(RequestCode.REGISTER_BROKER), 20.0, 1500.0, 0.5, 0.0, 0.0001),
            Kind(int(RequestCode.BROKER_HEARTBEAT), 100.0, 900.0, 0.5, 0.0, 0.0001))


class HdrBuckets:
    """HdrHistogram's bucket layout of bench.lib.hdr.new_histogram as arrays: value -> bucket, vectorised."""

    def __init__(self) -> None:
        histogram = new_histogram()
        lows = []
        for index in range(histogram.counts_len):
            low = histogram.get_value_from_index(index)
            if low > HIGHEST_US:
                break
            lows.append(low)
        self.low = np.array(lows, dtype=np.int64)
        self.high = np.array([histogram.get_highest_equivalent_value(int(v)) for v in self.low], dtype=np.int64)
        if not np.all(np.diff(self.low) > 0):
            raise AssertionError("HdrHistogram bucket lows are not increasing")

    def index(self, values_us: np.ndarray) -> np.ndarray:
        """Bucket index of each (integer, 1 .. HIGHEST_US) value."""
        return np.searchsorted(self.low, values_us, side="right") - 1

    def interval_rows(self, intervals: np.ndarray, values_us: np.ndarray,
                      ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(interval, value_lo, value_hi, count) of every non-empty bucket, by interval then value."""
        width = len(self.low)
        keys, counts = np.unique(intervals.astype(np.int64) * width + self.index(values_us), return_counts=True)
        buckets = keys % width
        return keys // width, self.low[buckets], self.high[buckets], counts.astype(np.int64)


@dataclass
class RunTotals:
    """What one synthetic run holds, per request name: for checking the report against."""

    answered: dict[str, int]
    requests: dict[str, int]
    errors: dict[str, int]
    histogram_rows: int


def _strings(value: str, n: int) -> pa.Array:
    return pa.DictionaryArray.from_arrays(pa.array(np.zeros(n, dtype=np.int32)), pa.array([value])).cast(pa.string())


def _lognormal_us(rng: np.random.Generator, n: int, median: np.ndarray | float, sigma: float) -> np.ndarray:
    values = np.rint(median * rng.lognormal(0.0, sigma, n))
    return np.clip(values, 1, HIGHEST_US).astype(np.int64)


def write_run(directory: Path, run_id: str, seconds: int, seed: int, config_index: int, meta: dict,
              buckets: HdrBuckets, route_rate: float) -> RunTotals:
    """One run directory: histograms, responses, resources parquet files and meta.json."""
    rng = np.random.default_rng(seed)
    speed = CONFIG_SPEED[config_index % len(CONFIG_SPEED)]
    drift = rng.lognormal(0.0, 0.08, seconds) * np.where(rng.random(seconds) < 0.01, 4.0, 1.0)  # per-second median
    histogram_parts: dict[tuple[str, int], tuple[np.ndarray, ...]] = {}
    response_parts = []
    totals = RunTotals({}, {}, {}, 0)
    for kind in kinds(route_rate):
        name = request_name(kind.code)
        answered = rng.poisson(kind.rate_per_s, seconds)
        unanswered = rng.binomial(answered, kind.unanswered_share)
        errors = rng.binomial(answered, kind.error_share)
        intervals = np.repeat(np.arange(seconds), answered)
        latency = _lognormal_us(rng, len(intervals), kind.median_us * speed * drift[intervals], kind.sigma)
        tail = rng.random(len(latency)) < 0.005  # a slow tail, up to 30x
        latency[tail] = np.clip(latency[tail] * rng.uniform(3.0, 30.0, int(tail.sum())), 1, HIGHEST_US).astype(np.int64)
        histogram_parts[("latency", kind.code)] = buckets.interval_rows(intervals, latency)
        sent_intervals = np.repeat(np.arange(seconds), answered + unanswered)
        delay = _lognormal_us(rng, len(sent_intervals), 300.0 * drift[sent_intervals], 0.8)
        histogram_parts[("send_delay", kind.code)] = buckets.interval_rows(sent_intervals, delay)
        for response, counts in ((0, answered - errors), (TOPIC_NOT_EXIST, errors), (NO_RESPONSE, unanswered)):
            present = np.flatnonzero(counts)
            response_parts.append((present, np.full(len(present), kind.code), np.full(len(present), response),
                                   counts[present]))
        totals.answered[name] = int(answered.sum())
        totals.requests[name] = int((answered + unanswered).sum())
        totals.errors[name] = int((errors + unanswered).sum())

    directory.mkdir(parents=True)
    totals.histogram_rows = _write_histograms(directory / "histograms.parquet", run_id, histogram_parts)
    _write_responses(directory / "responses.parquet", run_id, response_parts)
    _write_resources(directory / "resources.parquet", run_id, seconds, rng)
    meta = {**meta, "run_id": run_id, "interval_s": 1.0, "files": {
        "histograms": "histograms.parquet", "responses": "responses.parquet", "resources": "resources.parquet",
        "hdr_logs": {metric: f"hdr/{metric}.hlog" for metric in METRICS}}}
    (directory / "meta.json").write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return totals


def _write_histograms(path: Path, run_id: str, parts: dict[tuple[str, int], tuple[np.ndarray, ...]]) -> int:
    """RunRecorder's order: metric (METRICS order), then interval, then request code, then value."""
    chunks = []
    for (metric, code), (intervals, low, high, counts) in parts.items():
        chunks.append((np.full(len(low), METRICS.index(metric)), intervals, np.full(len(low), code), low, high, counts))
    metric_i, interval, code, low, high, count = (np.concatenate(column) for column in zip(*chunks))
    order = np.lexsort((low, code, interval, metric_i))
    metric_i, interval, code, low, high, count = (a[order] for a in (metric_i, interval, code, low, high, count))
    n = len(order)
    names = np.array([request_name(c) for c in np.unique(code)], dtype=object)
    code_slot = np.searchsorted(np.unique(code), code)
    table = pa.Table.from_arrays([
        _strings(run_id, n),
        pa.DictionaryArray.from_arrays(pa.array(metric_i.astype(np.int32)), pa.array(list(METRICS))).cast(pa.string()),
        pa.array(code.astype(np.int32)),
        pa.DictionaryArray.from_arrays(pa.array(code_slot.astype(np.int32)), pa.array(list(names))).cast(pa.string()),
        pa.array(interval.astype(np.float64)), pa.array(np.ones(n)), pa.array(low), pa.array(high), pa.array(count),
    ], schema=HISTOGRAM_SCHEMA)
    pq.write_table(table, path)
    return n


def _write_responses(path: Path, run_id: str, parts: list[tuple[np.ndarray, ...]]) -> None:
    interval, code, response, count = (np.concatenate(column) for column in zip(*parts))
    order = np.lexsort((response, code, interval))
    interval, code, response, count = (a[order] for a in (interval, code, response, count))
    table = pa.Table.from_arrays([
        _strings(run_id, len(order)), pa.array(interval.astype(np.float64)), pa.array(code.astype(np.int32)),
        pa.array([request_name(int(c)) for c in code], pa.string()), pa.array(response.astype(np.int32)),
        pa.array(count.astype(np.int64))], schema=RESPONSE_SCHEMA)
    pq.write_table(table, path)


def _write_resources(path: Path, run_id: str, seconds: int, rng: np.random.Generator) -> None:
    """A psutil sample of the generator and of the server each second (t = 1 .. seconds)."""
    t = np.arange(1, seconds + 1, dtype=np.float64)
    columns: dict[str, list[np.ndarray]] = {name: [] for name in RESOURCE_SCHEMA.names if name != "run_id"}
    for process, pids, cpu, rss, threads in (("generator", 3, 150.0, 180e6, 12), ("server", 1, 85.0, 90e6, 40)):
        columns["t"].append(t)
        columns["process"].append(np.full(seconds, process, dtype=object))
        columns["pids"].append(np.full(seconds, pids, dtype=np.int32))
        columns["cpu_percent"].append(np.clip(rng.normal(cpu, cpu * 0.08, seconds), 0, None))
        columns["rss_bytes"].append((rss + t * 2000 + rng.normal(0, 1e5, seconds)).astype(np.int64))
        columns["threads"].append(np.full(seconds, threads, dtype=np.int32))
        columns["ctx_voluntary"].append(np.cumsum(rng.poisson(3000, seconds)).astype(np.int64))
        columns["ctx_involuntary"].append(np.cumsum(rng.poisson(200, seconds)).astype(np.int64))
    arrays = {name: np.concatenate(parts) for name, parts in columns.items()}
    order = np.lexsort((arrays["process"].astype(str), arrays["t"]))  # RunRecorder: sampling order, t by t
    arrays = {name: a[order] for name, a in arrays.items()}
    arrays["run_id"] = np.full(len(order), run_id, dtype=object)
    pq.write_table(pa.Table.from_pydict({name: arrays[name] for name in RESOURCE_SCHEMA.names},
                                        schema=RESOURCE_SCHEMA), path)


def _meta(seconds: int, sweep_dir: Path, point: dict[str, str], index: int, configs: int, round_: int,
          repeat: int, started: float, route_rate: float) -> dict:
    """A sweep point's meta.json (the storm's keys; the sweep's extra_meta)."""
    rates = {request_name(k.code): k.rate_per_s for k in kinds(route_rate)}
    config = {"serverSelectorThreads": "1", "serverWorkerThreads": "8", "defaultThreadPoolNums": "16",
              "clientRequestThreadPoolNums": "8", **point}
    return {
        "tool": "bench/heartbeat_storm.py (synthesized by python -m bench report-scale)",
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%S.000+00:00", time.gmtime(started)), "start_epoch_s": started,
        "mode": "open", "duration_s": seconds, "warmup_s": 10, "drain_s": 3,
        "load": {"workers": 2, "connections_per_worker": 4, "in_flight_per_connection": None, "rates_per_s": rates,
                 "max_requests": 20_000_000, "seed": 1, "latency_from": "intended send time",
                 "bring_up_responses": {"SUCCESS": 200}, "workers_done": []},
        "fleet": {"brokers": 200, "route_clients": 10_000, "rates_per_s": rates},
        "server": {"address": "127.0.0.1:9876", "pid": None, "cmdline": [], "implementation": "namesrv",
                   "namesrv_version": "0.1.0", "version_ordinal": None, "version": "V5_3_3", "config": config,
                   "thread_config": {k: config[k] for k in ("serverSelectorThreads", "serverWorkerThreads",
                                                            "defaultThreadPoolNums", "clientRequestThreadPoolNums")},
                   "probe_problem": None},
        "host": {"hostname": "synthetic", "cpu_count": os.cpu_count(), "loadavg_before": [1.0, 1.0, 1.0],
                 "loadavg_after": [1.5, 1.2, 1.1]},
        "generator": {"synthetic": True},
        "summary": [], "propagation": None,
        "server_metrics": {"url": None, "metrics-start.prom": None, "metrics-end.prom": None},
        "sweep": {"dir": str(sweep_dir), "keys": [SWEEP_KEY], "grid": {SWEEP_KEY: list(SWEEP_VALUES[:configs])},
                  "point": point, "index": index, "points": configs, "round": round_, "repeat": repeat},
    }


def synthesize(root: Path, runs: int, seconds: int, configs: int, route_rate: float = 2000.0,
               seed: int = 1) -> tuple[list[Path], dict[str, RunTotals]]:
    """`runs` run directories under root/sweep (configurations round-robin, round after round, as a sweep)."""
    check_size(runs, seconds, configs, route_rate)
    sweep_dir = root / "sweep"
    buckets = HdrBuckets()
    repeat = -(-runs // configs)
    directories, totals = [], {}
    for number in range(runs):
        round_, index = divmod(number, configs)
        point = {SWEEP_KEY: SWEEP_VALUES[index]}
        run_id = f"p{index:02d}-dtpn{SWEEP_VALUES[index]}" + (f"-r{round_ + 1}" if repeat > 1 else "")
        meta = _meta(seconds, sweep_dir, point, index, configs, round_ + 1, repeat,
                     1_700_000_000.0 + number * (seconds + 20), route_rate)
        totals[run_id] = write_run(sweep_dir / run_id, run_id, seconds, seed * 1_000_003 + number, index, meta,
                                   buckets, route_rate)
        directories.append(sweep_dir / run_id)
    return directories, totals


def check_size(runs: int, seconds: int, configs: int, route_rate: float = 2000.0) -> None:
    if not 1 <= runs <= MAX_RUNS:
        raise ValueError(f"--runs {runs}: must be 1..{MAX_RUNS} (a real sweep holds at most 64 points x 10 repeats, "
                         "and the inputs grow linearly)")
    if not 1 <= seconds <= MAX_SECONDS:
        raise ValueError(f"--seconds {seconds}: must be 1..{MAX_SECONDS} (one hour of measured time per run)")
    if not 1 <= configs <= min(runs, len(SWEEP_VALUES)):
        raise ValueError(f"--configs {configs}: must be 1..{min(runs, len(SWEEP_VALUES))} (and at most --runs)")
    if not 1 <= route_rate <= MAX_ROUTE_RATE:
        raise ValueError(f"--route-rate {route_rate:g}: must be 1..{MAX_ROUTE_RATE:,} per second")


class PeakRss:
    """Samples this process's RSS and its children's (the Spark driver JVM) every 0.2 s."""

    def __init__(self) -> None:
        self.python = 0
        self.jvm = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def __enter__(self) -> PeakRss:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _sample(self) -> None:
        me = psutil.Process()
        while not self._stop.wait(0.2):
            try:
                self.python = max(self.python, me.memory_info().rss)
                self.jvm = max(self.jvm, sum(child.memory_info().rss for child in me.children(recursive=True)))
            except psutil.Error:
                pass


def directory_bytes(paths: list[Path]) -> int:
    return sum(f.stat().st_size for path in paths for f in path.rglob("*") if f.is_file())


def build_parser():
    parser = cli.parser("report-scale", __doc__)
    parser.add_argument("--runs", type=int, default=50, help=f"run directories to synthesize (1..{MAX_RUNS})")
    cli.add_seconds(parser, 600, f"measured seconds of each run, one interval each (1..{MAX_SECONDS})")
    parser.add_argument("--configs", type=int, default=5,
                        help=f"sweep configurations ({SWEEP_KEY} values); runs go round-robin over them, so "
                        "--runs 50 --configs 5 is 5 configurations x 10 repeats")
    parser.add_argument("--route-rate", type=float, default=2000.0,
                        help=f"GET_ROUTEINFO_BY_TOPIC requests per second, 1..{MAX_ROUTE_RATE} (REGISTER_BROKER 20/s and "
                        "BROKER_HEARTBEAT 100/s are fixed)")
    parser.add_argument("--seed", type=int, default=1, help="random seed of the synthetic latencies")
    parser.add_argument("--master", help="Spark master URL for the report (default: local[*])")
    parser.add_argument("--out", type=Path,
                        help="a new or empty directory for the runs (sweep/), totals.json, the report (report/) and "
                        "the timings (timings/, a run directory), all kept; without it a temporary directory is used "
                        "and removed")
    parser.add_argument("--no-report", action="store_true", help="only synthesize the runs, do not build the report")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    args.seconds = int(args.seconds)
    try:
        check_size(args.runs, args.seconds, args.configs, args.route_rate)
    except ValueError as exc:
        print(f"report-scale: {exc}", file=sys.stderr)
        return 2
    if args.out is not None and args.out.exists() and any(args.out.iterdir()):
        print(f"report-scale: --out {args.out} is not empty", file=sys.stderr)
        return 2
    root = args.out or Path(tempfile.mkdtemp(prefix="report-scale-"))
    root.mkdir(parents=True, exist_ok=True)
    say = Printed()
    try:
        started = time.perf_counter()
        directories, totals = synthesize(root, args.runs, args.seconds, args.configs, args.route_rate, args.seed)
        generation_s = time.perf_counter() - started
        (root / "totals.json").write_text(json.dumps({run_id: asdict(t) for run_id, t in totals.items()}, indent=1)
                                          + "\n", encoding="utf-8")
        rows = sum(t.histogram_rows for t in totals.values())
        answered = sum(sum(t.answered.values()) for t in totals.values())
        result = {"runs": args.runs, "seconds": args.seconds, "configs": args.configs, "histogram_rows": rows,
                  "answered": answered, "bytes": directory_bytes(directories), "generation_s": generation_s}
        say(f"runs: {args.runs} ({args.configs} configurations x {-(-args.runs // args.configs)} repeats), "
            f"{args.seconds} measured s each")
        say(f"histogram rows: {rows:,} ({rows / args.runs / args.seconds:,.0f} per run-second), "
            f"answered requests: {answered:,}")
        say(f"bytes on disk: {result['bytes']:,}")
        say(f"generation: {generation_s:.1f} s")
        if not args.no_report:
            from bench import spark_report  # pyspark only when reporting

            with PeakRss() as peak:
                started = time.perf_counter()
                spark = spark_report.create_spark(args.master)
                session_s = time.perf_counter() - started
                try:
                    started = time.perf_counter()
                    report = spark_report.build_report(spark, [str(d) for d in directories], root / "report",
                                                       title=f"report-scale: {args.runs} runs x {args.seconds} s")
                    report_s = time.perf_counter() - started
                finally:
                    spark.stop()
            python_peak = max(peak.python, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)
            result.update(session_s=session_s, report_s=report_s, driver_jvm_peak_bytes=peak.jvm,
                          python_peak_bytes=python_peak)
            say(f"Spark session start ({args.master or 'local[*]'}): {session_s:.1f} s")
            say(f"report wall time (build_report): {report_s:.1f} s -> {report}")
            say(f"peak RSS: driver JVM {peak.jvm / 2**20:,.0f} MiB, Python {python_peak / 2**20:,.0f} MiB")
        write_results(root / "timings", "report-scale", [result], say)
        return 0
    finally:
        if args.out is None:
            shutil.rmtree(root, ignore_errors=True)
