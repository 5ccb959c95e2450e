"""What a reader sees before scrolling: the verdict under the title, then the knee chart and the client's
latency beside the server's at the knee.

The verdict answers the question the run asked, in one line (for knee searches: each knee, their
ratio, what bounded them, whether each was met twice), then says what could make a reader doubt it:
a knee that is only a lower bound, a request kind too rare at a knee to judge its percentile, the
CPUs the servers and the generator ran on. The knee chart plots each step's worst *judged*
latency, so a step never sits "met" above the SLO line; a step with a kind too rare to judge is a
hollow point that says which. At the knee, when the client's p99 is ten times the server's or
more, a sentence says that the time went outside the server: that knee measures the host as much
as the server.
"""
from __future__ import annotations

from collections.abc import Sequence
from html import escape

import pandas as pd

from bench.lib import verdict
from bench.report import svgplot
from bench.report.contents import ReportTables
from bench.report.html import LATENCY_COLUMNS, ms, rate, table
from bench.report.inputs import Run
from bench.report.judging import saturation_searches
from bench.report.tables import host_load

#: Client p99 at least this many times the server's: the knee measures the host as much as the server.
OUTSIDE_THE_SERVER = 10.0


def verdict_html(tables: ReportTables | None, runs: Sequence[Run], others: Sequence[Run]) -> str:
    """The verdict line and the lines that qualify it, in `<div id=verdict>`."""
    head, details = "", []
    if tables is not None and tables.search_knees:
        head, details = _knee_verdict(tables, runs)
    elif tables is not None and tables.best is not None:
        head = (f"Best: {tables.best.label} — {tables.best.reason}" if tables.best.label
                else f"No best setting named: {tables.best.reason}")
    elif tables is not None:
        head = _runs_verdict(tables, runs)
    for run in others:
        lines = [line for line in run.meta.get("lines") or [] if not line.startswith("machine: ")]
        details.append(f"{run.meta.get('verb', 'run')} {run.run_id}: {lines[-1] if lines else 'no figures printed'}")
    if not head and others:
        head, details = details[0], details[1:]
    details += _where(runs or others)
    return (f"<div id=verdict><p class=verdict><b>{escape(head)}</b></p>"
            + "".join(f"<p class=verdict-detail>{escape(line)}</p>" for line in details) + "</div>")


def _knee_verdict(tables: ReportTables, runs: Sequence[Run]) -> tuple[str, list[str]]:
    """("namesrv knee 18,575/s, java 7,162/s: 2.59×", what bounded each knee, how sure each is)."""
    knees = tables.search_knees
    baseline = tables.groups.baseline if tables.groups is not None else next(iter(knees))
    order = sorted(knees, key=lambda name: name == baseline)  # the baseline last: "namesrv ÷ java"
    searches = saturation_searches(runs)
    shown = [f"{name}: no knee" if knees[name].offered_per_s is None
             else f"{name} {'knee ' if i == 0 else ''}{rate(knees[name].offered_per_s)}/s" for i, name in enumerate(order)]
    head = ", ".join(shown)
    if len(order) == 2 and all(knees[name].offered_per_s for name in order):
        head += f": {knees[order[0]].offered_per_s / knees[order[1]].offered_per_s:.2f}×"
    bounds = [_bound(name, knees[name]) for name in order]
    if bounds:
        head += "; " + "; ".join(bounds)
    details = []
    confirmed = [name for name in order if knees[name].met_twice]
    once = [name for name in order if knees[name].index is not None and not knees[name].met_twice]
    if confirmed and not once:
        whose = "Each knee" if len(confirmed) > 1 else f"{confirmed[0]}'s knee"
        details.append(f"{whose} was met twice (the knee and the lowest miss were each run again).")
    for name in once:
        details.append(f"{name}'s knee was met once only: the search ended before it was run again.")
    for name in order:
        knee = knees[name]
        if knee.index is None:
            continue
        judgement = tables.judgements[searches[name][knee.index].run_id]
        for unjudged in judgement.unjudged:
            details.append(f"At {name}'s knee {unjudged}: that kind was not judged, so the knee does not vouch "
                           "for its p99.")
    return head, details


def _bound(name: str, knee: verdict.Knee) -> str:
    if knee.offered_per_s is None:
        return f"{name} met the SLO at no rate: {knee.note}"
    if knee.bound == "slo":
        return f"{name} bounded by {'; '.join(knee.miss_reasons)} at {rate(knee.miss_per_s)}/s"
    if knee.bound == "generator":
        return f"{name}'s knee is a lower bound: {knee.note}"
    if knee.bound == "max-rate":
        return f"{name} met the SLO at the highest rate allowed"
    if knee.bound == "unfinished":
        return f"{name}'s search ended before a miss"
    return f"{name}: {knee.note}"


def _runs_verdict(tables: ReportTables, runs: Sequence[Run]) -> str:
    """Runs that are not a search: how many, the worst judged p99 and whether the generator kept up."""
    worst = None
    for run in runs:
        facts, slo = tables.facts[run.run_id], run.slo
        value = verdict.slo_latency_ms(facts, slo)
        if value is not None and (worst is None or value > worst[0]):
            worst = (value, run.run_id)
    limited = [run.run_id for run in runs if tables.judgements[run.run_id].generator_limited]
    head = f"{len(runs)} run(s)"
    if worst is not None:
        head += f"; worst judged p99 {ms(worst[0])} ms ({worst[1]})"
    return head + (f"; the generator was the limit in {', '.join(limited)}" if limited else
                   "; the generator kept up in every run")


def _where(runs: Sequence[Run]) -> list[str]:
    """The machine and the CPUs the measured processes ran on."""
    if not runs:
        return []
    host = runs[0].meta.get("host") or {}
    line = (f"Measured on {host.get('cpu_model') or 'an unknown CPU'}, {host.get('cpu_count', '?')} CPUs, host load "
            f"{host_load(host) or '?'} (1 min)")
    if host.get("python"):
        line += f", Python {host['python']}"
    cores = next((run.cores for run in runs if run.cores), None)
    if cores:
        line += (f"; the servers under test on CPU {','.join(map(str, cores['server_cpus']))} and the generator on "
                 f"CPU {','.join(map(str, cores['generator_cpus']))}, the same for every target")
    elif any(run.measured for run in runs):
        line += "; not pinned: the servers and the generator shared the host's CPUs"
    return [line + "."]


def knee_first_screen(tables: ReportTables, runs: Sequence[Run], colors: svgplot.Palette) -> str:
    """The knee chart, and the client's latency beside the server's at each knee."""
    searches = saturation_searches(runs)
    chart = knee_chart(tables, searches, colors)
    side, sentences = _at_the_knee(tables, searches)
    if side.empty:
        sentences.append("No search has a knee: there is no knee step to set the client's latency beside the "
                         "server's.")
    return (f"<div class=first><div>{chart}</div><div class=at-knee><h3>At the knee: client and server</h3>"
            + "".join(f"<p class=verdict-detail>{escape(sentence)}</p>" for sentence in sentences)
            + ("" if side.empty else table(side, LATENCY_COLUMNS, {"p99_ratio": "client ÷ server p99"}))
            + "</div></div>")


def knee_chart(tables: ReportTables, searches: dict[str, list[Run]], colors: svgplot.Palette) -> str:
    """Each search's worst judged latency at the SLO percentile against answered/s, the SLO line across."""
    series = []
    for name, steps in searches.items():
        judged = sorted((run for run in steps if not tables.facts[run.run_id].partial),
                        key=lambda run: tables.facts[run.run_id].offered_per_s)  # along the load
        xs, ys, notes = [], [], []
        for run in judged:
            facts, judgement = tables.facts[run.run_id], tables.judgements[run.run_id]
            latency = verdict.slo_latency_ms(facts, run.slo)
            xs.append(facts.answered_per_s)
            ys.append(facts.worst_latency_ms if latency is None else latency)
            notes.append("not judged: " + "; ".join(judgement.unjudged) if judgement.unjudged else "")
        series.append(svgplot.Series(name, xs, ys, colors(name), notes if any(notes) else ()))
    slo = next(iter(searches.values()))[0].slo
    answered = [x for s in series for x in s.xs]
    return svgplot.line_chart(series, title=f"Worst-kind p{slo.percentile:g} against throughput", markers=True,
                              x_label="answered / s", y_label=f"p{slo.percentile:g} (ms)", y_log=True,
                              x_log=svgplot.spans_decade(answered),
                              references=[svgplot.Reference(slo.latency_ms, f"SLO {slo.latency_ms:g} ms")])


def _at_the_knee(tables: ReportTables, searches: dict[str, list[Run]]) -> tuple[pd.DataFrame, list[str]]:
    """Per search and request kind at its knee: client p50/p99 beside the server's, and the sentences."""
    rows, sentences = [], []
    for name, steps in searches.items():
        knee = tables.search_knees.get(name)
        if knee is None or knee.index is None:
            continue
        run = steps[knee.index]
        mine = tables.client_vs_server[tables.client_vs_server["run_id"] == run.run_id]
        for record in mine.to_dict("records"):
            ratio = (record["client_p99"] / record["server_p99"]
                     if pd.notna(record.get("server_p99")) and record["server_p99"] else None)
            rows.append({"target": name, "request": record["request"], "client_p50": record["client_p50"],
                         "client_p99": record["client_p99"], "server_p50": record.get("server_p50"),
                         "server_p99": record.get("server_p99"), "p99_ratio": ratio})
        problem = tables.runs.loc[tables.runs["run_id"] == run.run_id, "server_metrics_problem"].iloc[0]
        if isinstance(problem, str):
            sentences.append(f"{name}: no server-side latency — {problem}.")
            continue
        judged = {kind.request for kind in tables.facts[run.run_id].kinds if kind.answered >= run.slo.min_samples}
        ratios = [(row["p99_ratio"], row) for row in rows
                  if row["target"] == name and row["p99_ratio"] is not None and row["request"] in judged]
        if ratios:
            worst, row = max(ratios, key=lambda item: item[0])
            if worst >= OUTSIDE_THE_SERVER:
                sentences.append(
                    f"At {name}'s knee the client's {row['request']} p99 ({ms(row['client_p99'] / 1000)} ms) is "
                    f"{worst:.0f}× the server's ({ms(row['server_p99'] / 1000)} ms): the time goes outside the server "
                    "(the generator, the kernel and ZeroMQ's queues, waiting for this host's cores), so this knee "
                    "measures the host as much as the server.")
    return pd.DataFrame(rows, columns=["target", "request", "client_p50", "client_p99", "server_p50", "server_p99",
                                       "p99_ratio"]), sentences


def results_sections(others: Sequence[Run]) -> str:
    """The runs of the verbs that do not record latency histograms: what each printed, its figures as a table."""
    parts = []
    for run in others:
        meta = run.meta
        lines = "\n".join(meta.get("lines") or [])
        rows = pd.DataFrame([{key: (value if not isinstance(value, (dict, list)) else ", ".join(map(str, value)))
                              for key, value in row.items()} for row in meta.get("results") or []])
        parts.append(f"<h2>{escape(meta.get('verb', 'run'))}: {escape(run.run_id)}</h2>"
                     f"<p class=details>{escape(meta.get('tool', ''))} {escape(' '.join(meta.get('argv') or []))}, "
                     f"{escape(str(meta.get('started_at', ''))[:19].replace('T', ' '))}</p>"
                     + (f"<pre class=lines>{escape(lines)}</pre>" if lines else "")
                     + (table(rows, {}) if len(rows) else ""))
    return "".join(parts)
