"""The benchmarks' request generator: template requests sent at their intended times over
non-blocking sockets, answers matched by opaque, each latency counted in its HDR bucket.

Pure twin of `namesrv/fastpath/generator.pxi` (same class, same bytes written, same records; see
namesrv.fastpath). The storm's worker processes (bench/storm/worker.py) drive it: Python decides
what to send and when, a few milliseconds ahead (arrays of intended times, templates and
connections), and this loop stamps, sends, reads, matches and records each request without a
Python call per request, so one generator process keeps up with a server on a core of its own.
Nothing here is namesrv's server code: it lives in the extension the project already builds.

Open loop: `schedule` requests, `pump` sends each at its intended time (late ones at once; the
lateness is part of the latency, measured from the intended time). Closed loop: `refill` keeps a
number of requests in flight on a connection, each answer sending the next of a cycle.

Records leave as int64 keys, one per event, which the worker adds up per second into HDR interval
histograms (`take`):
  histogram key = (((metric << 16 | request code) << 20 | interval) << 16) | bucket index
                  metric 0: latency (answer − intended send), 1: send delay (sent − intended),
                  in microseconds, in HdrHistogram's bucket layout given at construction;
  response key  = ((interval + 1) << 16 | request code) << 16 | (response code + 1) & 0xFFFF
                  interval −1: before the measured window; response code −1: never answered.
Intervals are of the intended send time, counted from `measure_start_ns`.
"""
from __future__ import annotations

import os
import select
import struct
import time
from array import array

_INT32 = struct.Struct(">i")
_INT16 = struct.Struct(">h")
_PREFIX = struct.Struct(">ii")
#: Requests a connection may have unanswered; past it the oldest counts as never answered.
PENDING_SLOTS = 1 << 16
#: Unsent bytes a connection may hold before the server is deemed not to read (the connection is lost).
MAX_OUTPUT_BYTES = 64 << 20
#: Bytes read per recv.
READ_BYTES = 256 << 10
LATENCY, SEND_DELAY = 0, 1
NO_RESPONSE = -1
_ROCKETMQ = 1
_MAX_DIGITS = 18


class RequestGenerator:
    """One process's requests: templates, connections, what is scheduled and what is unanswered."""

    def __init__(self, unit_magnitude: int, half_count_magnitude: int, highest_us: int,
                 interval_ns: int = 1_000_000_000, max_frame_length: int = 16 << 20, echo_ok: bool = False) -> None:
        """The HDR layout (unit magnitude, sub-bucket half-count magnitude, highest value recorded: higher
        values are clamped to it); `echo_ok`: a request frame coming back with a pending opaque (an echo
        server's answer) counts as answered SUCCESS."""
        if not 0 <= unit_magnitude < 32 or not 0 < half_count_magnitude < 16 or highest_us < 1 or interval_ns < 1:
            raise ValueError("bad histogram layout or interval")
        self._unit = unit_magnitude
        self._half = half_count_magnitude
        self._mask = ((1 << (half_count_magnitude + 1)) - 1) << unit_magnitude
        self._highest = highest_us
        self._interval_ns = interval_ns
        self._max_frame = max_frame_length
        self._echo_ok = echo_ok
        #: The start of the measured window (monotonic ns); requests intended before it are not recorded.
        self.measure_start_ns = 1 << 62
        self.sent = 0
        self.answered = 0
        self._templates: list[tuple[int, bytes, bytes, bytes, int]] = []
        self._conns: list[_Connection] = []
        self._due: list[tuple[int, int, int]] = []
        self._next_due = 0
        self._histograms = array("q")
        self._responses = array("q")

    # ---- set-up
    def template(self, code: int, head: bytes, tail: bytes, body: bytes, serialize_type: int) -> int:
        """A request whose frame is `head`, the opaque, `tail`, `body` (bench.lib.fleet.FrameTemplate's
        parts: the opaque as decimal digits in a JSON header, 4 bytes in a ROCKETMQ one); its id."""
        if not 0 <= code < 1 << 16 or serialize_type not in (0, _ROCKETMQ):
            raise ValueError("request code must be 0..65535 and serialize type 0 (JSON) or 1 (ROCKETMQ)")
        self._templates.append((code, bytes(head), bytes(tail), bytes(body), serialize_type))
        return len(self._templates) - 1

    def connect(self, fd: int) -> int:
        """A connection over the non-blocking socket `fd` (-1: none, its bytes stay in `outgoing`); its id."""
        self._conns.append(_Connection(fd))
        return len(self._conns) - 1

    def drop(self, conn: int) -> int:
        """No more I/O on `conn` (the caller closes its socket): what it has unanswered, and whatever is
        sent on it from now, counts as never answered; returns how many were pending."""
        connection = self._conn(conn)
        pending = self._abandon(connection)
        connection.alive = False
        connection.out.clear()
        connection.inbox.clear()
        connection.refill = array("i")
        return pending

    def alive(self, conn: int) -> bool:
        return self._conn(conn).alive

    # ---- what to send
    def schedule(self, intended_ns, templates, connections) -> None:
        """Requests to send at their intended times (monotonic ns, non-decreasing, after any scheduled before)."""
        intended, chosen, on = array("q", intended_ns), array("i", templates), array("i", connections)
        if not len(intended) == len(chosen) == len(on):
            raise ValueError("schedule: one template and one connection per intended time")
        last = self._due[-1][0] if self._next_due < len(self._due) else None
        for at, template, conn in zip(intended, chosen, on):
            if not 0 <= template < len(self._templates) or not 0 <= conn < len(self._conns):
                raise ValueError("schedule: unknown template or connection")
            if last is not None and at < last:
                raise ValueError("schedule: intended times must not decrease")
            last = at
        if self._next_due:
            del self._due[:self._next_due]
            self._next_due = 0
        self._due.extend(zip(intended, chosen, on))

    def cancel(self, after_ns: int) -> int:
        """Drop the scheduled requests intended at `after_ns` or later (a run cut short); how many."""
        keep = self._next_due
        while keep < len(self._due) and self._due[keep][0] < after_ns:
            keep += 1
        dropped = len(self._due) - keep
        del self._due[keep:]
        return dropped

    @property
    def scheduled(self) -> int:
        """Requests scheduled and not sent yet."""
        return len(self._due) - self._next_due

    def next_due_ns(self) -> int | None:
        return self._due[self._next_due][0] if self._next_due < len(self._due) else None

    def refill(self, conn: int, templates, in_flight: int, now_ns: int, stop_ns: int) -> None:
        """Closed loop on `conn`: send `in_flight` requests now and, for every answer before `stop_ns`,
        the next one; the templates are taken in turn from `templates`, cycled."""
        cycle = array("i", templates)
        if not cycle or in_flight < 1 or any(not 0 <= t < len(self._templates) for t in cycle):
            raise ValueError("refill: a non-empty cycle of known templates and at least one in flight")
        connection = self._conn(conn)
        connection.refill, connection.refill_next, connection.refill_stop = cycle, 0, stop_ns
        for _ in range(in_flight):
            self._refill_one(connection, now_ns)

    # ---- the loop's steps (pump runs them; tests drive them with times of their choosing)
    def send_due(self, now_ns: int) -> int:
        """Stamp every scheduled request due by `now_ns` into its connection's output; how many."""
        count = 0
        while self._next_due < len(self._due) and self._due[self._next_due][0] <= now_ns:
            intended, template, conn = self._due[self._next_due]
            self._next_due += 1
            self._send(self._conns[conn], template, intended, now_ns)
            count += 1
        return count

    def feed(self, conn: int, data, arrived_ns: int) -> bool:
        """The answers in `data`, a chunk read from `conn` at `arrived_ns`; False when a frame is bad (the
        connection is then lost: its unanswered requests count as never answered)."""
        connection = self._conn(conn)
        if not connection.alive:
            return False
        inbox = connection.inbox
        inbox += data
        pos, size = 0, len(inbox)
        while size - pos >= 4:
            total = _INT32.unpack_from(inbox, pos)[0]
            if total < 4 or total + 4 > self._max_frame:
                self._lose(connection)
                return False
            if pos + 4 + total > size:
                break
            field = _INT32.unpack_from(inbox, pos + 4)[0]
            header_len = field & 0xFFFFFF
            if header_len > total - 4:
                self._lose(connection)
                return False
            header = bytes(inbox[pos + 8:pos + 8 + header_len])
            pos += 4 + total
            fields = _binary_fields(header) if (field >> 24) & 0xFF == _ROCKETMQ else (
                _json_fields(header) if (field >> 24) & 0xFF == 0 else None)
            if fields is not None:
                self._answer(connection, *fields, arrived_ns)
                if not connection.alive:
                    return True
        del inbox[:pos]
        return True

    def outgoing(self, conn: int) -> bytes:
        """The bytes stamped for `conn` and not written yet, taken (a connection without a socket)."""
        connection = self._conn(conn)
        data = bytes(connection.out)
        connection.out.clear()
        return data

    def pending_of(self, conn: int) -> int:
        return self._conn(conn).pending

    @property
    def pending(self) -> int:
        return sum(connection.pending for connection in self._conns)

    def take(self) -> tuple[bytes, bytes]:
        """(histogram keys, response keys) recorded since the last call, as int64 arrays' bytes."""
        taken = (self._histograms.tobytes(), self._responses.tobytes())
        self._histograms = array("q")
        self._responses = array("q")
        return taken

    # ---- the loop
    def pump(self, until_ns: int) -> None:
        """Send what is due, write, wait for answers and read them, until the monotonic clock reaches
        `until_ns` (one pass, without waiting, when it already has)."""
        while True:
            self.send_due(time.monotonic_ns())
            poller, polled = select.poll(), {}
            for conn, connection in enumerate(self._conns):
                if connection.alive and connection.fd >= 0:
                    if connection.out:
                        self._write(connection)
                    if connection.alive:
                        poller.register(connection.fd, select.POLLIN | (select.POLLOUT if connection.out else 0))
                        polled[connection.fd] = conn
            due = self.next_due_ns()
            wake = until_ns if due is None else min(due, until_ns)
            for fd, events in poller.poll(max(0.0, (wake - time.monotonic_ns()) / 1e6)):
                conn = polled[fd]
                connection = self._conns[conn]
                if events & (select.POLLIN | select.POLLHUP | select.POLLERR):
                    self._read(conn, connection)
                if connection.alive and connection.out and events & select.POLLOUT:
                    self._write(connection)
            if time.monotonic_ns() >= until_ns:
                return

    def _read(self, conn: int, connection: _Connection) -> None:
        for _ in range(16):
            try:
                data = os.read(connection.fd, READ_BYTES)
            except BlockingIOError:
                return
            except OSError:
                self._lose(connection)
                return
            if not data:
                self._lose(connection)
                return
            if not self.feed(conn, data, time.monotonic_ns()):
                return

    def _write(self, connection: _Connection) -> None:
        try:
            written = os.write(connection.fd, connection.out)
        except BlockingIOError:
            written = 0
        except OSError:
            self._lose(connection)
            return
        del connection.out[:written]

    # ---- helpers
    def _conn(self, conn: int) -> _Connection:
        if not 0 <= conn < len(self._conns):
            raise ValueError(f"unknown connection {conn}")
        return self._conns[conn]

    def _interval(self, intended_ns: int) -> int:
        if intended_ns < self.measure_start_ns:
            return -1
        return (intended_ns - self.measure_start_ns) // self._interval_ns

    def _record(self, metric: int, code: int, interval: int, start_ns: int, end_ns: int) -> None:
        value = min(max((end_ns - start_ns) // 1000, 0), self._highest)
        bucket = (value | self._mask).bit_length() - self._unit - (self._half + 1)
        index = ((bucket + 1) << self._half) + ((value >> (bucket + self._unit)) - (1 << self._half))
        self._histograms.append((((metric << 16 | code) << 20 | (interval & 0xFFFFF)) << 16) | index)

    def _respond(self, interval: int, code: int, response: int) -> None:
        self._responses.append(((interval + 1) << 16 | code) << 16 | ((response + 1) & 0xFFFF))

    def _send(self, connection: _Connection, template: int, intended_ns: int, now_ns: int) -> None:
        code, head, tail, body, serialize_type = self._templates[template]
        interval = self._interval(intended_ns)
        self.sent += 1
        if interval >= 0:
            self._record(SEND_DELAY, code, interval, intended_ns, now_ns)
        if not connection.alive:
            self._respond(interval, code, NO_RESPONSE)
            return
        opaque = connection.next_opaque
        connection.next_opaque = 1 if opaque == 0x7FFFFFFF else opaque + 1
        slot = opaque & (PENDING_SLOTS - 1)
        older = connection.slots.get(slot)
        if older is not None:  # PENDING_SLOTS requests ago and still unanswered: never, then
            self._respond(self._interval(older[1]), older[2], NO_RESPONSE)
            connection.pending -= 1
        connection.slots[slot] = (opaque, intended_ns, code)
        connection.pending += 1
        stamp = _INT32.pack(opaque) if serialize_type == _ROCKETMQ else b"%d" % opaque
        header_len = len(head) + len(stamp) + len(tail)
        connection.out += _PREFIX.pack(4 + header_len + len(body), (serialize_type << 24) | header_len)
        connection.out += head + stamp + tail + body
        if len(connection.out) > MAX_OUTPUT_BYTES:
            self._lose(connection)

    def _answer(self, connection: _Connection, code: int, opaque: int, flag: int, arrived_ns: int) -> None:
        if not flag & 1 and not self._echo_ok:
            return  # a request from the server (a push), not an answer
        entry = connection.slots.get(opaque & (PENDING_SLOTS - 1))
        if entry is None or entry[0] != opaque:
            return
        del connection.slots[opaque & (PENDING_SLOTS - 1)]
        connection.pending -= 1
        _, intended_ns, request_code = entry
        interval = self._interval(intended_ns)
        if interval >= 0:
            self._record(LATENCY, request_code, interval, intended_ns, arrived_ns)
        self._respond(interval, request_code, code if flag & 1 else 0)
        self.answered += 1
        if connection.refill and arrived_ns < connection.refill_stop:
            self._refill_one(connection, arrived_ns)

    def _refill_one(self, connection: _Connection, now_ns: int) -> None:
        template = connection.refill[connection.refill_next]
        connection.refill_next = (connection.refill_next + 1) % len(connection.refill)
        self._send(connection, template, now_ns, now_ns)

    def _abandon(self, connection: _Connection) -> int:
        count = len(connection.slots)
        for slot in sorted(connection.slots):
            _, intended_ns, code = connection.slots[slot]
            self._respond(self._interval(intended_ns), code, NO_RESPONSE)
        connection.slots.clear()
        connection.pending = 0
        return count

    def _lose(self, connection: _Connection) -> None:
        self._abandon(connection)
        connection.alive = False
        connection.out.clear()
        connection.inbox.clear()


class _Connection:
    __slots__ = ("fd", "alive", "out", "inbox", "next_opaque", "slots", "pending", "refill", "refill_next",
                 "refill_stop")

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.alive = True
        self.out = bytearray()
        self.inbox = bytearray()
        self.next_opaque = 1
        #: opaque & (PENDING_SLOTS - 1) -> (opaque, intended ns, request code)
        self.slots: dict[int, tuple[int, int, int]] = {}
        self.pending = 0
        self.refill = array("i")
        self.refill_next = 0
        self.refill_stop = 0


def _binary_fields(header: bytes) -> tuple[int, int, int] | None:
    """(code, opaque, flag) of a ROCKETMQ header, None when it is too short to hold them."""
    if len(header) < 13:
        return None
    return _INT16.unpack_from(header, 0)[0], _INT32.unpack_from(header, 5)[0], _INT32.unpack_from(header, 9)[0]


def _json_fields(header: bytes) -> tuple[int, int, int] | None:
    """(code, opaque, flag) of a JSON header's top-level object, each the first of its key holding an
    integer of at most 18 digits (code and flag 0 when absent); None without such an opaque or when the
    object cannot be read. A key with escapes never matches; nested objects are skipped whole."""
    n = len(header)
    found: dict[bytes, int] = {}
    i = _space(header, 0)
    if i >= n or header[i] != 0x7B:
        return None
    i = _space(header, i + 1)
    if i < n and header[i] == 0x7D:
        return None
    while True:
        if i >= n or header[i] != 0x22:
            return None
        end = _string_end(header, i)
        if end < 0:
            return None
        key = header[i + 1:end - 1]
        i = _space(header, end)
        if i >= n or header[i] != 0x3A:
            return None
        i = _space(header, i + 1)
        number = _integer(header, i) if key in (b"code", b"opaque", b"flag") else None
        if number is not None:
            if key not in found:
                found[key] = number[0]
            i = number[1]
        else:
            i = _value_end(header, i)
            if i < 0:
                return None
        i = _space(header, i)
        if i < n and header[i] == 0x2C:
            i = _space(header, i + 1)
            continue
        if i < n and header[i] == 0x7D:
            break
        return None
    if b"opaque" not in found:
        return None
    return found.get(b"code", 0), found[b"opaque"], found.get(b"flag", 0)


def _space(data: bytes, i: int) -> int:
    while i < len(data) and data[i] in b" \t\r\n":
        i += 1
    return i


def _string_end(data: bytes, i: int) -> int:
    """After the string opening at `i` (its closing quote included); -1 when it never closes."""
    i += 1
    while i < len(data):
        if data[i] == 0x5C:
            i += 2
            continue
        if data[i] == 0x22:
            return i + 1
        i += 1
    return -1


def _integer(data: bytes, i: int) -> tuple[int, int] | None:
    """(value, the index after it) of an integer of 1..18 digits at `i`, ended by a delimiter; else None."""
    negative = i < len(data) and data[i] == 0x2D
    if negative:
        i += 1
    digits = i
    while i < len(data) and 0x30 <= data[i] <= 0x39:
        i += 1
    if not 0 < i - digits <= _MAX_DIGITS or (i < len(data) and data[i] not in b" \t\r\n,}"):
        return None
    value = int(data[digits:i])
    return (-value if negative else value), i


def _value_end(data: bytes, i: int) -> int:
    """After the JSON value at `i` (strings, objects and arrays skipped whole); -1 when it never ends."""
    if i >= len(data):
        return -1
    if data[i] == 0x22:
        return _string_end(data, i)
    if data[i] in b"{[":
        depth = 0
        while i < len(data):
            byte = data[i]
            if byte == 0x22:
                i = _string_end(data, i)
                if i < 0:
                    return -1
                continue
            if byte in b"{[":
                depth += 1
            elif byte in b"}]":
                depth -= 1
                if depth == 0:
                    return i + 1
            i += 1
        return -1
    while i < len(data) and data[i] not in b" \t\r\n,}]":
        i += 1
    return i
