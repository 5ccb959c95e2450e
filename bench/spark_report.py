"""The Spark report over run directories of every verb: one self-contained report.html plus CSV tables.

    python -m bench report runs/storm-* --out reports/latest
    python -m bench report runs/bench-20260101-120000 --out reports/bench --baseline java
    spark-submit --master yarn bench/__main__.py report hdfs:///bench/runs/a hdfs:///bench/runs/b --out report

Every location is a run directory (it holds meta.json) or a folder holding run directories up to
three levels down (a sweep folder, a bench folder of knee searches); local folders are walked,
other URIs listed with Hadoop's glob. A run given twice (a folder and a run in it) counts once.
Runs that measured latency (a storm, a knee's or a sweep's steps) get the percentile tables and
charts; every other verb's run its figures as a table. Errors in what was given are one line on
stderr and exit status 2.

Only the driver runs this repository's code (it finds `bench` and `namesrv` next to this file);
executors run built-in Spark SQL functions only, so a cluster needs no Python packages of ours.

This file is the command line and the public face (callers import the report's functions from
here); the work is done in bench/report/, each module importing only those before it:
percentiles.py (reading percentiles off merged HDR histograms, never averaging them), inputs.py
(finding and reading run directories), contents.py (what a report holds), judging.py
(bench/lib/verdict.py's rule on each run: the sweep's best point, the searches' knees, the
comparison against a baseline group), tables.py (every table, client and server latency,
route-change propagation), render.py (the HTML, its first screen the verdict and the knee chart),
svgplot.py (the charts) and browser.py (headless Chromium: the first screen's screenshot).
"""
from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path

import pandas as pd
from pyspark.sql import SparkSession

from bench.lib import cli
from bench.report import browser
from bench.report.contents import Groups, ReportTables, report_groups
from bench.report.inputs import RUN_SEARCH_DEPTH, Run, find_run_uris, load_runs
from bench.report.percentiles import SPECTRUM_PERCENTILES, SUMMARY_PERCENTILES, percentile_column
from bench.report.render import render_html
from bench.report.tables import compute_tables

__all__ = ["SPECTRUM_PERCENTILES", "SUMMARY_PERCENTILES", "Groups", "ReportTables", "Run", "build_parser",
           "build_report", "compute_tables", "create_spark", "find_run_uris", "load_runs", "main",
           "percentile_column", "render_html", "report_groups", "report_with_own_session"]


def create_spark(master: str | None, app_name: str = "namesrv-storm-report",
                 shuffle_partitions: int = 8) -> SparkSession:
    """Embedded local[*] by default; `--master` (or spark-submit's) for a cluster.

    Run directories hold thousands of rows, not billions: few shuffle partitions keep the
    many small stages of the report quick.
    """
    builder = (SparkSession.builder.appName(app_name)
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.adaptive.enabled", "false")
               .config("spark.sql.shuffle.partitions", str(shuffle_partitions))
               .config("spark.sql.execution.arrow.pyspark.enabled", "true")
               .config("spark.sql.session.timeZone", "UTC"))
    launched_by_spark_submit = "PYSPARK_GATEWAY_PORT" in os.environ
    if master or not launched_by_spark_submit:
        builder = builder.master(master or "local[*]")
        builder = builder.config("spark.driver.memory", os.environ.get("STORM_REPORT_DRIVER_MEMORY", "4g"))
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def build_report(spark: SparkSession, locations: Sequence[str], out_dir: Path,
                 title: str = "namesrv heartbeat storm report", baseline: str | None = None) -> Path:
    """Compute every table, write them as CSV under out_dir/csv and the HTML to out_dir/report.html."""
    runs = load_runs(spark, locations)
    measured = [run for run in runs if run.measured]
    others = [run for run in runs if not run.measured]
    tables = compute_tables(spark, measured, baseline) if measured else None
    (out_dir / "csv").mkdir(parents=True, exist_ok=True)
    for name, frame in tables.items() if tables is not None else ():
        frame.to_csv(out_dir / "csv" / f"{name}.csv", index=False)
    for run in others:
        pd.DataFrame(run.meta.get("results") or []).to_csv(out_dir / "csv" / f"results-{run.run_id}.csv", index=False)
    report = out_dir / "report.html"
    report.write_text(render_html(tables, measured, title, others), encoding="utf-8")
    return report


def report_with_own_session(master: str | None, locations: Sequence[str], out_dir: Path, title: str,
                            baseline: str | None = None) -> Path:
    """build_report in a session started (and stopped) for it: the command line and sweeps.

    Local locations are checked first, so a wrong path is an error before a session starts.
    """
    find_run_uris(locations)
    spark = create_spark(master)
    try:
        return build_report(spark, locations, out_dir, title, baseline)
    finally:
        spark.stop()


def build_parser() -> argparse.ArgumentParser:
    parser = cli.parser("report", __doc__)
    parser.add_argument("runs", nargs="+", metavar="LOCATION",
                        help="run directories (holding meta.json) or folders holding them up to "
                             f"{RUN_SEARCH_DEPTH} levels down (a sweep or bench folder); local paths or "
                             "Hadoop-compatible URIs")
    parser.add_argument("--out", type=Path, required=True, help="local directory for report.html and csv/")
    parser.add_argument("--master", help="Spark master URL; when absent: local[*], or the master spark-submit "
                                         "was given")
    parser.add_argument("--title", default="namesrv heartbeat storm report", help="the report's heading")
    parser.add_argument("--screenshot", choices=("auto", "off"), default="auto",
                        help="auto: with Chromium installed, a screenshot of the report's first screen "
                        "(first-screen.png beside report.html)")
    parser.add_argument("--baseline", metavar="NAME",
                        help="the group the comparison's ratios are relative to: a saturation search, "
                             "configuration label or run id; when absent: the search named java if searches "
                             "named namesrv and java exist, else the first group")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        report = report_with_own_session(args.master, args.runs, args.out, args.title, args.baseline)
    except (FileNotFoundError, ValueError) as exc:
        print(f"report: {exc}", file=sys.stderr)
        return 2
    print(f"report: {report}")
    if args.screenshot == "auto":
        if not browser.available():
            print(f"first screen: no screenshot, {browser.SKIP_REASON}")
        else:
            print(f"first screen: {browser.screenshot(report, report.parent / 'first-screen.png')}")
    return 0

