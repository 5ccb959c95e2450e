"""What the benches read off a server process and off raw samples, one definition each."""
from __future__ import annotations

import psutil


def _tree(process: psutil.Process) -> list[psutil.Process]:
    return [process, *process.children(recursive=True)]


def tree_cpu_seconds(process: psutil.Process) -> float:
    """CPU seconds (user + system) of `process` and its descendants (worker processes); one that
    ended meanwhile is left out."""
    total = 0.0
    for member in _tree(process):
        try:
            times = member.cpu_times()
        except psutil.NoSuchProcess:
            continue
        total += times.user + times.system
    return total


def tree_rss_bytes(process: psutil.Process) -> int:
    """RSS of `process` and its descendants; one that ended meanwhile is left out."""
    total = 0
    for member in _tree(process):
        try:
            total += member.memory_info().rss
        except psutil.NoSuchProcess:
            continue
    return total


def percentile(ordered: list[float], p: float) -> float:
    """The nearest-rank `p` percentile (0-100) of `ordered` (sorted ascending); NaN when empty."""
    return ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))] if ordered else float("nan")
