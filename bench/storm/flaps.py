"""Broker flaps: route changes at known moments, for timing how fast route-change pushes arrive.

Every `period_s` of the measured window one broker (round-robin over the fleet) goes down: the
worker that owns it closes the broker's own connection, and the server removes its routes at once
(one change of every topic of its cluster). Half a period later the broker comes back on a new
connection and registers again (a second change). Flap k closes at (k + 1/4) periods after the
warm-up and registers again at (k + 3/4), so both changes fall inside the window and a push has
half a period to arrive before the broker's next change.

The schedule follows from the run's settings, so workers (which flap their brokers) and subscriber
processes (which time the pushes) agree on it without talking. The moment of each change is
written to shared memory (`new_change_times`: CLOCK_MONOTONIC ns, one clock for every process on
the host) *before* the change is made, so whoever receives a push reflecting a change finds the
change's time already there.
"""
from __future__ import annotations

from collections.abc import MutableSequence, Sequence
from dataclasses import dataclass
from multiprocessing.context import BaseContext

#: The kinds of change a flap makes, in order.
CLOSE = 0
REGISTER_AGAIN = 1
#: Shortest flap period: the broker's down time (half of it) must outlast a reconnect by far.
MIN_PERIOD_S = 0.1
_SECOND = 1_000_000_000


@dataclass(frozen=True, slots=True)
class FlapSchedule:
    """`count` flaps, one every `period_s`, of brokers 0, 1, ... (mod `brokers`)."""

    period_s: float
    count: int
    brokers: int

    @classmethod
    def over(cls, period_s: float, duration_s: float, brokers: int) -> FlapSchedule:
        """The flaps of a measured window of `duration_s` (as many whole periods as fit)."""
        return cls(period_s, int(duration_s / period_s + 1e-9), brokers)

    def broker(self, flap: int) -> int:
        return flap % self.brokers

    def flapping_brokers(self) -> range:
        return range(min(self.count, self.brokers))

    def flaps_of(self, broker: int) -> range:
        return range(broker, self.count, self.brokers)

    def due_ns(self, flap: int, kind: int, measure_start_ns: int) -> int:
        """When the flap's change of `kind` is scheduled (monotonic ns)."""
        return measure_start_ns + round((flap + 0.25 + 0.5 * kind) * self.period_s * _SECOND)

    def latest_change(self, changed_at: Sequence[int], broker: int) -> tuple[int, int] | None:
        """(kind, monotonic ns) of `broker`'s latest change made so far; None before its first.

        A broker's changes are made (and their times written) in order, so the ones made are a
        prefix of its sequence close, register again, close, ...: found by bisection.
        """
        flaps = self.flaps_of(broker)
        made, unknown = 0, 2 * len(flaps)  # changes known made; changes that may be
        while made < unknown:
            middle = (made + unknown + 1) // 2
            if changed_at[change_index(flaps[(middle - 1) // 2], (middle - 1) % 2)]:
                made = middle
            else:
                unknown = middle - 1
        if not made:
            return None
        kind = (made - 1) % 2
        return kind, changed_at[change_index(flaps[(made - 1) // 2], kind)]

    def changes_made(self, changed_at: Sequence[int]) -> list[tuple[int, int]]:
        """(broker, kind) of every change made."""
        return [(self.broker(flap), kind) for flap in range(self.count) for kind in (CLOSE, REGISTER_AGAIN)
                if changed_at[change_index(flap, kind)]]


def change_index(flap: int, kind: int) -> int:
    """Where the time of a flap's change of `kind` is kept in the shared array."""
    return 2 * flap + kind


def new_change_times(context: BaseContext, schedule: FlapSchedule) -> MutableSequence[int]:
    """Zeroed shared memory for the schedule's change times (0 = not made yet), for spawned processes.

    Lock-free: each slot is written once, by the worker owning the broker, and aligned 8-byte
    stores are atomic on the platforms the storm runs on.
    """
    return context.RawArray("q", 2 * schedule.count)
