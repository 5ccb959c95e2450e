"""The knee verb: the search's steps, the knee met twice, a real search against a launched namesrv, Java beside it."""
from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest

from bench import knee
from bench.knee import CONFIRMATIONS, Search, SearchPlan, scaled_fleet
from bench.lib.fleet import HEARTBEAT, REGISTER, ROUTE, FleetShape
from bench.lib.servers import QUIET_WINDOW_S, java_unavailable_reason, servers_cpu_seconds, settle
from bench.lib.verdict import KindFacts, Slo, StepFacts, find_knee, judge, step_facts

SLO = Slo(latency_ms=5.0, min_samples=10)


def facts(rate: float, p99: float, lag: float = 0.1) -> StepFacts:
    answered = int(rate * 5)
    return StepFacts(rate, 5.0, (KindFacts("GET_ROUTEINFO_BY_TOPIC", answered, answered, 0, p99, lag),))


def test_each_step_shows_its_tail_beside_the_verdict_each_kinds_p99_9_over_p99_and_the_generators_send_delay():
    step = StepFacts(1000.0, 5.0, (
        KindFacts("GET_ROUTEINFO_BY_TOPIC", 5000, 5000, 0, 1.5, 0.4, p99_ms=1.5, p99_9_ms=4.2, send_delay_p99_9_ms=2.5),
        KindFacts("REGISTER_BROKER", 50, 50, 0, 2.0, 0.3, p99_ms=2.0, p99_9_ms=3.0, send_delay_p99_9_ms=2.9)))
    assert knee.format_tail(step) == (
        "  tail: GET_ROUTEINFO_BY_TOPIC p99 1.50 ms / p99.9 4.20 ms (2.80x); REGISTER_BROKER p99 2.00 ms / p99.9 "
        "3.00 ms (1.50x); generator send delay p99.9 2.90 ms")
    assert knee.format_tail(facts(1000.0, 1.0)) == ""  # no tail figures (the Spark report's rows): no line
    unanswered = StepFacts(1000.0, 5.0, (KindFacts("GET_ROUTEINFO_BY_TOPIC", 10, 0, 10, None, 0.0, None, None, 0.0),))
    assert knee.format_tail(unanswered) == ""


def drive(search: Search, knee_at: float, generator_limit: float | None = None) -> list[float]:
    """Run the search against a server whose p99 breaks above `knee_at`; the rates it asked for."""
    rates = []
    while (rate := search.next_rate()) is not None:
        rates.append(rate)
        limited = generator_limit is not None and rate > generator_limit
        step = facts(rate, 7.0 if limited else 1.0 if rate <= knee_at else 9.0, 3.0 if limited else 0.1)
        search.steps.append((step, judge(step, SLO), f"step{len(rates)}"))
    return rates


def test_the_search_doubles_then_bisects_until_the_resolution_then_runs_the_knee_and_the_miss_again():
    search = Search("namesrv", SearchPlan(start_rate=5000, resolution=0.1), SLO, workers=1)
    rates = drive(search, knee_at=30_000)
    assert rates[:4] == [5000, 10_000, 20_000, 40_000]
    assert rates[4] == pytest.approx(math.sqrt(20_000 * 40_000))
    found = search.knee()
    assert found.bound == "slo" and 30_000 / 1.1 <= found.offered_per_s <= 30_000
    lowest_miss = min(r for r in rates if r > 30_000)
    assert lowest_miss / found.offered_per_s <= 1.1
    assert rates[-CONFIRMATIONS:] == [found.offered_per_s, lowest_miss]  # each run once more: met twice
    assert found.met_twice and found.miss_runs == 2 and found.miss_per_s == lowest_miss


def test_a_knee_that_misses_its_second_run_is_no_knee_and_the_search_goes_on():
    search = Search("namesrv", SearchPlan(start_rate=5000, resolution=0.1, max_steps=12), SLO, workers=1)
    seen: dict[float, int] = {}
    while (rate := search.next_rate()) is not None:
        seen[rate] = seen.get(rate, 0) + 1
        flaky = 20_000 < rate <= 30_000 and seen[rate] == 2  # met once, then missed
        step = facts(rate, 9.0 if rate > 30_000 or flaky else 1.0)
        search.steps.append((step, judge(step, SLO), f"step{len(search.steps) + 1}"))
    found = search.knee()
    assert found.offered_per_s <= 20_000 * 1.1 and found.met_twice  # the flaky rates count as missed


def test_steps_run_again_for_the_generator_do_not_take_the_place_of_the_knee_s_second_runs():
    search = Search("java", SearchPlan(start_rate=5000, max_steps=3), SLO, workers=1)
    limited = facts(10_000, 7.0, lag=3.0)
    for step in (facts(5000, 1.0), limited, limited, facts(10_000, 9.0)):  # 10,000/s run again twice for the generator
        search.steps.append((step, judge(step, SLO), f"step{len(search.steps) + 1}"))
    assert drive(search, knee_at=7000) == [5000, 10_000]
    found = search.knee()
    assert found.offered_per_s == 5000 and found.met_twice and found.miss_runs == 2


def test_a_generator_limited_miss_run_again_with_more_workers_is_superseded():
    limited, met = facts(10_000, 7.0, lag=3.0), facts(10_000, 1.0)
    steps = [(facts(5000, 1.0), judge(facts(5000, 1.0), SLO)), (limited, judge(limited, SLO)), (met, judge(met, SLO))]
    assert steps[1][1].generator_limited and not steps[1][1].met
    assert find_knee(steps).offered_per_s == 10_000


def test_a_first_step_that_misses_walks_down():
    search = Search("java", SearchPlan(start_rate=5000, min_rate=100), SLO, workers=1)
    rates = drive(search, knee_at=1000)
    assert rates[:3] == [5000, 2500, 1250] and search.knee().offered_per_s <= 1000


def test_the_search_is_bounded_by_max_rate_and_max_steps():
    search = Search("x", SearchPlan(start_rate=5000, max_rate=15_000), SLO, workers=1)
    assert drive(search, knee_at=10**9) == [5000, 10_000, 15_000, 15_000]  # the cap, met twice
    assert search.knee().bound == "max-rate"
    search = Search("x", SearchPlan(start_rate=5000, max_steps=3), SLO, workers=1)
    assert len(drive(search, knee_at=10**9)) == 3 + 1 and search.knee().bound == "unfinished"


def test_a_generator_limited_miss_makes_the_knee_a_lower_bound():
    search = Search("x", SearchPlan(start_rate=5000), SLO, workers=1)
    drive(search, knee_at=10**9, generator_limit=12_000)
    knee = search.knee()
    assert knee.bound == "generator" and knee.offered_per_s <= 12_000


def test_scaling_keeps_the_fleet_and_its_mix():
    fleet = FleetShape(brokers=128, register_period_s=2.0, heartbeat_period_s=0.0, route_clients=5000,
                       route_poll_period_s=1.0)
    scaled = scaled_fleet(fleet, 50_640.0)
    assert scaled.rates() == pytest.approx({REGISTER: 640.0, ROUTE: 50_000.0})
    assert (scaled.brokers, scaled.route_clients, scaled.topics_per_broker) == (128, 5000, fleet.topics_per_broker)
    assert HEARTBEAT not in scaled.rates()


def test_search_options_are_validated():
    with pytest.raises(ValueError, match="rates must satisfy"):
        SearchPlan(start_rate=50, min_rate=100)
    assert knee.main(["--launch", "--mode", "closed", "--out", "/nonexistent"]) == 2


SEARCH_ARGS = ["--brokers", "8", "--topics", "10", "--register-period", "1", "--route-clients", "1000",
               "--route-poll-period", "1", "--seconds", "1", "--warmup", "0.5", "--drain", "1", "--prime", "0.5",
               "--max-steps", "2", "--min-samples", "100", "--slo-ms", "50"]


class FakeHost:
    """A clock that `sleep` moves, and servers using `busy[i]` cores in the i-th window slept (then idle)."""

    def __init__(self, busy: list[float]) -> None:
        self.now = 0.0
        self.cpu = 0.0
        self.busy = busy
        self.windows = 0

    def sleep(self, seconds: float) -> None:
        cores = self.busy[self.windows] if self.windows < len(self.busy) else 0.0
        self.windows += 1
        self.now += seconds
        self.cpu += cores * seconds

    def settle(self, **limits: float):
        return settle(lambda: self.cpu, clock=lambda: self.now, sleep=self.sleep, **limits)


def test_settle_waits_one_window_when_the_servers_are_idle():
    host = FakeHost([0.02])
    quiet = host.settle(threshold_cores=0.1, window_s=0.5, max_wait_s=30)
    assert (quiet.settled, host.windows, quiet.waited_s) == (True, 1, 0.5)
    assert quiet.cores == pytest.approx(0.02)


def test_settle_waits_until_a_backlog_drains():
    host = FakeHost([1.0, 0.52, 0.3, 0.04])  # a server draining what an overloaded step left
    quiet = host.settle(threshold_cores=0.1, window_s=0.5, max_wait_s=30)
    assert (quiet.settled, host.windows, quiet.waited_s) == (True, 4, 2.0)
    assert "waited 2.0 s" in quiet.line()


def test_settle_gives_up_at_its_limit_and_says_the_step_shares_the_cpu():
    host = FakeHost([0.5] * 1000)
    quiet = host.settle(threshold_cores=0.1, window_s=0.5, max_wait_s=3)
    assert (quiet.settled, host.windows, quiet.waited_s) == (False, 6, 3.0)
    assert quiet.cores == pytest.approx(0.5) and "still busy" in quiet.line()


@pytest.mark.timeout(60)
def test_settle_reads_real_processes_cpu():
    busy = subprocess.Popen([sys.executable, "-c", "import time\nend = time.time() + 30\nwhile time.time() < end: pass"])
    idle = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        spinning = settle(servers_cpu_seconds([busy.pid, 0]), threshold_cores=0.05, window_s=0.5, max_wait_s=1.0)
        assert not spinning.settled and spinning.cores > 0.1, spinning
        sleeping = settle(servers_cpu_seconds([idle.pid]), threshold_cores=0.05, window_s=0.5, max_wait_s=10.0)
        assert sleeping.settled, sleeping
    finally:
        busy.kill()
        idle.kill()
        busy.wait()
        idle.wait()


@pytest.mark.timeout(120)
def test_a_real_search_writes_every_step_and_its_knee_matches_the_rule_on_the_runs(tmp_path, capsys):
    code = knee.main(["--launch", "--out", str(tmp_path), *SEARCH_ARGS])
    out = capsys.readouterr().out
    assert code == 0, out
    result = json.loads((tmp_path / "namesrv" / "search.json").read_text())
    first, second = result["steps"][:2]  # a third when the second is run again with one more generator process
    assert first["offered_per_s"] == pytest.approx(1008.0)  # the fleet's own rate: 8 brokers/s + 1000 clients/s
    # doubled after a step that met the SLO, halved after one that missed (a loaded CI host may miss even 50 ms),
    # run again with one more generator process after a miss put on the generator (a busy host, too)
    first_workers = json.loads((tmp_path / "namesrv" / first["run_id"] / "meta.json").read_text())["load"]["workers"]
    again = first["generator_limited"] and first_workers < result["plan"]["max_workers"]
    assert second["offered_per_s"] == pytest.approx(2016.0 if first["met"] else 1008.0 if again else 504.0)
    assert f"[namesrv step 2] offered {second['offered_per_s']:,.0f}/s" in out
    assert out.splitlines()[-2].startswith("namesrv ")
    # every step's run directory judged again from its own meta.json gives the same knee
    slo = Slo(**result["slo"])
    steps = []
    for step in result["steps"]:
        meta = json.loads((tmp_path / "namesrv" / step["run_id"] / "meta.json").read_text())
        assert meta["saturation"]["search"] == "namesrv" and meta["server"]["implementation"] == "namesrv"
        assert meta["saturation"]["offered_per_s"] == step["offered_per_s"] and meta["partial"] is False
        assert meta["settle"]["waited_s"] >= QUIET_WINDOW_S and set(meta["settle"]) == {"waited_s", "cores", "settled"}
        again = step_facts(meta["summary"], [], offered_per_s=step["offered_per_s"], duration_s=meta["duration_s"],
                           workers=meta["load"]["workers"], slo=slo)
        assert again.answered_per_s == pytest.approx(step["answered_per_s"])
        steps.append((again, judge(again, slo)))
    assert find_knee(steps, result["plan"]["max_rate"]).offered_per_s == result["knee"]["offered_per_s"]
    overall = json.loads((tmp_path / "knee.json").read_text())
    assert [s["target"] for s in overall["searches"]] == ["namesrv"] and overall["skipped"] is None
    assert overall["host"]["cpu_model"] is not None and out.startswith("machine: ")
    if overall["cores"] is not None:  # pinned: the server on CPUs of its own, the steps' generators on the others
        assert "cores: the server under test on CPU" in out
        step = json.loads((tmp_path / "namesrv" / result["steps"][0]["run_id"] / "meta.json").read_text())
        assert step["generator"]["cores"] == overall["cores"]


def test_java_is_refused_with_heartbeats_it_cannot_answer(tmp_path, capsys):
    if java_unavailable_reason() is not None:
        pytest.skip(java_unavailable_reason())
    code = knee.main(["--launch", "--java", "on", "--heartbeat-period", "1", "--out", str(tmp_path)])
    assert code == 2 and "never answers BROKER_HEARTBEAT" in capsys.readouterr().err


@pytest.mark.timeout(240)
@pytest.mark.skipif(java_unavailable_reason() is not None, reason=str(java_unavailable_reason()))
def test_namesrv_and_the_java_nameserver_are_searched_alternately_in_one_run(tmp_path, capsys):
    code = knee.main(["--launch", "--java", "on", "--out", str(tmp_path), *SEARCH_ARGS])
    out = capsys.readouterr().out
    assert code == 0, out
    order = [line.split()[0].lstrip("[") for line in out.splitlines() if line.startswith("[")]
    # one step of each in turn; a generator-limited miss is run again at once (a loaded host), then Java's turn
    assert order[0] == "namesrv" and "java" in order[1:3] and sorted(set(order)) == ["java", "namesrv"]
    overall = json.loads((tmp_path / "knee.json").read_text())
    assert [s["implementation"] for s in overall["searches"]] == ["namesrv", "java"]
    java_step = json.loads((tmp_path / "java" / "java-step01" / "meta.json").read_text())
    assert java_step["server"]["implementation"] == "java" and java_step["saturation"]["implementation"] == "java"
    assert {row["request"]: row["errors"] for row in java_step["summary"]}["ALL"] == 0
    if all(search["knee"]["offered_per_s"] for search in overall["searches"]):
        assert "knee ratio namesrv ÷ java:" in out
    else:  # a busy host can miss both steps of a search: no knee, and then no ratio is claimed
        assert "knee ratio" not in out
