# cython: language_level=3, boundscheck=False, wraparound=False, initializedcheck=False
"""Cython implementation of the protocol hot path.

Same functions, results and `ProtocolError` messages as `namesrv/_purepath.py` (the tests run one
suite over both); only `scan_registration` may answer None ("parse it yourself") where the pure
twin answers, and only it leaves out topic entries (unchanged since the previous registration,
which the pure twin cannot afford to tell). Inputs are read through the buffer protocol, so bytes,
bytearray and memoryview all work without a copy; every length is checked against the buffer
before a byte is read.
"""
from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize
from cpython.dict cimport PyDict_GetItem, PyDict_Next
from cpython.long cimport PyLong_FromLong, PyLong_FromLongLong, PyLong_FromUnsignedLongLong
from cpython.mem cimport PyMem_Calloc, PyMem_Free, PyMem_Malloc, PyMem_Realloc
from cpython.object cimport PyObject
from cpython.ref cimport Py_INCREF, Py_XDECREF
from libc.stdint cimport int16_t, int32_t, uint16_t, uint32_t, uint64_t
from libc.stdio cimport snprintf
from libc.string cimport memcmp, memcpy, memset, strlen


cdef extern from "Python.h":
    object PyUnicode_DecodeUTF8(const char *data, Py_ssize_t size, const char *errors)
    object PyUnicode_New(Py_ssize_t size, Py_UCS4 maxchar)
    void *PyUnicode_DATA(object text)
    bint PyUnicode_CheckExact(object value)
    bint PyUnicode_IS_COMPACT_ASCII(object text)
    Py_ssize_t PyUnicode_GET_LENGTH(object text)
    const char *PyUnicode_AsUTF8AndSize(object text, Py_ssize_t *size) except NULL
    long long PyLong_AsLongLongAndOverflow(object value, int *overflow) except? -1


from isal.isal_zlib import crc32 as _isal_crc32


cdef enum:
    FIXED_LEN = 21                # code, language, version, opaque, flag, remarkLength, extLength
    KEY_CACHE_SLOTS = 256         # a power of two
    KEY_CACHE_MAX_LEN = 48        # longer keys are not field names


cdef inline int32_t _read_i32(const unsigned char *p) noexcept nogil:
    return <int32_t>((<uint32_t>p[0] << 24) | (<uint32_t>p[1] << 16) | (<uint32_t>p[2] << 8) | <uint32_t>p[3])


cdef inline int16_t _read_i16(const unsigned char *p) noexcept nogil:
    return <int16_t>((<uint16_t>p[0] << 8) | <uint16_t>p[1])


cdef inline unsigned char *_write_i32(unsigned char *p, int32_t value) noexcept nogil:
    cdef uint32_t v = <uint32_t>value
    p[0] = <unsigned char>(v >> 24)
    p[1] = <unsigned char>(v >> 16)
    p[2] = <unsigned char>(v >> 8)
    p[3] = <unsigned char>v
    return p + 4


cdef inline unsigned char *_write_i16(unsigned char *p, int16_t value) noexcept nogil:
    cdef uint16_t v = <uint16_t>value
    p[0] = <unsigned char>(v >> 8)
    p[1] = <unsigned char>v
    return p + 2


cdef inline unsigned char *_write_bytes(unsigned char *p, const char *src, Py_ssize_t length) noexcept nogil:
    memcpy(p, src, length)
    return p + length


cdef long long _frame_limit(object max_frame_length) except? -2:
    """The limit as a C integer; any value beyond the int32 range behaves like the nearest edge."""
    cdef int overflow = 0
    cdef long long limit = PyLong_AsLongLongAndOverflow(max_frame_length, &overflow)
    if overflow > 0:
        return 1LL << 40
    if overflow < 0 or limit < -1:
        return -1
    return limit


def split_frames(buf, max_frame_length):
    """Split complete frames off the front of `buf`; see `namesrv._purepath.split_frames`."""
    cdef long long limit = _frame_limit(max_frame_length)
    cdef Py_buffer view
    cdef const unsigned char *p
    cdef Py_ssize_t size, pos = 0, end
    cdef int32_t total
    cdef list frames = []
    PyObject_GetBuffer(buf, &view, PyBUF_SIMPLE)
    try:
        p = <const unsigned char *>view.buf
        size = view.len
        while size - pos >= 4:
            total = _read_i32(p + pos)
            if total < 4:
                raise ProtocolError(f"bad frame length {total} at offset {pos}: shorter than the header-length field")
            if <long long>total + 4 > limit:
                raise ProtocolError(f"frame length {total} exceeds the maximum frame length {max_frame_length}")
            end = pos + 4 + total
            if end > size:
                break
            frames.append(PyBytes_FromStringAndSize(<const char *>(p + pos + 4), total))
            pos = end
    finally:
        PyBuffer_Release(&view)
    return frames, pos


cdef inline bint _is_ascii(const unsigned char *p, Py_ssize_t length) noexcept nogil:
    cdef Py_ssize_t i
    for i in range(length):
        if p[i] >= 0x80:
            return False
    return True


cdef inline object _ascii_str(const unsigned char *p, Py_ssize_t length):
    cdef object text = PyUnicode_New(length, 127)
    memcpy(PyUnicode_DATA(text), p, length)
    return text


cdef object _read_utf8(const unsigned char *p, Py_ssize_t length, str what):
    if _is_ascii(p, length):  # the usual case: no decoder needed
        return _ascii_str(p, length)
    try:
        return PyUnicode_DecodeUTF8(<const char *>p, length, "strict")
    except UnicodeDecodeError as exc:
        raise ProtocolError(f"binary header: {what} is not valid UTF-8 ({exc.reason} at byte {exc.start})") from None


# extFields keys are a few dozen Java field names, so the decoder reuses their str objects (and the
# hashes cached on them) from a small direct-mapped table instead of allocating and hashing anew.
cdef PyObject *_key_cache[KEY_CACHE_SLOTS]


cdef object _read_key(const unsigned char *p, Py_ssize_t length):
    if length > KEY_CACHE_MAX_LEN or not _is_ascii(p, length):
        return _read_utf8(p, length, "extFields key")
    return _cached_ascii(p, length)


cdef object _cached_ascii(const unsigned char *p, Py_ssize_t length):
    """The str of `length` ASCII bytes (at most KEY_CACHE_MAX_LEN), from the cache when it is there."""
    cdef uint32_t fnv = 2166136261u
    cdef Py_ssize_t i
    for i in range(length):
        fnv = (fnv ^ p[i]) * 16777619u
    cdef uint32_t slot = fnv & (KEY_CACHE_SLOTS - 1)
    cdef PyObject *cached = _key_cache[slot]
    if (cached != NULL and PyUnicode_GET_LENGTH(<object>cached) == length
            and memcmp(PyUnicode_DATA(<object>cached), p, length) == 0):
        return <object>cached
    cdef object key = _ascii_str(p, length)
    Py_INCREF(key)
    _key_cache[slot] = <PyObject *>key
    Py_XDECREF(cached)
    return key


cdef tuple _decode_header(const unsigned char *p, Py_ssize_t size):
    if size < FIXED_LEN:
        raise ProtocolError(f"binary header of {size} bytes is shorter than the 21-byte fixed part")
    cdef int code = _read_i16(p)
    cdef int language = p[2]
    cdef int version = _read_i16(p + 3)
    cdef int32_t opaque = _read_i32(p + 5)
    cdef int32_t flag = _read_i32(p + 9)
    cdef int32_t remark_len = _read_i32(p + 13)
    cdef Py_ssize_t pos = 17, end
    cdef int32_t ext_len, value_len
    cdef int key_len
    cdef object remark = None, key, value
    cdef dict ext
    if remark_len < 0 or remark_len > size - pos - 4:
        raise ProtocolError(f"binary header: remark length {remark_len} exceeds the header")
    if remark_len:
        remark = _read_utf8(p + pos, remark_len, "remark")
    pos += remark_len
    ext_len = _read_i32(p + pos)
    pos += 4
    if ext_len < 0 or ext_len > size - pos:
        raise ProtocolError(f"binary header: extFields length {ext_len} exceeds the header")
    if ext_len == 0:
        return code, language, version, opaque, flag, remark, None
    ext = {}
    end = pos + ext_len
    while pos < end:
        if end - pos < 2:
            raise ProtocolError("binary header: truncated extFields key length")
        key_len = _read_i16(p + pos)
        pos += 2
        if key_len < 0 or key_len > end - pos:
            raise ProtocolError(f"binary header: extFields key length {key_len} exceeds the ext section")
        key = _read_key(p + pos, key_len) if key_len else None
        pos += key_len
        if end - pos < 4:
            raise ProtocolError("binary header: truncated extFields value length")
        value_len = _read_i32(p + pos)
        pos += 4
        if value_len < 0 or value_len > end - pos:
            raise ProtocolError(f"binary header: extFields value length {value_len} exceeds the ext section")
        value = _read_utf8(p + pos, value_len, "extFields value") if value_len else None
        pos += value_len
        if key is not None and value is not None:
            ext[key] = value
    return code, language, version, opaque, flag, remark, ext


def decode_binary_header(data):
    """Decode a ROCKETMQ (binary) header; see `namesrv._purepath.decode_binary_header`."""
    cdef Py_buffer view
    PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
    try:
        return _decode_header(<const unsigned char *>view.buf, view.len)
    finally:
        PyBuffer_Release(&view)


cdef bint _fits(object value, long long low, long long high) except -1:
    cdef int overflow = 0
    cdef long long number = PyLong_AsLongLongAndOverflow(value, &overflow)
    return overflow == 0 and low <= number <= high


cdef inline bint _is_null(object value) except -1:
    """Whether an entry's key or value is skipped (None or empty), as `not value` says, sooner."""
    if value is None:
        return True
    if PyUnicode_CheckExact(value):
        return PyUnicode_GET_LENGTH(value) == 0
    return not value


cdef inline const char *_utf8_of(object text, Py_ssize_t *length, str what) except NULL:
    """UTF-8 bytes of `text`, owned by the str object (no copy for ASCII, cached on it otherwise)."""
    if PyUnicode_CheckExact(text) and PyUnicode_IS_COMPACT_ASCII(text):
        length[0] = PyUnicode_GET_LENGTH(text)
        return <const char *>PyUnicode_DATA(text)
    try:
        return PyUnicode_AsUTF8AndSize(text, length)
    except UnicodeEncodeError as exc:
        raise ProtocolError(
            f"binary header: {what} is not encodable as UTF-8 ({exc.reason} at index {exc.start})") from None


def encode_binary_header(code, language, version, opaque, flag, remark, ext_fields):
    """Encode a ROCKETMQ (binary) header; see `namesrv._purepath.encode_binary_header`."""
    if not (_fits(code, -32768, 32767) and _fits(version, -32768, 32767) and _fits(language, 0, 255)
            and _fits(opaque, -2147483648, 2147483647) and _fits(flag, -2147483648, 2147483647)):
        raise ProtocolError(f"binary header cannot carry code={code} language={language} version={version} "
                            f"opaque={opaque} flag={flag}")
    cdef Py_ssize_t remark_len = 0, key_len, value_len, ext_len = 0, pos
    cdef const char *remark_utf8 = NULL
    cdef const char *key_utf8
    cdef const char *value_utf8
    cdef PyObject *key_ref
    cdef PyObject *value_ref
    cdef object key, value
    cdef dict entries = None
    if remark:
        remark_utf8 = _utf8_of(remark, &remark_len, "remark")
    if ext_fields:
        entries = ext_fields if type(ext_fields) is dict else dict(ext_fields.items())
        # First pass: validate and size; the second writes the same entries, their UTF-8 now
        # cached on the str objects. (Only non-str entries could run Python code in between.)
        pos = 0
        while PyDict_Next(entries, &pos, &key_ref, &value_ref):
            key = <object>key_ref
            value = <object>value_ref
            if _is_null(key) or _is_null(value):
                continue
            key_utf8 = _utf8_of(key, &key_len, "extFields key")
            value_utf8 = _utf8_of(value, &value_len, "extFields value")
            if key_len > 32767:
                raise ProtocolError(f"binary header: extFields key of {key_len} bytes is too long")
            ext_len += 6 + key_len + value_len
    cdef bytes out = PyBytes_FromStringAndSize(NULL, FIXED_LEN + remark_len + ext_len)
    cdef unsigned char *w = <unsigned char *>PyBytes_AS_STRING(out)
    cdef unsigned char *stop = w + FIXED_LEN + remark_len + ext_len
    w = _write_i16(w, <int16_t>code)
    w[0] = <unsigned char><int>language
    w = _write_i16(w + 1, <int16_t>version)
    w = _write_i32(w, <int32_t>opaque)
    w = _write_i32(w, <int32_t>flag)
    w = _write_i32(w, <int32_t>remark_len)
    if remark_len:
        w = _write_bytes(w, remark_utf8, remark_len)
    w = _write_i32(w, <int32_t>ext_len)
    if ext_len:
        pos = 0
        while PyDict_Next(entries, &pos, &key_ref, &value_ref):
            key = <object>key_ref
            value = <object>value_ref
            if _is_null(key) or _is_null(value):
                continue
            key_utf8 = _utf8_of(key, &key_len, "extFields key")
            value_utf8 = _utf8_of(value, &value_len, "extFields value")
            if stop - w < 6 + key_len + value_len:  # only a __bool__ that edits the dict gets here
                raise RuntimeError("ext_fields changed while being encoded")
            w = _write_i16(w, <int16_t>key_len)
            w = _write_bytes(w, key_utf8, key_len)
            w = _write_i32(w, <int32_t>value_len)
            w = _write_bytes(w, value_utf8, value_len)
    if w != stop:
        raise RuntimeError("ext_fields changed while being encoded")
    return out


def body_crc32(data):
    """The masked CRC32 RocketMQ puts in `bodyCrc32`; see `namesrv._purepath.body_crc32`. The CRC32
    is ISA-L's (isal: carry-less multiply, 5-10x zlib's table walk); the pure twin's zlib gives the
    same value."""
    if not data:
        return 0
    return _isal_crc32(data) & 0x7FFFFFFF



cdef inline bint _is_int32(object value) except -1:
    """A JSON integer (exactly int, so never bool) within int32."""
    cdef int overflow = 0
    cdef long long number
    if type(value) is not int:
        return False
    number = PyLong_AsLongLongAndOverflow(value, &overflow)
    return overflow == 0 and -2147483648 <= number <= 2147483647


# Twin of `_plain_queue_fields` in namesrv/_purepath.py: the one definition of a "plain" topic
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
    """A parsed topicConfigTable as the route table reads it; see `namesrv._purepath.queue_fields`."""
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
# `orjson.loads` + the transform (`namesrv._purepath.scan_registration`), so whatever it does not
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
    #include <string.h>
    /* A 64-bit digest of p[0:n]: multiply-rotate over 8-byte words, then murmur3's finaliser. Not
       cryptographic: it tells a topic entry from the broker's own previous entries, where only
       an accident can collide (and a broker can only ever mislead itself). */
    static inline uint64_t namesrv_mix(uint64_t h, uint64_t w) {
        h ^= w * 0xC2B2AE3D27D4EB4FULL;
        return ((h << 31) | (h >> 33)) * 0x9E3779B97F4A7C15ULL;
    }
    static inline uint64_t namesrv_digest(const unsigned char *p, Py_ssize_t n) {
        uint64_t h = (uint64_t)n, a = 0x243F6A8885A308D3ULL, b = 0x13198A2E03707344ULL,
                 c = 0xA4093822299F31D0ULL, d = 0x082EFA98EC4E6C89ULL, w, x, y, z;
        for (; n >= 32; p += 32, n -= 32) {  /* four independent lanes: no multiply waits on another */
            memcpy(&w, p, 8);
            memcpy(&x, p + 8, 8);
            memcpy(&y, p + 16, 8);
            memcpy(&z, p + 24, 8);
            a = namesrv_mix(a, w);
            b = namesrv_mix(b, x);
            c = namesrv_mix(c, y);
            d = namesrv_mix(d, z);
        }
        h = namesrv_mix(namesrv_mix(namesrv_mix(namesrv_mix(h, a), b), c), d);
        for (; n >= 8; p += 8, n -= 8) {
            memcpy(&w, p, 8);
            h = namesrv_mix(h, w);
        }
        if (n > 0) {
            w = 0;
            memcpy(&w, p, (size_t)n);
            h = namesrv_mix(h, w);
        }
        h ^= h >> 33;
        h *= 0xFF51AFD7ED558CCDULL;
        h ^= h >> 33;
        h *= 0xC4CEB9FE1A85EC53ULL;
        h ^= h >> 33;
        return h ? h : 1;  /* 0 marks an empty slot of a set */
    }
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
    uint64_t _digest "namesrv_digest" (const unsigned char *p, Py_ssize_t n) nogil
    Py_ssize_t _set_slots "namesrv_set_slots" (Py_ssize_t n) nogil
    bint _set_add "namesrv_set_add" (uint64_t *slots, Py_ssize_t count, uint64_t value) nogil


cdef struct _Entry:
    # What scan_registration remembers of a topic entry, in table order (16 bytes: a broker of
    # 10,000 topics costs 160 KB): the digest of its bytes (key to closing brace), and in one
    # word its key digest's top 40 bits (to find a repeated key) and its length (0 if past 24 bits:
    # never stepped over).
    uint64_t digest
    uint64_t key_length


cdef enum:
    ENTRY_LENGTH_BITS = 24


cdef struct _Digests:
    const _Entry *previous      # the previous registration's entries, in its table order
    Py_ssize_t previous_count
    _Entry *entries             # this table's entries, in order (grown as they are read)
    Py_ssize_t count
    Py_ssize_t capacity
    Py_ssize_t omitted
    int tables          # topic tables reached: a repeated table key would make the entries ambiguous
    bint escaped_key    # a key with escapes has more than one spelling: digests cannot tell keys apart


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
    here; anything else (a sign, a longer one, a leading zero, a fraction) goes to `_number`."""
    cdef const unsigned char *p = j.p
    cdef Py_ssize_t pos = j.pos, limit = j.pos + 9 if j.end - j.pos > 9 else j.end
    cdef long value = 0
    while pos < limit and 48 <= p[pos] <= 57:
        value = value * 10 + (p[pos] - 48)
        pos += 1
    if (pos == j.pos or pos == j.end or 48 <= p[pos] <= 57 or p[pos] == 46 or p[pos] == 101 or p[pos] == 69
            or (p[j.pos] == 48 and pos - j.pos > 1)):
        return _number(j)
    j.pos = pos
    return PyLong_FromLong(value)


cdef object _value(_Json *j, int depth):
    """The value at the cursor; `depth` is the nesting of the container holding it."""
    cdef unsigned char c = _peek(j)
    if c == 34:
        return _string(j)
    if c == 123:
        return _object(j, depth + 1, None, 0)
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


cdef dict _object(_Json *j, int depth, tuple path, Py_ssize_t step):
    """An object; when `path` is given, the member named path[step] is followed further (the
    last step is the topic table)."""
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
            if step + 1 == len(path):
                value = _table(j, depth + 1)
            else:
                value = _object(j, depth + 1, path, step + 1)
        else:
            value = _value(j, depth)
        out[key] = value  # a duplicate key keeps its first place and its last value, as in orjson
        if not _more(j, 125):
            return out


cdef dict _table(_Json *j, int depth):
    """The topic table: an object whose plain entries become queue-fields tuples.

    With digests asked for, every entry is noted (`_Entry`), and an entry whose bytes are those
    of the previous registration's entry at the same place is stepped over unread: the route
    table holds it already. Brokers list their topics in a stable order, so a registration that
    changed a few topics has only those read.
    """
    cdef dict out = {}
    cdef object key, value
    cdef Py_ssize_t start, length, entry_start, span, index = 0
    cdef int flags
    cdef const _Entry *before
    cdef _Digests *d = j.digests
    if d != NULL:
        d.tables += 1
    if _opened_empty(j, depth, 125):
        return out
    while True:
        if _peek(j) != 34:
            raise _NotForMe
        entry_start = j.pos
        if d != NULL and index < d.previous_count:
            before = d.previous + index
            span = <Py_ssize_t>(before.key_length & ((1 << ENTRY_LENGTH_BITS) - 1))
            if 0 < span <= j.end - entry_start and _digest(j.p + entry_start, span) == before.digest:
                _note_entry(d, before.digest, before.key_length)
                d.omitted += 1
                j.pos = entry_start + span
                index += 1
                if not _more(j, 125):
                    return out
                continue
        flags = _string_span(j, &start, &length)
        key = _string_object(j.p + start, length, flags)  # topic names: too many for the key cache
        _expect(j, 58)
        if _peek(j) == 123:
            value = _entry(j, depth + 1, key if flags & STR_ESCAPED == 0 else None, start, length)
        else:
            value = _value(j, depth)
        if d != NULL:
            if flags & STR_ESCAPED:
                d.escaped_key = True
            span = j.pos - entry_start
            _note_entry(d, _digest(j.p + entry_start, span),
                        (_digest(j.p + start, length) >> ENTRY_LENGTH_BITS << ENTRY_LENGTH_BITS)
                        | (<uint64_t>span if span < (1 << ENTRY_LENGTH_BITS) else 0))
        out[key] = value
        index += 1
        if not _more(j, 125):
            return out


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
    cdef dict entry = _object(j, depth, None, 0)
    fields = _plain_entry(entry)
    return entry if fields is None else fields


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
        if (predicted != F_OTHER and j.end - j.pos >= _ENTRY_KEY_LENGTH[predicted]
                and _same(j.p + j.pos, <const unsigned char *>_ENTRY_KEY[predicted], _ENTRY_KEY_LENGTH[predicted])):
            field = predicted
            j.pos += _ENTRY_KEY_LENGTH[predicted]
            _skip_ws(j)
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
    """A registration body parsed as `orjson.loads` does, with the plain entries of the object at
    `table_path` as queue-fields tuples (see `namesrv._purepath.scan_registration`), plus what it
    takes to read only the changed entries of the broker's next registration: `previous` is the
    `entries` a call for its last registration returned, or None. `data` is any bytes-like object.

    Returns (value, entries, omitted) or None. Each topic entry whose bytes are those of the
    entry at the same place in `previous` is left out of the table; `omitted` counts them.
    `entries` (bytes) is None when it cannot stand for the table: no single topic table, a
    repeated key, or a key with escapes (several spellings of one key); then nothing is left out
    either. The pure twin (`namesrv._purepath.scan_registration`) never has entries, so it
    leaves nothing out.
    """
    cdef _Digests d
    cdef object value
    if previous is not None and len(<bytes?>previous) % sizeof(_Entry):
        raise ValueError("previous: not the entries of a scan_registration")
    d.previous = NULL
    d.previous_count = 0
    if previous is not None:
        d.previous = <const _Entry *><const char *>PyBytes_AS_STRING(previous)
        d.previous_count = len(previous) // sizeof(_Entry)
    d.entries = NULL
    d.count = 0
    d.capacity = 0
    d.omitted = 0
    d.tables = 0
    d.escaped_key = False
    try:
        value = _scan(data, table_path, &d, False)
        if d.tables != 1 or d.escaped_key or _has_repeated_key(d.entries, d.count):
            return scan_registration(data, table_path, None) if d.omitted else (value, None, 0)
        return value, PyBytes_FromStringAndSize(<const char *>d.entries, d.count * sizeof(_Entry)), d.omitted
    except (_NotForMe, UnicodeDecodeError):
        return None
    finally:
        PyMem_Free(d.entries)


cdef bint _has_repeated_key(const _Entry *entries, Py_ssize_t count) except -1:
    """Do two entries have one key digest (a repeated key, or once in 2**39 two keys alike)?"""
    cdef Py_ssize_t slots = _set_slots(count), i
    cdef uint64_t *seen = <uint64_t *>PyMem_Calloc(slots, sizeof(uint64_t))
    if seen == NULL:
        raise MemoryError()
    try:
        for i in range(count):
            if not _set_add(seen, slots, (entries[i].key_length >> ENTRY_LENGTH_BITS) | 1):
                return True
        return False
    finally:
        PyMem_Free(seen)


def count_entries(data, tuple table_path not None):
    """How many members the object at `table_path` has, as `orjson.loads` would see them, or None;
    see `namesrv._purepath.count_entries`. Nothing is built: members are only syntax-checked."""
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
    memset(&d, 0, sizeof(d))
    if _opened_empty(j, depth, 125):
        return 0
    try:
        while True:
            if _peek(j) != 34 or _string_span(j, &start, &length) & STR_ESCAPED:
                raise _NotForMe
            _note_entry(&d, 0, _digest(j.p + start, length) >> ENTRY_LENGTH_BITS << ENTRY_LENGTH_BITS)
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
    cdef Py_ssize_t count
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
            value = _object(&j, 1, table_path, 0)
        else:
            value = _value(&j, 0)
        _skip_ws(&j)
        if j.pos != j.end:
            raise _NotForMe
        return value
    finally:
        PyBuffer_Release(&view)


# ---------------------------------------------------------------------------------------------
# The reactor's per-frame answers (namesrv.processor.seen_headers): a repeat header's key and
# opaque, and a response frame stamped from its pre-encoded header halves.
# ---------------------------------------------------------------------------------------------

cdef const char *_OPAQUE_KEY = b'"opaque":'
cdef enum:
    OPAQUE_KEY_LEN = 9


cdef object _canonical_int32(const unsigned char *p, Py_ssize_t length):
    """The int a JSON integer written as `b"%d"` writes it has, within int32; else None."""
    cdef Py_ssize_t i = 0
    cdef long long value = 0
    cdef bint negative = length > 0 and p[0] == 45
    if negative:
        i = 1
    if length - i < 1 or length - i > 10 or (p[i] == 48 and length - i > 1):
        return None
    while i < length:
        if p[i] < 48 or p[i] > 57:
            return None
        value = value * 10 + (p[i] - 48)
        i += 1
    if negative:
        if value == 0:
            return None  # "-0" is not how %d writes 0
        value = -value
    if value < -2147483648 or value > 2147483647:
        return None
    return PyLong_FromLongLong(value)


cdef object _opaque_key(const unsigned char *p, Py_ssize_t size):
    """`json_opaque_key` of the header at p[:size]."""
    cdef Py_ssize_t at = -1, i = 0, comma = -1, value_at
    cdef bytes key
    while i + OPAQUE_KEY_LEN <= size:
        if p[i] == 34 and memcmp(p + i, _OPAQUE_KEY, OPAQUE_KEY_LEN) == 0:
            at = i
            break
        i += 1
    if at < 0:
        return None
    value_at = at + OPAQUE_KEY_LEN
    i = value_at
    while i < size:
        if p[i] == 44:
            comma = i
            break
        i += 1
    if comma < 0:
        return None
    key = PyBytes_FromStringAndSize(NULL, size - (comma - value_at))
    memcpy(PyBytes_AS_STRING(key), p, value_at)
    memcpy(PyBytes_AS_STRING(key) + value_at, p + comma, size - comma)
    return key, _canonical_int32(p + value_at, comma - value_at)


def json_opaque_key(header):
    """See `namesrv._purepath.json_opaque_key`."""
    cdef Py_buffer view
    PyObject_GetBuffer(header, &view, PyBUF_SIMPLE)
    try:
        return _opaque_key(<const unsigned char *>view.buf, view.len)
    finally:
        PyBuffer_Release(&view)


cdef bytes _stamp(bytes head, bytes tail, int opaque, const char *body, Py_ssize_t body_len, int serialize_field,
                  bint binary):
    cdef char digits[16]
    cdef Py_ssize_t digits_len, header_len, total
    cdef unsigned char *out
    cdef bytes frame
    if binary:
        digits_len = 4
        _write_i32(<unsigned char *>digits, <int32_t>opaque)
    else:
        digits_len = snprintf(digits, sizeof(digits), "%d", opaque)
    header_len = len(head) + digits_len + len(tail)
    total = 4 + header_len + body_len
    frame = PyBytes_FromStringAndSize(NULL, 4 + total)
    out = <unsigned char *>PyBytes_AS_STRING(frame)
    out = _write_i32(out, <int32_t>total)
    out = _write_i32(out, <int32_t>(serialize_field | header_len))
    out = _write_bytes(out, PyBytes_AS_STRING(head), len(head))
    out = _write_bytes(out, digits, digits_len)
    out = _write_bytes(out, PyBytes_AS_STRING(tail), len(tail))
    _write_bytes(out, body, body_len)
    return frame


def stamp_frame(bytes head not None, bytes tail not None, int opaque, body, int serialize_field, bint binary):
    """See `namesrv._purepath.stamp_frame`."""
    cdef Py_buffer view
    if body is None:
        return _stamp(head, tail, opaque, NULL, 0, serialize_field, binary)
    PyObject_GetBuffer(body, &view, PyBUF_SIMPLE)
    try:
        return _stamp(head, tail, opaque, <const char *>view.buf, view.len, serialize_field, binary)
    finally:
        PyBuffer_Release(&view)


def route_hits(list frames not None, dict seen not None, query_type, lookup, bytes head not None,
               bytes tail not None):
    """See `namesrv._purepath.route_hits`."""
    cdef list replies = [], rest = []
    cdef const unsigned char *p
    cdef Py_ssize_t size
    cdef int32_t field
    cdef PyObject *query
    cdef object split, body
    for frame in frames:
        if type(frame) is not bytes:
            rest.append(frame)
            continue
        p = <const unsigned char *>PyBytes_AS_STRING(frame)
        size = len(<bytes>frame)
        if size >= 4:
            field = _read_i32(p)
            if field >= 0 and 4 + (field & 0xFFFFFF) <= size:  # a JSON header within the frame
                split = _opaque_key(p + 4, field & 0xFFFFFF)
                if split is not None and (<tuple>split)[1] is not None:
                    query = PyDict_GetItem(seen, (<tuple>split)[0])
                    if query is not NULL and type(<object>query) is query_type:
                        body = lookup(<object>query)
                        if type(body) is bytes:
                            replies.append(_stamp(head, tail, (<tuple>split)[1], PyBytes_AS_STRING(body),
                                                  len(<bytes>body), 0, False))
                            continue
        rest.append(frame)
    return replies, rest


# Imported last on purpose: namesrv.protocol's __init__ imports namesrv.fastpath, which imports
# this module; binding the functions first lets `import namesrv._fastpath` come first too.
from namesrv.protocol.errors import ProtocolError
