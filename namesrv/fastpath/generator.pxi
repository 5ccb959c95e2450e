# Twin of namesrv/fastpath/generator.py: the benchmarks' request generator (template requests out
# at their intended times, answers matched by opaque, latencies counted in HDR buckets). The same
# class, bytes written and records as its twin; every state is C memory, so a request costs no
# Python call. The interpreter lock is released only while it waits in ppoll.

from libc.stdint cimport int64_t
from libc.stdlib cimport free, malloc, realloc
from libc.string cimport memmove
from posix.time cimport CLOCK_MONOTONIC, clock_gettime, timespec
from posix.unistd cimport read as _os_read, write as _os_write


cdef extern from "<poll.h>" nogil:
    struct pollfd:
        int fd
        short events
        short revents
    int ppoll(pollfd *fds, unsigned long nfds, const timespec *timeout, const void *sigmask)
    enum:
        POLLIN
        POLLOUT
        POLLERR
        POLLHUP


cdef extern from "<errno.h>" nogil:
    int errno
    enum:
        EAGAIN
        EINTR


cdef extern from *:
    int __builtin_clzll(unsigned long long value) nogil


cdef enum:
    GEN_PENDING_SLOTS = 1 << 16
    GEN_MAX_OUTPUT_BYTES = 64 << 20
    GEN_READ_BYTES = 256 << 10
    GEN_READS_PER_WAKE = 16
    GEN_MAX_DIGITS = 18


cdef struct _GenTemplate:
    int32_t code
    int serialize_type
    const char *head
    Py_ssize_t head_len
    const char *tail
    Py_ssize_t tail_len
    const char *body
    Py_ssize_t body_len


cdef struct _GenConn:
    int fd
    bint alive
    unsigned char *out
    Py_ssize_t out_len
    Py_ssize_t out_cap
    unsigned char *inbox
    Py_ssize_t in_len
    Py_ssize_t in_cap
    int32_t next_opaque
    int32_t *slot_opaque      # 0: free (opaques start at 1)
    int64_t *slot_intended
    int32_t *slot_code
    Py_ssize_t pending
    int32_t *refill
    Py_ssize_t refill_len
    Py_ssize_t refill_next
    int64_t refill_stop


cdef inline int64_t _gen_now() noexcept nogil:
    cdef timespec ts
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return <int64_t>ts.tv_sec * 1000000000 + ts.tv_nsec


cdef int _gen_reserve(void **data, Py_ssize_t *capacity, Py_ssize_t needed, size_t item) except -1:
    """Room for `needed` items at *data, doubling; MemoryError when there is none."""
    cdef Py_ssize_t grown
    cdef void *moved
    if needed <= capacity[0]:
        return 0
    grown = capacity[0] * 2 if capacity[0] else 1024
    while grown < needed:
        grown *= 2
    moved = realloc(data[0], <size_t>grown * item)
    if moved == NULL:
        raise MemoryError()
    data[0] = moved
    capacity[0] = grown
    return 0


cdef inline Py_ssize_t _gen_space(const unsigned char *p, Py_ssize_t i, Py_ssize_t n) noexcept nogil:
    while i < n and (p[i] == 32 or p[i] == 9 or p[i] == 13 or p[i] == 10):
        i += 1
    return i


cdef Py_ssize_t _gen_string_end(const unsigned char *p, Py_ssize_t i, Py_ssize_t n) noexcept nogil:
    i += 1
    while i < n:
        if p[i] == 0x5C:
            i += 2
            continue
        if p[i] == 0x22:
            return i + 1
        i += 1
    return -1


cdef inline bint _gen_delimiter(unsigned char byte, bint closers) noexcept nogil:
    return (byte == 32 or byte == 9 or byte == 13 or byte == 10 or byte == 0x2C or byte == 0x7D
            or (closers and byte == 0x5D))


cdef Py_ssize_t _gen_integer(const unsigned char *p, Py_ssize_t i, Py_ssize_t n, int64_t *value) noexcept nogil:
    """The index after an integer of 1..18 digits at i, ended by a delimiter (its value in *value); -1 if none."""
    cdef bint negative = i < n and p[i] == 0x2D
    cdef Py_ssize_t digits
    cdef int64_t number = 0
    if negative:
        i += 1
    digits = i
    while i < n and 0x30 <= p[i] <= 0x39:
        if i - digits < GEN_MAX_DIGITS:  # past it the value is refused: no overflow
            number = number * 10 + (p[i] - 0x30)
        i += 1
    if i == digits or i - digits > GEN_MAX_DIGITS or (i < n and not _gen_delimiter(p[i], False)):
        return -1
    value[0] = -number if negative else number
    return i


cdef Py_ssize_t _gen_value_end(const unsigned char *p, Py_ssize_t i, Py_ssize_t n) noexcept nogil:
    cdef int depth = 0
    if i >= n:
        return -1
    if p[i] == 0x22:
        return _gen_string_end(p, i, n)
    if p[i] == 0x7B or p[i] == 0x5B:
        while i < n:
            if p[i] == 0x22:
                i = _gen_string_end(p, i, n)
                if i < 0:
                    return -1
                continue
            if p[i] == 0x7B or p[i] == 0x5B:
                depth += 1
            elif p[i] == 0x7D or p[i] == 0x5D:
                depth -= 1
                if depth == 0:
                    return i + 1
            i += 1
        return -1
    while i < n and not _gen_delimiter(p[i], True):
        i += 1
    return i


cdef bint _gen_json_fields(const unsigned char *p, Py_ssize_t n, int64_t *code, int64_t *opaque,
                           int64_t *flag) noexcept nogil:
    """Twin of generator.py's _json_fields: False when there is no answer to read."""
    cdef Py_ssize_t i, end, key_len
    cdef const unsigned char *key
    cdef int64_t number
    cdef bint has_code = False, has_opaque = False, has_flag = False
    cdef int which
    code[0] = 0
    flag[0] = 0
    i = _gen_space(p, 0, n)
    if i >= n or p[i] != 0x7B:
        return False
    i = _gen_space(p, i + 1, n)
    if i < n and p[i] == 0x7D:
        return False
    while True:
        if i >= n or p[i] != 0x22:
            return False
        end = _gen_string_end(p, i, n)
        if end < 0:
            return False
        key = p + i + 1
        key_len = end - i - 2
        i = _gen_space(p, end, n)
        if i >= n or p[i] != 0x3A:
            return False
        i = _gen_space(p, i + 1, n)
        which = 0
        if key_len == 4 and memcmp(key, b"code", 4) == 0:
            which = 1
        elif key_len == 6 and memcmp(key, b"opaque", 6) == 0:
            which = 2
        elif key_len == 4 and memcmp(key, b"flag", 4) == 0:
            which = 3
        end = _gen_integer(p, i, n, &number) if which else -1
        if end >= 0:
            if which == 1 and not has_code:
                code[0], has_code = number, True
            elif which == 2 and not has_opaque:
                opaque[0], has_opaque = number, True
            elif which == 3 and not has_flag:
                flag[0], has_flag = number, True
            i = end
        else:
            i = _gen_value_end(p, i, n)
            if i < 0:
                return False
        i = _gen_space(p, i, n)
        if i < n and p[i] == 0x2C:
            i = _gen_space(p, i + 1, n)
            continue
        if i < n and p[i] == 0x7D:
            break
        return False
    return has_opaque


cdef class RequestGenerator:
    """See `namesrv.fastpath.generator.RequestGenerator`."""

    cdef public int64_t measure_start_ns
    cdef readonly int64_t sent
    cdef readonly int64_t answered
    cdef int _unit
    cdef int _half
    cdef uint64_t _mask
    cdef int64_t _highest
    cdef int64_t _interval_ns
    cdef int64_t _max_frame
    cdef bint _echo_ok
    cdef list _keep
    cdef _GenTemplate *_templates
    cdef Py_ssize_t _template_count
    cdef Py_ssize_t _template_cap
    cdef _GenConn *_conns
    cdef Py_ssize_t _conn_count
    cdef Py_ssize_t _conn_cap
    cdef pollfd *_polled
    cdef Py_ssize_t _polled_cap
    cdef int32_t *_polled_conn
    cdef Py_ssize_t _polled_conn_cap
    cdef int64_t *_due_at
    cdef int32_t *_due_template
    cdef int32_t *_due_conn
    cdef Py_ssize_t _due_len
    cdef Py_ssize_t _due_next
    cdef Py_ssize_t _due_cap
    cdef int64_t *_hist
    cdef Py_ssize_t _hist_len
    cdef Py_ssize_t _hist_cap
    cdef int64_t *_resp
    cdef Py_ssize_t _resp_len
    cdef Py_ssize_t _resp_cap

    def __init__(self, int unit_magnitude, int half_count_magnitude, long long highest_us,
                 long long interval_ns=1_000_000_000, long long max_frame_length=16 << 20, bint echo_ok=False):
        if not 0 <= unit_magnitude < 32 or not 0 < half_count_magnitude < 16 or highest_us < 1 or interval_ns < 1:
            raise ValueError("bad histogram layout or interval")
        self._unit = unit_magnitude
        self._half = half_count_magnitude
        self._mask = ((<uint64_t>1 << (half_count_magnitude + 1)) - 1) << unit_magnitude
        self._highest = highest_us
        self._interval_ns = interval_ns
        self._max_frame = max_frame_length
        self._echo_ok = echo_ok
        self.measure_start_ns = <int64_t>1 << 62
        self._keep = []

    def __dealloc__(self):
        cdef Py_ssize_t c
        for c in range(self._conn_count):
            self._free_conn(&self._conns[c])
        free(self._conns)
        free(self._templates)
        free(self._polled)
        free(self._polled_conn)
        free(self._due_at)
        free(self._due_template)
        free(self._due_conn)
        free(self._hist)
        free(self._resp)

    cdef void _free_conn(self, _GenConn *conn) noexcept:
        free(conn.out)
        free(conn.inbox)
        free(conn.slot_opaque)
        free(conn.slot_intended)
        free(conn.slot_code)
        free(conn.refill)
        conn.out = conn.inbox = NULL
        conn.slot_opaque = conn.slot_code = conn.refill = NULL
        conn.slot_intended = NULL

    # ---- set-up
    def template(self, int code, bytes head not None, bytes tail not None, bytes body not None, int serialize_type):
        if not 0 <= code < 1 << 16 or serialize_type not in (0, 1):
            raise ValueError("request code must be 0..65535 and serialize type 0 (JSON) or 1 (ROCKETMQ)")
        _gen_reserve(<void **>&self._templates, &self._template_cap, self._template_count + 1, sizeof(_GenTemplate))
        self._keep.append((head, tail, body))
        cdef _GenTemplate *t = &self._templates[self._template_count]
        t.code = code
        t.serialize_type = serialize_type
        t.head, t.head_len = PyBytes_AS_STRING(head), len(head)
        t.tail, t.tail_len = PyBytes_AS_STRING(tail), len(tail)
        t.body, t.body_len = PyBytes_AS_STRING(body), len(body)
        self._template_count += 1
        return self._template_count - 1

    def connect(self, int fd):
        _gen_reserve(<void **>&self._conns, &self._conn_cap, self._conn_count + 1, sizeof(_GenConn))
        cdef _GenConn *conn = &self._conns[self._conn_count]
        memset(conn, 0, sizeof(_GenConn))
        conn.fd = fd
        conn.alive = True
        conn.next_opaque = 1
        conn.slot_opaque = <int32_t *>malloc(GEN_PENDING_SLOTS * sizeof(int32_t))
        conn.slot_intended = <int64_t *>malloc(GEN_PENDING_SLOTS * sizeof(int64_t))
        conn.slot_code = <int32_t *>malloc(GEN_PENDING_SLOTS * sizeof(int32_t))
        if conn.slot_opaque == NULL or conn.slot_intended == NULL or conn.slot_code == NULL:
            self._free_conn(conn)
            raise MemoryError()
        memset(conn.slot_opaque, 0, GEN_PENDING_SLOTS * sizeof(int32_t))
        self._conn_count += 1
        return self._conn_count - 1

    cdef _GenConn *_conn(self, long long conn) except NULL:
        if not 0 <= conn < self._conn_count:
            raise ValueError(f"unknown connection {conn}")
        return &self._conns[conn]

    def drop(self, long long conn):
        cdef _GenConn *c = self._conn(conn)
        cdef Py_ssize_t pending = self._abandon(c)
        c.alive = False
        c.out_len = 0
        c.in_len = 0
        c.refill_len = 0
        return pending

    def alive(self, long long conn):
        return bool(self._conn(conn).alive)

    # ---- what to send
    def schedule(self, intended_ns, templates, connections):
        cdef Py_buffer at_view, template_view, conn_view
        cdef const int64_t *at
        cdef const int32_t *chosen
        cdef const int32_t *on
        cdef Py_ssize_t count, i
        cdef int64_t last
        cdef bint has_last = self._due_next < self._due_len
        PyObject_GetBuffer(intended_ns, &at_view, PyBUF_SIMPLE)
        try:
            PyObject_GetBuffer(templates, &template_view, PyBUF_SIMPLE)
            try:
                PyObject_GetBuffer(connections, &conn_view, PyBUF_SIMPLE)
                try:
                    count = at_view.len // 8
                    if (at_view.len % 8 or template_view.len != count * 4 or conn_view.len != count * 4):
                        raise ValueError("schedule: one template and one connection per intended time")
                    at, chosen, on = <const int64_t *>at_view.buf, <const int32_t *>template_view.buf, \
                        <const int32_t *>conn_view.buf
                    last = self._due_at[self._due_len - 1] if has_last else 0
                    for i in range(count):
                        if not 0 <= chosen[i] < self._template_count or not 0 <= on[i] < self._conn_count:
                            raise ValueError("schedule: unknown template or connection")
                        if has_last and at[i] < last:
                            raise ValueError("schedule: intended times must not decrease")
                        last, has_last = at[i], True
                    if self._due_next:
                        self._due_len -= self._due_next
                        memmove(self._due_at, self._due_at + self._due_next, self._due_len * 8)
                        memmove(self._due_template, self._due_template + self._due_next, self._due_len * 4)
                        memmove(self._due_conn, self._due_conn + self._due_next, self._due_len * 4)
                        self._due_next = 0
                    i = self._due_cap
                    _gen_reserve(<void **>&self._due_at, &i, self._due_len + count, 8)
                    i = self._due_cap
                    _gen_reserve(<void **>&self._due_template, &i, self._due_len + count, 4)
                    _gen_reserve(<void **>&self._due_conn, &self._due_cap, self._due_len + count, 4)
                    memcpy(self._due_at + self._due_len, at, count * 8)
                    memcpy(self._due_template + self._due_len, chosen, count * 4)
                    memcpy(self._due_conn + self._due_len, on, count * 4)
                    self._due_len += count
                finally:
                    PyBuffer_Release(&conn_view)
            finally:
                PyBuffer_Release(&template_view)
        finally:
            PyBuffer_Release(&at_view)

    def cancel(self, long long after_ns):
        cdef Py_ssize_t keep = self._due_next, dropped
        while keep < self._due_len and self._due_at[keep] < after_ns:
            keep += 1
        dropped = self._due_len - keep
        self._due_len = keep
        return dropped

    @property
    def scheduled(self):
        return self._due_len - self._due_next

    def next_due_ns(self):
        return self._due_at[self._due_next] if self._due_next < self._due_len else None

    def refill(self, long long conn, templates, long long in_flight, long long now_ns, long long stop_ns):
        cdef _GenConn *c = self._conn(conn)
        cdef Py_buffer view
        cdef Py_ssize_t count, i
        cdef const int32_t *cycle
        PyObject_GetBuffer(templates, &view, PyBUF_SIMPLE)
        try:
            count = view.len // 4
            cycle = <const int32_t *>view.buf
            if view.len % 4 or not count or in_flight < 1:
                raise ValueError("refill: a non-empty cycle of known templates and at least one in flight")
            for i in range(count):
                if not 0 <= cycle[i] < self._template_count:
                    raise ValueError("refill: a non-empty cycle of known templates and at least one in flight")
            free(c.refill)
            c.refill = <int32_t *>malloc(count * 4)
            if c.refill == NULL:
                c.refill_len = 0
                raise MemoryError()
            memcpy(c.refill, cycle, count * 4)
        finally:
            PyBuffer_Release(&view)
        c.refill_len, c.refill_next, c.refill_stop = count, 0, stop_ns
        for i in range(in_flight):
            self._refill_one(c, now_ns)

    # ---- the loop's steps
    def send_due(self, long long now_ns):
        return self._send_due(now_ns)

    cdef Py_ssize_t _send_due(self, int64_t now_ns) except -1:
        cdef Py_ssize_t count = 0
        while self._due_next < self._due_len and self._due_at[self._due_next] <= now_ns:
            self._send(&self._conns[self._due_conn[self._due_next]], self._due_template[self._due_next],
                       self._due_at[self._due_next], now_ns)
            self._due_next += 1
            count += 1
        return count

    def feed(self, long long conn, data, long long arrived_ns):
        cdef _GenConn *c = self._conn(conn)
        cdef Py_buffer view
        if not c.alive:
            return False
        PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
        try:
            _gen_reserve(<void **>&c.inbox, &c.in_cap, c.in_len + view.len, 1)
            memcpy(c.inbox + c.in_len, view.buf, view.len)
            c.in_len += view.len
        finally:
            PyBuffer_Release(&view)
        return self._parse(c, arrived_ns)

    def outgoing(self, long long conn):
        cdef _GenConn *c = self._conn(conn)
        cdef bytes data = PyBytes_FromStringAndSize(<const char *>c.out, c.out_len) if c.out_len else b""
        c.out_len = 0
        return data

    def pending_of(self, long long conn):
        return self._conn(conn).pending

    @property
    def pending(self):
        cdef Py_ssize_t total = 0, c
        for c in range(self._conn_count):
            total += self._conns[c].pending
        return total

    def take(self):
        cdef bytes histograms = PyBytes_FromStringAndSize(<const char *>self._hist, self._hist_len * 8) \
            if self._hist_len else b""
        cdef bytes responses = PyBytes_FromStringAndSize(<const char *>self._resp, self._resp_len * 8) \
            if self._resp_len else b""
        self._hist_len = self._resp_len = 0
        return histograms, responses

    # ---- the loop
    def pump(self, long long until_ns):
        cdef int64_t wake
        cdef Py_ssize_t c, polled
        cdef _GenConn *conn
        cdef timespec timeout
        cdef int ready
        while True:
            self._send_due(_gen_now())
            _gen_reserve(<void **>&self._polled, &self._polled_cap, self._conn_count, sizeof(pollfd))
            _gen_reserve(<void **>&self._polled_conn, &self._polled_conn_cap, self._conn_count, 4)
            polled = 0
            for c in range(self._conn_count):
                conn = &self._conns[c]
                if conn.alive and conn.fd >= 0:
                    if conn.out_len:
                        self._write(conn)
                    if conn.alive:
                        self._polled[polled].fd = conn.fd
                        self._polled[polled].events = POLLIN | (POLLOUT if conn.out_len else 0)
                        self._polled[polled].revents = 0
                        self._polled_conn[polled] = <int32_t>c
                        polled += 1
            wake = until_ns
            if self._due_next < self._due_len and self._due_at[self._due_next] < wake:
                wake = self._due_at[self._due_next]
            wake -= _gen_now()
            if wake < 0:
                wake = 0
            timeout.tv_sec = wake // 1000000000
            timeout.tv_nsec = wake % 1000000000
            with nogil:
                ready = ppoll(self._polled, <unsigned long>polled, &timeout, NULL)
            if ready < 0:
                if errno == EINTR:
                    continue
                raise OSError(errno, "ppoll failed")
            for c in range(polled):
                if not self._polled[c].revents:
                    continue
                conn = &self._conns[self._polled_conn[c]]
                if self._polled[c].revents & (POLLIN | POLLHUP | POLLERR):
                    self._read(conn)
                if conn.alive and conn.out_len and self._polled[c].revents & POLLOUT:
                    self._write(conn)
            if _gen_now() >= until_ns:
                return

    cdef int _read(self, _GenConn *conn) except -1:
        cdef Py_ssize_t got
        cdef int attempt
        for attempt in range(GEN_READS_PER_WAKE):
            _gen_reserve(<void **>&conn.inbox, &conn.in_cap, conn.in_len + GEN_READ_BYTES, 1)
            got = _os_read(conn.fd, conn.inbox + conn.in_len, GEN_READ_BYTES)
            if got < 0:
                if errno != EAGAIN:  # Linux: EWOULDBLOCK is EAGAIN
                    self._lose(conn)
                return 0
            if got == 0:
                self._lose(conn)
                return 0
            conn.in_len += got
            if not self._parse(conn, _gen_now()):
                return 0
        return 0

    cdef int _write(self, _GenConn *conn) except -1:
        cdef Py_ssize_t written = _os_write(conn.fd, conn.out, conn.out_len)
        if written < 0:
            if errno != EAGAIN:  # Linux: EWOULDBLOCK is EAGAIN
                self._lose(conn)
            return 0
        conn.out_len -= written
        if conn.out_len:
            memmove(conn.out, conn.out + written, conn.out_len)
        return 0

    # ---- helpers
    cdef inline int64_t _interval(self, int64_t intended_ns) noexcept:
        if intended_ns < self.measure_start_ns:
            return -1
        return (intended_ns - self.measure_start_ns) // self._interval_ns

    cdef int _record(self, int64_t metric, int64_t code, int64_t interval, int64_t start_ns,
                     int64_t end_ns) except -1:
        cdef int64_t value = (end_ns - start_ns) // 1000 if end_ns >= start_ns else 0
        cdef int64_t bucket, index
        if value > self._highest:
            value = self._highest
        bucket = (64 - __builtin_clzll(<unsigned long long>value | self._mask)) - self._unit - (self._half + 1)
        index = ((bucket + 1) << self._half) + ((value >> (bucket + self._unit)) - (<int64_t>1 << self._half))
        _gen_reserve(<void **>&self._hist, &self._hist_cap, self._hist_len + 1, 8)
        self._hist[self._hist_len] = (((metric << 16 | code) << 20 | (interval & 0xFFFFF)) << 16) | index
        self._hist_len += 1
        return 0

    cdef int _respond(self, int64_t interval, int64_t code, int64_t response) except -1:
        _gen_reserve(<void **>&self._resp, &self._resp_cap, self._resp_len + 1, 8)
        self._resp[self._resp_len] = ((interval + 1) << 16 | code) << 16 | ((response + 1) & 0xFFFF)
        self._resp_len += 1
        return 0

    cdef int _send(self, _GenConn *conn, int32_t template, int64_t intended_ns, int64_t now_ns) except -1:
        cdef _GenTemplate *t = &self._templates[template]
        cdef int64_t interval = self._interval(intended_ns)
        cdef int32_t opaque, slot
        cdef char digits[16]
        cdef Py_ssize_t digits_len, header_len
        cdef unsigned char *out
        self.sent += 1
        if interval >= 0:
            self._record(1, t.code, interval, intended_ns, now_ns)
        if not conn.alive:
            self._respond(interval, t.code, -1)
            return 0
        opaque = conn.next_opaque
        conn.next_opaque = 1 if opaque == 0x7FFFFFFF else opaque + 1
        slot = opaque & (GEN_PENDING_SLOTS - 1)
        if conn.slot_opaque[slot]:
            self._respond(self._interval(conn.slot_intended[slot]), conn.slot_code[slot], -1)
            conn.pending -= 1
        conn.slot_opaque[slot] = opaque
        conn.slot_intended[slot] = intended_ns
        conn.slot_code[slot] = t.code
        conn.pending += 1
        if t.serialize_type == 1:
            digits_len = 4
            _write_i32(<unsigned char *>digits, opaque)
        else:
            digits_len = _write_decimal(digits, opaque)
        header_len = t.head_len + digits_len + t.tail_len
        _gen_reserve(<void **>&conn.out, &conn.out_cap, conn.out_len + 8 + header_len + t.body_len, 1)
        out = conn.out + conn.out_len
        out = _write_i32(out, <int32_t>(4 + header_len + t.body_len))
        out = _write_i32(out, <int32_t>((t.serialize_type << 24) | header_len))
        out = _write_bytes(out, t.head, t.head_len)
        out = _write_bytes(out, digits, digits_len)
        out = _write_bytes(out, t.tail, t.tail_len)
        _write_bytes(out, t.body, t.body_len)
        conn.out_len += 8 + header_len + t.body_len
        if conn.out_len > GEN_MAX_OUTPUT_BYTES:
            self._lose(conn)
        return 0

    cdef bint _parse(self, _GenConn *conn, int64_t arrived_ns) except -1:
        cdef const unsigned char *p = conn.inbox
        cdef Py_ssize_t pos = 0, size = conn.in_len
        cdef int32_t total, field, header_len
        cdef int serialize
        cdef int64_t code = 0, opaque = 0, flag = 0
        cdef bint found
        while size - pos >= 4:
            total = _read_i32(p + pos)
            if total < 4 or <int64_t>total + 4 > self._max_frame:
                self._lose(conn)
                return False
            if pos + 4 + total > size:
                break
            field = _read_i32(p + pos + 4)
            header_len = field & 0xFFFFFF
            if header_len > total - 4:
                self._lose(conn)
                return False
            serialize = (field >> 24) & 0xFF
            found = False
            if serialize == 1:
                if header_len >= 13:
                    code = _read_i16(p + pos + 8)
                    opaque = _read_i32(p + pos + 13)
                    flag = _read_i32(p + pos + 17)
                    found = True
            elif serialize == 0:
                found = _gen_json_fields(p + pos + 8, header_len, &code, &opaque, &flag)
            pos += 4 + total
            if found:
                self._answer(conn, code, opaque, flag, arrived_ns)
                if not conn.alive:
                    return True
        if pos:
            conn.in_len -= pos
            memmove(conn.inbox, conn.inbox + pos, conn.in_len)
        return True

    cdef int _answer(self, _GenConn *conn, int64_t code, int64_t opaque, int64_t flag,
                     int64_t arrived_ns) except -1:
        cdef int32_t slot
        cdef int64_t intended_ns, interval
        cdef int32_t request_code
        if not (flag & 1) and not self._echo_ok:
            return 0
        slot = <int32_t>(opaque & (GEN_PENDING_SLOTS - 1))
        if not conn.slot_opaque[slot] or conn.slot_opaque[slot] != opaque:
            return 0
        intended_ns, request_code = conn.slot_intended[slot], conn.slot_code[slot]
        conn.slot_opaque[slot] = 0
        conn.pending -= 1
        interval = self._interval(intended_ns)
        if interval >= 0:
            self._record(0, request_code, interval, intended_ns, arrived_ns)
        self._respond(interval, request_code, code if flag & 1 else 0)
        self.answered += 1
        if conn.refill_len and arrived_ns < conn.refill_stop:
            self._refill_one(conn, arrived_ns)
        return 0

    cdef int _refill_one(self, _GenConn *conn, int64_t now_ns) except -1:
        cdef int32_t template = conn.refill[conn.refill_next]
        conn.refill_next = (conn.refill_next + 1) % conn.refill_len
        return self._send(conn, template, now_ns, now_ns)

    cdef Py_ssize_t _abandon(self, _GenConn *conn) except -1:
        cdef Py_ssize_t slot, count = 0
        for slot in range(GEN_PENDING_SLOTS):
            if conn.slot_opaque[slot]:
                self._respond(self._interval(conn.slot_intended[slot]), conn.slot_code[slot], -1)
                conn.slot_opaque[slot] = 0
                count += 1
        conn.pending = 0
        return count

    cdef int _lose(self, _GenConn *conn) except -1:
        self._abandon(conn)
        conn.alive = False
        conn.out_len = 0
        conn.in_len = 0
        return 0
