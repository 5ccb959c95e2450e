# cython: language_level=3, boundscheck=False, wraparound=False, initializedcheck=False
"""The Cython twin of namesrv.fastpath's pure modules, one extension built from one file per concern.

Each `namesrv/fastpath/<concern>.pxi` is the twin of `namesrv/fastpath/<concern>.py`: the same
functions with the same results, features and `ProtocolError` messages (the tests run one suite
over both, and hypothesis differentials between them). The one licence: the JSON scanner may
answer None ("parse it yourself") where its twin answers, never another value. Inputs are read
through the buffer protocol, so bytes, bytearray and memoryview all work without a copy; every
length is checked against the buffer before a byte is read.
"""
cimport cython
from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize
from cpython.dict cimport PyDict_Next
from cpython.long cimport PyLong_FromLong, PyLong_FromLongLong, PyLong_FromUnsignedLongLong
from cpython.mem cimport PyMem_Calloc, PyMem_Free, PyMem_Malloc, PyMem_RawFree, PyMem_RawRealloc, PyMem_Realloc
from cpython.object cimport PyObject
from cpython.ref cimport Py_INCREF, Py_XDECREF
from libc.stdint cimport int16_t, int32_t, uint16_t, uint32_t, uint64_t
from libc.string cimport memchr, memcmp, memcpy, memset, strlen


cdef extern from "<string.h>":
    void *memmem(const void *haystack, size_t haystack_len, const void *needle, size_t needle_len) nogil


cdef extern from "Python.h":
    object PyUnicode_DecodeUTF8(const char *data, Py_ssize_t size, const char *errors)
    object PyUnicode_New(Py_ssize_t size, Py_UCS4 maxchar)
    void *PyUnicode_DATA(object text)
    bint PyUnicode_CheckExact(object value)
    bint PyUnicode_IS_COMPACT_ASCII(object text)
    Py_ssize_t PyUnicode_GET_LENGTH(object text)
    const char *PyUnicode_AsUTF8AndSize(object text, Py_ssize_t *size) except NULL
    long long PyLong_AsLongLongAndOverflow(object value, int *overflow) except? -1
    dict _PyDict_NewPresized(Py_ssize_t minused)
    void PyObject_GC_UnTrack(object value)


import os

from namesrv.errors import ProtocolError

include "fastpath/native.pxi"
include "fastpath/_bytes.pxi"
include "fastpath/frames.pxi"
include "fastpath/headers.pxi"
include "fastpath/registration.pxi"
include "fastpath/generator.pxi"
