# Twin of namesrv/fastpath/frames.py: frames off a byte stream, response frames stamped from
# pre-encoded header halves, and the body CRC32.

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
    """Split complete frames off the front of `buf`; see `namesrv.fastpath.frames.split_frames`."""
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


def body_crc32(data):
    """The masked CRC32 RocketMQ puts in `bodyCrc32`; see `namesrv.fastpath.frames.body_crc32`. The CRC32
    is ISA-L's (carry-less multiply, 5-10x zlib's table walk), computed without the interpreter lock
    for a body past GIL_FREE_BYTES; the pure twin's zlib gives the same value."""
    cdef Py_buffer view
    cdef uint32_t crc
    if not data:
        return 0
    PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
    try:
        if view.len >= GIL_FREE_BYTES:
            with nogil:
                crc = _crc32(<const unsigned char *>view.buf, view.len)
        else:
            crc = _crc32(<const unsigned char *>view.buf, view.len)
    finally:
        PyBuffer_Release(&view)
    return crc & 0x7FFFFFFF


def body_digest(frame):
    """See `namesrv.fastpath.frames.body_digest`: read off the frame, no view of its body made."""
    cdef Py_buffer view
    cdef const unsigned char *p
    cdef Py_ssize_t at
    cdef uint64_t digest = 0
    PyObject_GetBuffer(frame, &view, PyBUF_SIMPLE)
    try:
        p = <const unsigned char *>view.buf
        if view.len >= 4:
            at = 4 + ((<Py_ssize_t>p[1] << 16) | (<Py_ssize_t>p[2] << 8) | p[3])
            if view.len - at >= GIL_FREE_BYTES:
                with nogil:
                    digest = _digest(p + at, view.len - at)
            elif view.len > at:
                digest = _digest(p + at, view.len - at)
    finally:
        PyBuffer_Release(&view)
    return digest



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
        digits_len = _write_decimal(digits, <int32_t>opaque)
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


def stamp_frame(int serialize_field, bint binary, bytes head not None, bytes tail not None, int opaque, body):
    """See `namesrv.fastpath.frames.stamp_frame`."""
    cdef Py_buffer view
    if body is None:
        return _stamp(head, tail, opaque, NULL, 0, serialize_field, binary)
    PyObject_GetBuffer(body, &view, PyBUF_SIMPLE)
    try:
        return _stamp(head, tail, opaque, <const char *>view.buf, view.len, serialize_field, binary)
    finally:
        PyBuffer_Release(&view)


def stamp_frames(bytes head not None, bytes tail not None, list opaques not None, list bodies not None):
    """See `namesrv.fastpath.frames.stamp_frames`."""
    cdef list out = []
    cdef Py_ssize_t i, count = len(bodies)
    cdef object body
    if len(opaques) != count:
        raise ValueError("stamp_frames: one opaque per body")
    for i in range(count):
        body = bodies[i]
        if type(body) is bytes:
            out.append(_stamp(head, tail, opaques[i], PyBytes_AS_STRING(body), len(<bytes>body), 0, False))
        elif body is not None:
            raise TypeError(f"stamp_frames: a body is bytes or None, not {type(body).__name__}")
    return out
