"""Spark report over heartbeat-storm run directories: one self-contained report.html plus CSV tables.

    python bench/spark_report.py runs/storm-* --out reports/latest
    spark-submit --master yarn bench/spark_report.py hdfs:///bench/runs/a hdfs:///bench/runs/b --out report

Only the driver runs this repository's code (it finds `bench` and `namesrv` next to this file);
executors run built-in Spark SQL functions only, so a cluster needs no Python packages of ours.

Percentiles always come from *merged histograms*: the runs' non-empty HDR buckets are summed per
bucket and the percentile is read off the cumulative counts with HdrHistogram's own rule, so a
report's p99 over many intervals or runs is exactly what HdrHistogram would say for the union of
their samples (percentiles are never averaged). Runs with the same thread configuration are
merged the same way in the configuration table; a sweep gets heatmaps by configuration.

Server-side latency sits beside the client's: the difference of the two scrapes of the server's
/metrics the storm keeps in a run directory (bench/storm/server_metrics.py), its percentiles read
with Prometheus's `histogram_quantile` rule and runs merged by summing bucket counts, likewise.
A run without usable scrapes (no URL, a failed scrape, a server without the histogram) says why.

Route-change propagation (storms with --subscribers and --flap-period: how long a broker's flap
took to reach each subscriber, bench/storm/subscriber.py) is read off the merged `propagation`
histograms the same way, per run and per configuration, beside the versions missed and
subscribers dropped to polling of each run's meta.json. Runs without subscribers add nothing.
"""
from __future__ import annotations

import argparse
import json
import logging
import math
import os
import re
import sys
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape
from pathlib import Path
from urllib.parse import urlparse

import pandas as pd
from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F

if __package__ in (None, ""):  # run as a script: make `bench` and `namesrv` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.storm import server_metrics, svgplot  # noqa: E402
from bench.storm.rundir import SEND_DELAY_WARNING_US, response_name, thread_config  # noqa: E402

log = logging.getLogger("spark_report")

#: Percentiles of the summary tables.
SUMMARY_PERCENTILES = (50.0, 90.0, 99.0, 99.9)
#: Percentiles of the latency spectrum plot (plus 100 = max).
SPECTRUM_PERCENTILES = (0.0, 25.0, 50.0, 75.0, 90.0, 95.0, 99.0, 99.5, 99.9, 99.95, 99.99, 99.995, 99.999, 100.0)


def percentile_column(p: float) -> str:
    """50 -> p50, 99.9 -> p99_9 (column names Spark and CSV readers accept)."""
    return "p" + f"{p:g}".replace(".", "_")


#: Columns of the server-side latency tables after their keys and `request`: microseconds, as the client's.
SERVER_COLUMNS = ("count", *[percentile_column(p) for p in SUMMARY_PERCENTILES], "mean")
#: What the propagation tables take from each run's meta.json "propagation" (summed over a configuration's runs).
PROPAGATION_FACTS = ("changes", "sightings_expected", "versions_missed", "subscribers_dropped")


def merged_percentiles(buckets: DataFrame, keys: Sequence[str], percentiles: Sequence[float]) -> DataFrame:
    """Per group of `keys`: count, the given percentiles and max, from merged HDR buckets.

    HdrHistogram's rule (hdrh `get_value_at_percentile`): target = max(int(p * total / 100 + 0.5), 1);
    the answer is the highest equivalent value of the first bucket whose cumulative count reaches
    the target (the lowest equivalent value for p = 0). Same double arithmetic, same order.
    """
    merged = buckets.groupBy(*keys, "value_lo", "value_hi").agg(F.sum("count").alias("count"))
    group = Window.partitionBy(*keys)
    running = group.orderBy("value_lo").rowsBetween(Window.unboundedPreceding, Window.currentRow)
    merged = merged.withColumn("total", F.sum("count").over(group)).withColumn("cum", F.sum("count").over(running))
    aggregates = [F.max("total").alias("count")]
    for p in percentiles:
        target = F.greatest(F.floor(F.lit(float(min(p, 100.0))) * F.col("total") / F.lit(100.0) + F.lit(0.5)),
                            F.lit(1))
        value = F.col("value_hi") if p > 0 else F.col("value_lo")
        aggregates.append(F.min(F.when(F.col("cum") >= target, value)).alias(percentile_column(p)))
    aggregates.append(F.max("value_hi").alias("max"))
    return merged.groupBy(*keys).agg(*aggregates)


# ---------------------------------------------------------------- inputs


@dataclass(frozen=True, slots=True)
class Run:
    """One run directory's identity and meta.json."""

    run_id: str
    uri: str
    meta: dict

    @property
    def config(self) -> dict[str, str]:
        """The thread configuration the run is compared by: the sweep point, else the server's pools."""
        sweep = self.meta.get("sweep") or {}
        if sweep.get("point"):
            point = sweep["point"]
            return {k: str(point[k]) for k in sweep.get("keys") or sorted(point)}
        threads = (self.meta.get("server") or {}).get("thread_config") or {}
        return {k: str(v) for k, v in thread_config(threads).items()}  # meta.json sorts keys: restore the order

    @property
    def config_label(self) -> str:
        return " ".join(f"{k}={v}" for k, v in self.config.items()) or "unknown"

    @property
    def push(self) -> dict | None:
        """meta.json's route-change push summary when the run had subscribers, else None."""
        propagation = self.meta.get("propagation") or {}
        return propagation if propagation.get("subscribers") else None


def normalize_uri(location: str) -> str:
    """Local paths become absolute file: URIs; anything with a scheme (hdfs:, s3a:, file:) is kept."""
    if urlparse(location).scheme and not (len(location) > 1 and location[1] == ":"):
        return location.rstrip("/")
    return Path(location).resolve().as_uri()


def load_runs(spark: SparkSession, locations: Sequence[str]) -> list[Run]:
    """Each location's meta.json, read through Spark (so any Hadoop-compatible file system works)."""
    uris = [normalize_uri(location) for location in locations]
    for uri in uris:  # a clear message for the common case, before Spark's stack trace
        if uri.startswith("file:") and not Path(urlparse(uri).path, "meta.json").is_file():
            raise FileNotFoundError(f"{urlparse(uri).path} has no meta.json: not a storm run directory")
    texts = dict(spark.sparkContext.wholeTextFiles(",".join(f"{uri}/meta.json" for uri in uris)).collect())
    runs = []
    for uri in uris:
        wanted = _tail(uri) + "/meta.json"
        text = next((body for path, body in texts.items() if path.rstrip("/").endswith(wanted)), None)
        if text is None:
            raise FileNotFoundError(f"{uri} has no meta.json: not a storm run directory")
        meta = json.loads(text)
        runs.append(Run(meta["run_id"], uri, meta))
    seen: dict[str, str] = {}
    for run in runs:
        if run.run_id in seen:
            raise ValueError(f"run {run.run_id} given twice ({seen[run.run_id]} and {run.uri})")
        seen[run.run_id] = run.uri
    return runs


def _tail(uri: str) -> str:
    return urlparse(uri).path.rstrip("/")


def read_server_windows(spark: SparkSession, runs: Sequence[Run]) -> dict[str, server_metrics.ServerWindow]:
    """Each run's server-side latency, or why it has none, from its metrics-*.prom files read through Spark.

    The run directories are read with a file-name filter rather than the files named, so a scrape
    that was never written is simply absent instead of failing the whole read.
    """
    files = (spark.read.option("pathGlobFilter", "metrics-*.prom").text([run.uri for run in runs], wholetext=True)
             .select(F.col("_metadata.file_path"), "value").collect())
    run_ids = {_tail(run.uri): run.run_id for run in runs}
    scrapes: dict[str, dict[str, str]] = {run.run_id: {} for run in runs}
    for path, text in files:
        directory, _, name = _tail(path).rpartition("/")
        scrapes[run_ids[directory]][name] = text
    return {run.run_id: server_metrics.run_window(scrapes[run.run_id], run.meta.get("server_metrics"))
            for run in runs}


# ---------------------------------------------------------------- tables


@dataclass
class ReportTables:
    runs: pd.DataFrame
    summary: pd.DataFrame
    configurations: pd.DataFrame
    errors: pd.DataFrame
    intervals: pd.DataFrame
    spectrum: pd.DataFrame
    resources: pd.DataFrame
    sweep: pd.DataFrame
    server_latency: pd.DataFrame
    server_configurations: pd.DataFrame
    client_vs_server: pd.DataFrame
    client_vs_server_configurations: pd.DataFrame
    propagation: pd.DataFrame
    propagation_configurations: pd.DataFrame

    def items(self) -> list[tuple[str, pd.DataFrame]]:
        return [(name, getattr(self, name)) for name in
                ("runs", "summary", "configurations", "errors", "intervals", "spectrum", "resources", "sweep",
                 "server_latency", "server_configurations", "client_vs_server", "client_vs_server_configurations",
                 "propagation", "propagation_configurations")]


def compute_tables(spark: SparkSession, runs: Sequence[Run]) -> ReportTables:
    """Every table of the report.

    The bucket merging and percentile reading happen in Spark (they scale with the data); the
    small per-run/per-configuration results are then joined in pandas, which keeps the number of
    Spark jobs — each costing a scheduling round trip — low.
    """
    histograms = spark.read.parquet(*[f"{run.uri}/histograms.parquet" for run in runs])
    responses = spark.read.parquet(*[f"{run.uri}/responses.parquet" for run in runs])
    resources = spark.read.parquet(*[f"{run.uri}/resources.parquet" for run in runs])
    labels = spark.createDataFrame([(run.run_id, run.config_label) for run in runs], "run_id string, config string")
    latency = histograms.filter(F.col("metric") == "latency").join(F.broadcast(labels), "run_id").cache()
    run_info = pd.DataFrame({"run_id": [run.run_id for run in runs], "config": [run.config_label for run in runs],
                             "duration_s": [float(run.meta["duration_s"]) for run in runs]})

    percentiles = sorted(set(SPECTRUM_PERCENTILES) | set(SUMMARY_PERCENTILES))
    per_run = merged_percentiles(latency, ["run_id", "request"], percentiles).toPandas()
    per_config = merged_percentiles(latency, ["config", "request"], SUMMARY_PERCENTILES).toPandas()
    send_delay = (merged_percentiles(histograms.filter(F.col("metric") == "send_delay"), ["run_id", "request"],
                                     (99.0,)).toPandas().rename(columns={"p99": "send_delay_p99"}))
    per_interval = (merged_percentiles(latency, ["run_id", "request", "interval_start", "interval_length"],
                                       (50.0, 99.0))
                    .withColumn("throughput_per_s", F.col("count") / F.col("interval_length"))
                    .select("run_id", "request", "interval_start", "throughput_per_s", "count", "p50", "p99", "max")
                    .orderBy("run_id", "request", "interval_start").toPandas())
    errors = (responses.groupBy("run_id", "request", "response_code").agg(F.sum("count").alias("count"))
              .orderBy("run_id", "request", "response_code").toPandas())
    resource_table = resources.orderBy("run_id", "process", "t").toPandas()
    latency.unpersist()

    errors["share"] = errors["count"] / errors.groupby(["run_id", "request"])["count"].transform("sum")
    errors.insert(3, "response", [response_name(code) for code in errors["response_code"]])
    outcomes = (errors.assign(errors=errors["count"].where(errors["response_code"] != 0, 0))
                .groupby(["run_id", "request"], as_index=False).agg(requests=("count", "sum"), errors=("errors", "sum"))
                .merge(run_info, on="run_id"))
    summary = _stats_table(per_run.merge(send_delay[["run_id", "request", "send_delay_p99"]], how="left",
                                         on=["run_id", "request"]),
                           outcomes, run_info, ["run_id", "config"], with_send_delay=True)
    configurations = _stats_table(per_config, outcomes, run_info, ["config"], with_send_delay=False)
    spectrum = per_run.melt(id_vars=["run_id", "request"],
                            value_vars=[percentile_column(p) for p in SPECTRUM_PERCENTILES],
                            var_name="percentile", value_name="value_us")
    spectrum["percentile"] = [float(c[1:].replace("_", ".")) for c in spectrum["percentile"]]
    spectrum = spectrum.sort_values(["run_id", "request", "percentile"]).reset_index(drop=True)
    windows = read_server_windows(spark, runs)
    runs_table = pd.DataFrame([{**_run_row(run), "server_metrics_problem": windows[run.run_id].problem}
                               for run in runs])
    server_per_run, server_per_config = _server_tables(windows, run_info)
    return ReportTables(runs_table, summary, configurations, errors, per_interval, spectrum, resource_table,
                        _sweep(configurations, runs), server_per_run, server_per_config,
                        _client_vs_server(summary, server_per_run, ["run_id", "config"]),
                        _client_vs_server(configurations, server_per_config, ["config"]),
                        *_propagation_tables(histograms, labels, runs))


def _stats_table(stats: pd.DataFrame, outcomes: pd.DataFrame, run_info: pd.DataFrame, keys: list[str],
                 with_send_delay: bool) -> pd.DataFrame:
    """Per `keys` + request: answered, throughput, percentiles and errors.

    Grouped by ["config"], every run of a configuration is merged: buckets (already, in Spark),
    request counts and durations add, so throughput is answered / total measured seconds.
    """
    if "config" not in stats.columns:
        stats = stats.merge(run_info[["run_id", "config"]], on="run_id")
    counts = outcomes.groupby([*keys, "request"], as_index=False)[["requests", "errors"]].sum()
    durations = run_info.groupby(keys, as_index=False).agg(duration_s=("duration_s", "sum"), runs=("run_id", "count"))
    table = stats.merge(counts, how="outer", on=[*keys, "request"]).merge(durations, how="left", on=keys)
    table["throughput_per_s"] = table["count"] / table["duration_s"]
    table["error_rate"] = table["errors"] / table["requests"]
    table = table.rename(columns={"count": "answered"})
    columns = [*keys, *([] if "run_id" in keys else ["runs"]), "request", "requests", "answered", "throughput_per_s",
               *[percentile_column(p) for p in SUMMARY_PERCENTILES], "max", "errors", "error_rate",
               *(["send_delay_p99"] if with_send_delay else [])]
    return table[columns].sort_values([*keys, "request"]).reset_index(drop=True)


def _propagation_tables(histograms: DataFrame, labels: DataFrame,
                        runs: Sequence[Run]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Propagation latency per run and per thread configuration (runs merged), of the runs with subscribers.

    count and percentiles (µs) come from the merged `propagation` buckets exactly as the client
    latency's do; PROPAGATION_FACTS from each run's meta.json, summed over a configuration's runs.
    A run whose subscribers saw no change has count 0 and no percentiles.
    """
    tail = ["sightings_expected", "count", *[percentile_column(p) for p in SUMMARY_PERCENTILES], "max",
            "versions_missed", "subscribers_dropped"]
    run_columns = ["run_id", "config", "subscribers", "changes", *tail]
    config_columns = ["config", "runs", "changes", *tail]
    listening = [run for run in runs if run.push]
    if not listening:  # no Spark job for nothing
        return pd.DataFrame(columns=run_columns), pd.DataFrame(columns=config_columns)
    facts = pd.DataFrame([{"run_id": run.run_id, "config": run.config_label, "subscribers": run.push["subscribers"],
                           **{name: run.push.get(name) or 0 for name in PROPAGATION_FACTS}} for run in listening])
    per_config_facts = facts.groupby("config", as_index=False).agg(
        runs=("run_id", "count"), **{name: (name, "sum") for name in PROPAGATION_FACTS})
    propagation = histograms.filter(F.col("metric") == "propagation").join(F.broadcast(labels), "run_id")
    per_run = facts.merge(merged_percentiles(propagation, ["run_id"], SUMMARY_PERCENTILES).toPandas(), how="left",
                          on="run_id")
    per_config = per_config_facts.merge(merged_percentiles(propagation, ["config"], SUMMARY_PERCENTILES).toPandas(),
                                        how="left", on="config")
    for table in (per_run, per_config):
        table["count"] = table["count"].fillna(0).astype("int64")
    return (per_run[run_columns].sort_values("run_id").reset_index(drop=True),
            per_config[config_columns].sort_values("config").reset_index(drop=True))


def _server_tables(windows: dict[str, server_metrics.ServerWindow],
                   run_info: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Server latency per run and per thread configuration, by request code.

    A configuration's runs are merged as the client's are: their bucket deltas are summed and the
    percentiles read off the sum. `runs` counts the runs that had server metrics.
    """
    config_of = dict(zip(run_info["run_id"], run_info["config"]))
    per_run = []
    by_config: dict[str, dict[str, list[server_metrics.Buckets]]] = defaultdict(lambda: defaultdict(list))
    runs_with_metrics: dict[str, int] = defaultdict(int)
    for run_id, window in windows.items():
        if window.problem is not None:
            continue
        config = config_of[run_id]
        runs_with_metrics[config] += 1
        for request, buckets in window.histograms.items():
            per_run.append({"run_id": run_id, "config": config, "request": request, **_server_stats(buckets)})
            by_config[config][request].append(buckets)
    per_config = [{"config": config, "runs": runs_with_metrics[config], "request": request,
                   **_server_stats(server_metrics.merge(histograms))}
                  for config, requests in by_config.items() for request, histograms in requests.items()]
    return (pd.DataFrame(per_run, columns=["run_id", "config", "request", *SERVER_COLUMNS])
            .sort_values(["run_id", "request"]).reset_index(drop=True),
            pd.DataFrame(per_config, columns=["config", "runs", "request", *SERVER_COLUMNS])
            .sort_values(["config", "request"]).reset_index(drop=True))


def _server_stats(buckets: server_metrics.Buckets) -> dict[str, float]:
    """count, percentiles and mean in µs, rounded to the nanosecond (interpolation leaves float noise)."""
    percentiles, mean = server_metrics.summarize(buckets, SUMMARY_PERCENTILES)
    return {"count": round(buckets.count), **{percentile_column(p): round(v, 3) for p, v in percentiles.items()},
            "mean": round(mean, 3)}


def _client_vs_server(client: pd.DataFrame, server: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """Each request kind the client measured, its p50/p99 beside the server's for the same request code.

    The storm names requests by RocketMQ request code name (bench/storm/rundir.request_name), as
    the server's `request` label does, so the two join on the name; the server's own requests that
    the client did not measure stay in the server tables only.
    """
    def side(frame: pd.DataFrame, prefix: str, columns: tuple[str, ...]) -> pd.DataFrame:
        present = [c for c in columns if c in frame.columns]
        return frame[[*keys, "request", *present]].rename(columns={c: prefix + c for c in present})

    return (side(client, "client_", ("runs", "answered", "p50", "p99"))
            .merge(side(server, "server_", ("runs", "count", "p50", "p99")), how="left", on=[*keys, "request"]))


def _sweep(configurations: pd.DataFrame, runs: Sequence[Run]) -> pd.DataFrame:
    """One row per configuration: its settings as columns, total throughput, throughput and p99 per request."""
    settings = {run.config_label: run.config for run in runs}
    rows = []
    for label in sorted(configurations["config"].unique(), key=_natural):
        group = configurations[configurations["config"] == label]
        row: dict[str, object] = {"config": label, **settings[label]}
        row["throughput_total_per_s"] = float(group["throughput_per_s"].fillna(0).sum())
        for record in group.itertuples():
            row[f"throughput_per_s[{record.request}]"] = record.throughput_per_s
            row[f"p99_us[{record.request}]"] = record.p99
        rows.append(row)
    return pd.DataFrame(rows)


def _run_row(run: Run) -> dict[str, object]:
    meta = run.meta
    server = meta.get("server") or {}
    load = meta.get("load") or {}
    fleet = meta.get("fleet") or {}
    host = meta.get("host") or {}
    return {
        "run_id": run.run_id, "uri": run.uri, "config": run.config_label, "started_at": meta.get("started_at"),
        "mode": meta.get("mode"), "duration_s": meta.get("duration_s"), "warmup_s": meta.get("warmup_s"),
        "workers": load.get("workers"), "connections_per_worker": load.get("connections_per_worker"),
        "offered": json.dumps(load.get("rates_per_s") or load.get("weights") or {}, sort_keys=True),
        "in_flight_per_connection": load.get("in_flight_per_connection"),
        "fleet": json.dumps(fleet, sort_keys=True), "server": server.get("address"),
        "server_version": server.get("version"), "server_process": " ".join(server.get("cmdline") or [])[:200],
        "host_load_1m": "{} -> {}".format(*[(host.get(k) or [None])[0] for k in ("loadavg_before", "loadavg_after")]),
        "subscribers": (meta.get("propagation") or {}).get("subscribers", 0),
        "flap_period_s": (meta.get("propagation") or {}).get("flap_period_s", 0.0),
        "host": json.dumps(host, sort_keys=True),
    }


# ---------------------------------------------------------------- HTML


def render_html(tables: ReportTables, runs: Sequence[Run], title: str) -> str:
    body = [f"<h1>{escape(title)}</h1>",
            f"<p class=note>Generated {escape(time.strftime('%Y-%m-%d %H:%M:%S %Z'))} from {len(runs)} run(s). "
            "Latencies in milliseconds, measured from each request's <em>intended</em> send time (open loop: "
            "no coordinated omission) or its send time (closed loop); HdrHistogram with 3 significant digits, "
            "so values are exact to 0.1 %. Percentiles come from merged histograms, never averaged. "
            "<em>send delay p99</em> is how late the generator itself sent: if it is large, the generator "
            "(not the server) was the bottleneck. Warm-up is excluded.</p>"]
    body.append("<h2>Runs</h2>" + _table(tables.runs.drop(columns=["uri", "fleet", "host", "server_metrics_problem"]),
                                         {}))
    body.append("<h2>Summary by run and request</h2>" + _table(tables.summary, _LATENCY_COLUMNS))
    if _merges_runs(tables, runs):
        body.append("<h2>By thread configuration (runs merged)</h2>" + _table(tables.configurations, _LATENCY_COLUMNS))
    body.append(_server_section(tables, runs))
    body.append(_propagation_section(tables, runs))
    body.append("<h2>Responses by code</h2>" + _table(tables.errors, {}))
    if len(tables.sweep) > 1:
        body.append("<h2>Sweep</h2>" + _sweep_section(tables.sweep, runs)
                    + _table(tables.sweep, {c: 1000.0 for c in tables.sweep.columns if c.startswith("p99_us")}))
    for run in runs:
        body.append(_run_section(tables, run))
    return (f"<!DOCTYPE html><html lang=en><head><meta charset=utf-8><title>{escape(title)}</title>"
            f"<style>{_CSS}</style></head><body>{''.join(body)}</body></html>\n")


def _merges_runs(tables: ReportTables, runs: Sequence[Run]) -> bool:
    """Whether the report has per-configuration tables: several configurations, or runs sharing one."""
    return tables.configurations["config"].nunique() > 1 or len(runs) > len(tables.configurations["config"].unique())


_SERVER_NOTE = (
    "Server-side latency is namesrv's <code>namesrv_request_duration_seconds</code> histogram, from the reactor "
    "taking a request frame off its socket to its answer being queued for sending: it leaves out the network, the "
    "kernels' and ZeroMQ's queues and the generator, which the client's latency includes. It is the difference of two scrapes of the "
    "server's /metrics, one as the measured window starts (after warm-up) and one at 90 % of it, so its counts are "
    "about 90 % of the client's. Client request kinds are matched to the server's "
    "<code>request</code> label by RocketMQ request code name. Percentiles follow Prometheus's "
    "<code>histogram_quantile</code>: rank = quantile × count; the first bucket whose cumulative count reaches the "
    "rank holds the answer, interpolated linearly between the bucket's lower and upper bounds (the first bucket's "
    "lower bound being 0); a rank in the +Inf bucket is answered with the highest finite bound. So they are "
    "estimates at the resolution of the server's buckets, not exact as the client's are. Mean = sum / count. Runs "
    "of one thread configuration are merged by summing their bucket counts, never by averaging percentiles.")


def _server_section(tables: ReportTables, runs: Sequence[Run]) -> str:
    """Client and server latency side by side, the server's own tables, and the runs without server metrics."""
    parts = ["<h2>Client and server latency</h2>", f"<p class=note>{_SERVER_NOTE}</p>"]
    for run in runs:
        problem = _server_problem(tables, run)
        if problem is not None:
            parts.append(f"<p class=note>{escape(run.run_id)}: no server metrics for this run: {escape(problem)}</p>")
    if tables.server_latency.empty:
        return "".join(parts)
    parts.append("<h3>By run and request</h3>" + _table(tables.client_vs_server, _LATENCY_COLUMNS))
    if _merges_runs(tables, runs):
        parts.append("<h3>By thread configuration (runs merged)</h3>"
                     + _table(tables.client_vs_server_configurations, _LATENCY_COLUMNS))
    parts.append("<h3>Server latency by run and request code</h3>" + _table(tables.server_latency, _LATENCY_COLUMNS))
    if _merges_runs(tables, runs):
        parts.append("<h3>Server latency by thread configuration (runs merged)</h3>"
                     + _table(tables.server_configurations, _LATENCY_COLUMNS))
    return "".join(parts)


_PROPAGATION_NOTE = (
    "Route-change subscribers (SUBSCRIBE_ROUTE_CHANGES, each on a connection of its own, in processes apart from the "
    "request generator's) listen while, every flap period, a broker closes its connection (the server drops its "
    "routes: a change) and registers again half a period later (a second change). A <em>sighting</em> is "
    "one subscriber receiving, for one of its topics, the ROUTE_CHANGED that shows the broker gone or back; its "
    "latency runs from the moment of the change (just before the close, or the registration being sent; "
    "CLOCK_MONOTONIC, one clock for every process on the host) to the push's arrival. <em>count</em> is the "
    "sightings recorded, <em>sightings_expected</em> those the changes made should give (every subscriber of a topic "
    "of the broker's cluster). HdrHistogram with 3 significant digits; percentiles come from merged histograms, "
    "never averaged. <em>versions_missed</em>: changes whose version was not the subscriber's known version + 1; "
    "<em>subscribers_dropped</em>: subscribers the server dropped to polling for reading too slowly.")


def _propagation_section(tables: ReportTables, runs: Sequence[Run]) -> str:
    """The propagation tables, and which runs had no subscribers (nothing when none had any)."""
    if tables.propagation.empty:
        return ""
    parts = ["<h2>Route-change propagation</h2>", f"<p class=note>{_PROPAGATION_NOTE}</p>"]
    for run in runs:
        if run.push is None:
            parts.append(f"<p class=note>{escape(run.run_id)}: no subscribers in this run</p>")
        elif run.push.get("note"):
            parts.append(f"<p class=note>{escape(run.run_id)}: {escape(run.push['note'])}</p>")
    parts.append("<h3>By run</h3>" + _table(tables.propagation, _LATENCY_COLUMNS))
    if _merges_runs(tables, runs):
        parts.append("<h3>By thread configuration (runs merged)</h3>"
                     + _table(tables.propagation_configurations, _LATENCY_COLUMNS))
    return "".join(parts)


def _server_problem(tables: ReportTables, run: Run) -> str | None:
    """Why `run` has no server-side latency, None when it has."""
    problem = tables.runs.loc[tables.runs["run_id"] == run.run_id, "server_metrics_problem"].iloc[0]
    return problem if isinstance(problem, str) else None


_CSS = """body{font-family:sans-serif;margin:24px;color:#222;max-width:1500px}
h1{font-size:22px}h2{font-size:18px;margin-top:28px;border-bottom:1px solid #ccc}h3{font-size:15px}
table{border-collapse:collapse;font-size:12px;margin:8px 0}th,td{border:1px solid #ccc;padding:3px 6px}
th{background:#f2f2f2}td.n{text-align:right;font-variant-numeric:tabular-nums}.note{font-size:13px;color:#444}
.warn{font-size:13px;color:#8a1c00;background:#fff1e6;padding:4px 8px}
.charts{display:flex;flex-wrap:wrap;gap:12px}.charts svg{border:1px solid #eee}"""
#: Columns holding microseconds, shown in milliseconds.
_LATENCY_COLUMNS = {c: 1000.0 for c in ("p0", "p50", "p90", "p99", "p99_9", "max", "send_delay_p99", "mean",
                                        "client_p50", "client_p99", "server_p50", "server_p99")}


def _table(frame: pd.DataFrame, divide: dict[str, float]) -> str:
    head = "".join(f"<th>{escape(_header(c, divide))}</th>" for c in frame.columns)
    rows = []
    for record in frame.itertuples(index=False):
        cells = []
        for column, value in zip(frame.columns, record):
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                cells.append(f"<td class=n>{_format_cell(column, value, divide)}</td>")
            else:
                cells.append(f"<td>{escape('' if value is None else str(value))}</td>")
        rows.append("<tr>" + "".join(cells) + "</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"


def _header(column: str, divide: dict[str, float]) -> str:
    if column in divide:
        return column.replace("_us", "") + " (ms)"
    return column


def _format_cell(column: str, value: float, divide: dict[str, float]) -> str:
    if pd.isna(value):
        return "–"
    if column in divide:
        return f"{value / divide[column]:,.3f}"
    if column in ("error_rate", "share"):
        return f"{value:.4%}"
    if float(value).is_integer():
        return f"{int(value):,}"
    return f"{value:,.1f}"


def _run_section(tables: ReportTables, run: Run) -> str:
    charts = []
    spectrum = tables.spectrum[tables.spectrum["run_id"] == run.run_id]
    positions = {p: _spectrum_x(p) for p in SPECTRUM_PERCENTILES}
    charts.append(svgplot.line_chart(
        [svgplot.Series(request, [positions[p] for p in g["percentile"]], list(g["value_us"] / 1000.0))
         for request, g in spectrum.groupby("request")],
        title="Latency percentile spectrum", x_label="percentile", y_label="latency (ms, log scale)", markers=True,
        y_log=True,
        x_tick_labels={0.0: "0%", 1.0: "90%", 2.0: "99%", 3.0: "99.9%", 4.0: "99.99%", 5.0: "99.999%",
                       6.0: "max"}))
    intervals = tables.intervals[tables.intervals["run_id"] == run.run_id]
    charts.append(svgplot.line_chart(
        [svgplot.Series(request, list(g["interval_start"]), list(g["throughput_per_s"]))
         for request, g in intervals.groupby("request")],
        title="Throughput over time", x_label="seconds since warm-up", y_label="responses / s"))
    charts.append(svgplot.line_chart(
        [svgplot.Series(request, list(g["interval_start"]), list(g["p99"] / 1000.0))
         for request, g in intervals.groupby("request")],
        title="p99 latency over time (per 1-s interval)", x_label="seconds since warm-up", y_label="p99 (ms)"))
    resources = tables.resources[tables.resources["run_id"] == run.run_id]
    charts.append(svgplot.line_chart(
        [svgplot.Series(process, list(g["t"]), list(g["cpu_percent"])) for process, g in resources.groupby("process")],
        title="CPU over time (100 % = one core)", x_label="seconds since warm-up", y_label="CPU %"))
    charts.append(svgplot.line_chart(
        [svgplot.Series(process, list(g["t"]), list(g["rss_bytes"] / 2**20))
         for process, g in resources.groupby("process")],
        title="RSS over time", x_label="seconds since warm-up", y_label="RSS (MiB)"))
    meta = run.meta
    facts = (f"mode {meta.get('mode')}, {meta.get('duration_s')} s after {meta.get('warmup_s')} s warm-up, "
             f"server {(meta.get('server') or {}).get('address')}, configuration {run.config_label}")
    delays = tables.summary.loc[tables.summary["run_id"] == run.run_id, "send_delay_p99"].dropna()
    warning = ""
    if len(delays) and delays.max() > SEND_DELAY_WARNING_US:
        warning = (f"<p class=warn>The generator sent up to {delays.max() / 1000:,.1f} ms late (send delay p99): "
                   "this run's latencies include that lag (CPU contention on the host, or too few workers).</p>")
    problem = _server_problem(tables, run)
    server_note = "" if problem is None else f"<p class=note>no server metrics for this run: {escape(problem)}</p>"
    return (f"<h2>Run {escape(run.run_id)}</h2><p class=note>{escape(facts)}</p>{warning}{server_note}"
            f"<div class=charts>{''.join(charts)}</div>")


def _spectrum_x(p: float) -> float:
    """Percentile position on a log axis of 1/(1-p): 90 % -> 1, 99 % -> 2, ...; max at 6."""
    return 6.0 if p >= 100.0 else math.log10(1.0 / (1.0 - p / 100.0))


def _sweep_section(sweep: pd.DataFrame, runs: Sequence[Run]) -> str:
    """Heatmaps: rows = the first swept setting, columns = the others (values joined by " / ")."""
    keys = list(next(iter(runs)).config)
    row_key, column_keys = keys[0], keys[1:]

    def cell(record: pd.Series) -> tuple[str, str]:
        return str(record[row_key]), " / ".join(str(record[k]) for k in column_keys) or "-"

    cells = [cell(r) for _, r in sweep.iterrows()]
    rows = sorted({r for r, _ in cells}, key=_natural)
    columns = sorted({c for _, c in cells}, key=_natural)
    column_label = " / ".join(column_keys)
    charts = [svgplot.heatmap(rows, columns, {cell(r): r["throughput_total_per_s"] for _, r in sweep.iterrows()},
                              title="Total throughput (responses/s)", row_label=row_key, column_label=column_label,
                              higher_is_better=True, formatter=lambda v: f"{v:,.0f}")]
    for column in sweep.columns:
        if column.startswith("p99_us["):
            request = column[len("p99_us["):-1]
            charts.append(svgplot.heatmap(
                rows, columns, {cell(r): r[column] / 1000.0 for _, r in sweep.iterrows() if pd.notna(r[column])},
                title=f"p99 of {request} (ms)", row_label=row_key, column_label=column_label,
                higher_is_better=False, formatter=lambda v: f"{v:,.2f}"))
    best = sweep.sort_values("throughput_total_per_s", ascending=False).iloc[0]
    p99_columns = [c for c in sweep.columns if c.startswith("p99_us[")]
    worst_p99 = sweep[p99_columns].max(axis=1)
    calmest = sweep.loc[worst_p99.idxmin()]
    return (f"<p class=note>Highest total throughput: <b>{escape(str(best['config']))}</b> "
            f"({best['throughput_total_per_s']:,.0f} responses/s; the one to pick for closed-loop runs). "
            f"Lowest worst-request p99: <b>{escape(str(calmest['config']))}</b> ({worst_p99.min() / 1000:,.2f} ms; "
            f"the one to pick for open-loop runs at the same offered load).</p>"
            f"<div class=charts>{''.join(charts)}</div>")


def _natural(text: str) -> list:
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", text)]


# ---------------------------------------------------------------- entry point


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
        builder = builder.config("spark.driver.memory", os.environ.get("STORM_REPORT_DRIVER_MEMORY", "1g"))
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def build_report(spark: SparkSession, locations: Sequence[str], out_dir: Path,
                 title: str = "namesrv heartbeat storm report") -> Path:
    """Compute every table, write them as CSV under out_dir/csv and the HTML to out_dir/report.html."""
    runs = load_runs(spark, locations)
    tables = compute_tables(spark, runs)
    (out_dir / "csv").mkdir(parents=True, exist_ok=True)
    for name, frame in tables.items():
        frame.to_csv(out_dir / "csv" / f"{name}.csv", index=False)
    report = out_dir / "report.html"
    report.write_text(render_html(tables, runs, title), encoding="utf-8")
    return report


def report_with_own_session(master: str | None, locations: Sequence[str], out_dir: Path, title: str) -> Path:
    """build_report in a session started (and stopped) for it: the command line and sweeps."""
    spark = create_spark(master)
    try:
        return build_report(spark, locations, out_dir, title)
    finally:
        spark.stop()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", help="run directories (local paths or Hadoop-compatible URIs)")
    parser.add_argument("--out", type=Path, required=True, help="local directory for report.html and csv/")
    parser.add_argument("--master", help="Spark master URL (default: local[*], or what spark-submit says)")
    parser.add_argument("--title", default="namesrv heartbeat storm report")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    print(f"report: {report_with_own_session(args.master, args.runs, args.out, args.title)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
