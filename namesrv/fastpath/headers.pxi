# Twin of namesrv/fastpath/headers.py: the binary (ROCKETMQ) header codec, and the key and
# opaque of a JSON header that differs from another only in its opaque.

cdef enum:
    FIXED_LEN = 21                # code, language, version, opaque, flag, remarkLength, extLength

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
    """Decode a ROCKETMQ (binary) header; see `namesrv.fastpath.headers.decode_binary_header`."""
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
    """Encode a ROCKETMQ (binary) header; see `namesrv.fastpath.headers.encode_binary_header`."""
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
    cdef Py_ssize_t i, comma = -1, value_at
    cdef bytes key
    cdef const unsigned char *found = <const unsigned char *>memmem(p, size, _OPAQUE_KEY, OPAQUE_KEY_LEN)
    if found == NULL:
        return None
    value_at = (found - p) + OPAQUE_KEY_LEN
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
    """See `namesrv.fastpath.headers.json_opaque_key`."""
    cdef Py_buffer view
    PyObject_GetBuffer(header, &view, PyBUF_SIMPLE)
    try:
        return _opaque_key(<const unsigned char *>view.buf, view.len)
    finally:
        PyBuffer_Release(&view)



cdef bytes _BODY_CRC = b'"bodyCrc32":"'


def body_crc_key(key):
    """See `namesrv.fastpath.headers.body_crc_key`."""
    cdef Py_buffer view
    cdef const unsigned char *p
    cdef const unsigned char *found
    cdef const unsigned char *quote
    cdef Py_ssize_t size, start, digits, i
    cdef uint64_t value = 0
    cdef bytes out
    PyObject_GetBuffer(key, &view, PyBUF_SIMPLE)
    try:
        p = <const unsigned char *>view.buf
        size = view.len
        found = <const unsigned char *>memmem(p, size, PyBytes_AS_STRING(_BODY_CRC), len(_BODY_CRC))
        if found == NULL:
            return None
        start = (found - p) + len(_BODY_CRC)
        if memmem(p + start, size - start, PyBytes_AS_STRING(_BODY_CRC), len(_BODY_CRC)) != NULL:
            return None
        quote = <const unsigned char *>memchr(p + start, 0x22, size - start)
        if quote == NULL:
            return None
        digits = (quote - p) - start
        if digits == 0 or digits > 10 or (p[start] == 0x30 and digits > 1):
            return None
        for i in range(start, start + digits):
            if p[i] < 0x30 or p[i] > 0x39:
                return None
            value = value * 10 + (p[i] - 0x30)
        if value > 2147483647:
            return None
        out = PyBytes_FromStringAndSize(NULL, size - digits)
        memcpy(PyBytes_AS_STRING(out), p, start)
        memcpy(PyBytes_AS_STRING(out) + start, p + start + digits, size - start - digits)
        return out, <long long>value
    finally:
        PyBuffer_Release(&view)


def json_opaque_keys(list frames not None):
    """See `namesrv.fastpath.headers.json_opaque_keys`."""
    cdef list keys = [], opaques = []
    cdef const unsigned char *p
    cdef Py_ssize_t size
    cdef int32_t field
    cdef object split
    for frame in frames:
        split = None
        if type(frame) is bytes:
            p = <const unsigned char *>PyBytes_AS_STRING(frame)
            size = len(<bytes>frame)
            if size >= 4:
                field = _read_i32(p)
                if field >= 0 and 4 + (field & 0xFFFFFF) <= size:  # a JSON header within the frame
                    split = _opaque_key(p + 4, field & 0xFFFFFF)
        if split is not None and (<tuple>split)[1] is not None:
            keys.append((<tuple>split)[0])
            opaques.append((<tuple>split)[1])
        else:
            keys.append(None)
            opaques.append(0)
    return keys, opaques
