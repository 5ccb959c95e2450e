# Twin of namesrv/fastpath/registration.py: registration bodies read straight to the route
# table's queue fields, only their changed topic entries read.

cdef inline bint _is_int32(object value) except -1:
    """A JSON integer (exactly int, so never bool) within int32."""
    cdef int overflow = 0
    cdef long long number
    if type(value) is not int:
        return False
    number = PyLong_AsLongLongAndOverflow(value, &overflow)
    return overflow == 0 and -2147483648 <= number <= 2147483647


# Twin of `_plain_queue_fields` in namesrv/fastpath/registration.py: the one definition of a "plain" topic
# entry, given its fields as `dict.get` reads them (None when absent).
cdef tuple _plain_fields(object topic, object read, object write, object perm, object sys_flag,
                         object filter_type, object order, object attributes):
    if (type(topic) is str and PyUnicode_GET_LENGTH(topic) > 0 and _is_int32(read) and _is_int32(write)
            and _is_int32(perm) and _is_int32(sys_flag) and (order is True or order is False)
            and type(filter_type) is str and (filter_type == "SINGLE_TAG" or filter_type == "MULTI_TAG")
            and (attributes is None or type(attributes) is dict)):
        return (topic, read, write, perm, sys_flag)
    return None


cdef tuple _plain_entry(object obj):
    """`_plain_fields` of a parsed entry; None for anything but a plain one."""
    if type(obj) is not dict:
        return None
    cdef dict entry = <dict>obj
    return _plain_fields(entry.get("topicName"), entry.get("readQueueNums"), entry.get("writeQueueNums"),
                         entry.get("perm"), entry.get("topicSysFlag"), entry.get("topicFilterType"),
                         entry.get("order"), entry.get("attributes"))


def queue_fields(dict table not None, fallback):
    """A parsed topicConfigTable as the route table reads it; see `namesrv.fastpath.registration.queue_fields`."""
    cdef dict out = table.copy()  # a clone of the hash table: cheaper than inserting key by key
    cdef tuple fields
    for key, obj in table.items():
        if type(obj) is not tuple:  # a tuple was read by scan_registration already
            fields = _plain_entry(obj)
            out[key] = fallback(obj, key) if fields is None else fields
    return out



# ---------------------------------------------------------------------------------------------
# scan_registration: strict JSON straight to Python objects, plain topic entries straight to tuples.
#
# A recursive-descent parser over the raw bytes. It must never answer differently from
# `orjson.loads` + the transform (`namesrv.fastpath.registration.scan_registration`), so whatever it does not
# handle exactly as orjson does (floats, integers beyond 64 bits, nesting deeper than
# JSON_MAX_DEPTH) and every syntax error raise _NotForMe, and scan_registration answers None: the
# caller's lenient parser then decides. Every read is bounds-checked against the buffer.
# ---------------------------------------------------------------------------------------------

class _NotForMe(Exception):
    """Inside the scanner: input left to the caller's parser (invalid, or beyond what it handles)."""


cdef enum:
    JSON_MAX_DEPTH = 128          # registrations nest 4 deep; deeper input goes to orjson
    ESCAPE_STACK_BYTES = 256      # unescaped strings up to this size decode without an allocation
    STR_ESCAPED = 1               # flags of a scanned string
    STR_NON_ASCII = 2


cdef enum:  # the members of a topic entry the plain check reads (an "entry field"), alphabetically
    F_OTHER, F_ATTRIBUTES, F_ORDER, F_PERM, F_READ, F_FILTER_TYPE, F_TOPIC_NAME, F_SYS_FLAG, F_WRITE


cdef extern from *:
    """
    #include <stdint.h>
    #include <string.h>
    /* How many bytes from p (of n) are plain string content, needing no look: ASCII, not '"', not
       '\\', not a control character. Eight at a time: a byte test set on a whole word is exact in
       its lowest hit, so on little-endian machines the count is exact; elsewhere it stops at the
       word holding the first hit, which is only slower. */
    static inline Py_ssize_t namesrv_plain_run(const unsigned char *p, Py_ssize_t n) {
        const uint64_t ones = 0x0101010101010101ULL, highs = 0x8080808080808080ULL;
        Py_ssize_t i = 0;
        for (; n - i >= 8; i += 8) {
            uint64_t w, quote, backslash, hit;
            memcpy(&w, p + i, 8);
            quote = w ^ (ones * 0x22);
            backslash = w ^ (ones * 0x5C);
            hit = (((quote - ones) & ~quote) | ((backslash - ones) & ~backslash) | ((w - ones * 0x20) & ~w) | w)
                  & highs;
            if (hit) {
    #if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
                return i + (__builtin_ctzll(hit) >> 3);
    #else
                return i;
    #endif
            }
        }
        return i;
    }
    /* a[0:n] == b[0:n], inlined (short keys: a libc memcmp call costs more than the compare).
       Whole words, the last one overlapping the one before, so no byte loop below 4 bytes. */
    static inline int namesrv_same(const unsigned char *a, const unsigned char *b, Py_ssize_t n) {
        uint64_t x, y;
        uint32_t u, v;
        if (n >= 8) {
            for (; n > 8; a += 8, b += 8, n -= 8) {
                memcpy(&x, a, 8);
                memcpy(&y, b, 8);
                if (x != y) return 0;
            }
            memcpy(&x, a + n - 8, 8);
            memcpy(&y, b + n - 8, 8);
            return x == y;
        }
        if (n >= 4) {
            memcpy(&u, a, 4);
            memcpy(&v, b, 4);
            if (u != v) return 0;
            memcpy(&u, a + n - 4, 4);
            memcpy(&v, b + n - 4, 4);
            return u == v;
        }
        for (; n > 0; a++, b++, n--) {
            if (*a != *b) return 0;
        }
        return 1;
    }
    """
    Py_ssize_t _plain_run "namesrv_plain_run" (const unsigned char *p, Py_ssize_t n) nogil
    bint _same "namesrv_same" (const unsigned char *a, const unsigned char *b, Py_ssize_t n) nogil


cdef extern from *:
    """
    #include <stdint.h>
    /* A set of 64-bit values (never 0): an open-addressing table of 2**k slots (0: empty), probed
       linearly, at most three quarters full. */
    static inline Py_ssize_t namesrv_set_slots(Py_ssize_t n) {
        Py_ssize_t slots = 8;
        while (slots / 4 * 3 < n) slots *= 2;
        return slots;
    }
    /* Add `value` to the set of `count` slots; 0 if it was there already. */
    static inline int namesrv_set_add(uint64_t *slots, Py_ssize_t count, uint64_t value) {
        Py_ssize_t i = (Py_ssize_t)(value & (uint64_t)(count - 1));
        while (slots[i]) {
            if (slots[i] == value) return 0;
            i = (i + 1) & (count - 1);
        }
        slots[i] = value;
        return 1;
    }
    """
    Py_ssize_t _set_slots "namesrv_set_slots" (Py_ssize_t n) nogil
    bint _set_add "namesrv_set_add" (uint64_t *slots, Py_ssize_t count, uint64_t value) nogil


cdef struct _Entry:
    # What scan_registration remembers of a topic entry, in table order (16 bytes: a broker of
    # 10,000 topics costs 160 KB): the digest of its bytes (key to closing brace), and in one
    # word its key digest's top 40 bits (to find a repeated key) and its length (0 if past 24 bits:
    # never stepped over). A run of RUN_ENTRIES entries is remembered in the same layout: the
    # digest of its bytes (first key to last closing brace) and their length (both 0 when one of
    # its entries is never stepped over, and so neither is the run); the runs follow the entries.
    uint64_t digest
    uint64_t key_length


cdef enum:
    ENTRY_LENGTH_BITS = 24
    RUN_ENTRIES = 16    # see namesrv.fastpath.registration.RUN_ENTRIES


cdef struct _Facts:
    # What the topic entries `_prescan` read hold (QueueFacts): how many, which ASCII bytes their
    # topic names hold (bit b % 64 of word b // 64), the names' shortest and longest lengths, the
    # fewest and most read or write queues, and their perms or-ed together.
    Py_ssize_t count
    uint64_t name_bytes[2]
    Py_ssize_t shortest
    Py_ssize_t longest
    long fewest
    long most
    long perm_bits


cdef struct _Digests:
    const _Entry *previous      # the previous registration's entries, in its table order
    Py_ssize_t previous_count
    const _Entry *previous_runs # ... and its runs
    Py_ssize_t previous_run_count
    _Entry *entries             # this table's entries, in order (grown as they are read)
    Py_ssize_t count
    Py_ssize_t capacity
    _Entry *runs                # ... and its runs, each noted when its last entry is
    Py_ssize_t run_count
    Py_ssize_t run_capacity
    Py_ssize_t run_start        # the run being noted: where its first entry starts,
    Py_ssize_t run_end          # where its last entry noted so far ends,
    bint run_steppable          # whether every entry of it may be stepped over,
    Py_ssize_t run_copied       # and the previous run it was stepped over as (-1: none)
    Py_ssize_t omitted
    int tables          # topic tables reached: a repeated table key would make the entries ambiguous
    bint escaped_key    # a key with escapes has more than one spelling: digests cannot tell keys apart
    _Facts facts        # of the topic entries read (by the pre-scan, and by `_table`)
    bint facts_cover    # ... which were all the entries read


cdef inline uint64_t _key_length_word(const unsigned char *key, Py_ssize_t key_length, Py_ssize_t span) noexcept nogil:
    """`_Entry.key_length` of a member whose key content is key[0:key_length] and whose bytes
    (key to closing brace) are `span` long."""
    return ((_digest(key, key_length) >> ENTRY_LENGTH_BITS << ENTRY_LENGTH_BITS)
            | (<uint64_t>span if span < (1 << ENTRY_LENGTH_BITS) else 0))


cdef inline Py_ssize_t _unchanged_span(const _Entry *before, const unsigned char *p, Py_ssize_t pos,
                                       Py_ssize_t end) noexcept nogil:
    """The length of the member at p[pos] when its bytes are those of `before` (the previous
    registration's entry at its place), else 0."""
    cdef Py_ssize_t span = <Py_ssize_t>(before.key_length & ((1 << ENTRY_LENGTH_BITS) - 1))
    if 0 < span <= end - pos and _digest(p + pos, span) == before.digest:
        return span
    return 0


cdef inline Py_ssize_t _unchanged_run_span(const _Digests *d, Py_ssize_t index, const unsigned char *p,
                                           Py_ssize_t pos, Py_ssize_t end) noexcept nogil:
    """The length of the run of entries from the member at p[pos] (entry `index`) when it starts a
    run and its bytes are those of the previous registration's run at its place, else 0."""
    cdef const _Entry *before
    if index % RUN_ENTRIES or index // RUN_ENTRIES >= d.previous_run_count:
        return 0
    before = d.previous_runs + index // RUN_ENTRIES
    if 0 < before.key_length <= <uint64_t>(end - pos) and _digest(p + pos, before.key_length) == before.digest:
        return <Py_ssize_t>before.key_length
    return 0


cdef Py_ssize_t _entry_count(Py_ssize_t records) noexcept:
    """How many entries `records` records (the entries', then their runs') stand for; -1 if no count fits."""
    cdef Py_ssize_t count = records - (records + RUN_ENTRIES) // (RUN_ENTRIES + 1)
    return count if count + (count + RUN_ENTRIES - 1) // RUN_ENTRIES == records else -1


cdef int _note_member(_Digests *d, const unsigned char *p, uint64_t digest, uint64_t key_length, Py_ssize_t start,
                      Py_ssize_t end) except -1:
    """Note the entry p[start:end] (key to closing brace), and the run it closes if it closes one."""
    if d.count % RUN_ENTRIES == 0:
        d.run_start = start
        d.run_steppable = True
        d.run_copied = -1
    _note_entry(d, digest, key_length)
    d.run_end = end
    if key_length & ((1 << ENTRY_LENGTH_BITS) - 1) == 0:
        d.run_steppable = False
    if d.count % RUN_ENTRIES == 0:
        _note_run(d, p)
    return 0


cdef Py_ssize_t _note_unchanged_run(_Digests *d, const unsigned char *p, Py_ssize_t first, Py_ssize_t start,
                                    Py_ssize_t span) except -1:
    """Note the previous registration's run from entry `first`, found unchanged at p[start]; how
    many entries it holds."""
    cdef Py_ssize_t index, last = min(first + RUN_ENTRIES, d.previous_count)
    for index in range(first, last):
        _note_entry(d, d.previous[index].digest, d.previous[index].key_length)
    d.omitted += last - first
    d.run_start = start
    d.run_end = start + span
    d.run_steppable = True
    d.run_copied = first // RUN_ENTRIES
    if d.count % RUN_ENTRIES == 0:
        _note_run(d, p)
    return last - first


cdef int _note_run(_Digests *d, const unsigned char *p) except -1:
    """Note the run the last entry noted closes (RUN_ENTRIES of them, or the table's last)."""
    cdef Py_ssize_t capacity, run = (d.count - 1) // RUN_ENTRIES
    cdef _Entry *grown
    cdef _Entry *noted
    if d.run_count == d.run_capacity:
        capacity = 8 if d.run_capacity == 0 else 2 * d.run_capacity
        grown = <_Entry *>PyMem_Realloc(d.runs, capacity * sizeof(_Entry))
        if grown == NULL:
            raise MemoryError()
        d.runs = grown
        d.run_capacity = capacity
    noted = d.runs + d.run_count
    d.run_count += 1
    if d.run_copied == run and <uint64_t>(d.run_end - d.run_start) == d.previous_runs[run].key_length:
        noted[0] = d.previous_runs[run]  # the same bytes: no need to digest them again
    elif d.run_steppable:
        noted.digest = _digest(p + d.run_start, d.run_end - d.run_start)
        noted.key_length = <uint64_t>(d.run_end - d.run_start)
    else:
        noted.digest = 0
        noted.key_length = 0
    return 0


cdef struct _Json:
    const unsigned char *p
    Py_ssize_t pos
    Py_ssize_t end
    _Digests *digests   # NULL unless scan_registration asked for them


#: What each simple escape (`\n` ...) stands for; 0 for a byte that is no simple escape.
cdef unsigned char _SIMPLE_ESCAPE[256]
#: Each hex digit's value, -1 for every other byte.
cdef signed char _HEX[256]


#: Each entry field's member name as it starts a member, `"name":`, and its length. Brokers write
#: them in alphabetical order (fastjson's and orjson's sorted output), so after one member the
#: scanner first tries the next name with a single compare, before it scans a key in full.
cdef const char *_ENTRY_KEY[9]
cdef Py_ssize_t _ENTRY_KEY_LENGTH[9]


cdef void _init_tables() noexcept:
    cdef int c
    _ENTRY_KEY[F_OTHER] = b""
    _ENTRY_KEY[F_ATTRIBUTES] = b'"attributes":'
    _ENTRY_KEY[F_ORDER] = b'"order":'
    _ENTRY_KEY[F_PERM] = b'"perm":'
    _ENTRY_KEY[F_READ] = b'"readQueueNums":'
    _ENTRY_KEY[F_FILTER_TYPE] = b'"topicFilterType":'
    _ENTRY_KEY[F_TOPIC_NAME] = b'"topicName":'
    _ENTRY_KEY[F_SYS_FLAG] = b'"topicSysFlag":'
    _ENTRY_KEY[F_WRITE] = b'"writeQueueNums":'
    for c in range(9):
        _ENTRY_KEY_LENGTH[c] = strlen(_ENTRY_KEY[c])
    for c in range(256):
        _SIMPLE_ESCAPE[c] = 0
        _HEX[c] = -1
    for c in range(10):
        _HEX[48 + c] = c
    for c in range(6):
        _HEX[97 + c] = 10 + c
        _HEX[65 + c] = 10 + c
    _SIMPLE_ESCAPE[34] = 34     # \"
    _SIMPLE_ESCAPE[92] = 92     # \\
    _SIMPLE_ESCAPE[47] = 47     # \/
    _SIMPLE_ESCAPE[98] = 8      # \b
    _SIMPLE_ESCAPE[102] = 12    # \f
    _SIMPLE_ESCAPE[110] = 10    # \n
    _SIMPLE_ESCAPE[114] = 13    # \r
    _SIMPLE_ESCAPE[116] = 9     # \t


_init_tables()

#: Stands in for a plain entry's `attributes` object, which was only syntax-checked: the tuple
#: drops it, and the plain check asks only that it be a dict.
cdef dict _SKIPPED_OBJECT = {}


cdef inline void _skip_ws(_Json *j) noexcept nogil:
    cdef Py_ssize_t pos = j.pos
    cdef unsigned char c
    if pos < j.end and j.p[pos] > 32:  # compact JSON, as brokers send it: nothing to skip
        return
    while pos < j.end:
        c = j.p[pos]
        if c != 32 and c != 10 and c != 13 and c != 9:
            break
        pos += 1
    j.pos = pos


cdef inline unsigned char _peek(_Json *j) noexcept nogil:
    """The byte at the cursor; 0 at the end (never a valid token start outside strings)."""
    return j.p[j.pos] if j.pos < j.end else 0


cdef inline bint _opened_empty(_Json *j, int depth, unsigned char close) except -1:
    """Past an opening bracket at `depth`: True if the container closes at once (consumed)."""
    if depth > JSON_MAX_DEPTH:
        raise _NotForMe
    j.pos += 1
    _skip_ws(j)
    if _peek(j) == close:
        j.pos += 1
        return True
    return False


cdef inline bint _more(_Json *j, unsigned char close) except -1:
    """After a member or element: True past a ',' (another follows), False past `close` (the end)."""
    _skip_ws(j)
    if _peek(j) == 44:
        j.pos += 1
        _skip_ws(j)
        return True
    if _peek(j) == close:
        j.pos += 1
        return False
    raise _NotForMe


cdef inline int _expect(_Json *j, unsigned char c) except -1:
    """Skip whitespace, the byte `c`, and whitespace again."""
    _skip_ws(j)
    if _peek(j) != c:
        raise _NotForMe
    j.pos += 1
    _skip_ws(j)
    return 0


cdef inline int _literal(_Json *j, const char *word, Py_ssize_t length) except -1:
    if j.end - j.pos < length or not _same(j.p + j.pos, <const unsigned char *>word, length):
        raise _NotForMe
    j.pos += length
    return 0


cdef inline int _string_span(_Json *j, Py_ssize_t *start, Py_ssize_t *length) except -1:
    """At an opening quote: move past the closing one; the content's span and its STR_* flags."""
    cdef const unsigned char *p = j.p
    cdef Py_ssize_t pos = j.pos + 1
    cdef unsigned char c
    cdef int flags = 0
    start[0] = pos
    while True:
        pos += _plain_run(p + pos, j.end - pos)
        if pos >= j.end:
            raise _NotForMe  # unterminated
        c = p[pos]
        if c == 34:
            length[0] = pos - start[0]
            j.pos = pos + 1
            return flags
        if c == 92:
            flags |= STR_ESCAPED
            pos += 2  # the escape's own byte is checked when it is decoded
        elif c < 0x20:
            raise _NotForMe  # a raw control character
        else:
            flags |= STR_NON_ASCII
            pos += 1


cdef inline int _hex4(const unsigned char *p) noexcept nogil:
    """The value of 4 hex digits, or -1."""
    cdef int a = _HEX[p[0]], b = _HEX[p[1]], c = _HEX[p[2]], d = _HEX[p[3]]
    if a < 0 or b < 0 or c < 0 or d < 0:
        return -1
    return (a << 12) | (b << 8) | (c << 4) | d


cdef inline Py_ssize_t _put_utf8(char *out, int code) noexcept nogil:
    if code < 0x80:
        out[0] = <char>code
        return 1
    if code < 0x800:
        out[0] = <char>(0xC0 | (code >> 6))
        out[1] = <char>(0x80 | (code & 0x3F))
        return 2
    if code < 0x10000:
        out[0] = <char>(0xE0 | (code >> 12))
        out[1] = <char>(0x80 | ((code >> 6) & 0x3F))
        out[2] = <char>(0x80 | (code & 0x3F))
        return 3
    out[0] = <char>(0xF0 | (code >> 18))
    out[1] = <char>(0x80 | ((code >> 12) & 0x3F))
    out[2] = <char>(0x80 | ((code >> 6) & 0x3F))
    out[3] = <char>(0x80 | (code & 0x3F))
    return 4


cdef object _unescape_into(const unsigned char *s, Py_ssize_t n, char *buf):
    """Decode string content with escapes into `buf` (n bytes suffice: no escape grows), then
    from UTF-8. As orjson: the 8 simple escapes, \\uXXXX in either case, surrogates only in pairs."""
    cdef Py_ssize_t i = 0, out = 0
    cdef unsigned char c
    cdef int code, low
    while i < n:
        c = s[i]
        if c != 92:
            buf[out] = <char>c
            out += 1
            i += 1
            continue
        if n - i < 2:
            raise _NotForMe
        c = s[i + 1]
        i += 2
        if c != 117:  # not \u
            if _SIMPLE_ESCAPE[c] == 0:
                raise _NotForMe
            buf[out] = <char>_SIMPLE_ESCAPE[c]
            out += 1
            continue
        if n - i < 4:
            raise _NotForMe
        code = _hex4(s + i)
        i += 4
        if code < 0 or 0xDC00 <= code <= 0xDFFF:
            raise _NotForMe  # not hex, or a low surrogate first
        if 0xD800 <= code <= 0xDBFF:
            if n - i < 6 or s[i] != 92 or s[i + 1] != 117:
                raise _NotForMe  # a high surrogate alone
            low = _hex4(s + i + 2)
            if low < 0xDC00 or low > 0xDFFF:
                raise _NotForMe
            i += 6
            code = 0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00)
        out += _put_utf8(buf + out, code)
    return PyUnicode_DecodeUTF8(buf, out, "strict")


cdef object _unescape(const unsigned char *s, Py_ssize_t n):
    cdef char stack[ESCAPE_STACK_BYTES]
    cdef char *buf = stack
    stack[0] = 0  # all that is read is written first; this tells the C compiler so
    if n > ESCAPE_STACK_BYTES:
        buf = <char *>PyMem_Malloc(n)
        if buf == NULL:
            raise MemoryError()
    try:
        return _unescape_into(s, n, buf)
    finally:
        if buf != stack:
            PyMem_Free(buf)


cdef inline object _string_object(const unsigned char *s, Py_ssize_t n, int flags):
    """The str of scanned content (invalid UTF-8 raises UnicodeDecodeError, as orjson refuses it)."""
    if flags == 0:
        return _ascii_str(s, n)
    if flags == STR_NON_ASCII:
        return PyUnicode_DecodeUTF8(<const char *>s, n, "strict")
    return _unescape(s, n)


cdef object _string(_Json *j):
    cdef Py_ssize_t start, length
    cdef int flags = _string_span(j, &start, &length)
    return _string_object(j.p + start, length, flags)


cdef object _key(_Json *j):
    """An object key: short ASCII keys (field names, mostly) come from the shared key cache."""
    cdef Py_ssize_t start, length
    cdef int flags = _string_span(j, &start, &length)
    if flags == 0 and length <= KEY_CACHE_MAX_LEN:
        return _cached_ascii(j.p + start, length)
    return _string_object(j.p + start, length, flags)


cdef inline int _scan_number(_Json *j, uint64_t *magnitude, bint *negative) except -1:
    """An integer as orjson reads one (no leading zeros, no '+'); floats are not for this scanner."""
    cdef const unsigned char *p = j.p
    cdef Py_ssize_t pos = j.pos, first
    cdef uint64_t value = 0
    cdef unsigned int digit
    negative[0] = pos < j.end and p[pos] == 45  # '-'
    if negative[0]:
        pos += 1
    if pos >= j.end or not (48 <= p[pos] <= 57):
        raise _NotForMe
    if p[pos] == 48:
        pos += 1
        if pos < j.end and 48 <= p[pos] <= 57:
            raise _NotForMe  # a leading zero
    else:
        first = pos
        while pos < j.end and 48 <= p[pos] <= 57:
            digit = p[pos] - 48
            if pos - first >= 19 and value > (0xFFFFFFFFFFFFFFFFULL - digit) // 10:
                raise _NotForMe  # beyond 64 bits: orjson reads a float
            value = value * 10 + digit
            pos += 1
    if pos < j.end and (p[pos] == 46 or p[pos] == 101 or p[pos] == 69):  # '.', 'e', 'E'
        raise _NotForMe
    if negative[0] and value > 0x8000000000000000ULL:
        raise _NotForMe  # below int64: orjson reads a float
    magnitude[0] = value
    j.pos = pos
    return 0


cdef inline object _number(_Json *j):
    cdef uint64_t magnitude
    cdef bint negative
    _scan_number(j, &magnitude, &negative)
    if negative:
        return PyLong_FromLongLong(0) if magnitude == 0 else PyLong_FromLongLong(-<long long>(magnitude - 1) - 1)
    if magnitude <= 0x7FFFFFFFFFFFFFFFULL:
        return PyLong_FromLongLong(<long long>magnitude)
    return PyLong_FromUnsignedLongLong(magnitude)


cdef inline object _small_number(_Json *j):
    """`_number` for what topic entries hold: a non-negative integer of at most 9 digits is read
    by `_plain_number`; anything else (a sign, a longer one, a leading zero, a fraction) goes to
    `_number`."""
    cdef long value
    if _plain_number(j, &value):
        return PyLong_FromLong(value)
    return _number(j)


cdef object _value(_Json *j, int depth):
    """The value at the cursor; `depth` is the nesting of the container holding it."""
    cdef unsigned char c = _peek(j)
    if c == 34:
        return _string(j)
    if c == 123:
        return _object(j, depth + 1, None, 0, None)
    if c == 91:
        return _array(j, depth + 1)
    if c == 116:
        _literal(j, "true", 4)
        return True
    if c == 102:
        _literal(j, "false", 5)
        return False
    if c == 110:
        _literal(j, "null", 4)
        return None
    if c == 45 or 48 <= c <= 57:
        return _number(j)
    raise _NotForMe


cdef list _array(_Json *j, int depth):
    cdef list out = []
    if _opened_empty(j, depth, 93):
        return out
    while True:
        out.append(_value(j, depth))
        if not _more(j, 93):
            return out


cdef dict _object(_Json *j, int depth, tuple path, Py_ssize_t step, tuple read):
    """An object; when `path` is given, the member named path[step] is followed further (the
    last step is the topic table, unless `read` has it: (table, start, end) as `_table` read it
    before at start)."""
    cdef dict out = {}
    cdef object key, value
    if _opened_empty(j, depth, 125):
        return out
    while True:
        if _peek(j) != 34:
            raise _NotForMe
        key = _key(j)
        _expect(j, 58)
        if path is not None and _peek(j) == 123 and key == path[step]:
            if step + 1 != len(path):
                value = _object(j, depth + 1, path, step + 1, read)
            elif read is not None and j.pos == read[1]:
                value, j.pos = read[0], read[2]
            else:
                value = _table(j, depth + 1)
        else:
            value = _value(j, depth)
        out[key] = value  # a duplicate key keeps its first place and its last value, as in orjson
        if not _more(j, 125):
            return out


cdef struct _Plain:
    # A member of the topic table as `_prescan` read it without the interpreter lock: from its
    # key's quote (`start`) to past its value (`end`); stepped over as unchanged (`omitted`: alone,
    # or with the rest of its run when `run`), or an entry of the plain form with its key and topic
    # name spans, its fields and its `_Entry` words.
    Py_ssize_t start
    Py_ssize_t end
    bint omitted
    bint run
    Py_ssize_t key_start
    Py_ssize_t key_length
    Py_ssize_t topic_start
    Py_ssize_t topic_length
    long read
    long write
    long perm
    long sys_flag
    uint64_t digest
    uint64_t key_digest_length


cdef struct _Plains:
    _Plain *items
    Py_ssize_t count
    Py_ssize_t capacity
    _Facts facts


cdef enum:
    # The entry fields a plain entry must have (`attributes` may be absent).
    REQUIRED_FIELDS = ((1 << F_ORDER) | (1 << F_PERM) | (1 << F_READ) | (1 << F_FILTER_TYPE) | (1 << F_TOPIC_NAME)
                       | (1 << F_SYS_FLAG) | (1 << F_WRITE))


cdef dict _table(_Json *j, int depth):
    """The topic table: an object whose plain entries become queue-fields tuples.

    With digests asked for, every entry is noted (`_Entry`), and an entry whose bytes are those
    of the previous registration's entry at the same place is stepped over unread: the route
    table holds it already. Brokers list their topics in a stable order, so a registration that
    changed a few topics has only those read.

    In a large table the members are first read by `_prescan`, without the interpreter lock (a
    fleet's first registration then decodes on one core while the route table takes the previous
    body on the other); what is left here is making the objects. A member it did not read, and
    every one after it, is read here. A small table is read here in one pass: a second pass
    would cost more than the lock it frees.
    """
    cdef dict out = {}
    cdef object key, value
    cdef Py_ssize_t start, length, entry_start, span, index = 0, next_plain = 0
    cdef int flags
    cdef bint facts_cover = True
    cdef const _Entry *before
    cdef const _Plain *plain
    cdef _Digests *d = j.digests
    cdef _Plains plains
    if d != NULL:
        d.tables += 1
    if _opened_empty(j, depth, 125):
        return out
    memset(&plains, 0, sizeof(plains))
    if depth + 2 <= JSON_MAX_DEPTH and j.end - j.pos >= GIL_FREE_BYTES:  # attributes nest two deeper
        with nogil:
            _prescan(j[0], d, &plains)
        out = _PyDict_NewPresized(plains.count)  # not grown (and rehashed) a dozen times
    try:
        while True:
            if _peek(j) != 34:
                raise _NotForMe
            entry_start = j.pos
            if next_plain < plains.count and plains.items[next_plain].start == entry_start:
                plain = plains.items + next_plain
                next_plain += 1
                if plain.run:
                    index += _note_unchanged_run(d, j.p, index, entry_start, plain.end - entry_start) - 1
                elif plain.omitted:
                    before = d.previous + index
                    _note_member(d, j.p, before.digest, before.key_length, entry_start, plain.end)
                    d.omitted += 1
                else:
                    key = _ascii_str(j.p + plain.key_start, plain.key_length)
                    value = (key if plain.topic_length == plain.key_length
                             and _same(j.p + plain.topic_start, j.p + plain.key_start, plain.key_length)
                             else _ascii_str(j.p + plain.topic_start, plain.topic_length),
                             PyLong_FromLong(plain.read), PyLong_FromLong(plain.write),
                             PyLong_FromLong(plain.perm), PyLong_FromLong(plain.sys_flag))
                    # A str and four ints: no cycle. The collector would walk it once to learn that
                    # (a 10,000-topic table's tuples, a few young collections' work); untracked now.
                    PyObject_GC_UnTrack(value)
                    if d != NULL:
                        _note_member(d, j.p, plain.digest, plain.key_digest_length, entry_start, plain.end)
                    out[key] = value
                j.pos = plain.end
                index += 1
                if not _more(j, 125):
                    break
                continue
            if d != NULL and index < d.previous_count:
                span = _unchanged_run_span(d, index, j.p, entry_start, j.end)
                if span:
                    index += _note_unchanged_run(d, j.p, index, entry_start, span) - 1
                else:
                    before = d.previous + index
                    span = _unchanged_span(before, j.p, entry_start, j.end)
                    if span:
                        _note_member(d, j.p, before.digest, before.key_length, entry_start, entry_start + span)
                        d.omitted += 1
                if span:
                    j.pos = entry_start + span
                    index += 1
                    if not _more(j, 125):
                        break
                    continue
            flags = _string_span(j, &start, &length)
            key = _string_object(j.p + start, length, flags)  # topic names: too many for the key cache
            _expect(j, 58)
            if _peek(j) == 123:
                value = _entry(j, depth + 1, key if flags & STR_ESCAPED == 0 else None, start, length)
            else:
                value = _value(j, depth)
            if d != NULL:
                if facts_cover:
                    facts_cover = _note_read_facts(&plains.facts, value)
                if flags & STR_ESCAPED:
                    d.escaped_key = True
                span = j.pos - entry_start
                _note_member(d, j.p, _digest(j.p + entry_start, span), _key_length_word(j.p + start, length, span),
                             entry_start, j.pos)
            out[key] = value
            index += 1
            if not _more(j, 125):
                break
        if d != NULL and d.count % RUN_ENTRIES:
            _note_run(d, j.p)  # the table's last run, shorter than the others
        return out
    finally:
        PyMem_RawFree(plains.items)
        if d != NULL:
            d.facts = plains.facts
            d.facts_cover = facts_cover


cdef void _prescan(_Json j, const _Digests *d, _Plains *plains) noexcept nogil:
    """From the topic table's first member: note in `plains` each member `_table` would step over
    as unchanged, or read as an entry of the plain form (`_plain_member`), stopping at the first
    other one (or at the table's end, or when memory runs out). Only syntax `_table` accepts is
    noted, so a noted member is read exactly as `_table` would read it."""
    cdef Py_ssize_t index = 0, span, after, entries
    cdef _Plain *member
    cdef _Plain *grown
    while True:
        if plains.count == plains.capacity:
            plains.capacity = 64 if plains.capacity == 0 else 2 * plains.capacity
            grown = <_Plain *>PyMem_RawRealloc(plains.items, plains.capacity * sizeof(_Plain))
            if grown == NULL:
                plains.capacity = plains.count
                return
            plains.items = grown
        if _peek(&j) != 34:
            return
        member = plains.items + plains.count
        member.start = j.pos
        member.omitted = False
        member.run = False
        entries = 1
        if d != NULL and index < d.previous_count:
            span = _unchanged_run_span(d, index, j.p, j.pos, j.end)
            member.run = span != 0
            if member.run:
                entries = min(RUN_ENTRIES, d.previous_count - index)
            else:
                span = _unchanged_span(d.previous + index, j.p, j.pos, j.end)
            if span:
                member.omitted = True
                j.pos += span
        if not member.omitted:
            if not _plain_member(&j, member, d != NULL):
                return
        if j.pos - member.start < <Py_ssize_t>sizeof(_Plain):
            return  # a note no larger than its member: the notes never outgrow the body
        if not member.omitted:  # (ASCII: _plain_string saw to it)
            _note_facts(&plains.facts, j.p + member.topic_start, member.topic_length, member.read, member.write,
                        member.perm)
        member.end = j.pos
        _skip_ws(&j)
        after = _peek(&j)
        if after != 44:  # the table's '}' (read by `_table`), or a number that grew: not for this pass
            if after == 125:
                plains.count += 1
            return
        plains.count += 1
        index += entries
        j.pos += 1
        _skip_ws(&j)


cdef void _note_facts(_Facts *facts, const unsigned char *name, Py_ssize_t length, long read, long write,
                      long perm) noexcept nogil:
    """Sum up one plain entry (its ASCII topic name name[0:length] and its fields) into `facts`."""
    cdef Py_ssize_t i
    cdef unsigned char c
    if facts.count == 0:
        facts.shortest = facts.longest = length
        facts.fewest = facts.most = read
    facts.count += 1
    for i in range(length):
        c = name[i]
        facts.name_bytes[c >> 6] |= (<uint64_t>1) << (c & 63)
    facts.shortest = min(facts.shortest, length)
    facts.longest = max(facts.longest, length)
    facts.fewest = min(facts.fewest, min(read, write))
    facts.most = max(facts.most, max(read, write))
    facts.perm_bits |= perm


cdef bint _note_read_facts(_Facts *facts, object value) except -1:
    """Sum up an entry `_table` read (`_entry`'s value) into `facts`; False when the facts cannot
    hold it: not a queue-fields tuple, or a topic name not ASCII (the rules refuse it anyway)."""
    cdef tuple fields
    cdef object topic
    if type(value) is not tuple:
        return False
    fields = <tuple>value
    topic = fields[0]
    if not PyUnicode_IS_COMPACT_ASCII(topic):
        return False
    _note_facts(facts, <const unsigned char *>PyUnicode_DATA(topic), PyUnicode_GET_LENGTH(topic),
                <long>fields[1], <long>fields[2], <long>fields[3])  # int32: _plain_fields saw to it
    return True


cdef bint _plain_member(_Json *j, _Plain *member, bint digests) noexcept nogil:
    """At a member's quote: read it as a topic entry of the plain form, as brokers send it (keys
    and topic name plain ASCII without escapes, the entry fields each once and in order, numbers
    non-negative below a billion without sign, fraction or exponent, attributes a flat object of
    plain strings), into `member`; False (the cursor anywhere) for any other member."""
    cdef Py_ssize_t start, length, span
    cdef int field, last = F_OTHER, seen = 0
    cdef long number
    if not _plain_string(j, &member.key_start, &member.key_length):
        return False
    if not _plain_colon(j) or _peek(j) != 123:
        return False
    j.pos += 1
    _skip_ws(j)
    while True:
        field = last + 1  # the next field in order, as brokers send them
        if not _at_key(j, field):
            if not _plain_string(j, &start, &length):
                return False
            field = _entry_field(j.p + start, length)
            if field <= last or not _plain_colon(j):
                return False  # another field, or not in order (so possibly repeated)
        last = field
        seen |= 1 << field
        if field == F_ATTRIBUTES:
            if not _plain_flat_object(j):
                return False
        elif field == F_ORDER:
            if j.end - j.pos >= 4 and _same(j.p + j.pos, b"true", 4):
                j.pos += 4
            elif j.end - j.pos >= 5 and _same(j.p + j.pos, b"false", 5):
                j.pos += 5
            else:
                return False
        elif field == F_FILTER_TYPE:
            if j.end - j.pos >= 12 and _same(j.p + j.pos, b'"SINGLE_TAG"', 12):
                j.pos += 12
            elif j.end - j.pos >= 11 and _same(j.p + j.pos, b'"MULTI_TAG"', 11):
                j.pos += 11
            else:
                return False
        elif field == F_TOPIC_NAME:
            if not _plain_string(j, &member.topic_start, &member.topic_length) or member.topic_length == 0:
                return False
        else:
            if not _plain_number(j, &number):
                return False
            if field == F_READ:
                member.read = number
            elif field == F_WRITE:
                member.write = number
            elif field == F_PERM:
                member.perm = number
            else:
                member.sys_flag = number
        _skip_ws(j)
        if _peek(j) == 125:
            j.pos += 1
            break
        if _peek(j) != 44:
            return False
        j.pos += 1
        _skip_ws(j)
    if seen & REQUIRED_FIELDS != REQUIRED_FIELDS:
        return False
    if digests:
        span = j.pos - member.start
        member.digest = _digest(j.p + member.start, span)
        member.key_digest_length = _key_length_word(j.p + member.key_start, member.key_length, span)
    return True


cdef inline bint _plain_string(_Json *j, Py_ssize_t *start, Py_ssize_t *length) noexcept nogil:
    """At a quote: a string of plain ASCII content without escapes; move past it."""
    cdef Py_ssize_t pos
    cdef unsigned char c
    if _peek(j) != 34:
        return False
    pos = j.pos + 1
    while True:
        pos += _plain_run(j.p + pos, j.end - pos)
        if pos >= j.end:
            return False
        c = j.p[pos]
        if c == 34:
            break
        if c == 92 or c < 0x20 or c >= 0x80:
            return False
        pos += 1  # the last few bytes of the buffer are looked at one by one
    start[0] = j.pos + 1
    length[0] = pos - start[0]
    j.pos = pos + 1
    return True


cdef inline bint _plain_colon(_Json *j) noexcept nogil:
    _skip_ws(j)
    if _peek(j) != 58:
        return False
    j.pos += 1
    _skip_ws(j)
    return True


cdef inline bint _plain_number(_Json *j, long *number) noexcept nogil:
    """A non-negative integer of at most 9 digits (so an int32), no leading zero, no fraction or exponent."""
    cdef Py_ssize_t pos = j.pos, limit = j.pos + 10 if j.end - j.pos > 10 else j.end
    cdef long value = 0
    while pos < limit and 48 <= j.p[pos] <= 57:
        value = value * 10 + (j.p[pos] - 48)
        pos += 1
    if (pos == j.pos or pos - j.pos > 9 or pos == j.end or j.p[pos] == 46 or j.p[pos] == 101 or j.p[pos] == 69
            or (j.p[j.pos] == 48 and pos - j.pos > 1)):
        return False
    j.pos = pos
    number[0] = value
    return True


cdef bint _plain_flat_object(_Json *j) noexcept nogil:
    """At a '{': an object whose keys and values are plain strings (`_plain_string`)."""
    cdef Py_ssize_t start, length
    if _peek(j) != 123:
        return False
    j.pos += 1
    _skip_ws(j)
    if _peek(j) == 125:
        j.pos += 1
        return True
    while True:
        if not _plain_string(j, &start, &length) or not _plain_colon(j) or not _plain_string(j, &start, &length):
            return False
        _skip_ws(j)
        if _peek(j) == 125:
            j.pos += 1
            return True
        if _peek(j) != 44:
            return False
        j.pos += 1
        _skip_ws(j)


cdef int _note_entry(_Digests *d, uint64_t digest, uint64_t key_length) except -1:
    cdef Py_ssize_t capacity
    cdef _Entry *grown
    if d.count == d.capacity:
        capacity = 64 if d.capacity == 0 else 2 * d.capacity
        grown = <_Entry *>PyMem_Realloc(d.entries, capacity * sizeof(_Entry))
        if grown == NULL:
            raise MemoryError()
        d.entries = grown
        d.capacity = capacity
    d.entries[d.count].digest = digest
    d.entries[d.count].key_length = key_length
    d.count += 1
    return 0


cdef object _entry(_Json *j, int depth, object raw_key, Py_ssize_t key_start, Py_ssize_t key_length):
    """A topic entry: its tuple when it is plain, else the dict orjson builds."""
    if depth > JSON_MAX_DEPTH:
        raise _NotForMe
    cdef Py_ssize_t start = j.pos
    cdef tuple fields = _entry_fields(j, depth, raw_key, key_start, key_length)
    if fields is not None:
        return fields
    j.pos = start  # not plain (or a key with escapes): read it again, as a dict
    cdef dict entry = _object(j, depth, None, 0, None)
    fields = _plain_entry(entry)
    return entry if fields is None else fields


cdef inline bint _at_key(_Json *j, int field) noexcept nogil:
    """Is the cursor at entry field `field`'s key and colon (`_ENTRY_KEY`, one compare)? Then move
    past them and the whitespace after. F_OTHER, or a number past the last field, is never there."""
    if field <= F_OTHER or field > F_WRITE or j.end - j.pos < _ENTRY_KEY_LENGTH[field]:
        return False
    if not _same(j.p + j.pos, <const unsigned char *>_ENTRY_KEY[field], _ENTRY_KEY_LENGTH[field]):
        return False
    j.pos += _ENTRY_KEY_LENGTH[field]
    _skip_ws(j)
    return True


cdef int _entry_field(const unsigned char *name, Py_ssize_t length) noexcept nogil:
    """The entry field a key (its content, without escapes) names."""
    cdef int field
    for field in range(F_ATTRIBUTES, F_WRITE + 1):
        if (length == _ENTRY_KEY_LENGTH[field] - 3
                and _same(name, <const unsigned char *>_ENTRY_KEY[field] + 1, length)):
            return field
    return F_OTHER


cdef inline bint _is_int_field(int field) noexcept nogil:
    return field == F_READ or field == F_WRITE or field == F_PERM or field == F_SYS_FLAG


cdef tuple _entry_fields(_Json *j, int depth, object raw_key, Py_ssize_t key_start, Py_ssize_t key_length):
    """At an entry's '{': its tuple when it is plain, without building its dict; None when it is
    not (or has a key with escapes or non-ASCII bytes, which the dict reading handles).

    Fields are read as `dict.get` would see them: absent is None, a repeated key's last value
    counts, other members are only syntax-checked, and so is an `attributes` object.
    """
    cdef object topic = None, read = None, write = None, perm = None, sys_flag = None
    cdef object filter_type = None, order = None, attributes = None, value
    cdef Py_ssize_t start, length
    cdef int field, predicted = F_ATTRIBUTES
    cdef int flags
    j.pos += 1
    _skip_ws(j)
    if _peek(j) == 125:
        return None
    while True:
        if _at_key(j, predicted):
            field = predicted
        else:
            if _peek(j) != 34:
                raise _NotForMe
            if _string_span(j, &start, &length) != 0:
                return None
            field = _entry_field(j.p + start, length)
            _expect(j, 58)
        predicted = field + 1 if F_OTHER < field < F_WRITE else F_OTHER
        if field == F_OTHER:
            _skip_value(j, depth)
        elif field == F_ATTRIBUTES:
            if _peek(j) == 123:
                if j.end - j.pos >= 2 and j.p[j.pos + 1] == 125:  # {}, as brokers mostly send it
                    j.pos += 2
                else:
                    _skip_value(j, depth)
                attributes = _SKIPPED_OBJECT
            else:
                attributes = _value(j, depth)
        elif field == F_TOPIC_NAME and _peek(j) == 34:
            flags = _string_span(j, &start, &length)
            if (raw_key is not None and flags & STR_ESCAPED == 0 and length == key_length
                    and _same(j.p + start, j.p + key_start, length)):
                topic = raw_key  # the same bytes as the table key, usually: share its str
            else:
                topic = _string_object(j.p + start, length, flags)
        elif (field == F_FILTER_TYPE and j.end - j.pos >= 12
              and _same(j.p + j.pos, b'"SINGLE_TAG"', 12)):
            j.pos += 12
            filter_type = "SINGLE_TAG"
        elif (field == F_FILTER_TYPE and j.end - j.pos >= 11
              and _same(j.p + j.pos, b'"MULTI_TAG"', 11)):
            j.pos += 11
            filter_type = "MULTI_TAG"
        else:
            if _is_int_field(field) and (_peek(j) == 45 or 48 <= _peek(j) <= 57):
                value = _small_number(j)
            else:
                value = _value(j, depth)
            if field == F_TOPIC_NAME:
                topic = value
            elif field == F_READ:
                read = value
            elif field == F_WRITE:
                write = value
            elif field == F_PERM:
                perm = value
            elif field == F_SYS_FLAG:
                sys_flag = value
            elif field == F_FILTER_TYPE:
                filter_type = value
            else:
                order = value
        if not _more(j, 125):
            return _plain_fields(topic, read, write, perm, sys_flag, filter_type, order, attributes)


cdef int _skip_value(_Json *j, int depth) except -1:
    """Check the value at the cursor as `_value` would read it, building (almost) nothing."""
    cdef unsigned char c = _peek(j)
    cdef Py_ssize_t start, length
    cdef uint64_t magnitude
    cdef bint negative
    cdef int flags
    if c == 34:
        flags = _string_span(j, &start, &length)
        if flags != 0:
            _string_object(j.p + start, length, flags)  # escapes and UTF-8 checked by decoding
        return 0
    if c == 123 or c == 91:
        return _skip_container(j, depth + 1, c == 123)
    if c == 116:
        return _literal(j, "true", 4)
    if c == 102:
        return _literal(j, "false", 5)
    if c == 110:
        return _literal(j, "null", 4)
    if c == 45 or 48 <= c <= 57:
        return _scan_number(j, &magnitude, &negative)
    raise _NotForMe


cdef int _skip_container(_Json *j, int depth, bint is_object) except -1:
    cdef unsigned char close = 125 if is_object else 93
    if _opened_empty(j, depth, close):
        return 0
    while True:
        if is_object:
            if _peek(j) != 34:
                raise _NotForMe
            _skip_value(j, depth)  # the key: a string
            _expect(j, 58)
        _skip_value(j, depth)
        if not _more(j, close):
            return 0


def scan_registration(data, tuple table_path not None, previous):
    """See `namesrv.fastpath.registration.scan_registration`."""
    cdef _Digests d
    cdef object value
    cdef bytes entries
    cdef Py_ssize_t records = 0
    if previous is not None:
        records = len(<bytes?>previous) // sizeof(_Entry)
        if len(previous) % sizeof(_Entry) or _entry_count(records) < 0:
            raise ValueError("previous: not the entries of a scan_registration")
    memset(&d, 0, sizeof(d))
    if previous is not None:
        d.previous = <const _Entry *><const char *>PyBytes_AS_STRING(previous)
        d.previous_count = _entry_count(records)
        d.previous_runs = d.previous + d.previous_count
        d.previous_run_count = records - d.previous_count
    try:
        value = _scan(data, table_path, &d, False)
        # Every entry stepped over in place, or each key where it was: the previous registration's
        # keys, which were told apart (`_keys_as_before` compares them; the first needs no look).
        if d.tables != 1 or d.escaped_key or (not d.omitted == d.count == d.previous_count and not _keys_as_before(&d)
                                              and _has_repeated_key(d.entries, d.count)):
            return scan_registration(data, table_path, None) if d.omitted else (value, None, 0, None)
        entries = PyBytes_FromStringAndSize(NULL, (d.count + d.run_count) * sizeof(_Entry))
        memcpy(PyBytes_AS_STRING(entries), d.entries, d.count * sizeof(_Entry))
        memcpy(PyBytes_AS_STRING(entries) + d.count * sizeof(_Entry), d.runs, d.run_count * sizeof(_Entry))
        return (value, entries, d.omitted,
                _facts_tuple(&d.facts) if d.facts_cover and d.facts.count else None)
    except (_NotForMe, UnicodeDecodeError):
        return None
    finally:
        PyMem_Free(d.entries)
        PyMem_Free(d.runs)


cdef object _member(_Json *j, Py_ssize_t *start, Py_ssize_t *length):
    """At a member of an object: past its key and colon. The key's name as a str when it has escapes
    or non-ASCII bytes, else None: then its name is its bytes, p[start:start + length]."""
    cdef int flags
    if _peek(j) != 34:
        raise _NotForMe
    flags = _string_span(j, start, length)
    key = None if flags == 0 else _string_object(j.p + start[0], length[0], flags)
    _expect(j, 58)
    return key


cdef inline bint _named(_Json *j, Py_ssize_t start, Py_ssize_t length, object key, object name) except -1:
    """Is the member whose key `_member` read (`key`, at p[start:start + length]) named `name`?"""
    if key is not None:
        return key == name
    return (PyUnicode_GET_LENGTH(name) == length and PyUnicode_IS_COMPACT_ASCII(name)
            and _same(j.p + start, <const unsigned char *>PyUnicode_DATA(name), length))


#: The wrapper's members of the plain form besides its table (`_plain_wrapper` reads each by name): a
#: table path naming one of them is left to the caller, as is a wrapper named filterServerList.
cdef tuple _WRAPPER_MEMBERS = ("dataVersion", "mappingDataVersion", "topicQueueMappingInfoMap",
                               "topicQueueMappingDetailMap")


cdef tuple _plain_body(_Json *j, tuple path, list tables):
    """The registration body at the cursor (an object) in its plain form (see
    `namesrv.fastpath.registration.plain_form`: this is the extension's reading of that
    definition): (table, counter, timestamp, stateVersion, filter servers), or None when it is
    not of that form. Walked without making the objects around its topic table (the body's, the
    wrapper's, its DataVersions'); each topic table read is added to `tables` as (table, start,
    end), so a body that is not plain is read as any JSON without reading its table again. A
    member named twice counts with its last value, as in the dict the JSON reads as."""
    cdef Py_ssize_t start, length
    cdef object key, servers = None, server
    cdef tuple wrapper = None
    cdef bint plain_servers = True
    for key in path:
        if type(key) is not str:
            raise _NotForMe  # (brokers' tables are named by str)
    if len(path) == 1:
        if path[0] in _WRAPPER_MEMBERS:
            raise _NotForMe  # a table named as another member of the form: left to the caller
        wrapper = _plain_wrapper(j, 1, path[0], tables)
        return None if wrapper is None else wrapper + (None,)
    if len(path) != 2:
        return None
    if path[0] == "filterServerList" or path[1] in _WRAPPER_MEMBERS:
        raise _NotForMe
    if _opened_empty(j, 1, 125):
        return None
    while True:
        key = _member(j, &start, &length)
        if _named(j, start, length, key, path[0]):
            if _peek(j) == 123:
                wrapper = _plain_wrapper(j, 2, path[1], tables)
            else:
                _value(j, 1)
                wrapper = None
        elif _named(j, start, length, key, "filterServerList"):
            servers = _value(j, 1)
            plain_servers = servers is None or type(servers) is list
            if plain_servers and servers is not None:
                for server in <list>servers:
                    if type(server) is not str:
                        plain_servers = False
                        break
        else:
            _value(j, 1)
        if not _more(j, 125):
            break
    if wrapper is None or not plain_servers:
        return None
    return wrapper + (([] if servers is None else servers),)


cdef tuple _plain_wrapper(_Json *j, int depth, object table_name, list tables):
    """(table, counter, timestamp, stateVersion) of the wrapper object at the cursor (at `depth`)
    when it is of the plain form, else None (see `_plain_body`)."""
    cdef Py_ssize_t start, length, at
    cdef object key, table = None, value, entry
    cdef tuple version = _ZERO_VERSION
    cdef bint plain_mapping_version = True, plain_infos = True, plain_details = True
    if _opened_empty(j, depth, 125):
        return None
    while True:
        key = _member(j, &start, &length)
        if _named(j, start, length, key, table_name):
            if _peek(j) == 123:
                at = j.pos
                table = _table(j, depth + 1)
                tables.append((table, at, j.pos))
            else:
                table = _value(j, depth)
        elif _named(j, start, length, key, "dataVersion"):
            version = _plain_version_at(j, depth)
        elif _named(j, start, length, key, "mappingDataVersion"):
            plain_mapping_version = _plain_version_at(j, depth) is not None
        else:
            value = _value(j, depth)
            if _named(j, start, length, key, "topicQueueMappingInfoMap"):
                plain_infos = value is None or (type(value) is dict and not value)
            elif _named(j, start, length, key, "topicQueueMappingDetailMap"):
                plain_details = value is None or type(value) is dict
        if not _more(j, 125):
            break
    if type(table) is not dict or version is None or not (plain_mapping_version and plain_infos and plain_details):
        return None
    for entry in (<dict>table).values():
        if type(entry) is not tuple:
            return None
    return (table, version[0], version[1], version[2])


cdef tuple _plain_version_at(_Json *j, int depth):
    """(counter, timestamp, stateVersion) of the DataVersion at the cursor (a member's value in an
    object at `depth`) when it is plain: null, or an object whose three fields are each absent,
    null or an integer within int64 (absent and null read as 0); else None."""
    cdef Py_ssize_t start, length
    cdef object key, counter = None, timestamp = None, state = None, value
    if _peek(j) != 123:
        return _ZERO_VERSION if _value(j, depth) is None else None
    if not _opened_empty(j, depth + 1, 125):
        while True:
            key = _member(j, &start, &length)
            value = _value(j, depth + 1)
            if _named(j, start, length, key, "counter"):
                counter = value
            elif _named(j, start, length, key, "timestamp"):
                timestamp = value
            elif _named(j, start, length, key, "stateVersion"):
                state = value
            if not _more(j, 125):
                break
    counter = 0 if counter is None else counter
    timestamp = 0 if timestamp is None else timestamp
    state = 0 if state is None else state
    if _is_int64(counter) and _is_int64(timestamp) and _is_int64(state):
        return (counter, timestamp, state)
    return None


cdef tuple _ZERO_VERSION = (0, 0, 0)


cdef inline bint _is_int64(object value) except -1:
    """A JSON integer (exactly int, so never bool) within int64."""
    cdef int overflow = 0
    if type(value) is not int:
        return False
    PyLong_AsLongLongAndOverflow(value, &overflow)
    return overflow == 0


cdef tuple _facts_tuple(const _Facts *facts):
    cdef int c
    cdef Py_ssize_t count = 0
    cdef unsigned char chars[128]
    for c in range(128):
        if facts.name_bytes[c >> 6] >> (c & 63) & 1:
            chars[count] = c
            count += 1
    return (_ascii_str(chars, count), facts.shortest, facts.longest, facts.fewest, facts.most, facts.perm_bits)


def entry_digest(data):
    """See `namesrv.fastpath.registration.entry_digest`."""
    cdef Py_buffer view
    PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
    try:
        return _digest(<const unsigned char *>view.buf, view.len)
    finally:
        PyBuffer_Release(&view)


cdef enum:
    # The set of a table of up to 192 entries lives on the stack (2 KiB): a heap block that size
    # is the C library's (pymalloc stops at 512 bytes), and its calloc cost a broker of 100
    # topics more than the set itself.
    STACK_SET_SLOTS = 256


cdef bint _keys_as_before(const _Digests *d) noexcept nogil:
    """Has each entry the key digest of the previous registration's entry in its place? Then the
    keys are that registration's, which were told apart (a new DataVersion changing values only):
    what `_has_repeated_key` would say, without its set (the pure twin asks the set each time)."""
    cdef Py_ssize_t i
    if d.count != d.previous_count:
        return False
    for i in range(d.count):
        if (d.entries[i].key_length ^ d.previous[i].key_length) >> ENTRY_LENGTH_BITS:
            return False
    return True


cdef bint _has_repeated_key(const _Entry *entries, Py_ssize_t count) except -1:
    """Do two entries have one key digest (a repeated key, or once in 2**39 two keys alike)?"""
    cdef Py_ssize_t slots = _set_slots(count), i
    cdef uint64_t stack[STACK_SET_SLOTS]
    cdef uint64_t *seen = stack
    if slots <= STACK_SET_SLOTS:
        memset(stack, 0, slots * sizeof(uint64_t))
    else:
        seen = <uint64_t *>PyMem_Calloc(slots, sizeof(uint64_t))
        if seen == NULL:
            raise MemoryError()
    try:
        for i in range(count):
            if not _set_add(seen, slots, (entries[i].key_length >> ENTRY_LENGTH_BITS) | 1):
                return True
        return False
    finally:
        if seen != stack:
            PyMem_Free(seen)


def count_entries(data, tuple table_path not None):
    """See `namesrv.fastpath.registration.count_entries`; here nothing is built, members are only
    syntax-checked."""
    if not table_path:
        return None
    try:
        return _scan(data, table_path, NULL, True)
    except (_NotForMe, UnicodeDecodeError):
        return None


cdef Py_ssize_t _count_at(_Json *j, int depth, tuple path, Py_ssize_t step) except -2:
    """At an object's '{': the member count of the object at path[step:] within it, -1 if there is
    none (as orjson keeps them, the last of repeated keys counts)."""
    cdef Py_ssize_t found = -1
    cdef object key
    if _opened_empty(j, depth, 125):
        return -1
    while True:
        if _peek(j) != 34:
            raise _NotForMe
        key = _key(j)
        _expect(j, 58)
        if key != path[step]:
            _skip_value(j, depth)
        elif _peek(j) == 123:
            found = _members(j, depth + 1) if step + 1 == len(path) else _count_at(j, depth + 1, path, step + 1)
        else:
            found = -1  # the last of repeated keys counts, and this one is no object
            _skip_value(j, depth)
        if not _more(j, 125):
            return found


cdef Py_ssize_t _members(_Json *j, int depth) except -2:
    """At an object's '{': its member count. Keys must be told apart by their bytes, so a key with
    escapes or a repeated key is not for this scanner."""
    cdef _Digests d
    cdef Py_ssize_t start, length
    cdef int flags
    memset(&d, 0, sizeof(d))
    if _opened_empty(j, depth, 125):
        return 0
    try:
        while True:
            if _peek(j) != 34:
                raise _NotForMe
            flags = _string_span(j, &start, &length)
            if flags & STR_ESCAPED:
                raise _NotForMe
            if flags:
                _string_object(j.p + start, length, flags)  # UTF-8 checked by decoding, as orjson does
            _note_entry(&d, 0, _key_length_word(j.p + start, length, 0))
            _expect(j, 58)
            _skip_value(j, depth)
            if not _more(j, 125):
                break
        if _has_repeated_key(d.entries, d.count):
            raise _NotForMe
        return d.count
    finally:
        PyMem_Free(d.entries)


cdef object _scan(data, tuple table_path, _Digests *digests, bint counting):
    """The whole document at `data`, or (`counting`) the member count of the object at `table_path`
    in it; raises _NotForMe for what is not for this scanner."""
    cdef Py_buffer view
    cdef _Json j
    cdef object value
    cdef list tables
    cdef Py_ssize_t count, start
    PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
    try:
        j.p = <const unsigned char *>view.buf
        j.pos = 0
        j.end = view.len
        j.digests = digests
        _skip_ws(&j)
        if counting:
            if _peek(&j) != 123:
                raise _NotForMe
            count = _count_at(&j, 1, table_path, 0)
            if count < 0:
                raise _NotForMe  # no object at the path
            value = count
        elif table_path and _peek(&j) == 123:
            start = j.pos
            tables = []
            value = _plain_body(&j, table_path, tables)
            if value is None:  # not of the plain form: read as any JSON, its topic table as read
                j.pos = start  # (two tables are each read again: digests of two are never offered)
                value = _object(&j, 1, table_path, 0, tables[0] if len(tables) == 1 else None)
        else:
            value = _value(&j, 0)
        _skip_ws(&j)
        if j.pos != j.end:
            raise _NotForMe
        return value
    finally:
        PyBuffer_Release(&view)


def count_containers(const unsigned char[::1] data):
    """See `namesrv.fastpath.registration.count_containers`; here one pass the compiler vectorizes."""
    cdef Py_ssize_t i, j, end, n = data.shape[0]
    cdef Py_ssize_t count = 0
    cdef unsigned char lane
    cdef const unsigned char *p
    if n == 0:
        return 0
    p = &data[0]
    with nogil:
        i = 0
        while i < n:  # byte-wide sums over blocks of 255 bytes: the inner loop vectorizes
            end = min(n, i + 255)
            lane = 0
            for j in range(i, end):
                lane += (p[j] | 32) == 123  # '[' (0x5B) and '{' (0x7B) alone become 0x7B
            count += lane
            i = end
    return count
