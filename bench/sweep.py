"""Thread-setting sweep: the heartbeat storm over a grid of server settings, a fresh server per point.

    python bench/sweep.py --grid serverSelectorThreads=1,3 --grid defaultThreadPoolNums=4,16 \
        --grid clientRequestThreadPoolNums=2,8 --duration 20 --route-clients 4000 --route-poll-period 1 --report

Every point gets its own namesrv (namesrv.launcher, free port on 127.0.0.1) started with the
point's settings, one storm of the same fleet shape and load, and its own run directory under
the sweep directory; `--repeat N` runs the whole grid N times, round after round, so slow drifts
of a shared host spread over all points; `--report` then builds the Spark report (table +
heatmaps by setting, repeated runs of a point merged).
Any namesrv config key can be a grid axis (e.g. a worker-process count once the server has one).
All storm options apply to every point; --address and --launch are ignored (a sweep always launches).
"""
from __future__ import annotations

import argparse
import itertools
import json
import logging
import re
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make `bench` and `namesrv` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import spark_report  # noqa: E402
from bench.heartbeat_storm import (  # noqa: E402
    StormResult,
    build_parser,
    parse_overrides,
    run_storm,
    settings_from_args,
)
from namesrv.config import NamesrvConfig  # noqa: E402

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


def run_sweep(args: argparse.Namespace) -> tuple[Path, list[tuple[dict[str, str], StormResult]]]:
    grid = parse_grid(args.grid)
    points = grid_points(grid)
    fixed = parse_overrides(args.server_set)
    overlap = set(fixed) & set(grid)
    if overlap:
        raise ValueError(f"{sorted(overlap)} are both swept and fixed with --server-set")
    sweep_dir = args.sweep_dir or Path("runs") / f"sweep-{time.strftime('%Y%m%d-%H%M%S')}"
    if not 1 <= args.repeat <= 10:
        raise ValueError("--repeat must be 1..10")
    if len(points) * args.repeat > MAX_POINTS:
        raise ValueError(f"{len(points)} points × {args.repeat} repeats is over {MAX_POINTS} runs")
    base = settings_from_args(args)
    results = []
    runs = [(round_, index, point) for round_ in range(args.repeat) for index, point in enumerate(points)]
    for number, (round_, index, point) in enumerate(runs, start=1):
        print(f"[{number}/{len(runs)}] {' '.join(f'{k}={v}' for k, v in point.items())}", flush=True)
        run_id = point_id(index, point) + (f"-r{round_ + 1}" if args.repeat > 1 else "")
        settings = replace(base, runs_dir=sweep_dir, run_id=run_id, launch={**fixed, **point},
                           extra_meta={"sweep": {"dir": str(sweep_dir), "keys": list(grid), "grid": grid,
                                                 "point": point, "index": index, "points": len(points),
                                                 "round": round_ + 1, "repeat": args.repeat}})
        results.append((point, run_storm(settings)))
    (sweep_dir / "sweep.json").write_text(json.dumps(
        [{"point": point, "run_dir": str(result.run_dir), "summary": result.summary} for point, result in results],
        indent=2) + "\n", encoding="utf-8")
    return sweep_dir, results


def format_results(results: list[tuple[dict[str, str], StormResult]], mode: str) -> str:
    """One line per run, then the winner over each point's runs: highest mean throughput (closed
    loop) or, at the same offered load (open loop), the lowest worst p99 of its runs. (The Spark
    report merges repeated runs' histograms exactly; this quick ranking only compares runs.)"""
    lines = []
    by_point: dict[str, list[dict]] = {}
    for point, result in results:
        rows = {row["request"]: row for row in result.summary}
        total = rows.get("ALL") or next(iter(rows.values()))
        p99s = ", ".join(f"{name} p99 {row['p99_ms']:.2f} ms" for name, row in rows.items() if name != "ALL")
        label = " ".join(f"{k}={v}" for k, v in point.items())
        lines.append(f"{label}: {total['throughput_per_s']:,.0f} req/s ({p99s}), errors {total['errors']}")
        by_point.setdefault(label, []).append(total)
    if by_point and mode == "closed":
        label, totals = max(by_point.items(), key=lambda item: statistics.mean(t["throughput_per_s"] for t in item[1]))
        lines.append(f"best (highest throughput): {label} "
                     f"({statistics.mean(t['throughput_per_s'] for t in totals):,.0f} req/s over {len(totals)} run(s))")
    elif by_point:
        label, totals = min(by_point.items(), key=lambda item: (sum(t["errors"] for t in item[1]),
                                                                max(t["p99_ms"] for t in item[1])))
        lines.append(f"best (lowest p99 at the offered load): {label} "
                     f"(worst p99 {max(t['p99_ms'] for t in totals):.2f} ms over {len(totals)} run(s))")
    return "\n".join(lines)


def build_sweep_parser() -> argparse.ArgumentParser:
    """The storm's options plus the grid."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], parents=[build_parser(add_help=False)],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--grid", action="append", default=[], metavar="KEY=V1,V2",
                        help=f"a swept namesrv setting (repeatable; default {DEFAULT_GRID})")
    parser.add_argument("--repeat", type=int, default=1,
                        help="runs per point, interleaved round by round (noisy hosts; the report merges them)")
    parser.add_argument("--sweep-dir", type=Path, help="where the run directories go (default runs/sweep-<time>)")
    parser.add_argument("--report", action="store_true", help="build the Spark report over the sweep at the end")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_sweep_parser().parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        sweep_dir, results = run_sweep(args)
    except ValueError as exc:
        print(f"sweep: {exc}", file=sys.stderr)
        return 2
    print(format_results(results, args.mode))
    print(f"sweep directory: {sweep_dir}")
    if args.report:
        report = spark_report.report_with_own_session(None, [str(r.run_dir) for _, r in results],
                                                      sweep_dir / "report", "namesrv thread-setting sweep")
        print(f"report: {report}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
