"""What route-change subscribers hold unsent, counted as the process holds it (sans-IO).

A round's pushes are encoded once for every subscriber alike (namesrv.processor.route_push), and
the reactor hands a payload larger than one ZeroMQ message to each connection without copying it
(namesrv.remoting.endpoints): held by a hundred subscribers that do not read, such a payload is
still one payload in memory. Anything smaller is copied into each connection's own messages. So
what subscribers hold is each shared payload once, while any of them still holds it, plus each
subscriber's own bytes.

The route publisher records what it posts to whom (`post`) and tells what each subscriber was
measured to hold unsent (`measured`: the reactor's backlog for it and ZeroMQ's pipe). A
connection sends in order, so what it holds unsent are the newest bytes it was handed: the
shared payloads it still holds are its newest ones that cover its unsent bytes, the rest of
those bytes its own.
"""
from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field

from namesrv.channel import Channel


@dataclass(slots=True)
class Holder:
    """One subscriber's unsent pushes as last known."""

    #: Shared payloads it may still hold, oldest first: (serial, bytes).
    shared: deque[tuple[int, int]] = field(default_factory=deque)
    #: Bytes it holds of its own (not shared payloads).
    own: int = 0
    #: Bytes it holds unsent: as last measured, plus what was posted to it since.
    unsent: int = 0
    #: Bytes posted to it in the last round it was sent.
    last_round: int = 0


class PushHoldings:
    """Subscribers holding pushes, and the bytes that costs. Used by one thread (the publisher's)."""

    def __init__(self, shared_above: int) -> None:
        """`shared_above`: payloads larger than this are shared between the connections they go to."""
        self._shared_above = shared_above
        self._holders: dict[Channel, Holder] = {}
        #: serial -> [bytes, holders] of the shared payloads someone holds.
        self._payloads: dict[int, list[int]] = {}
        self._serials = itertools.count()
        self._shared_bytes = 0
        self._own_bytes = 0

    @property
    def total(self) -> int:
        """Bytes the subscribers hold unsent: each shared payload once, and their own bytes."""
        return self._shared_bytes + self._own_bytes

    def __len__(self) -> int:
        return len(self._holders)

    def __contains__(self, channel: Channel) -> bool:
        return channel in self._holders

    def channels(self) -> list[Channel]:
        return list(self._holders)

    def holder(self, channel: Channel) -> Holder | None:
        return self._holders.get(channel)

    def post(self, deliveries: Iterable[tuple[Channel, bytes]]) -> None:
        """Record one round's deliveries (a payload shared between subscribers is one object)."""
        serials: dict[int, int] = {}
        rounds: dict[Channel, int] = {}
        for channel, payload in deliveries:
            holder = self._holders.get(channel)
            if holder is None:
                holder = self._holders[channel] = Holder()
            size = len(payload)
            if size > self._shared_above:
                serial = serials.get(id(payload))
                if serial is None:
                    serial = serials[id(payload)] = next(self._serials)
                    self._payloads[serial] = [size, 0]
                    self._shared_bytes += size
                self._payloads[serial][1] += 1
                holder.shared.append((serial, size))
            else:
                holder.own += size
                self._own_bytes += size
            holder.unsent += size
            rounds[channel] = rounds.get(channel, 0) + size
        for channel, size in rounds.items():
            self._holders[channel].last_round = size

    def measured(self, channel: Channel, unsent: int | None) -> None:
        """`channel` holds `unsent` bytes unsent (None: it is closed, and holds nothing)."""
        holder = self._holders.get(channel)
        if holder is None:
            return
        if not unsent:
            self.forget(channel)
            return
        shared = holder.shared
        covered = kept = 0
        for _, size in reversed(shared):
            if covered >= unsent:
                break
            covered += size
            kept += 1
        for _ in range(len(shared) - kept):
            self._release(shared.popleft()[0])
        own = max(0, unsent - covered)
        self._own_bytes += own - holder.own
        holder.own = own
        holder.unsent = unsent

    def forget(self, channel: Channel) -> None:
        """`channel` holds nothing any more (it drained, or was closed)."""
        holder = self._holders.pop(channel, None)
        if holder is None:
            return
        for serial, _ in holder.shared:
            self._release(serial)
        self._own_bytes -= holder.own

    def oldest_first(self) -> list[Channel]:
        """The holders, those holding the oldest shared payload first (closing them is what frees
        old payloads), then by their own bytes, most first."""
        return sorted(self._holders, key=lambda channel: self._age_key(self._holders[channel]))

    @staticmethod
    def _age_key(holder: Holder) -> tuple[float, int]:
        return (holder.shared[0][0] if holder.shared else float("inf"), -holder.own)

    def _release(self, serial: int) -> None:
        payload = self._payloads[serial]
        payload[1] -= 1
        if not payload[1]:
            del self._payloads[serial]
            self._shared_bytes -= payload[0]
