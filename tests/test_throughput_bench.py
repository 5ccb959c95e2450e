"""bench/throughput.py and bench/ceiling.py still run end to end (a smoke run: tiny legs, nothing asserted on speed)."""
from __future__ import annotations

import json

from bench import throughput


def test_one_short_abab_round_measures_both_servers(tmp_path, capsys):
    out = tmp_path / "result.json"
    assert throughput.main(["--workloads", "route,register-new,register-churn", "--rounds", "1", "--leg-seconds", "0.5",
                            "--warmup-seconds", "0.2", "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    for workload in ("route", "register-new", "register-churn"):
        assert report[workload]["ceiling_per_s"] > 0 and report[workload]["namesrv_per_s"] > 0
        assert report[workload]["bad_answers"] == 0  # namesrv answered SUCCESS
    assert "ratio" in capsys.readouterr().out
