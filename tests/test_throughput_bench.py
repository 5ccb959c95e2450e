"""The throughput verb and the echo ceiling still run end to end (a smoke run: tiny legs, nothing asserted on
speed), every column is treated alike, and every rate comes with the server's CPU per request."""
from __future__ import annotations

import json
import re
import time

import pytest

from bench import throughput
from bench.lib.rounds import alternate, leg_order
from bench.lib.servers import Ceiling, java_unavailable_reason


def results_of(out) -> dict[tuple[str, str], dict]:
    """The run directory's rows by (workload, column)."""
    meta = json.loads((out / "meta.json").read_text())
    assert meta["verb"] == "throughput" and meta["host"]["cpu_model"] is not None and meta["lines"]
    return {(row["workload"], row["column"]): row for row in meta["results"]}


def test_one_short_round_measures_both_servers_with_their_cpu_per_request(tmp_path, capsys):
    out = tmp_path / "run"
    assert throughput.main(["--workloads", "route,register-new,register-churn,heartbeat,data-version", "--rounds", "1",
                            "--seconds", "0.5", "--warmup-seconds", "0.2", "--out", str(out)]) == 0
    rows = results_of(out)
    for workload in ("route", "register-new", "register-churn", "heartbeat", "data-version"):
        for column in ("ceiling", "namesrv"):
            assert rows[(workload, column)]["per_s"] > 0
            assert rows[(workload, column)]["bad_answers"] == 0  # namesrv answered SUCCESS
            assert rows[(workload, column)]["server_cpu_us_per_request"] > 0  # the pids are known
            # sockets are system calls, and a registration is interpreter work: neither share is all of it
            assert 0 < rows[(workload, column)]["server_kernel_share"] < 1
    printed = capsys.readouterr().out
    assert printed.startswith("machine: ") and "Python" in printed.splitlines()[0]
    assert "namesrv ÷ ceiling" in printed and "µs/request (" in printed and "% kernel)" in printed
    assert re.search(r"namesrv +[\d,]+/s \([\d.]+ µs/req, \d+% kernel\)", printed)


# ---- the columns are treated alike (an A/A run must give a ratio of 1 up to noise)

def _fleet() -> throughput.FleetShape:
    return throughput.FleetShape(brokers=1, topics_per_broker=100, queues_per_topic=8, clusters=1, slaves_per_master=0,
                                 serialize="json")


def test_leg_order_alternates_abba_by_round_and_by_workload():
    for workload_index in range(3):
        orders = [leg_order(workload_index, r, ("ceiling", "namesrv")) for r in range(4)]
        assert all(sorted(order) == ["ceiling", "namesrv"] for order in orders)
        firsts = [order[0] for order in orders]
        assert firsts.count("ceiling") == firsts.count("namesrv") == 2  # ABBA ABBA
        assert all(a != b for a, b in zip(firsts, firsts[1:]))
    assert leg_order(0, 0, ("a", "b")) != leg_order(1, 0, ("a", "b"))  # a workload's first leg alternates too


def test_three_columns_rotate_so_each_takes_each_place_equally_often():
    columns = ("ceiling", "namesrv", "java")
    for workload_index in range(3):
        orders = [leg_order(workload_index, r, columns) for r in range(3)]
        assert all(sorted(order) == sorted(columns) for order in orders)
        for place in range(3):
            assert sorted(order[place] for order in orders) == sorted(columns)
    assert leg_order(0, 0, columns)[0] != leg_order(1, 0, columns)[0]
    legs, order = alternate(columns, 3, lambda column: column.upper(), index=1)
    assert order == [c for r in range(3) for c in leg_order(1, r, columns)]
    assert legs == {column: [column.upper()] * 3 for column in columns}


@pytest.mark.timeout(300)
@pytest.mark.skipif(java_unavailable_reason() is not None, reason=str(java_unavailable_reason()))
def test_the_java_nameserver_is_a_third_column_of_the_same_run(tmp_path, capsys):
    out = tmp_path / "run"
    assert throughput.main(["--java", "on", "--workloads", "route,register-new,heartbeat", "--rounds", "1",
                            "--seconds", "0.5", "--warmup-seconds", "0.2", "--java-warmup-seconds", "1",
                            "--out", str(out)]) == 0
    rows = results_of(out)
    for workload in ("route", "register-new"):
        java = rows[(workload, "java")]
        assert java["per_s"] > 0 and java["bad_answers"] == 0  # Java answered SUCCESS
        assert sorted(java["order"]) == ["ceiling", "java", "namesrv"]
    assert ("heartbeat", "java") not in rows and ("heartbeat", "namesrv") in rows  # Java 4.9.8 never answers it
    printed = capsys.readouterr().out
    assert "namesrv ÷ java" in printed and "heartbeat: the Java NameServer 4.9.8 does not answer it" in printed


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
    with Ceiling() as ceiling:
        throughput.register_once(ceiling.address, _fleet(), echo_ok=True).close()
        with pytest.raises(RuntimeError, match="registration failed"):
            throughput.register_once(ceiling.address, _fleet())
        workload = throughput.build_workload("register-new", _fleet())
        leg = throughput.run_leg(ceiling.address, ceiling.pid, workload, 1, 0.2, 0.5, True)
        assert leg.answers > 0 and leg.bad == 0 and leg.cpu_us_per_request > 0


def test_an_a_a_run_registers_and_checks_both_columns_in_abba_order(namesrv_factory, tmp_path):
    first, second = namesrv_factory(), namesrv_factory()
    out = tmp_path / "aa"
    assert throughput.main(["--workloads", "route,register-same", "--rounds", "2", "--seconds", "0.5",
                            "--warmup-seconds", "0.2", "--ceiling", first.address, "--namesrv", second.address,
                            "--out", str(out)]) == 0
    rows = results_of(out)
    for workload in ("route", "register-same"):
        # the route broker is registered on the ceiling column too (else TOPIC_NOT_EXIST answers are bad)
        assert rows[(workload, "namesrv")]["bad_answers"] == rows[(workload, "ceiling")]["bad_answers"] == 0
        for column in ("ceiling", "namesrv"):  # pids found: CPU per request on both
            assert rows[(workload, column)]["server_cpu_us_per_request"] > 0
    assert rows[("route", "namesrv")]["order"] == ["ceiling", "namesrv", "namesrv", "ceiling"]
    assert rows[("register-same", "namesrv")]["order"] == ["namesrv", "ceiling", "ceiling", "namesrv"]
