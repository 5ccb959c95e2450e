"""The Spark report's saturation, comparison and sweep verdicts, its locations and its formatting.

Knees, bests and ratios are checked against bench/lib/verdict.py applied to facts computed
directly from the runs' raw HDR logs and parquet files (hdrh, pyarrow), never against the
report's own numbers; run directories come from tests/test_spark_report.py's helpers.
"""
from __future__ import annotations

import json
import re
from html import unescape
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest
from test_spark_report import HtmlTables, make_run, make_step, raw_histograms, spark  # noqa: F401 (a fixture)

from bench import spark_report
from bench.report import inputs
from bench.lib import verdict
from bench.report import svgplot

SLO = verdict.Slo(latency_ms=5.0, min_samples=100)
#: search -> (offered/s, latency ms, partial) per step. java: 2000/s at 8 ms misses, so its knee is 500/s;
#: namesrv: 2000/s at 9 ms misses, its knee 1000/s (2× java's); its 4000/s step was cut short (not judged).
SEARCHES = {
    "java": [(200, 1.0, False), (500, 2.0, False), (1000, 8.0, False), (2000, 20.0, False)],
    "namesrv": [(200, 0.5, False), (500, 0.6, False), (1000, 1.0, False), (2000, 9.0, False), (4000, 1.0, True)],
}
MAX_RATE = 1_000_000.0


def halves(offered: float) -> dict[str, float]:
    return {"GET_ROUTEINFO_BY_TOPIC": offered / 2, "REGISTER_BROKER": offered / 2}


@pytest.fixture(scope="module")
def bench_dir(tmp_path_factory) -> Path:
    """runs/bench-X/<search>/<search>-stepNN/: run directories two levels below the bench folder."""
    bench = tmp_path_factory.mktemp("runs") / "bench-20260102-030405"
    for search, steps in SEARCHES.items():
        for step, (offered, latency, partial) in enumerate(steps, start=1):
            saturation = {"search": search, "implementation": search, "step": step, "offered_per_s": float(offered),
                          "workers": 1, "slo": SLO.describe(), "max_rate": MAX_RATE, "target": "127.0.0.1:1"}
            make_step(bench / search, f"{search}-step{step:02d}", latency_ms=latency, rates=halves(offered),
                      seed=step + len(search), partial=partial, extra_meta={"saturation": saturation})
    (bench / "notes").mkdir()  # a folder without runs is skipped
    return bench


@pytest.fixture(scope="module")
def saturation_report(spark, bench_dir):  # noqa: F811 (the shared session fixture)
    return spark_report.build_report(spark, [str(bench_dir)], bench_dir.parent / "report")


def raw_facts(run_dir: Path) -> verdict.StepFacts:
    """verdict.step_facts from the run's HDR logs (hdrh) and parquet files, as the storm's summarize rows."""
    meta = json.loads((run_dir / "meta.json").read_text())
    latency, delays = raw_histograms(run_dir), raw_histograms(run_dir, metric="send_delay")
    responses = pq.read_table(run_dir / "responses.parquet").to_pylist()
    rows = []
    for request, histogram in latency.items():
        mine = [r for r in responses if r["request"] == request]
        rows.append({"request": request, "requests": sum(r["count"] for r in mine),
                     "answered": histogram.get_total_count(),
                     "errors": sum(r["count"] for r in mine if r["response_code"] != 0),
                     **{f"p{p:g}_ms".replace(".", "_"): histogram.get_value_at_percentile(p) / 1000
                        for p in (50, 99, 99.9)},
                     "send_delay_p99_ms": delays[request].get_value_at_percentile(99) / 1000})
    slo = verdict.Slo(**(meta.get("sweep", {}).get("slo") or meta.get("saturation", {}).get("slo") or {}))
    return verdict.step_facts(rows, pq.read_table(run_dir / "resources.parquet").to_pylist(),
                              offered_per_s=sum(meta["load"]["rates_per_s"].values()),
                              duration_s=meta["duration_s"], workers=meta["load"]["workers"], slo=slo,
                              partial=meta.get("partial", False))


def test_knees_csv_equals_find_knee_on_facts_from_the_raw_histograms(saturation_report, bench_dir):
    knees = pd.read_csv(saturation_report.parent / "csv" / "knees.csv").set_index("search")
    assert list(knees.index) == ["java", "namesrv"]
    for search, steps in SEARCHES.items():
        facts = [raw_facts(bench_dir / search / f"{search}-step{step:02d}") for step in range(1, len(steps) + 1)]
        knee = verdict.find_knee([(f, verdict.judge(f, SLO)) for f in facts], MAX_RATE)
        row = knees.loc[search]
        assert (row["knee_offered_per_s"], row["bound"], row["note"]) == (knee.offered_per_s, knee.bound, knee.note)
        assert row["answered_per_s"] == facts[knee.index].answered_per_s
    assert (knees.loc["java", "knee_offered_per_s"], knees.loc["namesrv", "knee_offered_per_s"]) == (500, 1000)
    assert knees["baseline"].tolist() == ["java", "java"]  # namesrv and java: the ratio reads namesrv ÷ java
    assert knees["knee_ratio"].tolist() == [1.0, 2.0]
    comparison = pd.read_csv(saturation_report.parent / "csv" / "comparison.csv")
    assert comparison["knee_ratio"].tolist() == [1.0, 2.0]


def test_saturation_steps_are_judged_and_partial_steps_are_not(saturation_report):
    steps = pd.read_csv(saturation_report.parent / "csv" / "saturation_steps.csv", keep_default_na=False)
    assert len(steps) == sum(len(s) for s in SEARCHES.values())
    namesrv = steps[steps["search"] == "namesrv"].set_index("step")
    assert namesrv["verdict"].tolist() == ["met", "met", "met", "missed", "partial (not judged)"]
    assert "p99" in namesrv.loc[4, "reasons"] and "> 5 ms" in namesrv.loc[4, "reasons"]
    assert set(steps["generator_limited"]) == {"no"}
    assert namesrv.loc[2, "offered_per_s"] == 500 and namesrv.loc[2, "answered_per_s"] == 500
    assert namesrv.loc[2, "server_rss_mib"] == pytest.approx((50_000_000 + 500 * 1000) / 2**20)
    html = saturation_report.read_text(encoding="utf-8")
    tables = HtmlTables(html)
    knees = {r["search"]: r for r in tables.records("Saturation", "Knees")}
    assert (knees["namesrv"]["knee_offered_per_s"], knees["namesrv"]["knee ÷ java's"]) == ("1,000", "2.00×")
    assert [r["verdict"] for r in tables.records("Saturation", "Search namesrv")][-1] == "partial (not judged)"
    assert "Comparison" not in html and "(log scale)" in html  # the knees and their ratio are not shown twice
    assert unescape(html).count("knee ÷ java's") == 1


def test_saturation_charts_use_log_axes(saturation_report):
    html = saturation_report.read_text(encoding="utf-8")
    latency = _svg(html, "Worst-kind p99 against throughput")
    assert "p99 (ms) (log scale)" in latency and "answered / s (log scale)" in latency  # 200..2000/s: 10×
    assert "SLO 5 ms" in latency
    assert "offered / s (log scale)" in _svg(html, "Answered against offered load")


def _svg(html: str, title: str) -> str:
    start = html.index(f'aria-label="{title}"')
    return html[start:html.index("</svg>", start)]


def test_baseline_option_picks_the_reference_and_rejects_unknown_names(spark, bench_dir, tmp_path):  # noqa: F811
    runs = spark_report.load_runs(spark, [str(bench_dir)])
    assert spark_report.report_groups(runs, "namesrv").baseline == "namesrv"
    with pytest.raises(ValueError, match=r"--baseline 'nope' is not one of this report's searches: 'java', 'namesrv'"):
        spark_report.build_report(spark, [str(bench_dir)], tmp_path / "report", baseline="nope")
    assert not (tmp_path / "report").exists()


# ---------------------------------------------------------------- sweep best and A/B comparison

FAST = {"serverSelectorThreads": 1}
SLOW = {"serverSelectorThreads": 2}
AB_RATES = {"GET_ROUTEINFO_BY_TOPIC": 1000, "REGISTER_BROKER": 64}


def sweep_meta(point: dict) -> dict:
    return {"sweep": {"point": point, "keys": list(point), "slo": SLO.describe()}}


@pytest.fixture(scope="module")
def ab_report(spark, tmp_path_factory):  # noqa: F811
    """A sweep folder: the fast point twice (repeats), the slow one once, all at one offered load."""
    sweep = tmp_path_factory.mktemp("sweep")
    dirs = [make_step(sweep, "p00-sst1-r1", latency_ms=1.0, rates=AB_RATES, duration=2, seed=1,
                      extra_meta=sweep_meta(FAST)),
            make_step(sweep, "p00-sst1-r2", latency_ms=1.5, rates=AB_RATES, duration=2, seed=2,
                      extra_meta=sweep_meta(FAST)),
            make_step(sweep, "p01-sst2-r1", latency_ms=3.0, rates=AB_RATES, duration=2, seed=3,
                      extra_meta=sweep_meta(SLOW))]
    report = spark_report.build_report(spark, [str(sweep)], sweep / "report", baseline="serverSelectorThreads=2")
    return report, dirs


def test_sweep_best_is_verdicts_choose_best_over_raw_facts(ab_report):
    report, dirs = ab_report
    candidates = []
    for label, members in (("serverSelectorThreads=1", dirs[:2]), ("serverSelectorThreads=2", dirs[2:])):
        facts = [raw_facts(d) for d in members]
        candidates.append(verdict.Candidate(label, tuple((f, verdict.judge(f, SLO)) for f in facts)))
    best = verdict.choose_best(candidates, SLO)
    assert best.label == "serverSelectorThreads=1"
    html = report.read_text(encoding="utf-8")
    assert f"Best: <b>{best.label}</b> — {best.reason}" in html


def test_comparison_ratios_come_from_merged_histograms(ab_report):
    report, dirs = ab_report
    comparison = pd.read_csv(report.parent / "csv" / "comparison.csv")
    fast, slow = raw_histograms(*dirs[:2]), raw_histograms(dirs[2])
    for request in AB_RATES:
        rows = comparison[comparison["request"] == request].set_index("group")
        assert list(rows.index) == ["serverSelectorThreads=1", "serverSelectorThreads=2"]
        for column, p in (("p50", 50), ("p99", 99), ("p99_9", 99.9)):
            assert rows.loc["serverSelectorThreads=1", column] == fast[request].get_value_at_percentile(p)
            ratio = fast[request].get_value_at_percentile(p) / slow[request].get_value_at_percentile(p)
            assert rows.loc["serverSelectorThreads=1", f"{column}_ratio"] == pytest.approx(ratio)
            assert rows.loc["serverSelectorThreads=2", f"{column}_ratio"] == 1.0
        assert rows.loc["serverSelectorThreads=1", "throughput_ratio"] == pytest.approx(1.0)  # same load, 2 runs
    html = report.read_text(encoding="utf-8")
    assert "Latency spectrum of GET_ROUTEINFO_BY_TOPIC" in html


def test_throughput_over_time_of_uneven_kinds_is_on_a_log_axis(ab_report):
    html = ab_report[0].read_text(encoding="utf-8")
    assert "responses / s (log scale)" in _svg(html, "Throughput over time")  # 1,000/s beside 64/s


# ---------------------------------------------------------------- formatting

NUMBER_WITH_MANY_DECIMALS = re.compile(r"\d\.\d{4,}")


@pytest.mark.parametrize("which", ["saturation", "ab"])
def test_html_cells_hold_rounded_numbers_and_no_json(which, saturation_report, ab_report):
    report = saturation_report if which == "saturation" else ab_report[0]
    html = report.read_text(encoding="utf-8")
    parsed = HtmlTables(html)
    cells = [cell for rows in parsed.tables.values() for row in rows for cell in row]
    assert cells
    for cell in cells:
        assert not NUMBER_WITH_MANY_DECIMALS.search(cell), cell
        assert not cell.lstrip().startswith(("{", "[")) and '":' not in cell, cell
        assert "->" not in cell, cell
    assert html.count("<table") == html.count("<div class=scroll><table")  # every table scrolls, not the page
    runs = parsed.records("Runs", "")
    assert runs[0]["offered"] in ("GET_ROUTEINFO_BY_TOPIC 1,000/s · REGISTER_BROKER 64/s",
                                  "GET_ROUTEINFO_BY_TOPIC 100/s · REGISTER_BROKER 100/s")
    assert runs[0]["host load 1m"] == "1.21 → 1.29"
    assert (runs[0]["duration_s"], runs[0]["workers × connections"], runs[0]["started"]) == ("1" if which ==
                                                                                            "saturation" else "2",
                                                                                            "1 × 1",
                                                                                            "2026-01-02 03:04:05")
    assert "--listen" not in "".join(runs[0].values())  # the command line is in the run's details line
    assert "command line: python -m namesrv --listen 127.0.0.1:1" in html


def test_svg_line_chart_goes_log_when_values_span_ten_times():
    assert svgplot.spans_decade([64, 128, 5000]) and not svgplot.spans_decade([100, 500, 0])
    flat = [svgplot.Series("a", [1, 2], [64, 128]), svgplot.Series("b", [1, 2], [5000, 5100])]
    chart = svgplot.line_chart(flat, title="t", x_label="x", y_label="rate", y_log=True, x_log=True)
    assert "rate (log scale)" in chart and "x (log scale)" in chart and ">10k<" in chart
    assert "(log scale)" not in svgplot.line_chart(flat, title="t", x_label="x", y_label="rate")
    with_zero = svgplot.line_chart([svgplot.Series("a", [0, 1, 2], [0, 10, 100])], title="t", x_label="x",
                                   y_label="y", y_log=True)  # a point at 0 has no place on a log axis
    assert re.search(r'points="[\d.]+,[\d.]+ [\d.]+,[\d.]+"', with_zero) and ">1e-09<" not in with_zero


# ---------------------------------------------------------------- locations


def test_folders_are_searched_three_levels_down_in_natural_order(tmp_path):
    bench = tmp_path / "bench"
    for path in ("a/x/step10", "a/x/step9", "b/step1", "c/d/e/f/too-deep"):
        (bench / path).mkdir(parents=True)
        (bench / path / "meta.json").write_text("{}")
    (bench / "b" / "step1" / "hdr" / "inner").mkdir(parents=True)  # nothing inside a run is another run
    (bench / "b" / "step1" / "hdr" / "inner" / "meta.json").write_text("{}")
    found = spark_report.find_run_uris([str(bench)])
    assert [Path(uri).name for uri in found] == ["step9", "step10", "step1"]
    assert spark_report.find_run_uris([str(bench / "b"), str(bench / "b" / "step1")]) == found[2:]  # once
    assert spark_report.find_run_uris(["hdfs:///bench/runs/a"]) == ["hdfs:///bench/runs/a"]  # no session: as given
    assert "too-deep" not in " ".join(found)  # four levels down
    with pytest.raises(FileNotFoundError, match=r"/c holds no run directories \(no meta.json within 3 levels\)"):
        spark_report.find_run_uris([str(bench / "c")])


def test_hadoop_listing_finds_the_same_runs(spark, bench_dir):  # noqa: F811
    local = spark_report.find_run_uris([str(bench_dir)])
    listed = inputs._remote_run_uris(spark, bench_dir.as_uri())
    assert [u.rsplit("/", 1)[1] for u in listed] == [u.rsplit("/", 1)[1] for u in local]
    with pytest.raises(FileNotFoundError, match="holds no run directories"):
        inputs._remote_run_uris(spark, (bench_dir / "notes").as_uri())


def test_main_reports_bad_locations_in_one_line_with_exit_status_2(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    assert spark_report.main([str(tmp_path / "empty"), "--out", str(tmp_path / "out")]) == 2
    error = capsys.readouterr().err
    assert error == (f"report: {tmp_path / 'empty'} holds no run directories "
                     "(no meta.json within 3 levels)\n")
    assert spark_report.main([str(tmp_path / "missing"), "--out", str(tmp_path / "out")]) == 2
    assert capsys.readouterr().err == f"report: {tmp_path / 'missing'} does not exist\n"


def test_every_option_has_help_and_a_default_only_when_it_has_one():
    text = " ".join(spark_report.build_parser().format_help().split())
    assert "(default: None)" not in text and "(default: False)" not in text
    assert "(default: namesrv heartbeat storm report)" in text
    for action in spark_report.build_parser()._actions:
        assert action.help, action.dest


def test_a_plain_storm_run_still_has_a_default_slo_and_offered_load(tmp_path):
    run_dir = make_run(tmp_path, "plain", 5, {"serverSelectorThreads": 1}, duration=1)
    meta = json.loads((run_dir / "meta.json").read_text())
    run = spark_report.Run(meta["run_id"], run_dir.as_uri(), meta)
    assert run.slo == verdict.Slo() and run.offered_per_s == 500 and run.saturation is None


def test_a_step_whose_answers_never_came_is_judged_alike_by_the_storm_and_the_report(spark, tmp_path):  # noqa: F811
    """An overloaded server closed every connection: the route queries of the window were never answered.
    The storm's own summary and the report both count them as errors, so both miss the step the same way."""
    from bench.heartbeat_storm import summarize
    from bench.storm.recorder import IntervalRecorder
    from bench.lib.output import RunRecorder
    from namesrv.protocol import RequestCode

    run = RunRecorder("lost-step01")
    recorder = IntervalRecorder(0, measure_start_ns=0)
    register, route = int(RequestCode.REGISTER_BROKER), int(RequestCode.GET_ROUTEINFO_BY_TOPIC)
    for i in range(200):
        intended = i * 5_000_000
        recorder.sent(register, intended, intended)
        recorder.answered(register, intended, intended + 1_000_000, 0)
        recorder.sent(route, intended, intended)
        recorder.unanswered(route, intended)
    recorder.ship().apply_to(run)
    saturation = {"search": "lost", "implementation": "namesrv", "step": 1, "offered_per_s": 400.0, "workers": 1,
                  "slo": SLO.describe(), "max_rate": MAX_RATE, "target": "127.0.0.1:1"}
    rows = summarize(run, 1.0)
    meta = {"duration_s": 1.0, "warmup_s": 1, "mode": "open", "partial": False, "summary": rows,
            "server": {"address": "127.0.0.1:1"}, "load": {"workers": 1, "rates_per_s": halves(400.0)},
            "saturation": saturation}
    run.write(tmp_path / "lost" / "lost-step01", meta, start_epoch_s=1_700_000_000.0)
    storm = verdict.judge(verdict.step_facts(rows, [], offered_per_s=400.0, duration_s=1.0, workers=1, slo=SLO), SLO)
    report = spark_report.build_report(spark, [str(tmp_path / "lost")], tmp_path / "report")
    steps = pd.read_csv(report.parent / "csv" / "saturation_steps.csv", keep_default_na=False)
    assert not storm.met and "errors 50.00% > budget 0.10%" in storm.reasons
    assert steps.loc[0, "verdict"] == "missed (not every kind judged)" and storm.unjudged  # no route answer to judge
    assert steps.loc[0, "reasons"] == "; ".join(storm.reasons)
