"""bench/routeinfo_wire.py against a real namesrv over TCP: every phase measured, refusals reported."""
from __future__ import annotations

from bench.routeinfo_wire import measure, render
from bench.scale_fleet import ScaleFleet
from namesrv.launcher import NamesrvProcess

FLEET = ScaleFleet(brokers=12, topics=300, brokers_per_cluster=4)
PHASES = dict(concurrency=4, period_s=2.0, steady_s=2.0, route_rate=100.0, idle_s=1.0, first_deadline_s=60.0)


def test_the_scale_fleet_over_tcp_reports_every_phase_of_a_real_server() -> None:
    with NamesrvProcess() as namesrv:
        figures = measure("namesrv", namesrv.address, namesrv.pid, FLEET, is_java=False, say=lambda _: None,
                          **PHASES)
    assert figures.failure is None and figures.notes == []
    assert figures.first_seconds > 0 and figures.rss_fleet_mb > 0 and figures.steady_cpu_percent > 0
    assert 0 < figures.route_idle_p99_ms and 0 < figures.route_steady_p50_ms <= figures.route_steady_p99_ms
    assert figures.live_heap_mb is None and figures.live_bytes_per_entry(FLEET.queue_entries) is None
    table = render(FLEET, [figures])
    assert "first registration of the fleet (s)" in table and "namesrv vs java" not in table


def test_registrations_the_server_refuses_are_reported_not_counted_as_registered() -> None:
    with NamesrvProcess({"maxQueueDatas": 1000}) as namesrv:  # 3 of the 12 brokers' 300 topics fit
        figures = measure("namesrv", namesrv.address, namesrv.pid, FLEET, is_java=False, say=lambda _: None,
                          **PHASES)
    assert figures.failure is None
    assert any(note.startswith("9 registrations refused") and "maxQueueDatas=1000" in note for note in figures.notes)
    assert any("route queries not SUCCESS" in note for note in figures.notes)
