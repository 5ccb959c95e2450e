"""bench/lib/verdict.py: the one rule behind a step's judgement, a search's knee and a sweep's best."""
from __future__ import annotations

import pytest

from bench.lib.verdict import Candidate, KindFacts, Slo, StepFacts, choose_best, find_knee, judge, slo_latency_ms, \
    step_facts

SLO = Slo(latency_ms=5.0, error_budget=0.001, min_samples=1000)


def step(rate: float, p99: float = 1.0, *, answered: int | None = None, errors: int = 0, lag: float = 0.1,
         cpu: float | None = 0.3, register_p99: float = 1.0, register_answers: int = 5000,
         partial: bool = False) -> StepFacts:
    """A 10-s step at `rate`: routes with p99 `p99`, plus registrations."""
    routes = int(rate * 10) - register_answers if answered is None else answered
    kinds = (KindFacts("GET_ROUTEINFO_BY_TOPIC", routes + errors, routes, errors, p99, lag),
             KindFacts("REGISTER_BROKER", register_answers, register_answers, 0, register_p99, lag))
    return StepFacts(rate, 10.0, kinds, cpu, 5.0, 100 << 20, partial)


def test_a_step_within_the_slo_meets_it():
    verdict = judge(step(10_000), SLO)
    assert verdict.met and not verdict.reasons and not verdict.generator_limited and not verdict.unjudged


@pytest.mark.parametrize("facts, reason", [
    (step(10_000, p99=7.5), "GET_ROUTEINFO_BY_TOPIC p99 7.500 ms > 5 ms"),
    (step(10_000, errors=200), "errors 0.20% > budget 0.10%"),
    (step(10_000, answered=50_000), "answered 5,500/s of 10,000/s offered"),
])
def test_a_step_misses_for_latency_errors_or_not_keeping_up(facts, reason):
    verdict = judge(facts, SLO)
    assert not verdict.met and verdict.reasons == (reason,)


def test_a_kind_with_too_few_answers_is_not_judged_on_latency():
    verdict = judge(step(10_000, register_p99=40.0, register_answers=300), SLO)
    assert verdict.met
    assert verdict.unjudged == ("REGISTER_BROKER: 300 answers (p99 40.000 ms), fewer than the 1000 a p99 needs",)
    assert slo_latency_ms(step(10_000, register_p99=40.0, register_answers=300), SLO) == 1.0
    assert verdict.outcome == "met (not every kind judged)"


def test_a_step_with_no_kind_to_judge_vouches_for_nothing_and_does_not_meet_the_slo():
    few = StepFacts(100.0, 1.0, (KindFacts("GET_ROUTEINFO_BY_TOPIC", 90, 90, 0, 40.0, 0.1),
                                 KindFacts("REGISTER_BROKER", 10, 10, 0, 40.0, 0.1)))
    verdict = judge(few, SLO)
    assert not verdict.met and verdict.nothing_judged and verdict.outcome == "not judged (too few answers)"
    assert verdict.reasons == ("no request kind had the 1000 answers a p99 needs: nothing judged (a longer step, "
                               "or a higher load)",)
    assert find_knee([(few, verdict)]).offered_per_s is None


@pytest.mark.parametrize("facts, reason", [
    (step(10_000, p99=7.0, lag=2.5), "generator send lag p99 2.50 ms >= 50% of the SLO"),
    (step(10_000, p99=9.0, cpu=0.95), "generator process busy 95% of a core"),
])
def test_the_generator_is_suspected_from_its_lag_or_its_cpu(facts, reason):
    verdict = judge(facts, SLO)
    assert not verdict.met and verdict.generator_limited and verdict.generator_reasons == (reason,)


def judged(*steps: StepFacts) -> list:
    return [(facts, judge(facts, SLO)) for facts in steps]


def test_the_knee_is_the_highest_met_rate_bounded_by_the_lowest_miss_above_it():
    knee = find_knee(judged(step(5000), step(10_000), step(20_000, p99=9.0), step(14_142), step(16_818, p99=6.0)))
    assert (knee.index, knee.offered_per_s, knee.bound) == (3, 14_142, "slo")
    assert knee.note == "at 16,818/s: GET_ROUTEINFO_BY_TOPIC p99 6.000 ms > 5 ms"


def test_a_lag_far_below_the_latency_is_the_servers_queueing_not_the_generator():
    verdict = judge(step(40_000, p99=77.0, lag=3.8), SLO)  # measured: a saturated server, a busy host
    assert not verdict.met and not verdict.generator_limited


def test_a_knee_below_a_generator_limited_miss_is_a_lower_bound():
    knee = find_knee(judged(step(5000), step(10_000, p99=7.0, lag=3.0)))
    assert knee.offered_per_s == 5000 and knee.bound == "generator" and knee.note.startswith("a lower bound")


def test_knee_edge_cases():
    assert find_knee(judged(step(5000, p99=9.0))).bound == "none"
    assert find_knee(judged(step(5000, p99=9.0))).note == "no step met the SLO"
    # met once, missed its second run: no knee, and the note does not say no step met
    assert find_knee(judged(step(5000), step(5000, p99=9.0))).note == "no rate met the SLO in all its runs"
    assert find_knee(judged(step(5000, p99=7.0, lag=3.0))).bound == "generator"
    assert find_knee(judged(step(5000), step(10_000)), max_rate=10_000).bound == "max-rate"
    assert find_knee(judged(step(5000))).bound == "unfinished"
    # a partial step (Ctrl-C) is shown but never judged
    assert find_knee(judged(step(5000), step(10_000, partial=True))).offered_per_s == 5000


def knees(*rates_and_bounds) -> Candidate:
    return Candidate("x", knees=tuple(find_knee(judged(*steps)) for steps in rates_and_bounds))


def test_best_knee_takes_each_points_worst_run_and_refuses_ties_and_generator_bounds():
    fast = Candidate("threads=8", knees=knees([step(5000), step(20_000), step(40_000, p99=9)],
                                              [step(5000), step(18_000), step(36_000, p99=9)]).knees)
    slow = Candidate("threads=1", knees=knees([step(5000), step(10_000), step(20_000, p99=9)]).knees)
    best = choose_best([slow, fast], SLO)
    assert (best.label, best.score) == ("threads=8", 18_000)
    close = Candidate("threads=4", knees=knees([step(5000), step(17_000), step(34_000, p99=9)]).knees)
    tie = choose_best([fast, close], SLO)
    assert tie.label is None and tie.reason.startswith("no clear winner: threads=8 (18,000/s) and threads=4")
    bounded = Candidate("threads=2", knees=knees([step(5000), step(10_000, p99=7, lag=3)]).knees)
    withheld = choose_best([fast, bounded], SLO)  # threads=2's knee may be anywhere above 5,000/s
    assert withheld.label is None and withheld.reason == (
        "threads=8 has the highest knee (18,000/s), but the knee of threads=2 is only a lower bound (the generator "
        "was the limit above it)")
    unfinished = Candidate("threads=6", knees=knees([step(5000), step(10_000)]).knees)
    assert "threads=6 is only a lower bound (its search ended before a miss)" in choose_best([fast, unfinished],
                                                                                            SLO).reason
    # a lower bound above every exact knee by more than the noise is a certain winner
    strong = Candidate("threads=12", knees=knees([step(5000), step(40_000), step(80_000, p99=7, lag=3)]).knees)
    best = choose_best([fast, slow, strong], SLO)
    assert (best.label, best.score) == ("threads=12", 40_000) and "a lower bound" in best.reason
    both = choose_best([strong, Candidate("threads=16", knees=strong.knees)], SLO)
    assert both.label is None and "within 10%" in both.reason and "lower bounds only" in both.reason


def at(label: str, *steps: StepFacts) -> Candidate:
    return Candidate(label, runs=tuple(judged(*steps)))


def test_best_at_a_fixed_load_is_the_lowest_worst_latency_among_points_that_met_the_slo():
    best = choose_best([at("a", step(10_000, p99=3.0), step(10_000, p99=2.0)), at("b", step(10_000, p99=2.5)),
                        at("c", step(10_000, p99=8.0))], SLO)
    assert (best.label, best.score) == ("b", 2.5)
    assert best.reason.endswith("; missed the SLO: c")


@pytest.mark.parametrize("candidates, reason", [
    ([at("a", step(10_000)), at("b", step(20_000))], "the points ran at different offered loads"),
    ([at("a", step(10_000)), at("b", step(10_000, p99=2.0, lag=3.0))], "b: the generator was the limit"),
    ([at("a", step(10_000)), at("b", step(10_000, partial=True))], "b: a run was cut short"),
    ([at("a", step(5.0, answered=33, register_answers=0)), at("b", step(5.0, answered=33, register_answers=0))],
     "a: every request kind had fewer than 1000 answers"),
    ([at("a", step(10_000, p99=9.0)), at("b", step(10_000, p99=8.0))], "no point met the SLO"),
    ([at("a", step(10_000, p99=2.0)), at("b", step(10_000, p99=2.1))], "no clear winner"),
    ([at("a", step(10_000))], "one point"),
])
def test_best_is_withheld_with_the_reason(candidates, reason):
    best = choose_best(candidates, SLO)
    assert best.label is None and best.reason.startswith(reason), best.reason


def test_step_facts_read_summary_rows_and_the_measured_windows_resources():
    rows = [{"request": "GET_ROUTEINFO_BY_TOPIC", "requests": 1000, "answered": 990, "errors": 10, "p50_ms": 0.5,
             "p99_ms": 2.0, "p99_9_ms": 4.0, "send_delay_p99_ms": 0.2, "send_delay_p99_9_ms": 0.7},
            {"request": "ALL", "requests": 1000, "answered": 990, "errors": 10, "p50_ms": 0.5, "p99_ms": 2.0,
             "p99_9_ms": 4.0, "send_delay_p99_ms": None}]
    resources = [{"process": "generator", "t": t, "cpu_percent": 80.0, "rss_bytes": 1} for t in (1.0, 2.0)]
    resources += [{"process": "server", "t": t, "cpu_percent": 50.0, "rss_bytes": t * 100} for t in (1.0, 2.0)]
    resources += [{"process": "generator", "t": 3.0, "cpu_percent": 0.0, "rss_bytes": 1},  # the drain: left out
                  {"process": "server", "t": 3.0, "cpu_percent": 0.0, "rss_bytes": 999}]
    facts = step_facts(rows, resources, offered_per_s=500.0, duration_s=2.0, workers=2, slo=Slo(percentile=99.9))
    assert [kind.request for kind in facts.kinds] == ["GET_ROUTEINFO_BY_TOPIC"]
    assert facts.kinds[0].latency_ms == 4.0 and facts.answered_per_s == 495.0 and facts.error_rate == 0.01
    assert (facts.kinds[0].p99_ms, facts.kinds[0].p99_9_ms, facts.send_delay_p99_9_ms) == (2.0, 4.0, 0.7)
    assert facts.generator_cpu == pytest.approx(0.4) and facts.server_cpu_s == pytest.approx(1.0)
    assert facts.server_rss_bytes == 200 and facts.server_cpu_us_per_answer == pytest.approx(1e6 / 990)


def test_bad_slos_are_refused():
    with pytest.raises(ValueError, match="percentile"):
        Slo(percentile=95.0)
    with pytest.raises(ValueError, match="latency"):
        Slo(latency_ms=0)
