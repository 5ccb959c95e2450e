"""The soak verb's RSS trend: the least-squares slope is exact on lines, and the verdict tells a
flat RSS, one levelling off towards the allocator's high-water mark, and a steady climb apart."""
from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bench.soak import floor, slope_mb_per_min, trend


@given(st.floats(-50, 50), st.floats(10, 500), st.integers(3, 200))
def test_the_slope_of_a_line_is_exact(per_minute: float, start: float, count: int) -> None:
    samples = [(2.0 * i, start + per_minute * (2.0 * i) / 60) for i in range(count)]
    assert slope_mb_per_min(samples) == pytest.approx(per_minute, abs=1e-6)


def test_too_few_samples_or_no_time_span_have_no_slope() -> None:
    assert slope_mb_per_min([(0.0, 10.0), (1.0, 20.0)]) == 0.0
    assert slope_mb_per_min([(5.0, 10.0)] * 4) == 0.0


def life(rss_at) -> list[tuple[float, float]]:
    """Two minutes of samples every 2 s, with +-0.3 MB of noise."""
    return [(float(t), rss_at(t) + (0.3 if t % 4 else -0.3)) for t in range(0, 120, 2)]


def test_a_warm_up_step_then_a_plateau_is_flat() -> None:
    verdict = trend(life(lambda t: 30.0 + min(t, 20) * 2.0))
    assert verdict["slope_mb_per_min"] > 0 and verdict["verdict"] == "flat"


def test_an_approach_to_a_high_water_mark_is_levelling_off() -> None:
    assert trend(life(lambda t: 30.0 + 60 * (1 - math.exp(-t / 50))))["verdict"] == "levelling off"


def test_a_steady_climb_grows() -> None:
    assert trend(life(lambda t: 30.0 + 0.1 * t))["verdict"] == "grows"


def test_the_floor_drops_a_transient_peak_shorter_than_its_window() -> None:
    samples = [(float(t), 30.0 + (40.0 if 20 <= t < 26 else 0.0)) for t in range(0, 60, 2)]
    assert {m for _, m in floor(samples, 12.0)} == {30.0}
    assert trend(samples)["verdict"] == "flat"
