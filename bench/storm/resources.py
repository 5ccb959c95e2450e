"""Once a second, psutil samples of the server's process tree (and the generator's, to show whether
the generator itself ran out of CPU): CPU %, RSS, threads, context switches."""
from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

import psutil

from bench.lib.output import ResourceSample



def context_switches(process: psutil.Process) -> tuple[int, int]:
    """(voluntary, involuntary) summed over the process's live threads.

    psutil reads /proc/<pid>/status, which counts the main thread only; a threaded server does
    its work elsewhere, so on Linux every /proc/<pid>/task/<tid>/status is added up.
    """
    tasks = Path(f"/proc/{process.pid}/task")
    if not tasks.is_dir():
        switches = process.num_ctx_switches()
        return switches.voluntary, switches.involuntary
    voluntary = involuntary = 0
    for task in tasks.iterdir():
        try:
            status = (task / "status").read_text()
        except OSError:  # the thread ended meanwhile
            continue
        for line in status.splitlines():
            if line.startswith("voluntary_ctxt_switches:"):
                voluntary += int(line.split()[1])
            elif line.startswith("nonvoluntary_ctxt_switches:"):
                involuntary += int(line.split()[1])
    return voluntary, involuntary


class _Tree:
    """A process and its descendants, with psutil objects kept so cpu_percent measures deltas."""

    def __init__(self, pids: Callable[[], list[int]]) -> None:
        self._pids = pids
        self._processes: dict[int, psutil.Process] = {}

    def sample(self, t: float, name: str) -> ResourceSample | None:
        roots = self._pids()
        current: dict[int, psutil.Process] = {}
        for pid in roots:
            try:
                root = self._processes.get(pid) or psutil.Process(pid)
                current[pid] = root
                for child in root.children(recursive=True):
                    current[child.pid] = self._processes.get(child.pid) or child
            except psutil.Error:
                continue
        cpu = rss = threads = voluntary = involuntary = alive = 0
        for pid, process in current.items():
            try:
                with process.oneshot():
                    first = pid not in self._processes
                    percent = process.cpu_percent(None)
                    cpu += 0.0 if first else percent
                    rss += process.memory_info().rss
                    threads += process.num_threads()
                    switches = context_switches(process)
                    voluntary += switches[0]
                    involuntary += switches[1]
                    alive += 1
            except psutil.Error:
                continue
        self._processes = current
        if not alive:
            return None
        return ResourceSample(t, name, alive, cpu, rss, threads, voluntary, involuntary)


class ResourceSampler(threading.Thread):
    """Samples on a `period_s` grid anchored at `measure_start_ns` (monotonic); `add` receives the
    samples of the measured window. A sample at t covers CPU over (t - period, t], so the first one
    kept is at t = period: no warm-up second leaks in."""

    def __init__(self, trees: dict[str, Callable[[], list[int]]], add: Callable[[ResourceSample], None],
                 measure_start_ns: int, period_s: float = 1.0) -> None:
        super().__init__(name="storm-resource-sampler", daemon=True)
        self._trees = {name: _Tree(pids) for name, pids in trees.items()}
        self._add = add
        self._measure_start_ns = measure_start_ns
        self._period_s = period_s
        self._stop_event = threading.Event()

    def run(self) -> None:
        for name, tree in self._trees.items():  # prime cpu_percent: its first reading is meaningless
            tree.sample(0.0, name)
        period_ns = int(self._period_s * 1e9)
        tick = (time.monotonic_ns() - self._measure_start_ns) // period_ns + 1
        while not self._stop_event.is_set():
            target = self._measure_start_ns + int(tick * self._period_s * 1e9)
            delay = (target - time.monotonic_ns()) / 1e9
            if delay > 0 and self._stop_event.wait(delay):
                break
            t = (time.monotonic_ns() - self._measure_start_ns) / 1e9
            for name, tree in self._trees.items():
                sample = tree.sample(round(t, 3), name)
                if sample is not None and t >= self._period_s / 2:
                    self._add(sample)
            tick += 1

    def stop(self) -> None:
        self._stop_event.set()
        self.join(timeout=5)
