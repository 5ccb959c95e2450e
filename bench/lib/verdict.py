"""The one rule that judges a load step, finds a knee and picks a sweep's best setting.

The knee search (`python -m bench knee`), the sweep (`python -m bench sweep`) and the Spark report
(`python -m bench report`) all call these functions on the same facts of each run, so the knee and
the "best" a user reads are computed once, the same way, wherever they are printed.
The facts are per run: a run's percentiles come from its own HDR histograms (exact, identical in
the storm process and in Spark's merged buckets), and a point run several times is judged by its
worst run ("a setting is as good as its worst repeat"), never by averaged percentiles.

A step *meets* the SLO when every request kind's latency at the SLO percentile (measured from the
intended send time) is within the SLO, errors (error codes and requests never answered) stay within
the error budget, and the server answered at least `min_answered_share` of the offered load. A
kind with fewer than `min_samples` answers (a p99 of 33 samples is just the maximum) is not judged
on latency, and says so; a step with no kind left to judge is *not judged* and does not meet the
SLO (it vouches for no latency), and a fixed-load sweep with no kind left to judge names no best. A step is
*generator-limited* when a generator process was busy `generator_cpu_limit` of a core, or when
the generator's own send lag (its p99) reaches `generator_lag_share` of the SLO and accounts for
the excess (latency minus lag within the SLO): a miss then says nothing about the server, and the
search says so instead of calling it a knee. A miss with a lag far below the latency is the
server's queueing, whatever the lag.

A rate run more than once (a knee is *met twice*: the search runs the knee and the lowest miss
again) counts as met only when every run of it met; a generator-limited miss that was run again
with more generator processes is superseded by that run.
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

#: Percentiles a storm summary carries, by SLO percentile: the summary row key.
SLO_PERCENTILE_KEYS = {50.0: "p50_ms", 99.0: "p99_ms", 99.9: "p99_9_ms"}
#: Two scores closer than this share are a tie on this host (the throughput verb's legs vary by 10-20 %).
DEFAULT_NOISE_SHARE = 0.10
#: Resource samples sit on a 1-s grid from the window's start; one at most this late still belongs to it.
_SAMPLE_SLACK_S = 0.5


@dataclass(frozen=True)
class Slo:
    """What a step must do to count as sustained."""

    percentile: float = 99.0
    latency_ms: float = 5.0
    error_budget: float = 0.001
    min_answered_share: float = 0.99
    min_samples: int = 1000
    generator_lag_share: float = 0.5
    generator_cpu_limit: float = 0.9

    def __post_init__(self) -> None:
        if self.percentile not in SLO_PERCENTILE_KEYS:
            raise ValueError(f"SLO percentile must be one of {sorted(SLO_PERCENTILE_KEYS)}")
        if not self.latency_ms > 0 or not 0 <= self.error_budget < 1 or not 0 < self.min_answered_share <= 1:
            raise ValueError("SLO latency must be > 0 ms, error budget in [0, 1), answered share in (0, 1]")
        if self.min_samples < 1 or not 0 < self.generator_lag_share or not 0 < self.generator_cpu_limit <= 1:
            raise ValueError("min samples must be >= 1, generator lag share > 0, generator CPU limit in (0, 1]")

    @property
    def label(self) -> str:
        return f"p{self.percentile:g} <= {self.latency_ms:g} ms, errors <= {self.error_budget:.2%}"

    def describe(self) -> dict:
        return {"percentile": self.percentile, "latency_ms": self.latency_ms, "error_budget": self.error_budget,
                "min_answered_share": self.min_answered_share, "min_samples": self.min_samples,
                "generator_lag_share": self.generator_lag_share, "generator_cpu_limit": self.generator_cpu_limit}


@dataclass(frozen=True)
class KindFacts:
    """One request kind of one run: counts, latency at the SLO percentile, the generator's send lag p99;
    and the tail beside them (p99 and p99.9 of the latency, the send lag's p99.9), shown, not judged."""

    request: str
    requests: int
    answered: int
    errors: int
    latency_ms: float | None
    send_delay_p99_ms: float | None
    p99_ms: float | None = None
    p99_9_ms: float | None = None
    send_delay_p99_9_ms: float | None = None


@dataclass(frozen=True)
class StepFacts:
    """One run at one offered load: what the rule needs, and the resources shown beside it."""

    offered_per_s: float
    duration_s: float
    kinds: tuple[KindFacts, ...]
    #: Mean CPU of one generator process over the measured window, 1.0 = one core; None if not sampled.
    generator_cpu: float | None = None
    #: Server CPU seconds over the measured window and its peak RSS; None if not sampled.
    server_cpu_s: float | None = None
    server_rss_bytes: int | None = None
    #: The run was cut short (Ctrl-C): shown, never judged as a step of a search.
    partial: bool = False
    #: CPU seconds of all the generator's processes over the measured window; None if not sampled.
    generator_cpu_s: float | None = None

    @property
    def requests(self) -> int:
        return sum(kind.requests for kind in self.kinds)

    @property
    def answered(self) -> int:
        return sum(kind.answered for kind in self.kinds)

    @property
    def errors(self) -> int:
        return sum(kind.errors for kind in self.kinds)

    @property
    def answered_per_s(self) -> float:
        return self.answered / self.duration_s if self.duration_s else 0.0

    @property
    def error_rate(self) -> float:
        return self.errors / self.requests if self.requests else 0.0

    @property
    def worst_latency_ms(self) -> float | None:
        return _worst(kind.latency_ms for kind in self.kinds)

    @property
    def send_delay_p99_ms(self) -> float | None:
        return _worst(kind.send_delay_p99_ms for kind in self.kinds)

    @property
    def send_delay_p99_9_ms(self) -> float | None:
        return _worst(kind.send_delay_p99_9_ms for kind in self.kinds)

    @property
    def server_cpu_us_per_answer(self) -> float | None:
        if self.server_cpu_s is None or not self.answered:
            return None
        return self.server_cpu_s * 1e6 / self.answered

    @property
    def generator_cpu_us_per_request(self) -> float | None:
        """The generator's CPU per request it sent and read the answer of: 1e6 / it is what one of
        its cores could offer at most."""
        if self.generator_cpu_s is None or not self.requests:
            return None
        return self.generator_cpu_s * 1e6 / self.requests


@dataclass(frozen=True)
class Judgement:
    met: bool
    #: Why the step missed (empty when it met the SLO).
    reasons: tuple[str, ...]
    generator_limited: bool
    #: Why the generator is suspected (empty when it is not).
    generator_reasons: tuple[str, ...]
    #: Kinds not judged on latency: too few answers for the SLO percentile.
    unjudged: tuple[str, ...] = ()
    #: No kind had enough answers: the step vouches for no latency, so it does not meet the SLO.
    nothing_judged: bool = False

    @property
    def outcome(self) -> str:
        """"met", "missed" or "not judged", and whether some kind was not judged."""
        if self.nothing_judged:
            return "not judged (too few answers)"
        return ("met" if self.met else "missed") + (" (not every kind judged)" if self.unjudged else "")


def slo_latency_ms(step: StepFacts, slo: Slo) -> float | None:
    """The worst latency at the SLO percentile over the kinds with enough answers to judge (None: none has)."""
    values = [kind.latency_ms for kind in step.kinds
              if kind.answered >= slo.min_samples and kind.latency_ms is not None]
    return max(values) if values else None


def step_facts(rows: Iterable[Mapping], resources: Iterable[Mapping], *, offered_per_s: float, duration_s: float,
               workers: int, slo: Slo, partial: bool = False) -> StepFacts:
    """Facts from a storm summary's rows (bench/heartbeat_storm.summarize: per request kind, the
    "ALL" row ignored) and its resource samples (process, t, cpu_percent, rss_bytes); the Spark
    report builds the same dicts from its tables."""
    key = SLO_PERCENTILE_KEYS[slo.percentile]
    kinds = tuple(KindFacts(row["request"], int(row["requests"]), int(row["answered"]), int(row["errors"]),
                            _number(row.get(key)), _number(row.get("send_delay_p99_ms")), _number(row.get("p99_ms")),
                            _number(row.get("p99_9_ms")), _number(row.get("send_delay_p99_9_ms")))
                  for row in rows if row["request"] != "ALL")
    samples: dict[str, list[Mapping]] = {}
    for sample in resources:
        if sample["t"] <= duration_s + _SAMPLE_SLACK_S:  # the drain after the window would dilute the means
            samples.setdefault(sample["process"], []).append(sample)
    generator = samples.get("generator") or []
    server = samples.get("server") or []
    generator_cpu = (sum(s["cpu_percent"] for s in generator) / len(generator) / 100.0 / max(workers, 1)
                     if generator else None)
    server_cpu_s = _cpu_seconds(server) if server else None
    server_rss = max(int(s["rss_bytes"]) for s in server) if server else None
    return StepFacts(offered_per_s, duration_s, kinds, generator_cpu, server_cpu_s, server_rss, partial,
                     _cpu_seconds(generator) if generator else None)


def _worst(values: Iterable[float | None]) -> float | None:
    """The highest of the kinds' figures that were measured; None when none was."""
    measured = [value for value in values if value is not None]
    return max(measured) if measured else None


def _number(value) -> float | None:
    if value is None:
        return None
    value = float(value)
    return None if math.isnan(value) else value


def _cpu_seconds(samples: Sequence[Mapping]) -> float:
    """CPU seconds from per-second samples (each covers the period before its t)."""
    ordered = sorted(samples, key=lambda s: s["t"])
    seconds, previous = 0.0, 0.0
    for sample in ordered:
        seconds += sample["cpu_percent"] / 100.0 * (sample["t"] - previous)
        previous = sample["t"]
    return seconds


def judge(step: StepFacts, slo: Slo) -> Judgement:
    """Whether `step` met `slo`, why not, and whether the generator may have been the limit."""
    reasons, unjudged = [], []
    for kind in step.kinds:
        if kind.answered < slo.min_samples:
            unjudged.append(f"{kind.request}: {kind.answered} answers (p{slo.percentile:g} {_ms(kind.latency_ms)}), "
                            f"fewer than the {slo.min_samples} a p{slo.percentile:g} needs")
        elif kind.latency_ms is None or kind.latency_ms > slo.latency_ms:
            reasons.append(f"{kind.request} p{slo.percentile:g} {_ms(kind.latency_ms)} > {slo.latency_ms:g} ms")
    nothing_judged = bool(step.kinds) and len(unjudged) == len(step.kinds)
    if nothing_judged:
        reasons.append(f"no request kind had the {slo.min_samples} answers a p{slo.percentile:g} needs: nothing "
                       "judged (a longer step, or a higher load)")
    if step.requests and step.error_rate > slo.error_budget:
        reasons.append(f"errors {step.error_rate:.2%} > budget {slo.error_budget:.2%}")
    offered = step.offered_per_s * step.duration_s
    if offered and step.answered < slo.min_answered_share * offered:
        reasons.append(f"answered {step.answered_per_s:,.0f}/s of {step.offered_per_s:,.0f}/s offered")
    generator = []
    lag = step.send_delay_p99_ms
    latency = slo_latency_ms(step, slo)
    if lag is not None and lag >= slo.generator_lag_share * slo.latency_ms and (
            # the lag is in every latency (measured from the intended send time): it is the limit when it
            # alone accounts for the excess over the SLO, not when the server's queueing does
            not reasons or latency is None or latency - lag <= slo.latency_ms):
        generator.append(f"generator send lag p99 {lag:,.2f} ms >= {slo.generator_lag_share:.0%} of the SLO")
    if step.generator_cpu is not None and step.generator_cpu >= slo.generator_cpu_limit:
        generator.append(f"generator process busy {step.generator_cpu:.0%} of a core")
    return Judgement(not reasons, tuple(reasons), bool(generator), tuple(generator), tuple(unjudged), nothing_judged)


def _ms(value: float | None) -> str:
    return "unmeasured" if value is None else f"{value:,.3f} ms"  # 5.003 must not read "5.00 > 5"


@dataclass(frozen=True)
class Knee:
    """A search's outcome: the highest offered load that met the SLO (None: none did), and why it stopped there."""

    index: int | None
    offered_per_s: float | None
    #: "slo" (a higher step missed), "generator" (a higher step missed while the generator was the limit:
    #: the knee is a lower bound), "max-rate" (the cap was met), "none" (no step met), "unfinished".
    bound: str
    note: str
    #: Runs at the knee's rate (all met) and at the lowest missed rate above it (0: none).
    runs: int = 0
    miss_runs: int = 0
    #: The lowest missed rate above the knee and why it missed (the first run that did).
    miss_per_s: float | None = None
    miss_reasons: tuple[str, ...] = ()

    @property
    def met_twice(self) -> bool:
        return self.runs >= 2


@dataclass(frozen=True)
class RateOutcome:
    """The runs of one offered rate taken together (see the module's docstring)."""

    rate: float
    met: bool
    #: The runs that count (partial ones and superseded generator-limited misses left out).
    runs: tuple[int, ...]
    #: The run that decides: the first miss, else the last run.
    deciding: int


def rate_outcomes(steps: Sequence[tuple[StepFacts, Judgement]]) -> list[RateOutcome]:
    """Each offered rate's outcome, by rate."""
    by_rate: dict[float, list[int]] = {}
    for i, (facts, _) in enumerate(steps):
        if not facts.partial:
            by_rate.setdefault(round(facts.offered_per_s, 6), []).append(i)
    outcomes = []
    for rate, indexes in sorted(by_rate.items()):
        counted = tuple(i for n, i in enumerate(indexes)
                        if steps[i][1].met or not steps[i][1].generator_limited or n == len(indexes) - 1)
        misses = [i for i in counted if not steps[i][1].met]
        outcomes.append(RateOutcome(steps[counted[-1]][0].offered_per_s, not misses, counted,
                                    misses[0] if misses else counted[-1]))
    return outcomes


def find_knee(steps: Sequence[tuple[StepFacts, Judgement]], max_rate: float | None = None) -> Knee:
    """The knee of a search's steps (in any order): the highest rate whose runs all met the SLO,
    bounded by the lowest higher rate that missed; partial steps are ignored."""
    outcomes = rate_outcomes(steps)
    met = [outcome for outcome in outcomes if outcome.met]
    if not met:
        limited = any(steps[outcome.deciding][1].generator_limited for outcome in outcomes)
        once = any(steps[i][1].met for outcome in outcomes for i in outcome.runs)
        note = ("no rate met the SLO in all its runs" if once else "no step met the SLO") + (
            " (the generator was the limit)" if limited else "")
        return Knee(None, None, "generator" if limited else "none", note)
    best = met[-1]
    above = [outcome for outcome in outcomes if not outcome.met and outcome.rate > best.rate]
    if not above:
        if max_rate is not None and best.rate >= max_rate * (1 - 1e-9):
            return Knee(best.deciding, best.rate, "max-rate", "the highest rate allowed met the SLO", len(best.runs))
        return Knee(best.deciding, best.rate, "unfinished", "no higher step was run", len(best.runs))
    miss = above[0]
    verdict = steps[miss.deciding][1]
    facts = steps[miss.deciding][0]
    fields = dict(runs=len(best.runs), miss_runs=len(miss.runs), miss_per_s=miss.rate, miss_reasons=verdict.reasons)
    if verdict.generator_limited:
        return Knee(best.deciding, best.rate, "generator",
                    f"a lower bound: at {facts.offered_per_s:,.0f}/s the generator was the limit "
                    f"({'; '.join(verdict.generator_reasons)})", **fields)
    return Knee(best.deciding, best.rate, "slo", f"at {facts.offered_per_s:,.0f}/s: {'; '.join(verdict.reasons)}",
                **fields)


@dataclass(frozen=True)
class Candidate:
    """One sweep point: its label, its runs' facts and judgements (the score is their worst)."""

    label: str
    runs: tuple[tuple[StepFacts, Judgement], ...] = ()
    #: Search mode: each run's knee (rate or None); fixed-load mode leaves it empty.
    knees: tuple[Knee, ...] = ()


@dataclass(frozen=True)
class Best:
    label: str | None
    #: The winning score (knee in requests/s, or worst latency in ms), None when withheld.
    score: float | None
    #: How the winner was chosen, or why none is named.
    reason: str


def choose_best(candidates: Sequence[Candidate], slo: Slo, noise_share: float = DEFAULT_NOISE_SHARE) -> Best:
    """The sweep's answer: the highest knee (searches) or the lowest worst-kind latency at one fixed
    offered load; withheld, with the reason, when the points are not comparable or too close to call."""
    if len(candidates) < 2:
        return Best(None, None, "one point: nothing to compare")
    if all(candidate.knees for candidate in candidates):
        return _best_knee(candidates, noise_share)
    if any(candidate.knees for candidate in candidates):
        return Best(None, None, "some points ran a saturation search and some a fixed load: not comparable")
    return _best_at_fixed_load(candidates, slo, noise_share)


#: Knee bounds that make a knee only a lower bound of the server's.
_LOWER_BOUNDS = {"generator": "the generator was the limit above it", "unfinished": "its search ended before a miss",
                 "max-rate": "it met the SLO at the highest rate allowed"}


def _best_knee(candidates: Sequence[Candidate], noise_share: float) -> Best:
    """The highest knee (each point's worst run). A knee that is only a lower bound can still win by
    more than the noise, but while any other point's knee is a lower bound no winner can be certain."""
    scores: dict[str, float] = {}
    bounded: dict[str, str] = {}
    for candidate in candidates:
        worst = min(candidate.knees, key=lambda knee: knee.offered_per_s or 0.0)
        scores[candidate.label] = worst.offered_per_s or 0.0
        reasons = [_LOWER_BOUNDS[knee.bound] for knee in candidate.knees if knee.bound in _LOWER_BOUNDS]
        if reasons:
            bounded[candidate.label] = reasons[0]
    best = _pick(scores, higher_is_better=True, noise_share=noise_share, unit="/s",
                 how="highest knee (worst of each point's runs)")
    others = {label: why for label, why in bounded.items() if label != best.label}
    if best.label is None:
        if bounded:
            return Best(None, None, best.reason + "; lower bounds only: " + "; ".join(
                f"{label} ({why})" for label, why in bounded.items()))
        return best
    if others:
        return Best(None, None, f"{best.label} has the highest knee ({_fmt(best.score, '/s')}), but the knee of "
                                + "; ".join(f"{label} is only a lower bound ({why})" for label, why in others.items()))
    if best.label in bounded:
        return Best(best.label, best.score, best.reason + f" (a lower bound: {bounded[best.label]}; still above "
                                                          "every other point's knee by more than the noise)")
    return best


def _best_at_fixed_load(candidates: Sequence[Candidate], slo: Slo, noise_share: float) -> Best:
    loads = {round(facts.offered_per_s, 6) for candidate in candidates for facts, _ in candidate.runs}
    if len(loads) > 1:
        return Best(None, None, "the points ran at different offered loads")
    scores, missed = {}, []
    for candidate in candidates:
        for facts, verdict in candidate.runs:
            if facts.partial:
                return Best(None, None, f"{candidate.label}: a run was cut short")
            if verdict.generator_limited:
                return Best(None, None, f"{candidate.label}: the generator was the limit "
                                        f"({'; '.join(verdict.generator_reasons)})")
            if slo_latency_ms(facts, slo) is None:
                return Best(None, None, f"{candidate.label}: every request kind had fewer than {slo.min_samples} "
                                        f"answers, too few for a p{slo.percentile:g}; run longer or at a higher load")
        if not all(verdict.met for _, verdict in candidate.runs):
            missed.append(candidate.label)
            continue
        scores[candidate.label] = max(slo_latency_ms(facts, slo) for facts, _ in candidate.runs)
    if not scores:
        return Best(None, None, f"no point met the SLO ({slo.label}) at this load")
    best = _pick(scores, higher_is_better=False, noise_share=noise_share, unit=" ms",
                 how=f"lowest worst-request p{slo.percentile:g} among points that met the SLO")
    if missed and best.label is not None:
        return Best(best.label, best.score, best.reason + f"; missed the SLO: {', '.join(missed)}")
    return best


def _pick(scores: Mapping[str, float], *, higher_is_better: bool, noise_share: float, unit: str, how: str) -> Best:
    ranked = sorted(scores.items(), key=lambda item: item[1], reverse=higher_is_better)
    label, score = ranked[0]
    if len(ranked) > 1:
        runner, second = ranked[1]
        gap = abs(score - second) / max(abs(score), abs(second), 1e-12)
        if gap < noise_share:
            return Best(None, None, f"no clear winner: {label} ({_fmt(score, unit)}) and {runner} "
                                    f"({_fmt(second, unit)}) are within {noise_share:.0%}, this host's run-to-run spread")
    return Best(label, score, f"{how}: {_fmt(score, unit)}")


def _fmt(value: float, unit: str) -> str:
    return f"{value:,.0f}{unit}" if unit == "/s" else f"{value:,.2f}{unit}"
