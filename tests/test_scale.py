"""The scale verb: over TCP against a real namesrv every phase measured and refusals reported; in process
every phase runs."""
from __future__ import annotations

import json

from bench import scale
from bench.lib.fleet import scale_fleet
from bench.scale import measure, queue_entries, render
from namesrv.launcher import NamesrvProcess

FLEET = scale_fleet(brokers=12, topics=300, brokers_per_cluster=4)
PHASES = dict(concurrency=4, period_s=2.0, steady_s=2.0, route_rate=100.0, idle_s=1.0, first_deadline_s=60.0)


def test_the_scale_fleet_over_tcp_reports_every_phase_of_a_real_server() -> None:
    with NamesrvProcess() as namesrv:
        figures = measure("namesrv", namesrv.address, namesrv.pid, FLEET, is_java=False, say=lambda _: None,
                          **PHASES)
    assert figures.failure is None and figures.notes == []
    assert figures.first_seconds > 0 and figures.rss_fleet_mb > 0 and figures.steady_cpu_percent > 0
    assert 0 < figures.route_idle_p99_ms and 0 < figures.route_steady_p50_ms <= figures.route_steady_p99_ms
    assert figures.live_heap_mb is None and figures.live_bytes_per_entry(queue_entries(FLEET)) is None
    table = render(FLEET, [figures])
    assert "first registration of the fleet (s)" in table and "namesrv vs java" not in table


def test_registrations_the_server_refuses_are_reported_not_counted_as_registered() -> None:
    # 2 of the 12 brokers' 300 topics fit: brokers 0 and 1, of clusters 0 and 1 (clusters take brokers in turn),
    # so cluster 2 has no broker and its topics no route
    with NamesrvProcess({"maxQueueDatas": 700}) as namesrv:
        figures = measure("namesrv", namesrv.address, namesrv.pid, FLEET, is_java=False, say=lambda _: None,
                          **PHASES)
    assert figures.failure is None
    assert any(note.startswith("10 registrations refused") and "maxQueueDatas=700" in note for note in figures.notes)
    assert any("route queries not SUCCESS" in note for note in figures.notes)


def test_in_process_every_phase_runs_and_the_run_directory_keeps_what_was_printed(tmp_path, capsys):
    out = tmp_path / "run"
    assert scale.main(["--brokers", "6", "--topics", "50", "--brokers-per-cluster", "3", "--query-topics", "40",
                       "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "first registration of all brokers" in printed and "expiry scan" in printed and "RSS at end" in printed
    meta = json.loads((out / "meta.json").read_text())
    assert meta["verb"] == "scale" and meta["wire"] is False and meta["lines"][-1].startswith("RSS at end")
