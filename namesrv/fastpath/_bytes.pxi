# Byte-level helpers every concern of namesrv._fastpath shares: big-endian integers, ASCII and
# UTF-8 strings, and the cache of short ASCII keys. C-level only, so they have no pure twin.

cdef enum:
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


@cython.cdivision(True)
cdef inline Py_ssize_t _write_decimal(char *p, int32_t value) noexcept nogil:
    """`value` in decimal as b"%d" writes it, at p (room for 11 bytes); its length. snprintf costs
    about 600 instructions more per stamped route answer (callgrind), most of it parsing "%d"."""
    cdef char reversed_digits[10]
    cdef Py_ssize_t count = 0, length = 0
    cdef uint32_t magnitude = <uint32_t>value
    if value < 0:
        p[0] = 45  # '-'
        length = 1
        magnitude = <uint32_t>0 - magnitude
    while True:
        reversed_digits[count] = <char>(48 + magnitude % 10)
        count += 1
        magnitude = magnitude // 10
        if magnitude == 0:
            break
    while count:
        count -= 1
        p[length] = reversed_digits[count]
        length += 1
    return length



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

