"""The run directory every verb writes and `python -m bench report` reads: one format, any tool can read it.

    <run>/meta.json            always: the verb ("tool"), when, the machine (CPU model, Python and its build
                               flags), what the run asked for; a verb's figures as rows ("results") and
                               the lines it printed ("lines"); a storm's fleet shape, load (mode, rates),
                               server address/config/version, host, times and summary
A storm (and each step of a knee or sweep) also writes what it measured, per second:
    <run>/histograms.parquet   one row per non-empty HDR bucket per (metric, request code, 1-s interval)
    <run>/responses.parquet    responses per (interval, request code, response code); -1 = no response
    <run>/resources.parquet    per-second psutil samples of the server and generator processes
    <run>/hdr/<metric>.hlog    the same interval histograms as HdrHistogram logs (format 1.3), Tag = request

A request belongs to the interval of its *intended* send time (seconds since the end of warm-up),
so warm-up exclusion is exact and late answers still count against the second that asked. Metrics:
`latency` (response time − intended send time, µs), `send_delay` (actual − intended send time,
µs: how far the generator itself lagged) and `propagation` (a route-change subscriber receiving
the ROUTE_CHANGED that shows a broker's flap − the moment of the flap, µs, in the interval of the
flap; request code ROUTE_CHANGED; see bench/storm/flaps.py). Histogram rows carry each bucket's
lowest and highest equivalent values, so merged percentiles match HdrHistogram's exactly.
"""
from __future__ import annotations

import json
import os
import platform
import sys
import sysconfig
from collections import defaultdict
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import psutil
import pyarrow as pa
import pyarrow.parquet as pq
from hdrh.histogram import HdrHistogram

import namesrv
from bench.lib.hdr import HdrLogWriter, add_bucket_counts, bucket_rows, new_histogram
from namesrv import fastpath
from namesrv.protocol import RequestCode, ResponseCode

METRICS = ("latency", "send_delay", "propagation")
#: The generator loop's metrics, by number (namesrv/fastpath/generator.py).
GENERATOR_METRICS = METRICS[:2]
NO_RESPONSE = -1
#: Server settings runs are compared by (RocketMQ's names), in display order; any key ending in
#: "Processes" (worker processes) joins them.
#: Generator lateness (send delay p99, µs) past which a run is flagged: its latencies include generator lag.
SEND_DELAY_WARNING_US = 1000
THREAD_CONFIG_KEYS = ("serverSelectorThreads", "serverWorkerThreads", "defaultThreadPoolNums",
                      "clientRequestThreadPoolNums")

HISTOGRAM_SCHEMA = pa.schema([
    ("run_id", pa.string()), ("metric", pa.string()), ("request_code", pa.int32()), ("request", pa.string()),
    ("interval_start", pa.float64()), ("interval_length", pa.float64()),
    ("value_lo", pa.int64()), ("value_hi", pa.int64()), ("count", pa.int64()),
])
RESPONSE_SCHEMA = pa.schema([
    ("run_id", pa.string()), ("interval_start", pa.float64()), ("request_code", pa.int32()), ("request", pa.string()),
    ("response_code", pa.int32()), ("count", pa.int64()),
])
RESOURCE_SCHEMA = pa.schema([
    ("run_id", pa.string()), ("t", pa.float64()), ("process", pa.string()), ("pids", pa.int32()),
    ("cpu_percent", pa.float64()), ("rss_bytes", pa.int64()), ("threads", pa.int32()),
    ("ctx_voluntary", pa.int64()), ("ctx_involuntary", pa.int64()),
])


def request_name(code: int) -> str:
    try:
        return RequestCode(code).name
    except ValueError:
        return f"CODE_{code}"


def response_name(code: int) -> str:
    if code == NO_RESPONSE:
        return "NO_RESPONSE"
    try:
        return ResponseCode(code).name
    except ValueError:
        return f"CODE_{code}"


def thread_config(config: dict[str, str]) -> dict[str, str]:
    """The thread settings of a server's GET_NAMESRV_CONFIG answer, in THREAD_CONFIG_KEYS order."""
    chosen = {key: config[key] for key in THREAD_CONFIG_KEYS if key in config}
    chosen.update({key: value for key, value in sorted(config.items()) if key.endswith("Processes")})
    return chosen


@dataclass(frozen=True, slots=True)
class ResourceSample:
    """One psutil sample of a process tree; `t` = seconds since measurement start; ctx counts cumulative."""

    t: float
    process: str
    pids: int
    cpu_percent: float
    rss_bytes: int
    threads: int
    ctx_voluntary: int
    ctx_involuntary: int


class RunRecorder:
    """Merges what the workers report, per interval, and writes the run directory.

    Workers send deltas (histograms and counts for any interval, any number of times);
    merging is `HdrHistogram.add` and integer addition, so the order does not matter.
    """

    def __init__(self, run_id: str, interval_s: float = 1.0) -> None:
        self.run_id = run_id
        self.interval_s = interval_s
        self._histograms: dict[tuple[str, int, int], HdrHistogram] = {}
        self._responses: dict[tuple[int, int, int], int] = defaultdict(int)
        self._resources: list[ResourceSample] = []

    def add_histogram(self, metric: str, interval: int, request_code: int, histogram: HdrHistogram) -> None:
        if metric not in METRICS:
            raise ValueError(f"unknown metric {metric!r}")
        key = (metric, interval, request_code)
        target = self._histograms.get(key)
        if target is None:
            target = self._histograms[key] = new_histogram()
        target.add(histogram)

    def add_keys(self, histograms: bytes, responses: bytes) -> None:
        """A generator loop's records (namesrv/fastpath/generator.py's keys), those of the window only."""
        keys, counts = np.unique(np.frombuffer(histograms, dtype=np.int64), return_counts=True)
        groups = keys >> 16  # (metric, request code, interval) over the bucket index
        edges = np.r_[0, np.flatnonzero(np.diff(groups)) + 1, len(groups)] if len(groups) else np.zeros(1, int)
        for first, end in zip(edges[:-1].tolist(), edges[1:].tolist()):
            group = int(groups[first])
            key = (GENERATOR_METRICS[group >> 36], group & 0xFFFFF, (group >> 20) & 0xFFFF)
            target = self._histograms.get(key)
            if target is None:
                target = self._histograms[key] = new_histogram()
            add_bucket_counts(target, keys[first:end] & 0xFFFF, counts[first:end])
        keys, counts = np.unique(np.frombuffer(responses, dtype=np.int64), return_counts=True)
        for key, count in zip(keys.tolist(), counts.tolist()):
            if key >> 32:
                self._responses[((key >> 32) - 1, (key >> 16) & 0xFFFF, (key & 0xFFFF) - 1)] += count

    def add_responses(self, interval: int, request_code: int, response_code: int, count: int) -> None:
        self._responses[(interval, request_code, response_code)] += count

    def add_resource(self, sample: ResourceSample) -> None:
        self._resources.append(sample)

    def interval_histogram(self, metric: str, interval: int, request_code: int) -> HdrHistogram | None:
        return self._histograms.get((metric, interval, request_code))

    def request_codes(self, metric: str = "latency") -> list[int]:
        return sorted({code for m, _, code in self._histograms if m == metric})

    def merged(self, metric: str, request_code: int) -> HdrHistogram:
        """All intervals of one request code in one histogram."""
        total = new_histogram()
        for (m, _, code), histogram in self._histograms.items():
            if m == metric and code == request_code:
                total.add(histogram)
        return total

    def response_counts(self) -> dict[tuple[int, int], int]:
        """(request code, response code) -> count over the whole run."""
        out: dict[tuple[int, int], int] = defaultdict(int)
        for (_, request_code, response_code), count in self._responses.items():
            out[(request_code, response_code)] += count
        return dict(out)

    def write(self, directory: Path, meta: dict, start_epoch_s: float) -> Path:
        """Write every file of the run directory (which must not hold another run)."""
        directory.mkdir(parents=True, exist_ok=True)
        if (directory / "meta.json").exists():
            raise FileExistsError(f"{directory} already holds a run")
        (directory / "hdr").mkdir(exist_ok=True)
        self._write_histograms(directory, start_epoch_s)
        self._write_responses(directory)
        self._write_resources(directory)
        meta = {**meta, "run_id": self.run_id, "interval_s": self.interval_s, "files": {
            "histograms": "histograms.parquet", "responses": "responses.parquet", "resources": "resources.parquet",
            "hdr_logs": {metric: f"hdr/{metric}.hlog" for metric in METRICS}}}
        (directory / "meta.json").write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        return directory

    def _write_histograms(self, directory: Path, start_epoch_s: float) -> None:
        columns: dict[str, list] = {name: [] for name in HISTOGRAM_SCHEMA.names}
        for metric in METRICS:
            with open(directory / "hdr" / f"{metric}.hlog", "w", encoding="utf-8") as stream:
                log = HdrLogWriter(stream, start_epoch_s, f"namesrv heartbeat storm run {self.run_id}: {metric} in "
                                   "microseconds, Interval_Max in milliseconds, Tag = request code name")
                keys = sorted((interval, code) for m, interval, code in self._histograms if m == metric)
                for interval, code in keys:
                    histogram = self._histograms[(metric, interval, code)]
                    start = interval * self.interval_s
                    log.write(request_name(code), start, self.interval_s, histogram)
                    for low, high, count in bucket_rows(histogram):
                        for name, value in zip(HISTOGRAM_SCHEMA.names, (
                                self.run_id, metric, code, request_name(code), start, self.interval_s, low, high,
                                count)):
                            columns[name].append(value)
        pq.write_table(pa.Table.from_pydict(columns, schema=HISTOGRAM_SCHEMA), directory / "histograms.parquet")

    def _write_responses(self, directory: Path) -> None:
        rows = sorted(self._responses.items())
        table = pa.Table.from_pydict({
            "run_id": [self.run_id] * len(rows),
            "interval_start": [interval * self.interval_s for (interval, _, _), _ in rows],
            "request_code": [code for (_, code, _), _ in rows],
            "request": [request_name(code) for (_, code, _), _ in rows],
            "response_code": [response for (_, _, response), _ in rows],
            "count": [count for _, count in rows],
        }, schema=RESPONSE_SCHEMA)
        pq.write_table(table, directory / "responses.parquet")

    def resource_rows(self) -> list[dict]:
        """The resource samples as resources.parquet holds them (without run_id)."""
        return [asdict(sample) for sample in self._resources]

    def _write_resources(self, directory: Path) -> None:
        samples = self.resource_rows()
        columns = {name: [sample[name] for sample in samples] for name in RESOURCE_SCHEMA.names if name != "run_id"}
        columns["run_id"] = [self.run_id] * len(samples)
        pq.write_table(pa.Table.from_pydict(columns, schema=RESOURCE_SCHEMA), directory / "resources.parquet")


def cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo ("" where there is none)."""
    try:
        return next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                     if line.startswith("model name")), "")
    except OSError:
        return ""


def machine(load_before: tuple[float, float, float] | None = None) -> dict:
    """What a figure depends on beyond the code: the host, its CPU and load, the Python that ran and
    how it was built (an --enable-optimizations --with-lto build answers faster), the fast path."""
    return {"hostname": platform.node(), "platform": platform.platform(), "cpu_model": cpu_model(),
            "cpu_count": os.cpu_count(), "cpus_usable": len(os.sched_getaffinity(0)),
            "memory_bytes": psutil.virtual_memory().total,
            "loadavg_before": list(load_before or os.getloadavg()), "loadavg_after": list(os.getloadavg()),
            "python": platform.python_version(), "python_implementation": platform.python_implementation(),
            "python_build": " ".join(platform.python_build()), "python_compiler": platform.python_compiler(),
            "python_config_args": sysconfig.get_config_var("CONFIG_ARGS") or "",
            "python_cflags": sysconfig.get_config_var("OPT") or "",
            "namesrv_package": namesrv.__version__, "fastpath": fastpath.IMPLEMENTATION}


def machine_line(host: dict) -> str:
    """One line a reader can compare between machines: CPU, cores, load, Python and its build flags."""
    flags = " ".join(flag.strip("'") for flag in host.get("python_config_args", "").split()
                     if flag.strip("'").startswith(("--enable-optimizations", "--with-lto", "--enable-shared",
                                                    "--disable-gil", "--with-pydebug")))
    return (f"machine: {host.get('cpu_model') or 'unknown CPU'}, {host.get('cpus_usable')} of "
            f"{host.get('cpu_count')} CPUs usable, load {host.get('loadavg_before', [0])[0]:.2f}; Python "
            f"{host.get('python')} ({host.get('python_compiler')}; {flags or 'no optimization flags'}; "
            f"{host.get('python_cflags') or 'default CFLAGS'}); fast path {host.get('fastpath')}")


class Printed(list):
    """What a verb prints, line by line (`say(line)`), kept for its run directory's "lines"; by default it
    starts with the machine's line."""

    def __init__(self, with_machine: bool = True) -> None:
        super().__init__()
        if with_machine:
            self(machine_line(machine()))

    def __call__(self, line: str) -> None:
        print(line, flush=True)
        self.append(line)


def write_results(directory: Path, verb: str, results: list[dict], lines: list[str], **meta: object) -> Path:
    """A verb's run directory: meta.json with its figures as rows and what it printed (it must not hold a run)."""
    directory.mkdir(parents=True, exist_ok=True)
    if (directory / "meta.json").exists():
        raise FileExistsError(f"{directory} already holds a run")
    record = {"tool": f"python -m bench {verb}", "verb": verb, "run_id": directory.name,
              "started_at": datetime.now(timezone.utc).isoformat(timespec="milliseconds"),
              "argv": sys.argv[1:], "host": machine(), "results": results, "lines": lines, **meta}
    (directory / "meta.json").write_text(json.dumps(record, indent=2, sort_keys=True, default=str) + "\n",
                                         encoding="utf-8")
    return directory
