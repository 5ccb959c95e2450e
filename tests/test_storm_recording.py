"""The storm's recording path: interval recorder -> deltas -> run recorder -> run directory files."""
from __future__ import annotations

import io
import json
import random

import pyarrow.parquet as pq
import pytest
from hdrh.histogram import HdrHistogram
from hypothesis import given, settings
from hypothesis import strategies as st
from hdrh.log import HistogramLogReader

from bench.lib.hdr import HIGHEST_US, HdrLogWriter, bucket_rows, new_histogram, record_us
from bench.storm.recorder import IntervalRecorder
from bench.lib.output import NO_RESPONSE, ResourceSample, RunRecorder
from namesrv.protocol import RequestCode

SECOND = 1_000_000_000
ROUTE = int(RequestCode.GET_ROUTEINFO_BY_TOPIC)
REGISTER = int(RequestCode.REGISTER_BROKER)


def test_bucket_rows_reproduce_the_histogram():
    histogram = new_histogram()
    rng = random.Random(7)
    for _ in range(5000):
        record_us(histogram, int(rng.lognormvariate(6, 1.5)))
    rebuilt = new_histogram()
    total = 0
    for low, high, count in bucket_rows(histogram):
        assert histogram.get_lowest_equivalent_value(high) == low
        rebuilt.record_value(low, count)
        total += count
    assert total == histogram.get_total_count() == 5000
    for p in (0, 50, 90, 99, 99.9, 100):
        assert rebuilt.get_value_at_percentile(p) == histogram.get_value_at_percentile(p)


def test_record_clamps_out_of_range_values_instead_of_dropping_them():
    histogram = new_histogram()
    record_us(histogram, HIGHEST_US * 10)
    record_us(histogram, -5)
    assert histogram.get_total_count() == 2
    assert histogram.get_max_value() >= HIGHEST_US


def test_hdr_log_is_format_1_3_and_readable_by_hdrh():
    stream = io.StringIO()
    log = HdrLogWriter(stream, 1_700_000_000.25, "test log")
    first, second = new_histogram(), new_histogram()
    for value in (100, 200, 300_000):
        first.record_value(value)
    second.record_value(42)
    log.write("GET_ROUTEINFO_BY_TOPIC", 0.0, 1.0, first)
    log.write("REGISTER_BROKER", 1.0, 1.0, second)
    text = stream.getvalue()
    assert "#[Histogram log format version 1.3]" in text
    assert "#[StartTime: 1700000000.250 (seconds since epoch)," in text
    assert '"StartTimestamp","Interval_Length","Interval_Max","Interval_Compressed_Histogram"' in text
    assert "Tag=GET_ROUTEINFO_BY_TOPIC,0.000,1.000,300.031," in text  # Interval_Max in ms
    with pytest.raises(ValueError):
        log.write("bad tag", 0.0, 1.0, first)


def test_hdr_log_round_trips_through_hdrh_reader(tmp_path):
    path = tmp_path / "x.hlog"
    with open(path, "w", encoding="utf-8") as stream:
        log = HdrLogWriter(stream, 1_700_000_000.0)
        histogram = new_histogram()
        for value in range(1, 2000, 7):
            histogram.record_value(value)
        log.write("A", 2.0, 1.0, histogram)
    reader = HistogramLogReader(str(path), new_histogram())
    read = reader.get_next_interval_histogram()
    assert read.get_tag() == "A"
    assert read.get_total_count() == histogram.get_total_count()
    assert read.get_start_time_stamp() == pytest.approx((1_700_000_000.0 + 2.0) * 1000)
    assert read.get_value_at_percentile(99) == histogram.get_value_at_percentile(99)
    assert reader.get_next_interval_histogram() is None


def test_interval_recorder_attributes_to_intended_interval_and_skips_warmup():
    start = 10 * SECOND
    recorder = IntervalRecorder(worker=3, measure_start_ns=start)
    recorder.sent(ROUTE, start - 1, start + 5)  # intended during warm-up: not measured
    recorder.answered(ROUTE, start - 1, start + 2 * SECOND, 0)
    recorder.sent(ROUTE, start + SECOND + 10, start + SECOND + 1010)  # 1 µs late
    recorder.answered(ROUTE, start + SECOND + 10, start + 3 * SECOND, 0)  # answered 2 s later: still interval 1
    recorder.unanswered(REGISTER, start + 2 * SECOND)
    delta = recorder.ship()
    assert delta.worker == 3 and delta.sent == 2
    assert [(m, i, c) for m, i, c, _ in delta.histograms] == [("latency", 1, ROUTE), ("send_delay", 1, ROUTE)]
    latency = HdrHistogram.decode(delta.histograms[0][3])
    assert latency.get_total_count() == 1
    assert latency.values_are_equivalent(latency.get_max_value(), (2 * SECOND - 10) // 1000)
    assert sorted(delta.responses) == [(1, ROUTE, 0, 1), (2, REGISTER, NO_RESPONSE, 1)]
    assert recorder.ship().histograms == []  # shipped deltas are not shipped twice


def test_run_directory_holds_merged_deltas(tmp_path):
    run = RunRecorder("run-a")
    reference = new_histogram()
    rng = random.Random(1)
    recorders = [IntervalRecorder(worker, 0) for worker in range(2)]
    for step in range(600):
        recorder = recorders[step % 2]
        intended = rng.randrange(0, 3 * SECOND)
        latency_ns = int(rng.lognormvariate(12, 1)) * 1000
        recorder.sent(ROUTE, intended, intended + 1000)
        recorder.answered(ROUTE, intended, intended + latency_ns, 0 if step % 50 else 17)
        reference.record_value(latency_ns // 1000)
        if step % 100 == 99:  # ship mid-run: the same interval arrives in several deltas
            recorder.ship().apply_to(run)
    for recorder in recorders:
        recorder.ship().apply_to(run)
    run.add_resource(ResourceSample(0.0, "server", 1, 12.5, 50_000_000, 7, 10, 2))
    directory = run.write(tmp_path / "r", {"duration_s": 3, "mode": "open"}, start_epoch_s=1_700_000_000.0)

    merged = run.merged("latency", ROUTE)
    assert merged.get_total_count() == 600
    for p in (50, 99, 99.9, 100):
        assert merged.get_value_at_percentile(p) == reference.get_value_at_percentile(p)
    assert run.response_counts() == {(ROUTE, 0): 588, (ROUTE, 17): 12}

    meta = json.loads((directory / "meta.json").read_text())
    assert meta["run_id"] == "run-a" and meta["duration_s"] == 3 and meta["interval_s"] == 1.0
    rows = pq.read_table(directory / "histograms.parquet").to_pylist()
    assert {row["interval_start"] for row in rows} == {0.0, 1.0, 2.0}
    assert sum(row["count"] for row in rows if row["metric"] == "latency") == 600
    assert all(row["request"] == "GET_ROUTEINFO_BY_TOPIC" for row in rows)
    responses = pq.read_table(directory / "responses.parquet").to_pylist()
    assert sum(row["count"] for row in responses if row["response_code"] == 17) == 12
    resources = pq.read_table(directory / "resources.parquet").to_pylist()
    assert resources == [{"run_id": "run-a", "t": 0.0, "process": "server", "pids": 1, "cpu_percent": 12.5,
                          "rss_bytes": 50_000_000, "threads": 7, "ctx_voluntary": 10, "ctx_involuntary": 2}]
    reader = HistogramLogReader(str(directory / "hdr" / "latency.hlog"), new_histogram())
    from_log = new_histogram()
    while (interval := reader.get_next_interval_histogram()) is not None:
        from_log.add(interval)
    assert from_log.get_total_count() == 600
    assert from_log.get_value_at_percentile(99.9) == reference.get_value_at_percentile(99.9)
    with pytest.raises(FileExistsError):
        run.write(directory, {}, start_epoch_s=0.0)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 1), st.integers(-SECOND, 4 * SECOND), st.integers(0, 10**10),
                          st.booleans()), max_size=120))
def test_deltas_merge_to_the_same_histograms_however_they_are_shipped(events):
    """Any interleaving of two workers and any shipping schedule gives the histograms a single
    recorder would have: per interval and merged."""
    run = RunRecorder("prop")
    workers = [IntervalRecorder(worker, 0) for worker in range(2)]
    expected: dict[int, HdrHistogram] = {}
    for worker, intended, latency_ns, ship in events:
        workers[worker].answered(ROUTE, intended, intended + latency_ns, 0)
        if intended >= 0:
            record_us(expected.setdefault(intended // SECOND, new_histogram()), latency_ns // 1000)
        if ship:
            workers[worker].ship().apply_to(run)
    for recorder in workers:
        recorder.ship().apply_to(run)
    for interval, histogram in expected.items():
        got = run.interval_histogram("latency", interval, ROUTE)
        assert list(bucket_rows(got)) == list(bucket_rows(histogram))
    total = new_histogram()
    for histogram in expected.values():
        total.add(histogram)
    assert list(bucket_rows(run.merged("latency", ROUTE))) == list(bucket_rows(total))
    assert sum(run.response_counts().values()) == sum(h.get_total_count() for h in expected.values())
