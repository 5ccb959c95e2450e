"""The Spark report against percentiles computed directly from the runs' raw HDR histograms.

Run directories are produced by the storm's own recording path (IntervalRecorder deltas merged by
RunRecorder) from synthetic latencies; the expected values come from hdrh on the HDR logs.
"""
from __future__ import annotations

import random
import shutil
import subprocess
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest
from hdrh.log import HistogramLogReader

from bench import spark_report
from bench.heartbeat_storm import StormSettings, run_storm
from bench.storm.fleet import FleetShape
from bench.storm.hdr import new_histogram
from bench.storm.recorder import IntervalRecorder
from bench.storm.rundir import ResourceSample, RunRecorder
from namesrv.launcher import NamesrvProcess
from namesrv.protocol import RequestCode

SECOND = 1_000_000_000
CODES = (int(RequestCode.GET_ROUTEINFO_BY_TOPIC), int(RequestCode.REGISTER_BROKER), int(RequestCode.BROKER_HEARTBEAT))
CHROMIUM = Path("/usr/bin/chromium")


def make_run(directory: Path, run_id: str, seed: int, point: dict[str, int], duration: int = 4) -> Path:
    """A run directory recorded through the storm's path: 2 workers, deltas shipped every 'second'."""
    rng = random.Random(seed)
    run = RunRecorder(run_id)
    workers = [IntervalRecorder(worker, measure_start_ns=0) for worker in range(2)]
    for second in range(duration):
        for recorder in workers:
            for code in CODES:
                for _ in range(rng.randrange(150, 400)):
                    intended = second * SECOND + rng.randrange(SECOND)
                    recorder.sent(code, intended, intended + rng.randrange(2_000_000))
                    tail = 200 if rng.random() < 0.01 else 1  # a slow tail for p99.9
                    latency = int(rng.lognormvariate(5.5 + CODES.index(code) * 0.3, 0.8) * tail * 1000)
                    response = 17 if rng.random() < 0.02 else 0
                    recorder.answered(code, intended, intended + latency, response)
                if rng.random() < 0.5:
                    recorder.unanswered(code, second * SECOND + 5)
            recorder.ship().apply_to(run)
        run.add_resource(ResourceSample(float(second), "server", 1, 40.0 + second, 60_000_000 + second * 1000, 9,
                                        100 * second, second))
        run.add_resource(ResourceSample(float(second), "generator", 2, 80.0, 90_000_000, 4, 50 * second, 0))
    meta = {"duration_s": duration, "warmup_s": 2, "mode": "open", "started_at": "2025-11-21T20:00:00Z",
            "sweep": {"point": point}, "server": {"address": "127.0.0.1:1", "version": "V5_3_3"},
            "load": {"workers": 2, "connections_per_worker": 2, "rates_per_s": {"GET_ROUTEINFO_BY_TOPIC": 500}}}
    return run.write(directory / run_id, meta, start_epoch_s=1_700_000_000.0 + seed)


def raw_histograms(*run_dirs: Path, metric: str = "latency") -> dict[str, object]:
    """Tag -> merged histogram, read directly from the runs' HDR logs."""
    merged: dict[str, object] = {}
    for run_dir in run_dirs:
        reader = HistogramLogReader(str(run_dir / "hdr" / f"{metric}.hlog"), new_histogram())
        while (interval := reader.get_next_interval_histogram()) is not None:
            merged.setdefault(interval.get_tag(), new_histogram()).add(interval)
    return merged


@pytest.fixture(scope="session")
def spark():
    session = spark_report.create_spark("local[2]", "namesrv-report-tests", shuffle_partitions=2)
    yield session
    session.stop()


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
    base = tmp_path_factory.mktemp("runs")
    same = {"serverSelectorThreads": 1, "defaultThreadPoolNums": 4}
    return [make_run(base, "run-a", 1, same), make_run(base, "run-b", 2, same)]


@pytest.fixture(scope="module")
def one_run_tables(spark, two_runs):
    return spark_report.compute_tables(spark, spark_report.load_runs(spark, [str(two_runs[0])]))


@pytest.fixture(scope="module")
def two_run_tables(spark, two_runs):
    return spark_report.compute_tables(spark, spark_report.load_runs(spark, [str(d) for d in two_runs]))


def expected_stats(histogram) -> dict[str, int]:
    out = {spark_report.percentile_column(p): histogram.get_value_at_percentile(p)
           for p in spark_report.SUMMARY_PERCENTILES}
    out["max"] = histogram.get_max_value()
    out["answered"] = histogram.get_total_count()
    return out


def test_single_run_percentiles_match_raw_histograms_exactly(one_run_tables, two_runs):
    run_dir = two_runs[0]
    tables = one_run_tables
    raw = raw_histograms(run_dir)
    assert set(tables.summary["request"]) == set(raw)
    for record in tables.summary.to_dict("records"):
        histogram = raw[record["request"]]
        for column, value in expected_stats(histogram).items():
            assert record[column] == value, (record["request"], column)
        assert record["throughput_per_s"] == histogram.get_total_count() / 4
    spectrum = tables.spectrum
    for request, histogram in raw.items():
        rows = spectrum[spectrum["request"] == request]
        for percentile, value in zip(rows["percentile"], rows["value_us"]):
            assert value == histogram.get_value_at_percentile(percentile), (request, percentile)
    delays = raw_histograms(run_dir, metric="send_delay")
    for record in tables.summary.to_dict("records"):
        assert record["send_delay_p99"] == delays[record["request"]].get_value_at_percentile(99)


@pytest.fixture(scope="module")
def storm_run(tmp_path_factory):
    """A short mixed storm (2 worker processes) against a real namesrv."""
    base = tmp_path_factory.mktemp("storm")
    fleet = FleetShape(brokers=8, topics_per_broker=20, register_period_s=0.5, heartbeat_period_s=0.5,
                       route_clients=300, route_poll_period_s=0.5)
    with NamesrvProcess(workdir=base / "server") as server:
        result = run_storm(StormSettings(address=server.address, fleet=fleet, duration_s=2, warmup_s=1, drain_s=3,
                                         workers=2, connections=2, runs_dir=base, run_id="real", progress=False))
    return result


def test_report_of_a_real_storm_matches_its_raw_histograms(spark, storm_run):
    tables = spark_report.compute_tables(spark, spark_report.load_runs(spark, [str(storm_run.run_dir)]))
    raw = raw_histograms(storm_run.run_dir)
    assert set(tables.summary["request"]) == {"REGISTER_BROKER", "BROKER_HEARTBEAT", "GET_ROUTEINFO_BY_TOPIC"}
    for record in tables.summary.to_dict("records"):
        for column, value in expected_stats(raw[record["request"]]).items():
            assert record[column] == value, (record["request"], column)
        assert record["errors"] == 0
    storm_summary = {row["request"]: row for row in storm_run.summary}
    for record in tables.summary.to_dict("records"):  # the storm's own summary agrees
        assert storm_summary[record["request"]]["p99_ms"] == record["p99"] / 1000
        assert storm_summary[record["request"]]["answered"] == record["answered"]
    assert set(tables.resources["process"]) == {"server", "generator"}


def test_per_interval_percentiles_match_each_interval_histogram(one_run_tables, two_runs):
    run_dir = two_runs[0]
    tables = one_run_tables
    reader = HistogramLogReader(str(run_dir / "hdr" / "latency.hlog"), new_histogram())
    checked = 0
    while (interval := reader.get_next_interval_histogram()) is not None:
        start = interval.get_start_time_stamp() / 1000 - (1_700_000_000.0 + 1)
        row = tables.intervals[(tables.intervals["request"] == interval.get_tag())
                               & (abs(tables.intervals["interval_start"] - start) < 1e-6)].iloc[0]
        assert row["p99"] == interval.get_value_at_percentile(99)
        assert row["p50"] == interval.get_value_at_percentile(50)
        assert row["count"] == interval.get_total_count() == row["throughput_per_s"]
        checked += 1
    assert checked == 4 * len(CODES)


def test_two_runs_of_one_configuration_merge_exactly(two_run_tables, two_runs):
    tables = two_run_tables
    merged = raw_histograms(*two_runs)
    configurations = tables.configurations
    assert list(configurations["runs"].unique()) == [2]
    for record in configurations.to_dict("records"):
        histogram = merged[record["request"]]
        for column, value in expected_stats(histogram).items():
            assert record[column] == value, (record["request"], column)
        assert record["throughput_per_s"] == histogram.get_total_count() / 8  # two 4-s runs
    per_run = tables.summary
    assert set(per_run["run_id"]) == {"run-a", "run-b"}
    for run_dir in two_runs:
        raw = raw_histograms(run_dir)
        for record in per_run[per_run["run_id"] == run_dir.name].to_dict("records"):
            assert record["p99"] == raw[record["request"]].get_value_at_percentile(99)


def test_error_counts_come_from_responses(two_run_tables, two_runs):
    tables = two_run_tables
    rows = pq.read_table(two_runs[1] / "responses.parquet").to_pylist()
    summary = tables.summary
    for record in summary[summary["run_id"] == "run-b"].to_dict("records"):
        mine = [r for r in rows if r["request"] == record["request"]]
        assert record["requests"] == sum(r["count"] for r in mine)
        assert record["errors"] == sum(r["count"] for r in mine if r["response_code"] != 0)
        assert record["error_rate"] == record["errors"] / record["requests"]
    assert set(tables.errors["response"]) <= {"SUCCESS", "TOPIC_NOT_EXIST", "NO_RESPONSE"}
    assert "NO_RESPONSE" in set(tables.errors["response"])


def test_duplicate_run_and_missing_meta_are_clear_errors(spark, two_runs, tmp_path):
    with pytest.raises(ValueError, match="given twice"):
        spark_report.load_runs(spark, [str(two_runs[0]), str(two_runs[0])])
    empty = tmp_path / "not-a-run"
    empty.mkdir()
    (empty / "x").write_text("")
    with pytest.raises(FileNotFoundError, match="not a storm run directory"):
        spark_report.load_runs(spark, [str(empty)])


@pytest.fixture(scope="module")
def sweep_report(spark, tmp_path_factory):
    base = tmp_path_factory.mktemp("sweep")
    dirs = [make_run(base, f"p{selector}{pool}", 10 + selector * 10 + pool,
                     {"serverSelectorThreads": selector, "defaultThreadPoolNums": pool}, duration=3)
            for selector in (1, 2) for pool in (4, 8)]
    out = base / "report"
    report = spark_report.build_report(spark, [str(d) for d in dirs], out)
    return report, dirs


def test_sweep_report_writes_html_and_every_csv(sweep_report):
    report, dirs = sweep_report
    html = report.read_text()
    assert html.startswith("<!DOCTYPE html>") and html.count("<svg") >= 4 * 5 + 3
    assert "Sweep" in html and "Total throughput" in html and "Highest total throughput" in html
    for name in ("runs", "summary", "configurations", "errors", "intervals", "spectrum", "resources", "sweep"):
        assert (report.parent / "csv" / f"{name}.csv").stat().st_size > 0
    sweep = pd.read_csv(report.parent / "csv" / "sweep.csv")
    assert len(sweep) == 4
    assert set(sweep["serverSelectorThreads"]) == {1, 2}
    route = sweep.set_index("config")["p99_us[GET_ROUTEINFO_BY_TOPIC]"]
    for run_dir in dirs:
        raw = raw_histograms(run_dir)["GET_ROUTEINFO_BY_TOPIC"]
        point = pd.read_json(run_dir / "meta.json", typ="series")["sweep"]["point"]
        label = " ".join(f"{k}={v}" for k, v in point.items())
        assert route[label] == raw.get_value_at_percentile(99)


def test_report_opens_in_headless_chromium_without_errors(sweep_report, tmp_path):
    if not CHROMIUM.exists():
        pytest.skip("Debian's chromium is not installed (/usr/bin/chromium): apt-get install -y chromium")
    report, _ = sweep_report
    command = [str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
               "--disable-component-update", "--disable-sync", "--disable-quic", "--no-first-run",
               "--enable-logging=stderr", "--v=0", f"--user-data-dir={tmp_path / 'profile'}",
               "--virtual-time-budget=2000", "--dump-dom", report.as_uri()]
    result = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "<svg" in result.stdout and "namesrv heartbeat storm report" in result.stdout
    console_errors = [line for line in result.stderr.splitlines()
                      if "CONSOLE" in line and ("Uncaught" in line or "Error" in line)]
    assert console_errors == []
    shutil.rmtree(tmp_path / "profile", ignore_errors=True)
