"""bench/throughput.py and bench/ceiling.py still run end to end (a smoke run: tiny legs, nothing asserted on speed)."""
from __future__ import annotations

import json
import time

import pytest

from bench import throughput
from bench.storm.java_namesrv import java_unavailable_reason


def test_one_short_abab_round_measures_both_servers(tmp_path, capsys):
    out = tmp_path / "result.json"
    assert throughput.main(["--workloads", "route,register-new,register-churn", "--rounds", "1", "--leg-seconds", "0.5",
                            "--warmup-seconds", "0.2", "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    for workload in ("route", "register-new", "register-churn"):
        assert report[workload]["ceiling_per_s"] > 0 and report[workload]["namesrv_per_s"] > 0
        assert report[workload]["bad_answers"] == 0  # namesrv answered SUCCESS
    assert "ratio" in capsys.readouterr().out


# ---- the two columns are treated alike (an A/A run must give a ratio of 1 up to noise)

def _fleet() -> throughput.FleetShape:
    return throughput.FleetShape(brokers=1, topics_per_broker=100, queues_per_topic=8, clusters=1, slaves_per_master=0,
                                 serialize="json")


def test_leg_order_alternates_abba_by_round_and_by_workload():
    for workload_index in range(3):
        orders = [throughput.leg_order(workload_index, r) for r in range(4)]
        assert all(sorted(order) == ["ceiling", "namesrv"] for order in orders)
        firsts = [order[0] for order in orders]
        assert firsts.count("ceiling") == firsts.count("namesrv") == 2  # ABBA ABBA
        assert all(a != b for a, b in zip(firsts, firsts[1:]))
    assert throughput.leg_order(0, 0) != throughput.leg_order(1, 0)  # a workload's first leg alternates too


def test_three_columns_rotate_so_each_takes_each_place_equally_often():
    columns = ("ceiling", "namesrv", "java")
    for workload_index in range(3):
        orders = [throughput.leg_order(workload_index, r, columns) for r in range(3)]
        assert all(sorted(order) == sorted(columns) for order in orders)
        for place in range(3):
            assert sorted(order[place] for order in orders) == sorted(columns)
    assert throughput.leg_order(0, 0, columns)[0] != throughput.leg_order(1, 0, columns)[0]


@pytest.mark.timeout(300)
@pytest.mark.skipif(java_unavailable_reason() is not None, reason=str(java_unavailable_reason()))
def test_the_java_nameserver_is_a_third_column_of_the_same_run(tmp_path, capsys):
    out = tmp_path / "result.json"
    assert throughput.main(["--java", "on", "--workloads", "route,register-new", "--rounds", "1", "--leg-seconds",
                            "0.5", "--warmup-seconds", "0.2", "--java-warmup-seconds", "1", "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    for workload in ("route", "register-new"):
        row = report[workload]
        assert row["java_per_s"] > 0 and row["java_bad_answers"] == 0  # Java answered SUCCESS
        assert row["namesrv_over_java"] == row["namesrv_per_s"] / row["java_per_s"]
        assert sorted(row["order"]) == ["ceiling", "java", "namesrv"]
    assert "namesrv ÷ java" in capsys.readouterr().out


class _Out:
    def __init__(self) -> None:
        self.items: list[tuple] = []

    def put(self, item: tuple) -> None:
        self.items.append(item)


def test_no_answer_is_decoded_inside_the_measured_window(namesrv_factory, monkeypatch):
    server = namesrv_factory()
    host, port = server.address.rsplit(":", 1)
    registration = throughput.register_once(server.address, _fleet())
    workload = throughput.build_workload("route", _fleet())
    calls: list[float] = []
    checked = throughput.answer_ok
    monkeypatch.setattr(throughput, "answer_ok", lambda frame, echo_ok: calls.append(time.monotonic())
                        or checked(frame, echo_ok))
    out = _Out()
    start_at, warmup_s, duration_s = time.monotonic() + 0.1, 0.3, 0.6
    throughput.drive((host, int(port)), workload.pools, workload.in_flight, start_at, warmup_s, duration_s, False, out)
    registration.close()
    answers, seconds, bad = out.items[0]
    assert answers > 0 and bad == 0
    # The checks fall in two groups, the warm-up's and the drain's, with the measured window between
    # them: no check for (nearly) duration_s, where a check per chunk would leave no gap over a millisecond.
    gap, index = max((b - a, i) for i, (a, b) in enumerate(zip(calls, calls[1:])))
    assert gap >= duration_s * 0.9
    warmup, drained = calls[:index + 1], calls[index + 1:]
    assert warmup and all(t < start_at + warmup_s + 0.1 for t in warmup)
    assert len(drained) >= len(workload.pools) * workload.in_flight  # every answer in flight at the end is checked


def test_checks_count_wrong_answers_on_either_column(namesrv_factory):
    server = namesrv_factory()  # no broker registered: every route query answers TOPIC_NOT_EXIST
    workload = throughput.build_workload("route", _fleet())
    for echo_ok in (False, True):
        leg = throughput.run_leg(server.address, server.pid, workload, 1, 0.2, 0.5, echo_ok)
        assert leg.answers > 0 and leg.bad >= len(workload.pools) * workload.in_flight


def test_the_echo_is_a_good_answer_on_the_ceiling_column_only():
    ceiling = throughput.CeilingProcess()
    try:
        throughput.register_once(ceiling.address, _fleet(), echo_ok=True).close()
        try:
            throughput.register_once(ceiling.address, _fleet()).close()
        except RuntimeError:
            pass
        else:
            raise AssertionError("an echoed registration passed for a namesrv answer")
        workload = throughput.build_workload("register-new", _fleet())
        leg = throughput.run_leg(ceiling.address, ceiling.pid, workload, 1, 0.2, 0.5, True)
        assert leg.answers > 0 and leg.bad == 0
    finally:
        ceiling.close()


def test_an_a_a_run_registers_and_checks_both_columns_in_abba_order(namesrv_factory, tmp_path):
    first, second = namesrv_factory(), namesrv_factory()
    out = tmp_path / "aa.json"
    assert throughput.main(["--workloads", "route,register-same", "--rounds", "2", "--leg-seconds", "0.5",
                            "--warmup-seconds", "0.2", "--ceiling", first.address, "--namesrv", second.address,
                            "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    for workload in ("route", "register-same"):
        # the route broker is registered on the ceiling column too (else TOPIC_NOT_EXIST answers are bad)
        assert report[workload]["bad_answers"] == report[workload]["ceiling_bad_answers"] == 0
        assert report[workload]["ceiling_per_cpu_s"] > 0 and report[workload]["namesrv_per_cpu_s"] > 0  # pids found
    assert report["route"]["order"] == ["ceiling", "namesrv", "namesrv", "ceiling"]
    assert report["register-same"]["order"] == ["namesrv", "ceiling", "ceiling", "namesrv"]
