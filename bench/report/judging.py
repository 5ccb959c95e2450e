"""The report's judging: bench/storm/verdict.py's rule on each run's facts, as the sweep and the search apply it.

Each run's facts (per request kind: counts and percentiles from its own merged histograms; its
resource samples) are judged against the SLO its meta.json carries. A sweep's best setting is
verdict.choose_best over its points; a saturation search gets a step table and its knee
(verdict.find_knee, computed here, never read from a file); the comparison sets the report's
groups against the baseline group.
"""
from __future__ import annotations

import sys
from collections.abc import Sequence

import pandas as pd

from bench.report.contents import ReportTables
from bench.report.inputs import Run
from bench.lib import verdict
from namesrv.protocol import RequestCode


def judge_runs(tables: ReportTables, runs: Sequence[Run]) -> None:
    """Each run's facts and judgement, the sweep's best point, the searches' steps and knees and the comparison."""
    for run in runs:
        tables.facts[run.run_id] = run_facts(run, tables.summary, tables.resources)
        tables.judgements[run.run_id] = verdict.judge(tables.facts[run.run_id], run.slo)
    knees = _search_knees(runs, tables)
    tables.search_knees = {name: knee for name, (knee, _) in knees.items()}
    tables.saturation_steps = _saturation_steps(runs, tables)
    tables.knees = _knee_table(runs, tables, knees)
    if len(tables.sweep) > 1:
        tables.best = sweep_best(runs, tables, knees)
    tables.comparison = _comparison(tables)


def storm_rows(summary: pd.DataFrame) -> list[dict]:
    """A run's summary as the storm's own `summarize` rows (milliseconds): every kind that was answered
    or counted in its responses (a kind never answered: all errors, no percentiles), so the report
    judges exactly what the storm's command line judged."""
    rows = []
    for record in summary.to_dict("records"):
        rows.append({"request": record["request"], "requests": int(_zero(record["requests"])),
                     "answered": int(_zero(record["answered"])), "errors": int(_zero(record["errors"])),
                     **{f"{column}_ms": _milliseconds(record[column]) for column in ("p50", "p99", "p99_9")},
                     "send_delay_p99_ms": _milliseconds(record.get("send_delay_p99"))})
    return sorted(rows, key=lambda row: _request_code(row["request"]))


def _request_code(name: str) -> int:
    """The code of a request kind's name (rundir.request_name's inverse): the storm's row order."""
    if name.startswith("CODE_") and name[5:].lstrip("-").isdigit():
        return int(name[5:])
    try:
        return int(RequestCode[name])
    except KeyError:
        return sys.maxsize


def _zero(value) -> float:
    return 0 if value is None or pd.isna(value) else value


def _milliseconds(microseconds) -> float | None:
    return None if microseconds is None or pd.isna(microseconds) else float(microseconds) / 1000.0


def run_facts(run: Run, summary: pd.DataFrame, resources: pd.DataFrame) -> verdict.StepFacts:
    """verdict.step_facts of one run, from the report's summary rows and resource samples."""
    rows = storm_rows(summary[summary["run_id"] == run.run_id])
    samples = resources.loc[resources["run_id"] == run.run_id, ["process", "t", "cpu_percent", "rss_bytes"]]
    load = run.meta.get("load") or {}
    return verdict.step_facts(rows, samples.to_dict("records"), offered_per_s=run.offered_per_s,
                              duration_s=float(run.meta["duration_s"]), workers=int(load.get("workers") or 1),
                              slo=run.slo, partial=bool(run.meta.get("partial", False)))


def saturation_searches(runs: Sequence[Run]) -> dict[str, list[Run]]:
    """Saturation searches in order of appearance, each one's steps in step order."""
    searches: dict[str, list[Run]] = {}
    for run in runs:
        if run.saturation:
            searches.setdefault(run.saturation["search"], []).append(run)
    return {name: sorted(steps, key=lambda run: run.saturation.get("step", 0)) for name, steps in searches.items()}


def _search_knees(runs: Sequence[Run], tables: ReportTables) -> dict[str, tuple[verdict.Knee, list[Run]]]:
    """Each search's knee (verdict.find_knee over its steps' facts) and its steps."""
    knees = {}
    for name, steps in saturation_searches(runs).items():
        judged = [(tables.facts[run.run_id], tables.judgements[run.run_id]) for run in steps]
        max_rate = steps[0].saturation.get("max_rate")
        knees[name] = (verdict.find_knee(judged, None if max_rate is None else float(max_rate)), steps)
    return knees


def _worst(summary: pd.DataFrame, run_id: str, column: str) -> float | None:
    """The highest `column` (µs) over a run's request kinds, in ms: the kind that decides the verdict."""
    values = summary.loc[summary["run_id"] == run_id, column].dropna()
    return float(values.max()) / 1000.0 if len(values) else None


def _step_row(run: Run, tables: ReportTables) -> dict[str, object]:
    facts, judgement = tables.facts[run.run_id], tables.judgements[run.run_id]
    if facts.partial:
        outcome = "partial (not judged)"
    else:
        outcome = judgement.outcome
    return {"search": run.saturation["search"], "step": run.saturation.get("step"), "run_id": run.run_id,
            "offered_per_s": facts.offered_per_s, "answered_per_s": facts.answered_per_s,
            **{f"worst_{column}_ms": _worst(tables.summary, run.run_id, column) for column in ("p50", "p99", "p99_9")},
            "error_rate": facts.error_rate, "send_lag_p99_ms": facts.send_delay_p99_ms,
            "generator_cpu_percent": None if facts.generator_cpu is None else facts.generator_cpu * 100.0,
            "server_cpu_us_per_answer": facts.server_cpu_us_per_answer,
            "server_rss_mib": None if facts.server_rss_bytes is None else facts.server_rss_bytes / 2**20,
            "verdict": outcome, "reasons": "; ".join(judgement.reasons), "unjudged": "; ".join(judgement.unjudged),
            "generator_limited": "yes" if judgement.generator_limited else "no",
            "generator_reasons": "; ".join(judgement.generator_reasons)}


_STEP_COLUMNS = ("search", "step", "run_id", "offered_per_s", "answered_per_s", "worst_p50_ms", "worst_p99_ms",
                 "worst_p99_9_ms", "error_rate", "send_lag_p99_ms", "generator_cpu_percent",
                 "server_cpu_us_per_answer", "server_rss_mib", "verdict", "reasons", "unjudged", "generator_limited",
                 "generator_reasons")


def _saturation_steps(runs: Sequence[Run], tables: ReportTables) -> pd.DataFrame:
    rows = [_step_row(run, tables) for steps in saturation_searches(runs).values() for run in steps]
    return pd.DataFrame(rows, columns=list(_STEP_COLUMNS))


_KNEE_COLUMNS = ("search", "implementation", "knee_offered_per_s", "runs", "bound", "note", "answered_per_s",
                 "worst_p99_ms", "server_cpu_us_per_answer", "server_rss_mib", "knee_ratio", "baseline")


def _knee_table(runs: Sequence[Run], tables: ReportTables,
                knees: dict[str, tuple[verdict.Knee, list[Run]]]) -> pd.DataFrame:
    """One row per search: its knee and the knee step's facts, and the knee ÷ the baseline search's knee."""
    rows = []
    for name, (knee, steps) in knees.items():
        row: dict[str, object] = {"search": name, "implementation": steps[0].saturation.get("implementation"),
                                  "knee_offered_per_s": knee.offered_per_s,
                                  "runs": "" if knee.index is None else "met twice" if knee.met_twice else "met once",
                                  "bound": knee.bound, "note": knee.note}
        if knee.index is not None:
            step = steps[knee.index]
            facts = tables.facts[step.run_id]
            row.update(answered_per_s=facts.answered_per_s, worst_p99_ms=_worst(tables.summary, step.run_id, "p99"),
                       server_cpu_us_per_answer=facts.server_cpu_us_per_answer,
                       server_rss_mib=None if facts.server_rss_bytes is None else facts.server_rss_bytes / 2**20)
        rows.append(row)
    table = pd.DataFrame(rows, columns=list(_KNEE_COLUMNS))
    if table.empty:
        return table
    baseline = tables.groups.baseline if tables.groups and tables.groups.kind == "search" else table["search"][0]
    reference = table.loc[table["search"] == baseline, "knee_offered_per_s"].iloc[0]
    table["knee_ratio"] = [_ratio(value, reference) for value in table["knee_offered_per_s"]]
    table["baseline"] = baseline
    return table


def _ratio(value, reference) -> float | None:
    if value is None or reference is None or pd.isna(value) or pd.isna(reference) or not reference:
        return None
    return float(value) / float(reference)


def sweep_best(runs: Sequence[Run], tables: ReportTables,
               knees: dict[str, tuple[verdict.Knee, list[Run]]]) -> verdict.Best:
    """verdict.choose_best with one Candidate per configuration label: its plain runs' facts and
    judgements, or the knees of the searches its runs belong to."""
    slos = list(dict.fromkeys(run.slo for run in runs))
    if len(slos) > 1:
        return verdict.Best(None, None, "the runs were judged by different SLOs: not comparable")
    by_label: dict[str, list[Run]] = {}
    for run in runs:
        by_label.setdefault(run.config_label, []).append(run)
    candidates = []
    for label, members in by_label.items():
        plain = tuple((tables.facts[run.run_id], tables.judgements[run.run_id])
                      for run in members if not run.saturation)
        searches = dict.fromkeys(run.saturation["search"] for run in members if run.saturation)
        candidates.append(verdict.Candidate(label, plain, tuple(knees[name][0] for name in searches)))
    return verdict.choose_best(candidates, slos[0])


#: The comparison's measures: (table column, ratio column).
_COMPARED = (("throughput_per_s", "throughput_ratio"), ("p50", "p50_ratio"), ("p99", "p99_ratio"),
             ("p99_9", "p99_9_ratio"))


def _comparison(tables: ReportTables) -> pd.DataFrame:
    """Per group and request kind: throughput and merged percentiles, each ÷ the baseline group's.

    Searches compare by knee (the knee table); configurations by their merged runs' table; runs by
    their own rows. Nothing with fewer than two groups.
    """
    groups = tables.groups
    if groups is None or len(groups.names) < 2:
        return pd.DataFrame()
    if groups.kind == "search":
        return tables.knees
    key, source = ("config", tables.configurations) if groups.kind == "configuration" else ("run_id", tables.summary)
    table = source[source[key].isin(groups.names)].rename(columns={key: "group"})
    table = table[["group", "request", *([] if key == "run_id" else ["runs"]), "answered",
                   *(column for column, _ in _COMPARED)]].copy()
    reference = table[table["group"] == groups.baseline].set_index("request")
    for column, ratio in _COMPARED:
        table[ratio] = [_ratio(value, reference[column].get(request))
                        for request, value in zip(table["request"], table[column])]
    order = {name: index for index, name in enumerate(groups.names)}
    return (table.sort_values(["request", "group"], key=lambda c: c.map(order) if c.name == "group" else c)
            .reset_index(drop=True))
