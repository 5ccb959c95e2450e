"""Alternating rounds: every column (a server, a setting, a cache on or off) measured in the same run,
in an order that favours none, and compared by medians.

On a shared host the load drifts from second to second: two columns measured one after the other
would compare two moments, not two servers. So each round runs one leg of every column, the order
rotated from round to round and from workload to workload (two columns: ABBA; three: a Latin
square), so every column takes every place equally often, and whatever one leg leaves behind for
the next (a warm cache, a busy core) hits all of them alike.
"""
from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from typing import TypeVar

Leg = TypeVar("Leg")


def leg_order(index: int, round_index: int, columns: Sequence[str]) -> tuple[str, ...]:
    """The columns' order in round `round_index` of workload `index`."""
    columns = tuple(columns)
    shift = (index + round_index) % len(columns)
    return columns[shift:] + columns[:shift]


def alternate(columns: Sequence[str], rounds: int, leg: Callable[[str], Leg],
              index: int = 0) -> tuple[dict[str, list[Leg]], list[str]]:
    """`rounds` rounds of `leg(column)` for every column in rotated order: each column's legs, and the order run."""
    legs: dict[str, list[Leg]] = {column: [] for column in columns}
    order: list[str] = []
    for round_index in range(rounds):
        for column in leg_order(index, round_index, columns):
            legs[column].append(leg(column))
            order.append(column)
    return legs, order


def median(values: Sequence[float]) -> float:
    """The median of a column's legs (NaN without legs)."""
    return statistics.median(values) if values else float("nan")
