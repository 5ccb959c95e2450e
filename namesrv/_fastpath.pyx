# cython: language_level=3, boundscheck=False, wraparound=False, initializedcheck=False
"""Cython implementation of the protocol hot path.

Same functions, results and `ProtocolError` messages as `namesrv/_purepath.py` (the tests run one
suite over both). Inputs are read through the buffer protocol, so bytes, bytearray and memoryview
all work without a copy; every length is checked against the buffer before a byte is read.
"""
from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize
from cpython.dict cimport PyDict_Next
from cpython.object cimport PyObject
from cpython.ref cimport Py_INCREF, Py_XDECREF
from libc.stdint cimport int16_t, int32_t, uint16_t, uint32_t
from libc.string cimport memcmp, memcpy


cdef extern from "Python.h":
    object PyUnicode_DecodeUTF8(const char *data, Py_ssize_t size, const char *errors)
    object PyUnicode_New(Py_ssize_t size, Py_UCS4 maxchar)
    void *PyUnicode_DATA(object text)
    bint PyUnicode_CheckExact(object value)
    bint PyUnicode_IS_COMPACT_ASCII(object text)
    Py_ssize_t PyUnicode_GET_LENGTH(object text)
    const char *PyUnicode_AsUTF8AndSize(object text, Py_ssize_t *size) except NULL
    long long PyLong_AsLongLongAndOverflow(object value, int *overflow) except? -1


cdef extern from "zlib.h" nogil:
    unsigned long crc32(unsigned long crc, const unsigned char *buf, unsigned int length)


cdef enum:
    FIXED_LEN = 21                # code, language, version, opaque, flag, remarkLength, extLength
    CRC_CHUNK = 1 << 30           # zlib takes an unsigned int length
    CRC_NOGIL_FROM = 64 * 1024    # below this, dropping the GIL costs more than it lets others run
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
    """The masked CRC32 RocketMQ puts in `bodyCrc32`; see `namesrv._purepath.body_crc32`."""
    if not data:
        return 0
    cdef Py_buffer view
    cdef const unsigned char *p
    cdef Py_ssize_t left
    cdef unsigned int chunk
    cdef unsigned long crc = 0
    PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
    try:
        p = <const unsigned char *>view.buf
        left = view.len
        if left < CRC_NOGIL_FROM:
            crc = crc32(crc, p, <unsigned int>left)
        else:
            with nogil:
                while left > 0:
                    chunk = <unsigned int>(CRC_CHUNK if left > CRC_CHUNK else left)
                    crc = crc32(crc, p, chunk)
                    p += chunk
                    left -= chunk
    finally:
        PyBuffer_Release(&view)
    return crc & 0x7FFFFFFF



cdef inline bint _is_int32(object value) except -1:
    """A JSON integer (exactly int, so never bool) within int32."""
    cdef int overflow = 0
    cdef long long number
    if type(value) is not int:
        return False
    number = PyLong_AsLongLongAndOverflow(value, &overflow)
    return overflow == 0 and -2147483648 <= number <= 2147483647


def queue_fields(dict table not None, fallback):
    """A parsed topicConfigTable as the route table reads it; see `namesrv._purepath.queue_fields`."""
    cdef dict out = {}
    cdef dict entry
    cdef object topic, read, write, perm, sys_flag, filter_type, order, attributes
    for key, obj in table.items():
        if type(obj) is dict:
            entry = <dict>obj
            topic = entry.get("topicName")
            read = entry.get("readQueueNums")
            write = entry.get("writeQueueNums")
            perm = entry.get("perm")
            sys_flag = entry.get("topicSysFlag")
            filter_type = entry.get("topicFilterType")
            order = entry.get("order")
            attributes = entry.get("attributes")
            if (type(topic) is str and PyUnicode_GET_LENGTH(topic) > 0 and _is_int32(read) and _is_int32(write)
                    and _is_int32(perm) and _is_int32(sys_flag) and (order is True or order is False)
                    and type(filter_type) is str and (filter_type == "SINGLE_TAG" or filter_type == "MULTI_TAG")
                    and (attributes is None or type(attributes) is dict)):
                out[key] = (topic, read, write, perm, sys_flag)
                continue
        out[key] = fallback(obj, key)
    return out


# Imported last on purpose: namesrv.protocol's __init__ imports namesrv.fastpath, which imports
# this module; binding the functions first lets `import namesrv._fastpath` come first too.
from namesrv.protocol.errors import ProtocolError
