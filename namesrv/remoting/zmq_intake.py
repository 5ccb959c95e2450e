"""What libzmq holds for each ZeroMQ peer before the reactor sees it, measured and bounded.

A ROUTER socket hands over a multipart message only once all its frames have arrived, and
ZMQ_MAXMSGSIZE bounds each frame, not the message: one message of 40 frames of 15 MiB is buffered
whole inside libzmq (600 MiB) before we could refuse it, and no socket option bounds that. So it
is measured instead: the kernel counts the bytes libzmq has read from each peer's TCP connection
(TCP_INFO's tcpi_bytes_received), the endpoint counts the bytes of the messages delivered from it
(each message names its connection's descriptor, SRCFD); the difference, less ZeroMQ's framing, is
what libzmq holds for that peer: a message still arriving, or messages waiting for the reactor. A
peer holding more than its bound is reset at the socket (as a TCP peer that does not read, see
namesrv.remoting.sockets), and libzmq drops what it held.

Every CHECK_PERIOD the next CHECKS_PER_ROUND connections are checked (round robin; a check costs
about 3 us, so at most 3 % of a core): what a peer can make us hold is its bound plus what it
sends between two checks of it, 20 ms up to 200 peers, 1 s at 10,000. The
accounting allows for framing generously (CURVE's per-frame box included, and heartbeats by
connection age), so it never mistakes a well-behaved peer for one holding bytes back. Only TCP
endpoints are watched: ipc and inproc peers are local processes.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass

from namesrv.remoting.sockets import abort_connection, bytes_received, peer_address

log = logging.getLogger(__name__)

CHECK_PERIOD = 0.02
CHECKS_PER_ROUND = 200
#: Per delivered frame: a long frame header (9 bytes) and CURVE's MESSAGE command around it (33).
FRAME_OVERHEAD = 64
#: The greeting and handshake (NULL: about 100 bytes, CURVE: about 500).
HANDSHAKE_ALLOWANCE = 4096
#: Heartbeats (PING/PONG commands), per second of the connection's age.
HEARTBEAT_ALLOWANCE = 64


@dataclass(slots=True)
class Intake:
    """One peer connection: its address, when accepted, and what was delivered from it."""

    peer: str
    since: float
    delivered: int = 0
    frames: int = 0
    held: int = 0


class IntakeWatch:
    """The ZeroMQ endpoint's connections by descriptor, and what libzmq holds for each."""

    def __init__(self, max_held: int) -> None:
        """`max_held`: the most one peer may have held inside libzmq."""
        self.max_held = max_held
        self.intakes: dict[int, Intake] = {}
        self._order: list[int] = []
        self._next = 0
        self._due = 0.0
        #: Bytes held inside libzmq across the peers, as of the last checks.
        self.held = 0

    def accepted(self, fd: int, now: float) -> None:
        peer = peer_address(fd)
        if peer is not None:
            self.intakes[fd] = Intake(peer, now)

    def disconnected(self, fd: int) -> None:
        intake = self.intakes.pop(fd, None)
        if intake is not None:
            self.held -= intake.held

    def delivered(self, fd: int, size: int, frames: int) -> None:
        intake = self.intakes.get(fd)
        if intake is not None:
            intake.delivered += size
            intake.frames += frames

    def due(self, now: float) -> bool:
        return bool(self.intakes) and now >= self._due

    def check(self, now: float) -> list[int]:
        """Measure the next connections; reset those holding more than `max_held` (their descriptors returned)."""
        self._due = now + CHECK_PERIOD
        if self._next >= len(self._order):
            self._order = list(self.intakes)
            self._next = 0
        batch = self._order[self._next:self._next + CHECKS_PER_ROUND]
        self._next += len(batch)
        aborted = []
        for fd in batch:
            intake = self.intakes.get(fd)
            if intake is None:
                continue
            received = bytes_received(fd)
            if received is None:
                continue
            allowance = (intake.frames * FRAME_OVERHEAD + HANDSHAKE_ALLOWANCE
                         + int((now - intake.since) * HEARTBEAT_ALLOWANCE))
            held = max(0, received - intake.delivered - allowance)
            self.held += held - intake.held
            intake.held = held
            if held > self.max_held:
                aborted.append((fd, intake))
        for fd, intake in aborted:
            self._reset(fd, intake, f"{intake.held} bytes of unfinished messages held inside ZeroMQ, more than "
                                    f"{self.max_held} (2 x maxFrameLength)")
        return [fd for fd, _ in aborted]

    def reset_largest(self, excess: int, limit: int) -> list[int]:
        """Reset the peers holding most until `excess` bytes are freed; their descriptors returned."""
        reset = []
        for fd, intake in sorted(self.intakes.items(), key=lambda item: -item[1].held):
            if excess <= 0 or not intake.held:
                break
            excess -= intake.held
            reset.append(fd)
            self._reset(fd, intake, f"{intake.held} bytes of unfinished messages held inside ZeroMQ, the most while "
                                    f"in-flight request bytes are at maxInFlightRequestBytes ({limit})")
        return reset

    def _reset(self, fd: int, intake: Intake, reason: str) -> None:
        self.disconnected(fd)
        if abort_connection(fd, intake.peer):
            log.warning("reset zmq connection %s: %s", intake.peer, reason)
