"""The report as one self-contained HTML page: tables, notes, SVG charts and the CSS, no scripts.

The first screen (bench/report/first_screen.py) answers the question: the verdict, then the knee
chart and the client's latency beside the server's at the knee; the sections below hold the runs,
every table and each run's charts. A target, a request kind or a process keeps one colour in
every chart. Numbers are formatted for reading only (bench/report/html.py); the CSV tables keep
them raw.
"""
from __future__ import annotations

import math
import re
import time
from collections.abc import Sequence
from html import escape

import pandas as pd

from bench.report.contents import ReportTables
from bench.report.inputs import Run, natural_key
from bench.report.judging import saturation_searches
from bench.report.percentiles import SPECTRUM_PERCENTILES
from bench.report.tables import host_load
from bench.lib import verdict
from bench.report import svgplot
from bench.report.first_screen import knee_first_screen, results_sections, verdict_html
from bench.report.html import LATENCY_COLUMNS, page, plain, rate, table


def render_html(tables: ReportTables | None, runs: Sequence[Run], title: str, others: Sequence[Run] = ()) -> str:
    """The page: `tables` of the `runs` that recorded latency (None: there are none), the `others`' figures."""
    colors = svgplot.Palette()
    body = [f"<h1>{escape(title)}</h1>", verdict_html(tables, runs, others)]
    if tables is not None and tables.search_knees:
        body.append(knee_first_screen(tables, runs, colors))
    if tables is not None:
        body.append(f"<p class=note>Generated {escape(time.strftime('%Y-%m-%d %H:%M:%S %Z'))} from {len(runs)} "
                    "run(s). Latencies in milliseconds, measured from each request's <em>intended</em> send time "
                    "(open loop: no coordinated omission) or its send time (closed loop); HdrHistogram with 3 "
                    "significant digits, so values are exact to 0.1 %. Percentiles come from merged histograms, "
                    "never averaged. <em>send delay p99</em> is how late the generator itself sent; a run where that "
                    "lag made the generator the limit says so. Warm-up is excluded.</p>")
        body.append("<h2>Runs</h2>" + table(_runs_display(runs), {}))
        body.append(_saturation_section(tables, runs, colors))
        body.append(_comparison_section(tables, colors))
        if len(tables.sweep) > 1 and any(run.meta.get("sweep") for run in runs):
            body.append("<h2>Sweep</h2>" + _sweep_section(tables.sweep, runs, tables.best)
                        + table(tables.sweep, {c: 1000.0 for c in tables.sweep.columns if c.startswith("p99_us")}))
        body.append("<h2>Summary by run and request</h2>" + table(tables.summary, LATENCY_COLUMNS))
        if _merges_runs(tables, runs):
            body.append("<h2>By thread configuration (runs merged)</h2>"
                        + table(tables.configurations, LATENCY_COLUMNS))
        body.append(_server_section(tables, runs))
        body.append(_propagation_section(tables, runs))
        body.append("<h2>Responses by code</h2>" + table(tables.errors, {}))
        for run in runs:
            body.append(_run_section(tables, run, colors))
    body.append(results_sections(others))
    return page(title, body)


def _runs_display(runs: Sequence[Run]) -> pd.DataFrame:
    """The Runs table: short, readable cells only (the long facts go in each run's details line)."""
    rows = []
    for run in runs:
        meta, load = run.meta, run.meta.get("load") or {}
        rows.append({"run_id": run.run_id, "config": run.config_label, "started": _when(meta.get("started_at")),
                     "mode": meta.get("mode") or "", "duration_s": _number_or_none(meta.get("duration_s")),
                     "warmup_s": _number_or_none(meta.get("warmup_s")),
                     "workers × connections":
                         f"{load.get('workers', '?')} × {load.get('connections_per_worker', '?')}",
                     "offered": _offered(load), "server": (meta.get("server") or {}).get("version") or "",
                     "host load 1m": host_load(meta.get("host") or {})})
    return pd.DataFrame(rows)


def _when(started_at: object) -> str:
    """2025-11-21T20:00:00.123+00:00 -> 2025-11-21 20:00:00 (UTC, as the storm writes it)."""
    return str(started_at or "")[:19].replace("T", " ")


def _number_or_none(value: object) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _offered(load: dict) -> str:
    """GET_ROUTEINFO_BY_TOPIC 5,000/s · REGISTER_BROKER 64/s; a closed loop's weights as "closed loop: …"."""
    if load.get("rates_per_s"):
        return " · ".join(f"{name} {rate(per_s)}/s" for name, per_s in load["rates_per_s"].items())
    if load.get("weights"):
        in_flight = load.get("in_flight_per_connection")
        return ("closed loop" + (f", {in_flight} in flight per connection" if in_flight else "") + ": "
                + " · ".join(f"{name} ×{plain(weight)}" for name, weight in load["weights"].items()))
    return ""


def _run_details(run: Run) -> str:
    """The long facts of a run, readable: server and its command line, fleet shape, host, directory."""
    meta = run.meta
    server, host, fleet = meta.get("server") or {}, meta.get("host") or {}, meta.get("fleet") or {}
    lines = [f"server {server.get('address') or '?'} ({server.get('version') or 'unknown version'})"
             + (f", command line: {' '.join(server['cmdline'])}" if server.get("cmdline") else "")]
    if fleet:
        lines.append("fleet: " + _readable({k: v for k, v in fleet.items() if k != "rates_per_s"}))
    if host:
        memory = host.get("memory_bytes")
        lines.append("host: " + ", ".join(str(part) for part in (
            host.get("hostname"), host.get("cpu_model"), host.get("cpu_count") and f"{host['cpu_count']} CPUs",
            memory and f"{memory / 2**30:,.1f} GiB", host_load(host) and f"load 1m {host_load(host)}") if part))
    push = meta.get("propagation") or {}
    if push.get("subscribers"):
        lines.append(f"{push['subscribers']:,} route-change subscribers, "
                     f"flap period {plain(push.get('flap_period_s'))} s")
    lines.append(f"directory: {run.uri}")
    return "".join(f"<p class=details>{escape(line)}</p>" for line in lines)


def _readable(value: object) -> str:
    """A meta.json value as text, not JSON: "brokers 8 · topics_per_broker 20 · …"."""
    if isinstance(value, dict):
        return " · ".join(f"{key} {_readable(item)}" for key, item in value.items())
    if isinstance(value, (list, tuple)):
        return ", ".join(_readable(item) for item in value)
    if isinstance(value, float):
        return plain(value)
    return str(value)


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
    parts.append("<h3>By run and request</h3>" + table(tables.client_vs_server, LATENCY_COLUMNS))
    if _merges_runs(tables, runs):
        parts.append("<h3>By thread configuration (runs merged)</h3>"
                     + table(tables.client_vs_server_configurations, LATENCY_COLUMNS))
    parts.append("<h3>Server latency by run and request code</h3>" + table(tables.server_latency, LATENCY_COLUMNS))
    if _merges_runs(tables, runs):
        parts.append("<h3>Server latency by thread configuration (runs merged)</h3>"
                     + table(tables.server_configurations, LATENCY_COLUMNS))
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
    parts.append("<h3>By run</h3>" + table(tables.propagation, LATENCY_COLUMNS))
    if _merges_runs(tables, runs):
        parts.append("<h3>By thread configuration (runs merged)</h3>"
                     + table(tables.propagation_configurations, LATENCY_COLUMNS))
    return "".join(parts)


def _server_problem(tables: ReportTables, run: Run) -> str | None:
    """Why `run` has no server-side latency, None when it has."""
    problem = tables.runs.loc[tables.runs["run_id"] == run.run_id, "server_metrics_problem"].iloc[0]
    return problem if isinstance(problem, str) else None


def _run_section(tables: ReportTables, run: Run, colors: svgplot.Palette) -> str:
    charts = []
    spectrum = tables.spectrum[tables.spectrum["run_id"] == run.run_id]
    positions = {p: _spectrum_x(p) for p in SPECTRUM_PERCENTILES}
    charts.append(svgplot.line_chart(
        [svgplot.Series(request, [positions[p] for p in g["percentile"]], list(g["value_us"] / 1000.0), colors(request))
         for request, g in spectrum.groupby("request")],
        title="Latency percentile spectrum", x_label="percentile", y_label="latency (ms, log scale)", markers=True,
        y_log=True, x_tick_labels=_SPECTRUM_TICKS))
    intervals = tables.intervals[tables.intervals["run_id"] == run.run_id]
    charts.append(svgplot.line_chart(
        [svgplot.Series(request, list(g["interval_start"]), list(g["throughput_per_s"]), colors(request))
         for request, g in intervals.groupby("request")],
        title="Throughput over time", x_label="seconds since warm-up", y_label="responses / s",
        y_log=svgplot.spans_decade(list(intervals["throughput_per_s"]))))
    charts.append(svgplot.line_chart(
        [svgplot.Series(request, list(g["interval_start"]), list(g["p99"] / 1000.0), colors(request))
         for request, g in intervals.groupby("request")],
        title="p99 latency over time (per 1-s interval)", x_label="seconds since warm-up", y_label="p99 (ms)"))
    resources = tables.resources[tables.resources["run_id"] == run.run_id]
    charts.append(svgplot.line_chart(
        [svgplot.Series(process, list(g["t"]), list(g["cpu_percent"]), colors(process))
         for process, g in resources.groupby("process")],
        title="CPU over time (100 % = one core)", x_label="seconds since warm-up", y_label="CPU %"))
    charts.append(svgplot.line_chart(
        [svgplot.Series(process, list(g["t"]), list(g["rss_bytes"] / 2**20), colors(process))
         for process, g in resources.groupby("process")],
        title="RSS over time", x_label="seconds since warm-up", y_label="RSS (MiB)"))
    meta = run.meta
    facts = (f"mode {meta.get('mode')}, {plain(meta.get('duration_s'))} s after {plain(meta.get('warmup_s'))} s "
             f"warm-up, offered {_offered(meta.get('load') or {}) or 'unknown'}, configuration {run.config_label}"
             + (" — cut short (partial)" if meta.get("partial") else ""))
    judgement = tables.judgements[run.run_id]
    warning = ""
    if judgement.generator_limited and not meta.get("partial"):  # only where the lag matters (bench/lib/verdict.py)
        warning = (f"<p class=warn>The generator was the limit in this run ({escape('; '.join(judgement.generator_reasons))}"
                   "): its latencies include the generator's own lag, not the server's alone.</p>")
    problem = _server_problem(tables, run)
    server_note = "" if problem is None else f"<p class=note>no server metrics for this run: {escape(problem)}</p>"
    return (f"<h2>Run {escape(run.run_id)}</h2><p class=note>{escape(facts)}</p>{_run_details(run)}{warning}"
            f"{server_note}<div class=charts>{''.join(charts)}</div>")


_SPECTRUM_TICKS = {0.0: "0%", 1.0: "90%", 2.0: "99%", 3.0: "99.9%", 4.0: "99.99%", 5.0: "99.999%", 6.0: "max"}


def _spectrum_x(p: float) -> float:
    """Percentile position on a log axis of 1/(1-p): 90 % -> 1, 99 % -> 2, ...; max at 6."""
    return 6.0 if p >= 100.0 else math.log10(1.0 / (1.0 - p / 100.0))


def _sweep_section(sweep: pd.DataFrame, runs: Sequence[Run], best: verdict.Best | None) -> str:
    """The best point (verdict.choose_best) and heatmaps: rows = the first swept setting, columns = the
    others (values joined by " / ")."""
    keys = list(next(iter(runs)).config)
    row_key, column_keys = keys[0], keys[1:]

    def cell(record: pd.Series) -> tuple[str, str]:
        return str(record[row_key]), " / ".join(str(record[k]) for k in column_keys) or "-"

    cells = [cell(r) for _, r in sweep.iterrows()]
    rows = sorted({r for r, _ in cells}, key=natural_key)
    columns = sorted({c for _, c in cells}, key=natural_key)
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
    return _best_line(best) + f"<div class=charts>{''.join(charts)}</div>"


def _best_line(best: verdict.Best | None) -> str:
    """"Best: <label> — <reason>" or "No best setting named: <reason>", as the sweep's command line says."""
    if best is None:
        return ""
    if best.label is None:
        return f"<p class=verdict>No best setting named: {escape(best.reason)}</p>"
    return f"<p class=verdict>Best: <b>{escape(best.label)}</b> — {escape(best.reason)}</p>"


_SATURATION_NOTE = (
    "A saturation search offers one load per step, higher each step, and judges each step by the SLO of its "
    "meta.json (bench/storm/verdict.py, the rule the search itself applies): {slo}. The <em>knee</em> is the "
    "highest offered load that met it, bounded by the lowest higher step that missed; a miss while the generator "
    "was the limit (its send lag or CPU) makes the knee a lower bound only. Steps cut short are listed as "
    "<em>partial</em> and not judged. Latencies are each step's worst request kind; CPU % is of one core.")


def _saturation_section(tables: ReportTables, runs: Sequence[Run], colors: svgplot.Palette) -> str:
    """Each search's knee and steps, and answered against offered ("" without searches; the knee chart
    is on the first screen)."""
    if tables.saturation_steps.empty:
        return ""
    searches = saturation_searches(runs)
    slos = "; ".join(dict.fromkeys(steps[0].slo.label for steps in searches.values()))
    parts = ["<h2>Saturation</h2>", f"<p class=note>{_SATURATION_NOTE.format(slo=escape(slos))}</p>",
             "<h3>Knees</h3>" + _knee_html(tables.knees)]
    for name in searches:
        steps = tables.saturation_steps[tables.saturation_steps["search"] == name].drop(columns=["search"])
        parts.append(f"<h3>Search {escape(name)}</h3>" + table(steps, {}))
    throughput = []
    for name, steps in searches.items():
        judged = sorted((tables.facts[run.run_id] for run in steps if not tables.facts[run.run_id].partial),
                        key=lambda facts: facts.offered_per_s)
        throughput.append(svgplot.Series(name, [f.offered_per_s for f in judged], [f.answered_per_s for f in judged],
                                         colors(name)))
    offered = [x for s in throughput for x in s.xs]
    parts.append("<div class=charts>" + svgplot.line_chart(
        throughput, title="Answered against offered load", markers=True, x_label="offered / s",
        y_label="answered / s", x_log=svgplot.spans_decade(offered),
        y_log=svgplot.spans_decade([y for s in throughput for y in s.ys])) + "</div>")
    return "".join(parts)


def _knee_html(knees: pd.DataFrame) -> str:
    baseline = str(knees["baseline"].iloc[0])
    return table(knees.drop(columns=["baseline"]), {}, {"knee_ratio": f"knee ÷ {baseline}'s"})


def _comparison_section(tables: ReportTables, colors: svgplot.Palette) -> str:
    """The groups side by side against the baseline group ("" with fewer than two groups, and for searches,
    whose knees and their ratios are the Saturation section's knee table)."""
    groups = tables.groups
    if tables.comparison.empty or groups is None or groups.kind == "search":
        return ""
    baseline = escape(groups.baseline)
    note = (f"<p class=note>The groups are the report's {escape(groups.kind)}s; each request kind's throughput and "
            "percentiles (merged histograms of the group's runs, never averaged) and their ratio to "
            f"<b>{baseline}</b>'s (choose another with --baseline); a latency ratio below 1 is faster.</p>")
    return ("<h2>Comparison</h2>" + note + table(tables.comparison, LATENCY_COLUMNS)
            + _comparison_chart(tables, colors))


def _legend_name(label: str) -> str:
    """A configuration label short enough for a chart legend: serverSelectorThreads=1 -> sst=1."""
    if len(label) <= 26:
        return label
    return re.sub(r"([A-Za-z][A-Za-z0-9]*)=", lambda m: m.group(1)[0].lower()
                  + "".join(c for c in m.group(1)[1:] if c.isupper()).lower() + "=", label)


def _comparison_chart(tables: ReportTables, colors: svgplot.Palette) -> str:
    """The busiest request kind's latency spectrum, one series per group."""
    groups = tables.groups
    busiest = tables.comparison.groupby("request")["answered"].sum().idxmax()
    spectrum, key = ((tables.configuration_spectrum, "config") if groups.kind == "configuration"
                     else (tables.spectrum, "run_id"))
    chosen = spectrum[(spectrum["request"] == busiest) & spectrum[key].isin(groups.names)]
    series = [svgplot.Series(_legend_name(name), [_spectrum_x(p) for p in g["percentile"]],
                             list(g["value_us"] / 1000.0), colors(name))
              for name, g in sorted(chosen.groupby(key), key=lambda item: groups.names.index(item[0]))]
    chart = svgplot.line_chart(series, title=f"Latency spectrum of {busiest}", x_label="percentile",
                               y_label="latency (ms)", markers=True, y_log=True, x_tick_labels=_SPECTRUM_TICKS)
    return f"<div class=charts>{chart}</div>"
