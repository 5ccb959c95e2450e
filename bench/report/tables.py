"""Every table of the report: Spark merges the runs' buckets and counts, pandas joins the small results.

Client latency per run and per thread configuration (runs merged bucket by bucket); server-side
latency beside it, from the two /metrics scrapes a run directory keeps (bench/storm/server_metrics.py,
Prometheus's `histogram_quantile` rule, runs merged by summing bucket counts); route-change
propagation from the merged `propagation` histograms and each run's meta.json. A run without
usable scrapes or without subscribers says why, or adds nothing.
"""
from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Sequence

import pandas as pd
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from bench.report.contents import ReportTables, report_groups
from bench.report.inputs import Run, natural_key, read_server_windows
from bench.report.judging import judge_runs
from bench.report.percentiles import SPECTRUM_PERCENTILES, SUMMARY_PERCENTILES, merged_percentiles, percentile_column
from bench.report import server_metrics
from bench.lib.output import response_name


#: Columns of the server-side latency tables after their keys and `request`: microseconds, as the client's.
SERVER_COLUMNS = ("count", *[percentile_column(p) for p in SUMMARY_PERCENTILES], "mean")
#: What the propagation tables take from each run's meta.json "propagation" (summed over a configuration's runs).
PROPAGATION_FACTS = ("changes", "sightings_expected", "versions_missed", "subscribers_dropped")


def compute_tables(spark: SparkSession, runs: Sequence[Run], baseline: str | None = None) -> ReportTables:
    """Every table of the report.

    The bucket merging and percentile reading happen in Spark (they scale with the data); the
    small per-run/per-configuration results are then joined in pandas, which keeps the number of
    Spark jobs — each costing a scheduling round trip — low. `baseline` names the comparison's
    reference group (checked first, so a typo costs no Spark job).
    """
    groups = report_groups(runs, baseline)
    histograms = spark.read.parquet(*[f"{run.uri}/histograms.parquet" for run in runs])
    responses = spark.read.parquet(*[f"{run.uri}/responses.parquet" for run in runs])
    resources = spark.read.parquet(*[f"{run.uri}/resources.parquet" for run in runs])
    labels = spark.createDataFrame([(run.run_id, run.config_label) for run in runs], "run_id string, config string")
    latency = histograms.filter(F.col("metric") == "latency").join(F.broadcast(labels), "run_id").cache()
    run_info = pd.DataFrame({"run_id": [run.run_id for run in runs], "config": [run.config_label for run in runs],
                             "duration_s": [float(run.meta["duration_s"]) for run in runs]})

    percentiles = sorted(set(SPECTRUM_PERCENTILES) | set(SUMMARY_PERCENTILES))
    per_run = merged_percentiles(latency, ["run_id", "request"], percentiles).toPandas()
    per_config = merged_percentiles(latency, ["config", "request"], percentiles).toPandas()
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
    windows = read_server_windows(spark, runs)
    runs_table = pd.DataFrame([{**_run_row(run), "server_metrics_problem": windows[run.run_id].problem}
                               for run in runs])
    server_per_run, server_per_config = _server_tables(windows, run_info)
    tables = ReportTables(runs_table, summary, configurations, errors, per_interval, _spectrum(per_run, "run_id"),
                          resource_table, _sweep(configurations, runs), server_per_run, server_per_config,
                          _client_vs_server(summary, server_per_run, ["run_id", "config"]),
                          _client_vs_server(configurations, server_per_config, ["config"]),
                          *_propagation_tables(histograms, labels, runs),
                          configuration_spectrum=_spectrum(per_config, "config"), groups=groups)
    judge_runs(tables, runs)
    return tables


def _spectrum(percentiles: pd.DataFrame, key: str) -> pd.DataFrame:
    """Long form of the spectrum percentiles: `key`, request, percentile (0-100), value_us."""
    spectrum = percentiles.melt(id_vars=[key, "request"],
                                value_vars=[percentile_column(p) for p in SPECTRUM_PERCENTILES],
                                var_name="percentile", value_name="value_us")
    spectrum["percentile"] = [float(c[1:].replace("_", ".")) for c in spectrum["percentile"]]
    return spectrum.sort_values([key, "request", "percentile"]).reset_index(drop=True)


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
    for label in sorted(configurations["config"].unique(), key=natural_key):
        group = configurations[configurations["config"] == label]
        row: dict[str, object] = {"config": label, **settings[label]}
        row["throughput_total_per_s"] = float(group["throughput_per_s"].fillna(0).sum())
        for record in group.itertuples():
            row[f"throughput_per_s[{record.request}]"] = record.throughput_per_s
            row[f"p99_us[{record.request}]"] = record.p99
        rows.append(row)
    return pd.DataFrame(rows)


def _run_row(run: Run) -> dict[str, object]:
    """runs.csv: one run's identity, load and setting (machine-readable; the HTML shows a readable subset)."""
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
        "host_load_1m": host_load(host),
        "subscribers": (meta.get("propagation") or {}).get("subscribers", 0),
        "flap_period_s": (meta.get("propagation") or {}).get("flap_period_s", 0.0),
        "host": json.dumps(host, sort_keys=True),
    }


def host_load(host: dict) -> str:
    """The host's 1-minute load average before → after the run, e.g. 1.21 → 1.29."""
    before, after = [(host.get(key) or [None])[0] for key in ("loadavg_before", "loadavg_after")]
    if before is None and after is None:
        return ""
    return " → ".join("?" if value is None else f"{float(value):.2f}" for value in (before, after))
