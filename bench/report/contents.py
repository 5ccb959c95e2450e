"""What a report holds: its tables, the groups its comparison sets side by side, each run's judgement.

A module of its own so the code that fills it (tables, judging) and the code that draws it
(render) share it without importing one another in a circle.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import pandas as pd

from bench.report.inputs import Run
from bench.lib import verdict


@dataclass(frozen=True)
class Groups:
    """What the comparison sets side by side: saturation searches, else configurations, else runs."""

    kind: str
    names: tuple[str, ...]
    baseline: str


def report_groups(runs: Sequence[Run], baseline: str | None = None) -> Groups:
    """The report's groups and its baseline: `baseline` when given (it must be one of them), else
    "java" when searches named namesrv and java exist (so ratios read "namesrv ÷ java"), else the first."""
    searches = tuple(dict.fromkeys(run.saturation["search"] for run in runs if run.saturation))
    configurations = tuple(dict.fromkeys(run.config_label for run in runs))
    if searches:
        kind, names = "search", searches
    elif len(configurations) > 1:
        kind, names = "configuration", configurations
    else:
        kind, names = "run", tuple(run.run_id for run in runs)
    if baseline is not None and baseline not in names:
        plural = {"search": "searches", "configuration": "configurations", "run": "runs"}[kind]
        raise ValueError(f"--baseline {baseline!r} is not one of this report's {plural}: "
                         + ", ".join(repr(name) for name in names))
    if baseline is None:
        baseline = "java" if kind == "search" and {"namesrv", "java"} <= set(names) else names[0]
    return Groups(kind, names, baseline)


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
    #: Per-configuration latency spectrum (runs merged), for the comparison chart.
    configuration_spectrum: pd.DataFrame = field(default_factory=pd.DataFrame)
    saturation_steps: pd.DataFrame = field(default_factory=pd.DataFrame)
    knees: pd.DataFrame = field(default_factory=pd.DataFrame)
    comparison: pd.DataFrame = field(default_factory=pd.DataFrame)
    #: Each run's facts and judgement (verdict.py), by run id.
    facts: dict[str, verdict.StepFacts] = field(default_factory=dict)
    judgements: dict[str, verdict.Judgement] = field(default_factory=dict)
    #: The sweep's best point over its configuration labels (None: one configuration only).
    best: verdict.Best | None = None
    groups: Groups | None = None
    #: Each saturation search's knee (verdict.find_knee over its steps), by search name.
    search_knees: dict[str, verdict.Knee] = field(default_factory=dict)

    def items(self) -> list[tuple[str, pd.DataFrame]]:
        """The tables written as csv/<name>.csv."""
        return [(name, getattr(self, name)) for name in
                ("runs", "summary", "configurations", "errors", "intervals", "spectrum", "resources", "sweep",
                 "server_latency", "server_configurations", "client_vs_server", "client_vs_server_configurations",
                 "propagation", "propagation_configurations", "saturation_steps", "knees", "comparison")]
