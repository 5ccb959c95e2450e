"""The Spark report against percentiles computed directly from the runs' raw HDR histograms.

Run directories are produced by the storm's own recording path (IntervalRecorder deltas merged by
RunRecorder) from synthetic latencies; the expected values come from hdrh on the HDR logs. Server-side latency
comes from synthesized /metrics scrapes whose percentiles are worked out by hand below.
"""
from __future__ import annotations

import math
import random
import shutil
from html import escape
from html.parser import HTMLParser
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest
from hdrh.log import HistogramLogReader

from bench import spark_report
from bench.report import browser
from bench.heartbeat_storm import StormSettings, run_storm
from bench.lib.fleet import FleetShape
from bench.lib.hdr import new_histogram
from bench.storm.recorder import IntervalRecorder
from bench.report.server_metrics import (
    END_FILE,
    START_FILE,
    Buckets,
    NoServerMetrics,
    histogram_quantile,
    merge,
    parse_histogram,
    run_window,
    window_delta,
)
from bench.lib.output import ResourceSample, RunRecorder
from bench.storm.subscriber import PROPAGATION
from namesrv.launcher import NamesrvProcess
from namesrv.protocol import RequestCode

SECOND = 1_000_000_000
CODES = (int(RequestCode.GET_ROUTEINFO_BY_TOPIC), int(RequestCode.REGISTER_BROKER), int(RequestCode.BROKER_HEARTBEAT))
ROUTE_CHANGED = int(RequestCode.ROUTE_CHANGED)


def make_run(directory: Path, run_id: str, seed: int, point: dict[str, int], duration: int = 4,
             server_metrics: dict | None = None, push: tuple[dict[int, int], dict] | None = None) -> Path:
    """A run directory recorded through the storm's path: 2 workers, deltas shipped every 'second'.

    `server_metrics` is meta.json's entry of that name (left out when None, as in runs from before
    the storm scraped /metrics). `push`: propagation latencies (µs -> how many, spread over the
    intervals) recorded as a subscriber process does, and meta.json's "propagation".
    """
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
    if push is not None:
        record_propagation(run, push[0], duration)
    meta = {"duration_s": duration, "warmup_s": 2, "mode": "open", "started_at": "2025-11-21T20:00:00Z",
            "sweep": {"point": point}, "server": {"address": "127.0.0.1:1", "version": "V5_3_3"},
            "load": {"workers": 2, "connections_per_worker": 2, "rates_per_s": {"GET_ROUTEINFO_BY_TOPIC": 500}}}
    if server_metrics is not None:
        meta["server_metrics"] = server_metrics
    if push is not None:
        meta["propagation"] = push[1]
    return run.write(directory / run_id, meta, start_epoch_s=1_700_000_000.0 + seed)


#: Host facts of a storm's meta.json, as _host_meta writes them (load averages with float noise).
HOST = {"hostname": "bench-host", "platform": "Linux", "cpu_model": "Test CPU", "cpu_count": 2,
        "memory_bytes": 8 * 2**30, "loadavg_before": [1.2119140625, 1.0, 0.9],
        "loadavg_after": [1.2900390625, 1.1, 1.0]}


def make_step(directory: Path, run_id: str, *, latency_ms: float | dict[str, float], rates: dict[str, float],
              duration: int = 1, seed: int = 0, partial: bool = False, extra_meta: dict | None = None,
              lag_ms: float = 0.05) -> Path:
    """A run directory like make_run's with a controlled load: each request kind answered exactly
    rate × duration times (nothing lost, no error), latencies uniform in [latency_ms / 2, latency_ms]
    (`latency_ms` per request kind, or one for all), the generator up to `lag_ms` late; one server
    and one generator process sampled each second. `extra_meta` adds meta.json entries ("saturation",
    "sweep", "server")."""
    rng = random.Random(seed)
    run = RunRecorder(run_id)
    recorder = IntervalRecorder(0, measure_start_ns=0)
    for name, rate in rates.items():
        code = int(RequestCode[name])
        count = int(rate * duration)
        latency = latency_ms[name] if isinstance(latency_ms, dict) else latency_ms
        for i in range(count):
            intended = i * duration * SECOND // count
            recorder.sent(code, intended, intended + rng.randrange(int(lag_ms * 1e6)))
            recorder.answered(code, intended, intended + int(latency * 1e6 * rng.uniform(0.5, 1.0)), 0)
    recorder.ship().apply_to(run)
    total = sum(rates.values())
    for second in range(1, duration + 1):
        run.add_resource(ResourceSample(float(second), "server", 1, 30.0 + total / 100, 50_000_000 + int(total) * 1000,
                                        3, 0, 0))
        run.add_resource(ResourceSample(float(second), "generator", 1, 40.0, 90_000_000, 2, 0, 0))
    meta = {"duration_s": duration, "warmup_s": 1, "mode": "open", "started_at": "2026-01-02T03:04:05.678+00:00",
            "partial": partial, "host": HOST,
            "server": {"address": "127.0.0.1:1", "version": "V5_3_3",
                       "cmdline": ["python", "-m", "namesrv", "--listen", "127.0.0.1:1"] + ["--flag"] * 40},
            "fleet": {"brokers": 8, "topics_per_broker": 20, "rates_per_s": rates},
            "load": {"workers": 1, "connections_per_worker": 1, "rates_per_s": rates}, **(extra_meta or {})}
    return run.write(directory / run_id, meta, start_epoch_s=1_700_000_000.0 + seed)


def record_propagation(run: RunRecorder, latencies_us: dict[int, int], duration: int) -> None:
    recorder = IntervalRecorder(worker=0, measure_start_ns=0)
    sample = 0
    for microseconds, count in latencies_us.items():
        for _ in range(count):
            changed = (sample % duration) * SECOND + 1000
            recorder.observe(PROPAGATION, ROUTE_CHANGED, changed, changed + microseconds * 1000)
            sample += 1
    recorder.ship().apply_to(run)


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
    same = spark_report.load_runs(spark, [str(two_runs[0]), str(two_runs[0]), str(two_runs[0].parent)])
    assert [run.run_id for run in same] == ["run-a", "run-b"]  # one run given twice (and in its folder) counts once
    copy = shutil.copytree(two_runs[0], tmp_path / "copy" / "run-a")
    with pytest.raises(ValueError, match="run run-a given twice"):  # two directories, one run id
        spark_report.load_runs(spark, [str(two_runs[0]), str(copy)])
    empty = tmp_path / "not-a-run"
    empty.mkdir()
    (empty / "x").write_text("")
    with pytest.raises(FileNotFoundError, match="holds no run directories"):
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
    assert "Sweep" in html and "Total throughput" in html
    assert "Best: " in html or "No best setting named: " in html
    assert "Highest total throughput" not in html and "Lowest worst-request p99" not in html
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
    if not browser.available():
        pytest.skip(browser.SKIP_REASON)
    report, _ = sweep_report
    result = browser.run(report.as_uri(), tmp_path / "profile", "--dump-dom")
    assert result.returncode == 0, result.stderr[-2000:]
    assert "<svg" in result.stdout and "namesrv heartbeat storm report" in result.stdout
    assert browser.console_errors(result) == []


# ---------------------------------------------------------------- server-side latency

#: namesrv's bucket upper bounds, µs -> the `le` label the server writes (seconds).
LE = {10: "1e-05", 25: "2.5e-05", 50: "5e-05", 100: "0.0001", 250: "0.00025", 500: "0.0005", 1_000: "0.001",
      2_500: "0.0025", 5_000: "0.005", 10_000: "0.01", 25_000: "0.025", 50_000: "0.05", 100_000: "0.1",
      250_000: "0.25", 500_000: "0.5", 1_000_000: "1.0", 2_500_000: "2.5", 5_000_000: "5.0", 10_000_000: "10.0",
      math.inf: "+Inf"}
SCRIPT = "<script>alert(1)</script>"
PROCESS_ONLY = "# TYPE process_cpu_seconds_total counter\nprocess_cpu_seconds_total 1.5\n"


def exposition(histograms: dict[str, tuple[dict[float, int], float]]) -> str:
    """/metrics text as namesrv writes it: request -> ({bucket upper bound µs: requests in it}, seconds summed).

    Counts are cumulative and written as floats, like prometheus-client's; a requests_total counter
    and a process metric come along, as in a real scrape.
    """
    lines = ["# HELP namesrv_request_duration_seconds Request frame arrival to answer queued.",
             "# TYPE namesrv_request_duration_seconds histogram"]
    for request, (per_bucket, total_s) in histograms.items():
        label = request.replace("\\", r"\\").replace('"', r'\"')
        cumulative = 0
        for bound_us, le in LE.items():
            cumulative += per_bucket.get(bound_us, 0)
            lines.append(f'namesrv_request_duration_seconds_bucket{{request="{label}",le="{le}"}} {cumulative:.1f}')
        lines.append(f'namesrv_request_duration_seconds_count{{request="{label}"}} {cumulative:.1f}')
        lines.append(f'namesrv_request_duration_seconds_sum{{request="{label}"}} {total_s!r}')
    lines += ["# TYPE namesrv_requests_total counter",
              'namesrv_requests_total{request="REGISTER_BROKER",response="SUCCESS",path="fast_path"} 110.0']
    return "\n".join(lines) + "\n" + PROCESS_ONLY


# Run srv-a, per bucket (µs upper bound: requests), end − start:
#   REGISTER_BROKER  100: 40, 250: 50, 500: 8, 1000: 2 (100 requests, 0.015 s): cumulative 40, 90, 98, 100
#     p50: rank 50 in (100, 250]: 100 + 150 × (50 − 40) / 50 = 130     p90: rank 90 reaches 250 exactly = 250
#     p99: rank 99 in (500, 1000]: 500 + 500 × (99 − 98) / 2 = 750    p99.9: 500 + 500 × 1.9 / 2 = 975; mean 150
#   GET_ROUTEINFO_BY_TOPIC  50: 6, 100: 3, +Inf: 1 (10 requests, 12.00048 s)
#     p50: 25 + 25 × 5 / 6;  p90: rank 9 reaches 100 = 100;  p99, p99.9: in +Inf -> highest finite bound 10 s
#     mean 1.200048 s
#   SCRIPT  10: 1 (4 µs): p50 = 10 × 0.5 = 5, p90 = 9, p99 = 9.9, p99.9 = 9.99; mean 4
#   BROKER_HEARTBEAT: as many at the end as at the start, so no row
SRV_A_START = {"REGISTER_BROKER": ({100: 5, 250: 5}, 0.002), "BROKER_HEARTBEAT": ({50: 7}, 0.0003)}
SRV_A_END = {"REGISTER_BROKER": ({100: 45, 250: 55, 500: 8, 1_000: 2}, 0.017),
             "BROKER_HEARTBEAT": ({50: 7}, 0.0003),
             "GET_ROUTEINFO_BY_TOPIC": ({50: 6, 100: 3, math.inf: 1}, 12.00048),
             SCRIPT: ({10: 1}, 4e-06)}
# Run srv-b (same configuration), from an empty histogram: REGISTER_BROKER 250: 20, 500: 80 (0.03 s)
#     p50: 250 + 250 × 30 / 80 = 343.75, p90: 250 + 250 × 70 / 80 = 468.75, p99: 250 + 250 × 79 / 80 = 496.875,
#     p99.9: 250 + 250 × 79.9 / 80 = 499.6875; mean 300
SRV_B_END = {"REGISTER_BROKER": ({250: 20, 500: 80}, 0.03)}
# Both merged, REGISTER_BROKER: 100: 40, 250: 70, 500: 88, 1000: 2 (200): cumulative 40, 110, 198, 200
#     p50: 100 + 150 × 60 / 70, p90: 250 + 250 × 70 / 88, p99: rank 198 reaches 500 = 500,
#     p99.9: 500 + 500 × 1.8 / 2 = 950; mean 0.045 s / 200 = 225
EXPECTED = {
    ("srv-a", "REGISTER_BROKER"): {"count": 100, "p50": 130, "p90": 250, "p99": 750, "p99_9": 975, "mean": 150},
    ("srv-a", "GET_ROUTEINFO_BY_TOPIC"): {"count": 10, "p50": 25 + 25 * 5 / 6, "p90": 100, "p99": 10_000_000,
                                          "p99_9": 10_000_000, "mean": 1_200_048},
    ("srv-a", SCRIPT): {"count": 1, "p50": 5, "p90": 9, "p99": 9.9, "p99_9": 9.99, "mean": 4},
    ("srv-b", "REGISTER_BROKER"): {"count": 100, "p50": 343.75, "p90": 468.75, "p99": 496.875, "p99_9": 499.6875,
                                   "mean": 300},
}
SERVER_POINT = {"serverSelectorThreads": 1, "defaultThreadPoolNums": 4}
NO_SERVER_POINT = {"serverSelectorThreads": 2, "defaultThreadPoolNums": 4}
REFUSED = "not scraped: <urlopen error [Errno 111] Connection refused>"


def config_label(point: dict[str, int]) -> str:
    """The report's label of a sweep point without "keys": meta.json sorts the point's keys."""
    return " ".join(f"{k}={v}" for k, v in sorted(point.items()))


def scraped_run(base: Path, run_id: str, seed: int, point: dict[str, int], start: str | None, end: str | None,
                record: dict) -> Path:
    """make_run plus the scrape files the storm would have written."""
    run_dir = make_run(base, run_id, seed, point, duration=2, server_metrics=record)
    for name, text in ((START_FILE, start), (END_FILE, end)):
        if text is not None:
            (run_dir / name).write_text(text, encoding="utf-8")
    return run_dir


@pytest.fixture(scope="module")
def server_report(spark, tmp_path_factory):
    base = tmp_path_factory.mktemp("server")
    url = "http://127.0.0.1:1/metrics"
    scraped = {"url": url, START_FILE: START_FILE, END_FILE: END_FILE}
    dirs = [
        scraped_run(base, "srv-a", 31, SERVER_POINT, exposition(SRV_A_START), exposition(SRV_A_END), scraped),
        scraped_run(base, "srv-b", 32, SERVER_POINT, exposition({}), exposition(SRV_B_END), scraped),
        scraped_run(base, "srv-no-url", 33, NO_SERVER_POINT, None, None,
                    {"url": None, START_FILE: None, END_FILE: None}),
        scraped_run(base, "srv-end-only", 34, NO_SERVER_POINT, None, exposition(SRV_B_END),
                    {"url": url, START_FILE: REFUSED, END_FILE: END_FILE}),
        scraped_run(base, "srv-java", 35, NO_SERVER_POINT, PROCESS_ONLY, PROCESS_ONLY, scraped),
    ]
    report = spark_report.build_report(spark, [str(d) for d in dirs], base / "report")
    return report, dirs


class HtmlTables(HTMLParser):
    """Every <table> of a page by its (h2, h3) headings, as rows of cell texts (entities decoded)."""

    def __init__(self, html: str) -> None:
        super().__init__()
        self.tables: dict[tuple[str, str], list[list[str]]] = {}
        self._headings = ["", ""]
        self._capture: str | None = None
        self._text = ""
        self._rows: list[list[str]] = []
        self.feed(html)

    def handle_starttag(self, tag: str, attrs: list) -> None:
        if tag in ("h2", "h3", "th", "td"):
            self._capture, self._text = tag, ""
        elif tag == "table":
            self._rows = self.tables[(self._headings[0], self._headings[1])] = []
        elif tag == "tr":
            self._rows.append([])

    def handle_endtag(self, tag: str) -> None:
        if tag != self._capture:
            return
        if tag == "h2":
            self._headings = [self._text, ""]
        elif tag == "h3":
            self._headings[1] = self._text
        else:
            self._rows[-1].append(self._text)
        self._capture = None

    def handle_data(self, data: str) -> None:
        if self._capture:
            self._text += data

    def records(self, h2: str, h3: str) -> list[dict[str, str]]:
        header, *rows = self.tables[(h2, h3)]
        return [dict(zip(header, row)) for row in rows]


def test_histogram_quantile_follows_prometheus():
    # per bucket: (0, 1]: 2, (1, 2]: 4, (2, 4]: 2, +Inf: 2 -> cumulative 2, 6, 8, 10
    cumulative = {1.0: 2, 2.0: 6, 4.0: 8, math.inf: 10}
    assert histogram_quantile(0.1, cumulative) == 0.5  # rank 1 in the first bucket, whose lower bound is 0
    assert histogram_quantile(0.2, cumulative) == 1.0  # rank 2 reaches the first bound exactly
    assert histogram_quantile(0.5, cumulative) == 1.75  # rank 5: 1 + 1 × (5 − 2) / 4
    assert histogram_quantile(0.7, cumulative) == 3.0  # rank 7: 2 + (4 − 2) × (7 − 6) / (8 − 6)
    assert histogram_quantile(0.8, cumulative) == 4.0
    assert histogram_quantile(0.81, cumulative) == 4.0  # in the +Inf bucket: the highest finite bound
    assert histogram_quantile(1.0, cumulative) == 4.0
    assert histogram_quantile(0.5, {1.0: 0, 2.0: 4, math.inf: 4}) == 1.5  # empty first bucket skipped
    assert histogram_quantile(1.0, {1.0: 0, 2.0: 4, math.inf: 4}) == 2.0
    assert math.isnan(histogram_quantile(0.5, {1.0: 0, 2.0: 0, math.inf: 0}))  # no observations
    assert math.isnan(histogram_quantile(0.5, {1.0: 3, 2.0: 4}))  # no +Inf bucket
    assert math.isnan(histogram_quantile(0.5, {math.inf: 4}))  # no finite bound
    for q in (0.0, -0.5, 1.5):
        with pytest.raises(ValueError):
            histogram_quantile(q, cumulative)


def test_scrapes_parse_and_subtract_per_request_code():
    start = parse_histogram(exposition(SRV_A_START))
    end = parse_histogram(exposition(SRV_A_END))
    assert end[SCRIPT].cumulative[1e-05] == 1.0 and end[SCRIPT].count == 1.0
    delta = window_delta(start, end)
    assert set(delta) == {"REGISTER_BROKER", "GET_ROUTEINFO_BY_TOPIC", SCRIPT}  # BROKER_HEARTBEAT did not move
    register = delta["REGISTER_BROKER"]
    assert [register.cumulative[float(LE[b])] for b in (50, 100, 250, 500, 1_000, math.inf)] == [0, 40, 90, 98, 100,
                                                                                                  100]
    assert register.sum_s == pytest.approx(0.015)
    assert parse_histogram(PROCESS_ONLY) == {}
    with pytest.raises(NoServerMetrics, match="went backwards"):  # the server restarted between the scrapes
        window_delta(end, start)
    with pytest.raises(NoServerMetrics, match="went backwards"):
        window_delta(end, {"REGISTER_BROKER": end["REGISTER_BROKER"]})


def test_merge_sums_buckets_on_the_bounds_all_histograms_have():
    fine = Buckets({1.0: 1, 2.0: 3, 4.0: 4, math.inf: 4}, 6.0)
    coarse = Buckets({2.0: 2, math.inf: 3}, 9.0)
    assert merge([fine, coarse]) == Buckets({2.0: 5, math.inf: 7}, 15.0)
    assert merge([fine, fine]) == Buckets({1.0: 2, 2.0: 6, 4.0: 8, math.inf: 8}, 12.0)


def test_run_window_says_why_there_are_no_server_metrics():
    text = exposition(SRV_B_END)
    both = {START_FILE: exposition({}), END_FILE: text}
    assert set(run_window(both, None).histograms) == {"REGISTER_BROKER"}
    assert run_window({END_FILE: text}, None).problem == (
        "no metrics-start.prom in the run directory (the storm did not scrape /metrics)")
    assert run_window({}, {"url": None, START_FILE: None, END_FILE: None}).problem == (
        "the storm had no metrics URL (run it with --metrics-url, or --launch)")
    url = "http://127.0.0.1:1/metrics"
    assert run_window({END_FILE: text}, {"url": url, START_FILE: REFUSED, END_FILE: END_FILE}).problem == (
        f"metrics-start.prom {REFUSED}")
    assert run_window({START_FILE: text}, {"url": url, START_FILE: START_FILE, END_FILE: END_FILE}).problem == (
        "metrics-end.prom is missing from the run directory")
    assert run_window({START_FILE: PROCESS_ONLY, END_FILE: PROCESS_ONLY}, None).problem.startswith(
        "the server exports no namesrv_request_duration_seconds histogram")
    assert run_window({START_FILE: text, END_FILE: text}, None).problem == (
        "namesrv_request_duration_seconds counted no requests between the scrapes")
    assert run_window({START_FILE: "garbage{ 1\n", END_FILE: text}, None).problem.startswith(
        "metrics-start.prom is not Prometheus text")
    no_inf = "\n".join(line for line in text.splitlines() if 'le="+Inf"' not in line)
    assert run_window({START_FILE: exposition({}), END_FILE: no_inf}, None).problem == (
        "namesrv_request_duration_seconds of request 'REGISTER_BROKER' has no +Inf bucket")


def test_server_latency_csv_has_hand_computed_percentiles(server_report):
    report, _ = server_report
    table = pd.read_csv(report.parent / "csv" / "server_latency.csv", keep_default_na=False)
    assert list(table.columns) == ["run_id", "config", "request", "count", "p50", "p90", "p99", "p99_9", "mean"]
    rows = {(r["run_id"], r["request"]): r for r in table.to_dict("records")}
    assert set(rows) == set(EXPECTED)  # no BROKER_HEARTBEAT (no requests in the window), no run without metrics
    for key, expected in EXPECTED.items():
        for column, value in expected.items():
            assert rows[key][column] == pytest.approx(value, abs=1e-3), (key, column)


def test_server_latency_of_a_configuration_sums_its_runs_buckets(server_report):
    report, _ = server_report
    table = pd.read_csv(report.parent / "csv" / "server_configurations.csv")
    label = config_label(SERVER_POINT)
    assert set(table["config"]) == {label}  # the other configuration has no run with server metrics
    register = table[table["request"] == "REGISTER_BROKER"].iloc[0]
    expected = {"runs": 2, "count": 200, "p50": 100 + 150 * 60 / 70, "p90": 250 + 250 * 70 / 88, "p99": 500,
                "p99_9": 950, "mean": 225}
    for column, value in expected.items():
        assert register[column] == pytest.approx(value, abs=1e-3), column
    route = table[table["request"] == "GET_ROUTEINFO_BY_TOPIC"].iloc[0]  # srv-a's alone
    assert route["count"] == 10 and route["p50"] == pytest.approx(25 + 25 * 5 / 6, abs=1e-3)


def test_html_shows_client_and_server_latency_in_one_row(server_report):
    report, _ = server_report
    html = report.read_text(encoding="utf-8")
    assert "histogram_quantile" in html and "linearly" in html and "highest finite bound" in html
    tables = HtmlTables(html)
    summary = pd.read_csv(report.parent / "csv" / "summary.csv")
    side_by_side = {(r["run_id"], r["request"]): r for r in tables.records("Client and server latency",
                                                                          "By run and request")}
    assert set(side_by_side) == {(r, q) for r in summary["run_id"] for q in summary["request"]}
    client = summary.set_index(["run_id", "request"])
    row = side_by_side[("srv-a", "REGISTER_BROKER")]
    assert row["client_p50 (ms)"] == f"{client.loc[('srv-a', 'REGISTER_BROKER'), 'p50'] / 1000:,.3f}"
    assert row["client_p99 (ms)"] == f"{client.loc[('srv-a', 'REGISTER_BROKER'), 'p99'] / 1000:,.3f}"
    assert (row["server_count"], row["server_p50 (ms)"], row["server_p99 (ms)"]) == ("100", "0.130", "0.750")
    route = side_by_side[("srv-a", "GET_ROUTEINFO_BY_TOPIC")]
    assert (route["server_p50 (ms)"], route["server_p99 (ms)"]) == ("0.046", "10,000.000")
    assert side_by_side[("srv-a", "BROKER_HEARTBEAT")]["server_p50 (ms)"] == "–"
    assert side_by_side[("srv-java", "REGISTER_BROKER")]["server_p99 (ms)"] == "–"
    label = config_label(SERVER_POINT)
    merged = {(r["config"], r["request"]): r for r in tables.records("Client and server latency",
                                                                     "By thread configuration (runs merged)")}
    assert (merged[(label, "REGISTER_BROKER")]["server_p50 (ms)"], merged[(label, "REGISTER_BROKER")]["server_runs"],
            merged[(label, "REGISTER_BROKER")]["client_runs"]) == ("0.229", "2", "2")
    server = {(r["run_id"], r["request"]): r for r in tables.records("Client and server latency",
                                                                     "Server latency by run and request code")}
    assert server[("srv-a", "GET_ROUTEINFO_BY_TOPIC")]["mean (ms)"] == "1,200.048"
    assert server[("srv-a", SCRIPT)]["p99_9 (ms)"] == "0.010"


def test_wire_labels_are_escaped_in_html(server_report):
    report, _ = server_report
    html = report.read_text(encoding="utf-8")
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "<script" not in html


def test_runs_without_server_metrics_say_why(server_report):
    report, _ = server_report
    html = report.read_text(encoding="utf-8")
    reasons = {
        "srv-no-url": "the storm had no metrics URL (run it with --metrics-url, or --launch)",
        "srv-end-only": f"metrics-start.prom {REFUSED}",
        "srv-java": "the server exports no namesrv_request_duration_seconds histogram (an older namesrv, or another "
                    "NameServer)",
    }
    for run_id, reason in reasons.items():  # in the server section and in the run's own section
        assert html.count(f"no server metrics for this run: {escape(reason)}") == 2, run_id
    assert "<urlopen" not in html
    runs = pd.read_csv(report.parent / "csv" / "runs.csv").set_index("run_id")["server_metrics_problem"]
    assert runs.drop(["srv-a", "srv-b"]).to_dict() == reasons
    assert runs[["srv-a", "srv-b"]].isna().all()
    assert html.count("no server metrics for this run:") == 2 * len(reasons)


def test_report_without_scrapes_says_so_plainly(sweep_report):
    report, dirs = sweep_report
    html = report.read_text(encoding="utf-8")
    reason = "no metrics-start.prom in the run directory (the storm did not scrape /metrics)"
    assert html.count(f"no server metrics for this run: {reason}") == 2 * len(dirs)
    assert "Server latency by run and request code" not in html
    assert pd.read_csv(report.parent / "csv" / "server_latency.csv").empty


# ---------------------------------------------------------------- route-change propagation

# push-a: 1000 µs × 50, 1500 × 40, 1900 × 9, 2000 × 1 (100 sightings; below 2048 µs HDR buckets are 1 µs wide)
#   p50: target max(int(50 × 100 / 100 + 0.5), 1) = 50, reached at 1000;  p90: 90 -> 1500;  p99: 99 -> 1900
#   p99.9: int(99.9 + 0.5) = 100 -> 2000;  max 2000
# push-b: 3000 µs × 100: from 2048 µs buckets are 2 µs wide, [3000, 3001], so every percentile and max is 3001
# Both merged (200): cumulative 50, 90, 99, 100 (≤ 2000), 200 (3001)
#   p50: target 100 -> 2000;  p90: 180 -> 3001;  p99: 198 -> 3001;  p99.9: int(199.8 + 0.5) = 200 -> 3001
PUSH_A = {1000: 50, 1500: 40, 1900: 9, 2000: 1}
PUSH_B = {3000: 100}
PUSH_EXPECTED = {
    "push-a": {"count": 100, "p50": 1000, "p90": 1500, "p99": 1900, "p99_9": 2000, "max": 2000},
    "push-b": {"count": 100, "p50": 3001, "p90": 3001, "p99": 3001, "p99_9": 3001, "max": 3001},
}
PUSH_MERGED = {"count": 200, "p50": 2000, "p90": 3001, "p99": 3001, "p99_9": 3001, "max": 3001}
#: A sweep point whose label needs escaping in HTML.
PUSH_POINT = {"serverSelectorThreads": 1, "tag": "<b>push</b>"}


def push_meta(subscribers: int, changes: int, missed: int, dropped: int, **extra) -> dict:
    """meta.json's "propagation" as the storm writes it (the report reads these keys)."""
    return {"subscribers": subscribers, "subscriber_topics": 4, "flap_period_s": 1.0, "flaps": changes // 2,
            "changes": changes, "sightings_expected": 100, "versions_missed": missed, "subscribers_dropped": dropped,
            **extra}


@pytest.fixture(scope="module")
def push_report(spark, tmp_path_factory):
    base = tmp_path_factory.mktemp("push")
    dirs = [make_run(base, "push-a", 41, PUSH_POINT, duration=2, push=(PUSH_A, push_meta(10, 4, 0, 0))),
            make_run(base, "push-b", 42, PUSH_POINT, duration=2, push=(PUSH_B, push_meta(20, 4, 2, 1))),
            make_run(base, "push-none", 43, PUSH_POINT, duration=2),
            make_run(base, "push-quiet", 44, {"serverSelectorThreads": 2}, duration=2,
                     push=({}, push_meta(5, 0, 0, 0, note="no broker flapped (--flap-period 0): no route changed, "
                                                                "no propagation recorded")))]
    return spark_report.build_report(spark, [str(d) for d in dirs], base / "report"), dirs


def test_propagation_tables_have_hand_computed_percentiles(push_report):
    report, dirs = push_report
    per_run = pd.read_csv(report.parent / "csv" / "propagation.csv").set_index("run_id")
    assert list(per_run.index) == ["push-a", "push-b", "push-quiet"]  # push-none had no subscribers
    for run_id, expected in PUSH_EXPECTED.items():
        for column, value in expected.items():
            assert per_run.loc[run_id, column] == value, (run_id, column)
    assert per_run.loc["push-b", ["subscribers", "changes", "versions_missed", "subscribers_dropped"]].tolist() == \
        [20, 4, 2, 1]
    assert per_run.loc["push-quiet", "count"] == 0 and per_run.loc["push-quiet", ["p50", "max"]].isna().all()
    raw = raw_histograms(dirs[0], metric="propagation")["ROUTE_CHANGED"]  # and they agree with hdrh
    assert per_run.loc["push-a", "p99"] == raw.get_value_at_percentile(99)
    configurations = pd.read_csv(report.parent / "csv" / "propagation_configurations.csv").set_index("config")
    merged = configurations.loc[config_label(PUSH_POINT)]
    assert (merged["runs"], merged["changes"], merged["versions_missed"], merged["subscribers_dropped"]) == (2, 8, 2, 1)
    for column, value in PUSH_MERGED.items():
        assert merged[column] == value, column


def test_propagation_section_escapes_names_and_says_which_runs_had_no_subscribers(push_report):
    report, _ = push_report
    html = report.read_text(encoding="utf-8")
    tables = HtmlTables(html)
    by_run = {r["run_id"]: r for r in tables.records("Route-change propagation", "By run")}
    assert (by_run["push-a"]["p50 (ms)"], by_run["push-a"]["p90 (ms)"], by_run["push-a"]["p99 (ms)"],
            by_run["push-a"]["p99_9 (ms)"], by_run["push-a"]["max (ms)"]) == ("1.000", "1.500", "1.900", "2.000",
                                                                          "2.000")
    assert (by_run["push-b"]["p99 (ms)"], by_run["push-b"]["count"]) == ("3.001", "100")
    assert by_run["push-a"]["config"] == config_label(PUSH_POINT)  # decoded from its escaped form
    merged = {r["config"]: r for r in tables.records("Route-change propagation", "By thread configuration (runs merged)")}
    assert (merged[config_label(PUSH_POINT)]["p50 (ms)"], merged[config_label(PUSH_POINT)]["p90 (ms)"]) == ("2.000",
                                                                                                          "3.001")
    assert "push-none: no subscribers in this run" in html
    assert "push-quiet: no broker flapped (--flap-period 0)" in html
    assert "&lt;b&gt;push&lt;/b&gt;" in html and "<b>push" not in html


def test_runs_without_subscribers_add_no_propagation_section(sweep_report):
    report, _ = sweep_report
    assert "Route-change propagation" not in report.read_text(encoding="utf-8")
    assert pd.read_csv(report.parent / "csv" / "propagation.csv").empty
