"""Settings sweep: every grid point of server settings at a load that means something, a fresh server each.

    python -m bench sweep --grid serverSelectorThreads=1,3 --grid defaultThreadPoolNums=4,16 \
        --brokers 128 --topics 200 --route-clients 5000 --route-poll-period 1 --report

Every point gets its own namesrv (namesrv.launcher, free port on 127.0.0.1) started with the
point's settings. By default each point runs its own knee search (bench/knee.py: the offered
load doubles, then bisects, until the latency SLO breaks) and the points are compared by
their knees; with --rate R every point instead runs one open-loop storm at R requests/s (pick a
rate near the knee: at a rate every setting handles easily, the settings all look the same) and
the points are compared by their worst request kind's latency at the SLO percentile.

"Best" is computed once, by bench/lib/verdict.choose_best, on the command line and in the Spark
report alike; it is withheld, with the reason, when the points are not comparable (a point's knee
was bounded by the generator, too few samples for the percentile, a run cut short) or when they
are within this host's run-to-run spread (10 %). `--repeat N` runs the whole grid N times, round
after round, so slow drifts of a shared host spread over all points, and a point counts as good as
its worst repeat. Any namesrv config key can be a grid axis (e.g. workerProcesses). All storm
options apply to every point; --namesrv and --launch are ignored (a sweep always launches).
"""
from __future__ import annotations

import argparse
import itertools
import json
import logging
import re
import sys
from dataclasses import replace
from pathlib import Path

from bench import spark_report
from bench.heartbeat_storm import INTERRUPTED, StormSettings, build_parser, run_storm, settings_from_args
from bench.knee import add_search_arguments, describe, plan_from_args, scaled_fleet, search_all, slo_from_args
from bench.lib import cli
from bench.lib.servers import open_targets
from bench.lib.verdict import Best, Candidate, Slo, choose_best, judge, step_facts
from namesrv.config import NamesrvConfig
from namesrv.launcher import NamesrvStartError

log = logging.getLogger("sweep")

DEFAULT_GRID = {"serverSelectorThreads": ["1", "3"], "defaultThreadPoolNums": ["4", "16"],
                "clientRequestThreadPoolNums": ["2", "8"]}
MAX_POINTS = 64


def parse_grid(items: list[str]) -> dict[str, list[str]]:
    """["key=v1,v2", ...] -> {key: [v1, v2]}, keys validated against namesrv's configuration."""
    if not items:
        return dict(DEFAULT_GRID)
    known = NamesrvConfig.keys()
    grid: dict[str, list[str]] = {}
    for item in items:
        key, sep, values = item.partition("=")
        key = key.strip()
        choices = [v.strip() for v in values.split(",") if v.strip()]
        if not sep or not choices:
            raise ValueError(f"--grid {item!r} must be KEY=V1,V2,...")
        if key not in known:
            raise ValueError(f"--grid {key}: not a namesrv configuration key")
        if key in grid:
            raise ValueError(f"--grid {key} given twice")
        grid[key] = choices
    return grid


def grid_points(grid: dict[str, list[str]]) -> list[dict[str, str]]:
    points = [dict(zip(grid, values)) for values in itertools.product(*grid.values())]
    if len(points) > MAX_POINTS:
        raise ValueError(f"the grid has {len(points)} points; at most {MAX_POINTS} (each starts a server and a storm)")
    return points


def point_id(index: int, point: dict[str, str]) -> str:
    label = "-".join(f"{_initials(key)}{value}" for key, value in point.items())
    return f"p{index:02d}-{re.sub(r'[^A-Za-z0-9_.-]', '_', label)}"


def _initials(key: str) -> str:
    """serverSelectorThreads -> sst (short, still readable in a directory name)."""
    return (key[0] + "".join(c for c in key[1:] if c.isupper())).lower()


def run_sweep(args: argparse.Namespace) -> tuple[Path, list[dict], Best, bool]:
    """Run every point (round after round): one record per run, the best point by the shared rule, and
    whether every run finished (False after Ctrl-C)."""
    grid = parse_grid(args.grid)
    points = grid_points(grid)
    fixed = cli.parse_overrides(args.server_set)
    overlap = set(fixed) & set(grid)
    if overlap:
        raise ValueError(f"{sorted(overlap)} are both swept and fixed with --server-set")
    if not 1 <= args.repeat <= 10:
        raise ValueError("--repeat must be 1..10")
    if len(points) * args.repeat > MAX_POINTS:
        raise ValueError(f"{len(points)} points × {args.repeat} repeats is over {MAX_POINTS} runs")
    base = replace(settings_from_args(args), progress=False)
    slo = slo_from_args(args)
    plan = plan_from_args(args, base) if args.rate is None else None
    if args.rate is not None and not args.rate > 0:
        raise ValueError("--rate must be > 0 requests/s")
    sweep_dir = cli.out_dir(args, "sweep")
    records: list[dict] = []
    runs = [(round_, index, point) for round_ in range(args.repeat) for index, point in enumerate(points)]
    try:
        for number, (round_, index, point) in enumerate(runs, start=1):
            label = " ".join(f"{k}={v}" for k, v in point.items())
            print(f"[{number}/{len(runs)}] {label}", flush=True)
            run_id = point_id(index, point) + (f"-r{round_ + 1}" if args.repeat > 1 else "")
            sweep_meta = {"dir": str(sweep_dir), "keys": list(grid), "grid": grid, "point": point, "index": index,
                          "points": len(points), "round": round_ + 1, "repeat": args.repeat, "slo": slo.describe(),
                          "load": "search" if args.rate is None else {"rate_per_s": args.rate}}
            settings = replace(base, runs_dir=sweep_dir, extra_meta={**base.extra_meta, "sweep": sweep_meta})
            if plan is None:
                records.append(_fixed_load_run(label, point, run_id, settings, {**fixed, **point}, args.rate, slo))
            else:
                records.append(_search_run(label, point, run_id, settings, {**fixed, **point}, plan, slo,
                                           args.prime))
            if records[-1].get("stopped"):
                raise KeyboardInterrupt
    except KeyboardInterrupt:
        print("interrupted: the points run so far are kept", flush=True)
    best = choose_best(candidates(records), slo)
    complete = len(records) == len(runs) and not any(record.get("stopped") for record in records)
    sweep_dir.mkdir(parents=True, exist_ok=True)
    (sweep_dir / "sweep.json").write_text(json.dumps(
        {"slo": slo.describe(), "load": "search" if args.rate is None else {"rate_per_s": args.rate},
         "runs": [{k: v for k, v in record.items() if not k.startswith("_")} for record in records],
         "complete": complete,
         "best": {"label": best.label, "score": best.score, "reason": best.reason}}, indent=2) + "\n",
        encoding="utf-8")
    return sweep_dir, records, best, complete


def _fixed_load_run(label: str, point: dict[str, str], run_id: str, settings: StormSettings,
                    overrides: dict[str, str], rate: float, slo: Slo) -> dict:
    """One storm at `rate` against a fresh server with the point's settings, judged."""
    result = run_storm(replace(settings, run_id=run_id, launch=overrides, fleet=scaled_fleet(settings.fleet, rate)))
    facts = step_facts(result.summary, result.resources, offered_per_s=rate, duration_s=result.duration_s,
                       workers=settings.workers, slo=slo, partial=result.partial)
    verdict = judge(facts, slo)
    return {"point": point, "label": label, "run_dir": str(result.run_dir), "summary": result.summary,
            "met": verdict.met, "reasons": list(verdict.reasons), "generator_limited": verdict.generator_limited,
            "stopped": "interrupted (Ctrl-C)" if result.partial else None, "_facts": (facts, verdict)}


def _search_run(label: str, point: dict[str, str], run_id: str, settings: StormSettings, overrides: dict[str, str],
                plan, slo: Slo, prime_s: float) -> dict:
    """A knee search against a fresh server with the point's settings; its steps land in sweep_dir/run_id."""
    with open_targets(None, overrides, "off", cores=settings.cores, name=run_id) as (targets, _):
        target, = targets
        search, = search_all([target], replace(settings, launch=None), plan, slo, settings.runs_dir, prime_s)
    result = describe(search, target)
    return {"point": point, "label": label, "search_dir": str(settings.runs_dir / run_id), "knee": result["knee"],
            "steps": result["steps"], "stopped": search.stopped, "_knee": search.knee()}


def candidates(records: list[dict]) -> list[Candidate]:
    """The records grouped by point label, as verdict.choose_best takes them."""
    by_label: dict[str, list[dict]] = {}
    for record in records:
        by_label.setdefault(record["label"], []).append(record)
    return [Candidate(label, runs=tuple(r["_facts"] for r in group if "_facts" in r),
                      knees=tuple(r["_knee"] for r in group if "_knee" in r))
            for label, group in by_label.items()]


def format_results(records: list[dict], best: Best) -> str:
    """One line per run (its knee, or its latency at the fixed load), then the shared rule's answer."""
    lines = []
    for record in records:
        if "knee" in record:
            knee = record["knee"]
            rate = "none" if knee["offered_per_s"] is None else f"{knee['offered_per_s']:,.0f}/s"
            lines.append(f"{record['label']}: knee {rate} ({knee['bound']}: {knee['note']})")
        else:
            rows = {row["request"]: row for row in record["summary"] if row["request"] != "ALL"}
            p99s = ", ".join(f"{name} p99 " + ("unanswered" if row["p99_ms"] is None else f"{row['p99_ms']:.2f} ms")
                             for name, row in rows.items())
            verdict = "met the SLO" if record["met"] else "missed: " + "; ".join(record["reasons"])
            lines.append(f"{record['label']}: {p99s}; {verdict}")
    if best.label is None:
        lines.append(f"no best setting named: {best.reason}")
    else:
        lines.append(f"best: {best.label} ({best.reason})")
    return "\n".join(lines)


def build_sweep_parser() -> argparse.ArgumentParser:
    """The storm's options, the SLO and search plan, plus the grid."""
    parser = argparse.ArgumentParser(prog="python -m bench sweep", description=__doc__.split("\n\n")[0],
                                     parents=[build_parser(add_help=False)], formatter_class=cli.HelpFormatter)
    add_search_arguments(parser)
    grid = parser.add_argument_group("grid")
    grid.add_argument("--grid", action="append", default=[], metavar="KEY=V1,V2",
                      help=f"a swept namesrv setting (repeatable; when absent: {DEFAULT_GRID})")
    grid.add_argument("--rate", type=float,
                      help="every point runs one storm at this many requests/s instead of a saturation search "
                      "(when absent: each point searches for its knee)")
    grid.add_argument("--repeat", type=int, default=1,
                      help="runs per point, interleaved round by round (a point counts as good as its worst run)")
    grid.add_argument("--report", action="store_true", help="build the Spark report over the sweep at the end")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_sweep_parser().parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        sweep_dir, records, best, complete = run_sweep(args)
    except (ValueError, NamesrvStartError) as exc:
        print(f"sweep: {exc}", file=sys.stderr)
        return 2
    print(format_results(records, best))
    print(f"sweep directory: {sweep_dir}")
    if args.report and records:
        report = spark_report.report_with_own_session(None, [str(sweep_dir)], sweep_dir / "report",
                                                      "namesrv settings sweep")
        print(f"report: {report}")
    return 0 if complete else INTERRUPTED

