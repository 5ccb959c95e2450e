"""bench/sweep.py: grid parsing, and a real two-point sweep with a fresh server per point."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import sweep
from bench.heartbeat_storm import StormResult


def test_grid_parsing_and_points():
    grid = sweep.parse_grid(["serverSelectorThreads=1,3", "defaultThreadPoolNums=4, 16"])
    assert grid == {"serverSelectorThreads": ["1", "3"], "defaultThreadPoolNums": ["4", "16"]}
    assert sweep.grid_points(grid) == [
        {"serverSelectorThreads": "1", "defaultThreadPoolNums": "4"},
        {"serverSelectorThreads": "1", "defaultThreadPoolNums": "16"},
        {"serverSelectorThreads": "3", "defaultThreadPoolNums": "4"},
        {"serverSelectorThreads": "3", "defaultThreadPoolNums": "16"},
    ]
    assert sweep.parse_grid([]) == sweep.DEFAULT_GRID
    assert sweep.point_id(3, {"serverSelectorThreads": "1", "clientRequestThreadPoolNums": "8"}) == "p03-sst1-crtpn8"


@pytest.mark.parametrize("items, message", [
    (["serverSelectorThreads"], "KEY=V1,V2"), (["noSuchKey=1,2"], "not a namesrv configuration key"),
    (["serverSelectorThreads=1", "serverSelectorThreads=2"], "given twice"),
])
def test_bad_grids_are_clear_errors(items, message):
    with pytest.raises(ValueError, match=message):
        sweep.parse_grid(items)


def test_grid_size_is_bounded():
    with pytest.raises(ValueError, match="at most"):
        sweep.grid_points({f"k{i}": ["1", "2"] for i in range(7)})


def test_two_point_sweep_starts_a_fresh_server_per_run(tmp_path, capsys):
    code = sweep.main(["--grid", "serverSelectorThreads=1,2", "--server-set", "defaultThreadPoolNums=3", "--repeat", "2",
                       "--duration", "1", "--warmup", "0.5", "--drain", "2", "--workers", "1", "--brokers", "4",
                       "--topics", "5", "--register-period", "1", "--route-clients", "100", "--route-poll-period", "1",
                       "--sweep-dir", str(tmp_path), "--no-progress"])
    assert code == 0
    out = capsys.readouterr().out
    assert "best (lowest p99 at the offered load): serverSelectorThreads=" in out
    points = json.loads((tmp_path / "sweep.json").read_text())
    assert [p["point"] for p in points] == [{"serverSelectorThreads": "1"}, {"serverSelectorThreads": "2"}] * 2
    assert [Path(p["run_dir"]).name for p in points] == ["p00-sst1-r1", "p01-sst2-r1", "p00-sst1-r2", "p01-sst2-r2"]
    pids = set()
    for entry in points:
        meta = json.loads((Path(entry["run_dir"]) / "meta.json").read_text())
        assert meta["sweep"]["point"] == entry["point"] and meta["sweep"]["keys"] == ["serverSelectorThreads"]
        # the server's own GET_NAMESRV_CONFIG answer shows the point's settings took effect
        assert meta["server"]["thread_config"]["serverSelectorThreads"] == entry["point"]["serverSelectorThreads"]
        assert meta["server"]["thread_config"]["defaultThreadPoolNums"] == "3"
        pids.add(meta["server"]["pid"])
        assert {row["request"]: row["errors"] for row in meta["summary"]}["ALL"] == 0
    assert len(pids) == 4


def _result(throughput: float, p99: float, errors: int = 0) -> StormResult:
    return StormResult(Path("x"), [{"request": "ALL", "throughput_per_s": throughput, "p99_ms": p99,
                                    "errors": errors}])


def test_ranking_uses_every_run_of_a_point():
    a, b = {"serverSelectorThreads": "1"}, {"serverSelectorThreads": "3"}
    results = [(a, _result(100, 5.0)), (b, _result(150, 9.0)), (a, _result(300, 4.0)), (b, _result(160, 3.0))]
    closed = sweep.format_results(results, "closed").splitlines()
    assert closed[-1] == "best (highest throughput): serverSelectorThreads=1 (200 req/s over 2 run(s))"
    opened = sweep.format_results(results, "open").splitlines()
    assert opened[-1] == "best (lowest p99 at the offered load): serverSelectorThreads=1 (worst p99 5.00 ms over 2 run(s))"
    assert len(closed) == 5


def test_swept_and_fixed_settings_must_not_overlap(tmp_path):
    with pytest.raises(ValueError, match="both swept and fixed"):
        sweep.run_sweep(sweep.build_sweep_parser().parse_args([
            "--grid", "serverSelectorThreads=1,2", "--server-set", "serverSelectorThreads=3",
            "--sweep-dir", str(tmp_path)]))
