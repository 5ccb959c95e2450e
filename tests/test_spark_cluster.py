"""The Spark report on a real standalone cluster (master + worker JVMs from the installed pyspark on
127.0.0.1) equals the embedded local[*] report; and the report-scale verb's synthetic sweep.

The cluster test runs the report verb's real command line, once with
`--master spark://127.0.0.1:PORT` and once without (local[*]), over the same run directories, and
compares every CSV. It skips without Java 17+. The report_scale tests check the generator's HDR
bucketing against hdrh and that the report's per-run counts are the synthesized ones.
"""
from __future__ import annotations

import functools
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import psutil
import pyarrow.parquet as pq
import pytest

from bench import report_scale
from bench.lib.hdr import bucket_rows, new_histogram
from bench.report.server_metrics import END_FILE, START_FILE

REPO = Path(__file__).resolve().parent.parent
APP_NAME = "namesrv-storm-report"  # bench.spark_report.create_spark's default appName
JAVA_MIN = 17


@functools.cache
def java_problem() -> str | None:
    """Why a Spark 4 cluster cannot start here (no java, or older than 17), None when it can."""
    java = shutil.which("java")
    if java is None:
        return "no java on PATH (Spark 4 standalone needs Java 17+)"
    try:
        out = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"`java -version` failed: {exc}"
    match = re.search(r'version "(\d+)(?:\.(\d+))?', out.stderr + out.stdout)
    if match is None:
        return f"cannot read the Java version from {(out.stderr + out.stdout).strip()[:200]!r}"
    major = int(match.group(1))
    if major == 1 and match.group(2):  # "1.8.0_..."
        major = int(match.group(2))
    if major < JAVA_MIN:
        return f"Java {major} at {java}; Spark 4 needs Java {JAVA_MIN}+"
    return None


def pyspark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def free_ports(count: int) -> list[int]:
    """Ports free on 127.0.0.1 right now (all held open until every one is chosen, so they differ)."""
    sockets = []
    try:
        for _ in range(count):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            sockets.append(s)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def tail(path: Path, lines: int = 40) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError as exc:
        return f"<{exc}>"


@dataclass
class StandaloneCluster:
    """A Spark standalone master and one worker, each a JVM started by spark-class (which execs java)."""

    master_url: str
    web_url: str
    work_dir: Path
    logs: dict[str, Path]
    processes: dict[str, subprocess.Popen] = field(default_factory=dict)

    def state(self) -> dict:
        with urllib.request.urlopen(f"{self.web_url}/json/", timeout=5) as response:
            return json.load(response)

    def log_tails(self) -> str:
        return "\n".join(f"--- {name} log ({path}), last lines:\n{tail(path)}" for name, path in self.logs.items())


def start_cluster(base: Path) -> StandaloneCluster:
    home = pyspark_home()
    master_port, master_web, worker_web = free_ports(3)
    conf_dir = base / "conf"  # empty: no spark-defaults.conf or spark-env.sh from elsewhere
    work_dir = base / "work"
    for directory in (conf_dir, work_dir):
        directory.mkdir(parents=True)
    env = {**os.environ, "SPARK_HOME": str(home), "SPARK_LOCAL_IP": "127.0.0.1", "SPARK_CONF_DIR": str(conf_dir),
           "SPARK_LOG_DIR": str(base), "SPARK_DAEMON_MEMORY": "512m", "PYSPARK_PYTHON": sys.executable}
    spark_class = str(home / "bin" / "spark-class")
    master_url = f"spark://127.0.0.1:{master_port}"
    cluster = StandaloneCluster(master_url, f"http://127.0.0.1:{master_web}", work_dir,
                                {"master": base / "master.log", "worker": base / "worker.log"})
    commands = {
        "master": [spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                   "--port", str(master_port), "--webui-port", str(master_web)],
        "worker": [spark_class, "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1", "--cores", "2",
                   "--memory", "2g", "--webui-port", str(worker_web), "--work-dir", str(work_dir), master_url],
    }
    for name, command in commands.items():
        with open(cluster.logs[name], "wb") as log:
            cluster.processes[name] = subprocess.Popen(command, env=env, stdin=subprocess.DEVNULL, stdout=log,
                                                       stderr=subprocess.STDOUT, cwd=base, start_new_session=True)
    return cluster


def wait_for_worker(cluster: StandaloneCluster, deadline_s: float = 90.0) -> None:
    deadline = time.monotonic() + deadline_s
    last = "no answer yet"
    while time.monotonic() < deadline:
        for name, process in cluster.processes.items():
            if process.poll() is not None:
                raise AssertionError(f"the Spark {name} exited with {process.returncode} before the worker "
                                     f"registered\n{cluster.log_tails()}")
        try:
            state = cluster.state()
            if state.get("aliveworkers", 0) >= 1:
                return
            last = f"aliveworkers={state.get('aliveworkers')}"
        except (OSError, ValueError) as exc:
            last = repr(exc)
        time.sleep(0.5)
    raise AssertionError(f"no Spark worker registered with {cluster.master_url} within {deadline_s:.0f} s "
                         f"(last: {last})\n{cluster.log_tails()}")


def stop_cluster(cluster: StandaloneCluster) -> list[int]:
    """SIGTERM the worker then the master (SIGKILL after 5 s), by pid; returns every pid that must be gone
    (theirs and the executors the worker had started)."""
    pids = []
    for name in ("worker", "master"):
        process = cluster.processes.get(name)
        if process is None:
            continue
        pids.append(process.pid)
        try:
            pids += [child.pid for child in psutil.Process(process.pid).children(recursive=True)]
        except psutil.Error:
            pass
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)
    return pids


def still_running(pids: list[int], grace_s: float = 10.0) -> list[int]:
    """The pids still alive (not zombies) after up to grace_s; executors get their own SIGTERM from the worker."""
    deadline = time.monotonic() + grace_s
    while True:
        alive = []
        for pid in pids:
            try:
                if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                    alive.append(pid)
            except psutil.NoSuchProcess:
                pass
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.2)


@pytest.fixture(scope="module")
def standalone_cluster(tmp_path_factory) -> Iterator[StandaloneCluster]:
    problem = java_problem()
    if problem is not None:
        pytest.skip(problem)
    cluster = start_cluster(tmp_path_factory.mktemp("spark-standalone"))
    try:
        wait_for_worker(cluster)
        yield cluster
    finally:
        pids = stop_cluster(cluster)
        alive = still_running(pids)
        for pid in alive:  # never leave a JVM behind, even when failing
            try:
                psutil.Process(pid).kill()
            except psutil.Error:
                pass
        assert not alive, f"Spark JVMs still running after the cluster was stopped: {alive}"


def synthesized_runs(base: Path) -> list[Path]:
    """A small sweep (3 configurations x 2 repeats x 20 s) in the storm's run-directory shape, one run
    with server /metrics scrapes so the report's metrics-*.prom reading runs on the executors too."""
    directories, _ = report_scale.synthesize(base, runs=6, seconds=20, configs=3, route_rate=1000.0)
    scraped = directories[0]
    bounds = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, "+Inf")

    def exposition(counts: list[int], total_s: float) -> str:
        lines = ["# TYPE namesrv_request_duration_seconds histogram"]
        cumulative = 0
        for bound, count in zip(bounds, counts):
            cumulative += count
            lines.append(f'namesrv_request_duration_seconds_bucket{{request="GET_ROUTEINFO_BY_TOPIC",'
                         f'le="{bound}"}} {cumulative:.1f}')
        lines.append(f'namesrv_request_duration_seconds_count{{request="GET_ROUTEINFO_BY_TOPIC"}} {cumulative:.1f}')
        lines.append(f'namesrv_request_duration_seconds_sum{{request="GET_ROUTEINFO_BY_TOPIC"}} {total_s!r}')
        return "\n".join(lines) + "\n"

    (scraped / START_FILE).write_text(exposition([10, 20, 5, 1, 0, 0], 0.01), encoding="utf-8")
    (scraped / END_FILE).write_text(exposition([900, 4000, 1200, 300, 20, 1], 2.5), encoding="utf-8")
    meta = json.loads((scraped / "meta.json").read_text(encoding="utf-8"))
    meta["server_metrics"] = {"url": "http://127.0.0.1:1/metrics", START_FILE: START_FILE, END_FILE: END_FILE}
    (scraped / "meta.json").write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return directories


def run_report(runs: list[Path], out: Path, *extra: str) -> float:
    """`python -m bench report` as a user types it; returns its wall time."""
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable}
    started = time.monotonic()
    result = subprocess.run([sys.executable, "-m", "bench", "report", *map(str, runs),
                             "--out", str(out), *extra], cwd=REPO, env=env, capture_output=True, text=True,
                            timeout=240)
    assert result.returncode == 0, f"report {' '.join(extra)} failed:\n{result.stdout}\n{result.stderr[-5000:]}"
    return time.monotonic() - started


@pytest.mark.timeout(300)
def test_report_on_a_standalone_cluster_equals_local(standalone_cluster, tmp_path):
    cluster = standalone_cluster
    runs = synthesized_runs(tmp_path / "runs")
    run_report(runs, tmp_path / "cluster", "--master", cluster.master_url)
    run_report(runs, tmp_path / "local")

    names = sorted(p.name for p in (tmp_path / "local" / "csv").glob("*.csv"))
    assert names == sorted(p.name for p in (tmp_path / "cluster" / "csv").glob("*.csv"))
    assert "summary.csv" in names and "server_latency.csv" in names
    for name in names:
        # No column is excluded: every value, the runs' file: URIs included, is the same in both.
        local = pd.read_csv(tmp_path / "local" / "csv" / name)
        remote = pd.read_csv(tmp_path / "cluster" / "csv" / name)
        pd.testing.assert_frame_equal(remote, local, check_exact=True, obj=name)
    summary = pd.read_csv(tmp_path / "local" / "csv" / "summary.csv")
    assert len(summary) == 6 * 3 and summary["answered"].gt(0).all()
    server = pd.read_csv(tmp_path / "local" / "csv" / "server_latency.csv")
    assert list(server["request"]) == ["GET_ROUTEINFO_BY_TOPIC"] and server["count"].tolist() == [6421 - 36]

    # It really ran on the cluster: the master lists the report as a finished application that had
    # executors' cores, and the worker started an executor for it in its work directory.
    state = cluster.state()
    apps = [app for app in state.get("completedapps", []) + state.get("activeapps", []) if app.get("name") == APP_NAME]
    assert apps, f"no application {APP_NAME!r} on the master: {state}"
    assert any(app.get("cores", 0) > 0 for app in apps), apps
    executors = [d for d in cluster.work_dir.glob("app-*/*") if d.is_dir()]
    assert executors, f"the worker's work directory has no executor: {list(cluster.work_dir.iterdir())}"


# ---------------------------------------------------------------- the report-scale verb


def test_generator_buckets_like_hdrhistogram():
    rng = np.random.default_rng(7)
    values = np.clip(np.rint(rng.lognormal(6.5, 1.5, 20_000)), 1, 3_600_000_000).astype(np.int64)
    values[:3] = (1, 2048, 3_600_000_000)  # the first bucket, the first doubled bucket, the top
    intervals = rng.integers(0, 3, len(values))
    got = report_scale.HdrBuckets().interval_rows(intervals, values)
    for interval in range(3):
        histogram = new_histogram()
        for value in values[intervals == interval]:
            histogram.record_value(int(value))
        mine = [tuple(int(x) for x in row) for row in zip(*(column[got[0] == interval] for column in got[1:]))]
        assert mine == list(bucket_rows(histogram)), interval


def test_synthetic_runs_have_the_storms_shape_and_their_counts(tmp_path):
    directories, totals = report_scale.synthesize(tmp_path, runs=2, seconds=3, configs=2)
    for directory in directories:
        run_id = directory.name
        meta = json.loads((directory / "meta.json").read_text())
        assert meta["run_id"] == run_id and meta["sweep"]["keys"] == [report_scale.SWEEP_KEY]
        assert meta["sweep"]["point"][report_scale.SWEEP_KEY] in meta["sweep"]["grid"][report_scale.SWEEP_KEY]
        histograms = pq.read_table(directory / "histograms.parquet")
        assert histograms.schema == report_scale.HISTOGRAM_SCHEMA
        frame = histograms.to_pandas()
        latency = frame[frame["metric"] == "latency"].groupby("request")["count"].sum().to_dict()
        assert latency == totals[run_id].answered
        per_interval = frame[(frame["metric"] == "latency") & (frame["request"] == "GET_ROUTEINFO_BY_TOPIC")]
        assert per_interval.groupby("interval_start").size().min() > 300  # hundreds of buckets a second
        responses = pq.read_table(directory / "responses.parquet").to_pandas()
        assert responses.groupby("request")["count"].sum().to_dict() == totals[run_id].requests
        resources = pq.read_table(directory / "resources.parquet").to_pandas()
        assert sorted(resources["process"].unique()) == ["generator", "server"] and len(resources) == 2 * 3


def test_generator_refuses_oversized_inputs(capsys):
    assert report_scale.main(["--runs", "201", "--no-report"]) == 2
    assert "--runs 201: must be 1..200" in capsys.readouterr().err
    assert report_scale.main(["--seconds", "3601", "--no-report"]) == 2
    assert "--seconds 3601: must be 1..3600" in capsys.readouterr().err
    help_text = report_scale.build_parser().format_help()
    assert "(default: 50)" in help_text and "(default: 600)" in help_text


@pytest.mark.timeout(300)
@pytest.mark.skipif(java_problem() is not None, reason=str(java_problem()))
def test_report_scale_verb_reports_the_synthesized_counts(tmp_path):
    keep = tmp_path / "scale"
    result = subprocess.run([sys.executable, "-m", "bench", "report-scale", "--runs", "3", "--seconds", "5",
                             "--configs", "3", "--out", str(keep)], cwd=REPO, capture_output=True, text=True,
                            timeout=240)
    assert result.returncode == 0, result.stdout + result.stderr[-5000:]
    assert re.search(r"report wall time \(build_report\): [\d.]+ s", result.stdout), result.stdout
    totals = json.loads((keep / "totals.json").read_text())
    summary = pd.read_csv(keep / "report" / "csv" / "summary.csv")
    assert sorted(summary["run_id"].unique()) == sorted(totals)
    for record in summary.to_dict("records"):
        expected = totals[record["run_id"]]
        assert record["answered"] == expected["answered"][record["request"]], record
        assert record["requests"] == expected["requests"][record["request"]], record
        assert record["errors"] == expected["errors"][record["request"]], record
    timings = json.loads((keep / "timings" / "meta.json").read_text())
    assert timings["verb"] == "report-scale" and timings["results"][0]["report_s"] > 0
