"""The knee: the highest offered load a NameServer sustains within a latency SLO, searched step by step.

    python -m bench knee --launch                               # a fresh namesrv
    python -m bench knee --namesrv 127.0.0.1:9876               # a server already running
    python -m bench knee --launch --java on --out runs/knees    # namesrv and Java 4.9.8, alternating

The fleet shape is fixed (brokers, topics, queues, clients; all storm options apply); the offered
load is scaled by shortening every period alike, so the request mix stays the same. The first step
offers --start-rate; each step that meets the SLO doubles the rate (--factor) until one misses,
then the search bisects (geometric mean) between the highest rate met and the lowest missed until
they are within --resolution. Then the knee and the lowest miss are each run once more: a knee is
*met twice* (a rate counts as met only when all its runs met). Each step is one open-loop storm
(bench/heartbeat_storm.py): warm-up excluded, latency from the intended send time, its own run
directory. The rule that judges a step and finds the knee is bench/lib/verdict.py, which the
Spark report applies to the same runs.

On a host with few cores, --pin auto (the default) gives the servers under test and the generator
CPUs of their own, the same CPUs for every target (bench/lib/servers.core_plan), so the knee
measures the server, not the fight for a core. --ceiling adds the echo ceiling as a target: its
knee is the generator's own (the steps' generator CPU per request says how near one core it is).
The generator watches itself: a step that misses while its send lag or CPU says the generator was
the limit is run again with one more generator process (up to --max-workers); when it cannot be
helped, the knee is reported as a lower bound and says why. Every step's line gives the server's
CPU per answered request, and the run starts with the machine (CPU model, Python and its build).

With several targets (namesrv and the Java NameServer of ../shared/rocketmq-4.9.8) the searches
advance in lockstep, one step of each in turn, so drifts of a shared host spread over both; the
result prints each knee, CPU and RSS per answered request, and the ratio of the knees. Every step
starts once all the servers are idle (`settle`: they are pinned to the same CPUs, and a server
overloaded by its step drains its backlog for seconds after it); a wait of more than a second is
printed, and each step's meta.json says what it waited.
Ctrl-C ends the step that runs (kept, marked partial, not judged) and the search, and still writes
what was found. `python -m bench report OUT` then draws the curves.
"""
from __future__ import annotations

import argparse
import json
import logging
import math
import sys
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from bench.heartbeat_storm import INTERRUPTED, StormSettings, build_parser, run_storm, settings_from_args
from bench.lib import cli
from bench.lib.fleet import HEARTBEAT, FleetShape
from bench.lib.output import machine, machine_line
from bench.lib.servers import QUIET_WINDOW_S, Quiet, Target, open_targets, servers_cpu_seconds, settle
from bench.lib.verdict import Judgement, Knee, Slo, StepFacts, find_knee, judge, rate_outcomes, slo_latency_ms, \
    step_facts
from namesrv.launcher import NamesrvStartError

log = logging.getLogger("knee")

MAX_STEPS = 30
#: Runs after the search: the knee and the lowest miss once more each (or the next knee's, when one fails).
CONFIRMATIONS = 2


@dataclass(frozen=True)
class SearchPlan:
    """How the offered load moves: rates in requests per second over the whole fleet."""

    start_rate: float = 5000.0
    factor: float = 2.0
    resolution: float = 0.10
    min_rate: float = 100.0
    max_rate: float = 2_000_000.0
    max_steps: int = 12
    max_workers: int = 2

    def __post_init__(self) -> None:
        if not 0 < self.min_rate <= self.start_rate <= self.max_rate:
            raise ValueError("rates must satisfy 0 < min rate <= start rate <= max rate")
        if not self.factor > 1 or not 0 < self.resolution < 1:
            raise ValueError("factor must be > 1 and resolution in (0, 1)")
        if not 1 <= self.max_steps <= MAX_STEPS or not 1 <= self.max_workers <= 64:
            raise ValueError(f"max steps must be 1..{MAX_STEPS} and max workers 1..64")


@dataclass
class Search:
    """One target's search: the steps run so far and what comes next (None: done)."""

    target: str
    plan: SearchPlan
    slo: Slo
    workers: int
    steps: list[tuple[StepFacts, Judgement, str]] = field(default_factory=list)
    #: Seconds of unmeasured load before the first step (the first step's warm-up is at least this).
    prime_s: float = 0.0
    #: Why the search ended early (Ctrl-C), None while it runs or when it ended normally.
    stopped: str | None = None
    #: The rates handed out for their second run, each once.
    run_again: set[float] = field(default_factory=set)

    def next_rate(self) -> float | None:
        """The rate of the next step: the search's (while fewer than max_steps have run), then the knee's and
        the lowest miss's second runs, which steps run again for the generator never take the place of.
        Each rate is handed out for a second run once at most, so the confirmations end."""
        if self.stopped:
            return None
        outcomes = rate_outcomes([(facts, verdict) for facts, verdict, _ in self.steps])
        rate = self._search_rate(outcomes) if len(self.steps) < self.plan.max_steps else None
        if rate is not None:
            return rate
        knee = self.knee()
        for again in (knee.offered_per_s, knee.miss_per_s):
            outcome = next((o for o in outcomes if again is not None and math.isclose(o.rate, again)), None)
            if outcome is not None and len(outcome.runs) < 2 and outcome.rate not in self.run_again:
                self.run_again.add(outcome.rate)  # once: a rate the generator limits again stays run once
                return outcome.rate
        return None

    def _search_rate(self, outcomes) -> float | None:
        if not outcomes:
            return self.plan.start_rate if not self.steps else None
        met = [outcome.rate for outcome in outcomes if outcome.met]
        low = max(met) if met else None
        missed = [outcome.rate for outcome in outcomes if not outcome.met and (low is None or outcome.rate > low)]
        high = min(missed) if missed else None
        if high is None:
            return None if low >= self.plan.max_rate else min(low * self.plan.factor, self.plan.max_rate)
        if low is None:
            rate = high / self.plan.factor
            return rate if rate >= self.plan.min_rate else None
        if high / low <= 1 + self.plan.resolution:
            return None
        return math.sqrt(low * high)

    def knee(self) -> Knee:
        return find_knee([(facts, verdict) for facts, verdict, _ in self.steps], self.plan.max_rate)


def scaled_fleet(fleet: FleetShape, rate: float) -> FleetShape:
    """The same fleet offering `rate` requests/s in all: every period divided alike, the mix kept."""
    factor = rate / sum(fleet.rates().values())
    return replace(fleet, register_period_s=fleet.register_period_s / factor,
                   heartbeat_period_s=fleet.heartbeat_period_s / factor,
                   route_poll_period_s=fleet.route_poll_period_s / factor)


def run_step(search: Search, target: Target, base: StormSettings, out_dir: Path, rate: float,
             idle: Callable[[], Quiet] | None = None) -> tuple[StepFacts, Judgement]:
    """One storm at `rate` against `target`, judged; a generator-limited miss is run again with one
    more generator process while --max-workers allows (both runs are kept). Each storm starts once
    `idle()` has waited for the servers to go idle (what it saw is in the step's meta.json)."""
    before: StepFacts | None = None
    while True:
        number = len(search.steps) + 1
        first = number == 1
        quiet = None if idle is None else idle()
        if quiet is not None and (not quiet.settled or quiet.waited_s > 2 * QUIET_WINDOW_S):
            print(quiet.line(), flush=True)
        settings = replace(
            base, address=target.address, server_pid=target.pid, metrics_url=target.metrics_url, launch=None,
            echo_ok=target.implementation == "ceiling",
            fleet=scaled_fleet(base.fleet, rate), workers=search.workers, runs_dir=out_dir / target.name,
            run_id=f"{target.name}-step{number:02d}", progress=False,
            warmup_s=max(base.warmup_s, search.prime_s) if first else base.warmup_s,
            extra_meta={**base.extra_meta, "saturation": {
                "search": target.name, "implementation": target.implementation, "target": target.address,
                "step": number, "offered_per_s": rate, "workers": search.workers, "slo": search.slo.describe(),
                "max_rate": search.plan.max_rate}, **({} if quiet is None else {"settle": asdict(quiet)})})
        result = run_storm(settings)
        facts = step_facts(result.summary, result.resources, offered_per_s=rate, duration_s=result.duration_s,
                           workers=search.workers, slo=search.slo, partial=result.partial)
        verdict = judge(facts, search.slo)
        search.steps.append((facts, verdict, result.run_dir.name))
        print(format_step(target.name, number, facts, verdict, search.workers, search.slo), flush=True)
        tail = format_tail(facts)
        if tail:
            print(tail, flush=True)
        if result.partial:
            search.stopped = "interrupted (Ctrl-C)"
            raise KeyboardInterrupt
        if before is not None and _lag(facts) >= _lag(before):
            search.workers -= 1  # the processes share this host's cores with the server: more made it worse
            print(f"  {search.workers + 1} generator processes lagged no less than {search.workers}: back to "
                  f"{search.workers}", flush=True)
            return facts, verdict
        if verdict.met or not verdict.generator_limited or search.workers >= search.plan.max_workers:
            return facts, verdict
        before = facts
        search.workers += 1
        print(f"  the generator was the limit: running {rate:,.0f}/s again with {search.workers} generator "
              "processes", flush=True)


def format_tail(facts: StepFacts) -> str:
    """The step's tail, shown beside the verdict: each kind's p99 and p99.9 and their ratio, and the
    generator's own send delay at p99.9. Latency runs from the intended send time, so a generator that
    sends late adds its delay to the latency: a p99.9 near the send delay's is the generator's, and the
    echo ceiling (--ceiling) at the same rate shows what any server's tail would be on this host."""
    kinds = [f"{kind.request} p99 {_ms(kind.p99_ms)} / p99.9 {_ms(kind.p99_9_ms)} ({kind.p99_9_ms / kind.p99_ms:.2f}x)"
             for kind in facts.kinds if kind.p99_ms and kind.p99_9_ms is not None]
    if not kinds:
        return ""
    lag = facts.send_delay_p99_9_ms
    return "  tail: " + "; ".join(kinds) + ("" if lag is None else f"; generator send delay p99.9 {_ms(lag)}")


def _lag(facts: StepFacts) -> float:
    return facts.send_delay_p99_ms if facts.send_delay_p99_ms is not None else math.inf


def format_step(name: str, number: int, facts: StepFacts, verdict: Judgement, workers: int, slo: Slo) -> str:
    """The console line of a step: what was offered and answered, the worst *judged* latency at the SLO
    percentile, and the verdict; kinds too few to judge are named with their own figure, so no step
    reads "met" beside a number above the SLO."""
    lag = facts.send_delay_p99_ms
    server_cpu = facts.server_cpu_us_per_answer
    line = (f"[{name} step {number}] offered {facts.offered_per_s:,.0f}/s, answered {facts.answered_per_s:,.0f}/s"
            + (f" at {server_cpu:.1f} µs of server CPU each" if server_cpu else "") + ", "
            f"worst judged p{slo.percentile:g} {_ms(slo_latency_ms(facts, slo))}, errors {facts.error_rate:.2%}, generator lag p99 {_ms(lag)} "
            f"({workers} process{'es' if workers > 1 else ''}"
            + (f", {facts.generator_cpu_us_per_request:.1f} µs/request" if facts.generator_cpu_us_per_request else "")
            + "): ")
    if facts.partial:
        return line + "partial (Ctrl-C), not judged"
    line += "met" if verdict.met else ("not judged: " if verdict.nothing_judged else "missed: ") + "; ".join(
        verdict.reasons)
    if verdict.unjudged and not verdict.nothing_judged:
        line += " [unjudged: " + "; ".join(verdict.unjudged) + "]"
    if verdict.generator_limited:
        line += " [generator: " + "; ".join(verdict.generator_reasons) + "]"
    return line


def _ms(value: float | None) -> str:
    return "–" if value is None else f"{value:,.2f} ms"


def search_all(targets: Sequence[Target], base: StormSettings, plan: SearchPlan, slo: Slo, out_dir: Path,
               prime_s: float) -> list[Search]:
    """The searches of every target, in lockstep: a step of each in turn until all are done."""
    searches = [Search(target.name, plan, slo, base.workers, prime_s=prime_s) for target in targets]
    servers = servers_cpu_seconds(target.pid for target in targets)
    try:
        while True:
            progressed = False
            for search, target in zip(searches, targets):
                rate = search.next_rate()
                if rate is None:
                    continue
                run_step(search, target, base, out_dir, rate, lambda: settle(servers))
                progressed = True
            if not progressed:
                return searches
    except KeyboardInterrupt:
        for search in searches:
            search.stopped = search.stopped or "interrupted (Ctrl-C) before it finished"
        return searches


def describe(search: Search, target: Target) -> dict:
    """search.json: the steps as judged and the knee (the report recomputes both from the runs)."""
    knee = search.knee()
    steps = []
    for facts, verdict, run_id in search.steps:
        steps.append({
            "run_id": run_id, "offered_per_s": facts.offered_per_s, "answered_per_s": facts.answered_per_s,
            "duration_s": facts.duration_s, "worst_latency_ms": facts.worst_latency_ms,
            "latency_ms": {kind.request: kind.latency_ms for kind in facts.kinds},
            "tail_ms": {kind.request: {"p99": kind.p99_ms, "p99_9": kind.p99_9_ms} for kind in facts.kinds},
            "error_rate": facts.error_rate, "send_delay_p99_ms": facts.send_delay_p99_ms,
            "send_delay_p99_9_ms": facts.send_delay_p99_9_ms,
            "generator_cpu": facts.generator_cpu, "generator_cpu_us_per_request": facts.generator_cpu_us_per_request,
            "server_cpu_us_per_answer": facts.server_cpu_us_per_answer,
            "server_rss_bytes": facts.server_rss_bytes, "partial": facts.partial, "met": verdict.met,
            "reasons": list(verdict.reasons), "generator_limited": verdict.generator_limited,
            "generator_reasons": list(verdict.generator_reasons), "unjudged": list(verdict.unjudged)})
    at_knee = search.steps[knee.index][0] if knee.index is not None else None
    return {"target": target.name, "implementation": target.implementation, "address": target.address,
            "slo": search.slo.describe(), "plan": asdict(search.plan),
            "stopped": search.stopped, "steps": steps,
            "knee": {"offered_per_s": knee.offered_per_s, "bound": knee.bound, "note": knee.note,
                     "runs": knee.runs, "met_twice": knee.met_twice, "miss_per_s": knee.miss_per_s,
                     "miss_runs": knee.miss_runs,
                     "run_id": None if knee.index is None else search.steps[knee.index][2],
                     "answered_per_s": None if at_knee is None else at_knee.answered_per_s,
                     "worst_latency_ms": None if at_knee is None else at_knee.worst_latency_ms,
                     "server_cpu_us_per_answer": None if at_knee is None else at_knee.server_cpu_us_per_answer,
                     "server_rss_bytes": None if at_knee is None else at_knee.server_rss_bytes}}


def format_knees(results: Sequence[dict], skipped: str | None) -> str:
    """The end-of-search table: each target's knee, whether it was met twice, its cost, then the ratio."""
    lines = [f"{'target':<10}{'knee /s':>12}{'runs':>6}{'answered /s':>13}{'worst p99':>11}{'CPU µs/req':>12}"
             f"{'RSS MiB':>9}  bound"]
    for result in results:
        knee = result["knee"]
        runs = "–" if knee["offered_per_s"] is None else ("met twice" if knee["met_twice"] else "once")
        lines.append(f"{result['target']:<10}{_rate(knee['offered_per_s']):>12}{runs:>10}"
                     f"{_rate(knee['answered_per_s']):>13}"
                     f"{_ms(knee['worst_latency_ms']):>11}{_number(knee['server_cpu_us_per_answer'], 1):>12}"
                     f"{_number(None if knee['server_rss_bytes'] is None else knee['server_rss_bytes'] / 2**20, 1):>9}"
                     f"  {knee['bound']}: {knee['note']}")
        if result["stopped"]:
            lines.append(f"{'':<10}stopped early: {result['stopped']}")
    knees = {r["target"]: r["knee"]["offered_per_s"] for r in results}
    if len(results) > 1 and all(knees.values()):
        base = results[-1]["target"]
        for name, rate in knees.items():
            if name != base:
                lines.append(f"knee ratio {name} ÷ {base}: {rate / knees[base]:.2f}×")
    if skipped:
        lines.append(skipped)
    return "\n".join(lines)


def _rate(value: float | None) -> str:
    return "–" if value is None else f"{value:,.0f}"


def _number(value: float | None, decimals: int) -> str:
    return "–" if value is None else f"{value:,.{decimals}f}"


def add_search_arguments(parser: argparse.ArgumentParser) -> None:
    """The SLO and the search plan (the sweep adds them too), with a step's storm defaults."""
    search = parser.add_argument_group("SLO and search")
    search.add_argument("--slo-ms", type=float, default=Slo.latency_ms,
                        help="latency SLO in ms: every request kind's percentile must stay within it")
    search.add_argument("--slo-percentile", type=float, choices=(50.0, 99.0, 99.9), default=Slo.percentile,
                        help="the percentile the SLO bounds")
    search.add_argument("--error-budget", type=float, default=Slo.error_budget,
                        help="largest share of requests answered with an error or not at all")
    search.add_argument("--min-samples", type=int, default=Slo.min_samples,
                        help="answers a request kind needs before its percentile is judged")
    search.add_argument("--start-rate", type=float, default=None,
                        help="offered requests/s of the first step (when absent: the fleet's own rate)")
    search.add_argument("--factor", type=float, default=SearchPlan.factor,
                        help="rate multiplier while every step meets the SLO")
    search.add_argument("--resolution", type=float, default=SearchPlan.resolution,
                        help="stop when the lowest missed rate is within this share above the highest met")
    search.add_argument("--max-rate", type=float, default=SearchPlan.max_rate, help="highest rate tried, requests/s")
    search.add_argument("--max-steps", type=int, default=SearchPlan.max_steps,
                        help=f"search steps per target at most (then up to {CONFIRMATIONS} more: the knee and the "
                        "lowest miss again)")
    search.add_argument("--max-workers", type=int, default=SearchPlan.max_workers,
                        help="generator processes a generator-limited step may grow to")
    search.add_argument("--prime", type=float, default=10.0,
                        help="seconds of unmeasured load before each search's first step (JIT, caches)")
    parser.set_defaults(seconds=5.0, warmup=2.0, drain=2.0, workers=1, heartbeat_period=0.0, pin="auto")


def slo_from_args(args: argparse.Namespace) -> Slo:
    return Slo(percentile=args.slo_percentile, latency_ms=args.slo_ms, error_budget=args.error_budget,
               min_samples=args.min_samples)


def plan_from_args(args: argparse.Namespace, base: StormSettings) -> SearchPlan:
    if base.mode != "open":
        raise ValueError("a knee search offers loads: it needs --mode open")
    start = args.start_rate or sum(base.fleet.rates().values())
    return SearchPlan(start_rate=start, factor=args.factor, resolution=args.resolution, min_rate=min(100.0, start),
                      max_rate=args.max_rate, max_steps=args.max_steps,
                      max_workers=max(args.max_workers, base.workers))


def build_knee_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bench knee", description=__doc__.split("\n\n")[0],
                                     parents=[build_parser(add_help=False)], formatter_class=cli.HelpFormatter)
    add_search_arguments(parser)
    targets = parser.add_argument_group("targets")
    targets.add_argument("--name", default="server", help="the target's name in the results when not --launch")
    cli.add_java(targets)
    targets.add_argument("--ceiling", action="store_true",
                         help="also search the echo ceiling (a server that only echoes frames, on the servers' CPUs): "
                         "its knee is what the generator reaches on its own CPUs")
    return parser


def write_results(out_dir: Path, slo: Slo, results: Sequence[dict], skipped: str | None, host: dict,
                  cores: dict | None) -> None:
    """Each search's search.json beside its runs, and knee.json over all of them."""
    for result in results:
        (out_dir / result["target"]).mkdir(parents=True, exist_ok=True)
        (out_dir / result["target"] / "search.json").write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    (out_dir / "knee.json").write_text(json.dumps({"slo": slo.describe(), "searches": list(results),
                                                   "skipped": skipped, "host": host, "cores": cores},
                                                  indent=2) + "\n", encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    args = build_knee_parser().parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        base = replace(settings_from_args(args), progress=False, launch=None)
        slo = slo_from_args(args)
        plan = plan_from_args(args, base)
        out_dir = cli.out_dir(args, "knee")
        if args.java != "off" and HEARTBEAT in base.fleet.rates():
            raise ValueError("the Java NameServer 4.9.8 never answers BROKER_HEARTBEAT (a 5.x request): "
                             "use --heartbeat-period 0 to compare the same requests")
        if not args.launch:
            base.validate()
        host = machine()
        print(machine_line(host), flush=True)
        if base.cores is not None:
            print(base.cores.line(), flush=True)
        with open_targets(None if args.launch else base.address, cli.parse_overrides(args.server_set), args.java,
                          args.java_opts, ceiling=args.ceiling, cores=base.cores,
                          name="namesrv" if args.launch else args.name) as (targets, skipped):
            if skipped:
                print(skipped, flush=True)
            searches = search_all(targets, base, plan, slo, out_dir, args.prime)
            results = [describe(search, target) for search, target in zip(searches, targets)]
    except (ValueError, ConnectionError, NamesrvStartError, RuntimeError) as exc:
        print(f"knee: {exc}", file=sys.stderr)
        return 2
    write_results(out_dir, slo, results, skipped, host, None if base.cores is None else base.cores.describe())
    print(format_knees(results, skipped))
    print(f"searches: {out_dir} (report: python -m bench report {out_dir} --out {out_dir}/report)")
    return INTERRUPTED if any(r["stopped"] for r in results) else 0
