# cython: language_level=3
"""The JSON header of an infer response, written directly.

The common response (no response parameters, no output bound for a client's region, names
of printable ASCII) is written here byte for byte as the general encode writes it through a
dict and orjson (``frontends/http/infer_codec.py``): the same keys in the same order, no
spaces. Each output is either sent binary (its blob's size in ``binary_data_size``) or
carries its ``data`` as orjson wrote it alone (an array's JSON is the same alone and inside
the document). Anything else returns None and the general encode writes it.
"""

cimport cython
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_CheckExact, PyBytes_FromStringAndSize
from cpython.bytes cimport PyBytes_GET_SIZE
from cpython.long cimport PyLong_CheckExact
from cpython.mem cimport PyMem_Free, PyMem_Malloc
from cpython.tuple cimport PyTuple_CheckExact
from cpython.unicode cimport PyUnicode_CheckExact
from libc.string cimport memcpy


cdef extern from "string.h" nogil:
    void* memmem(const void* haystack, size_t haystack_size, const void* needle,
                 size_t needle_size)


cdef extern from "Python.h":
    const char* PyUnicode_AsUTF8AndSize(object text, Py_ssize_t* size) except NULL
    long long PyLong_AsLongLongAndOverflow(object value, int* overflow) except? -1
    bint PyUnicode_IS_ASCII(object text)


cdef bint _plain(str text) except -1:
    """Whether JSON writes ``text`` as it is between quotes: printable ASCII, no quote,
    no backslash (orjson escapes nothing else in such a string)."""
    cdef Py_ssize_t size, i
    cdef const char* data
    cdef char c
    if not PyUnicode_IS_ASCII(text):
        return False
    data = PyUnicode_AsUTF8AndSize(text, &size)
    for i in range(size):
        c = data[i]
        if c < 0x20 or c == 0x7f or c == c'"' or c == c'\\':
            return False
    return True


cdef long long _small(value) except -2:
    """A non-negative Python int below 2**62 (every shape and size) as a C integer; -1 for
    anything else."""
    cdef int overflow = 0
    cdef long long number
    if not PyLong_CheckExact(value):
        return -1
    number = PyLong_AsLongLongAndOverflow(value, &overflow)
    if overflow or number < 0 or number >= (<long long>1 << 62):
        return -1
    return number


cdef enum:
    _STACK_BYTES = 2048  # most headers fit; a longer one moves to the heap


cdef struct _Writer:
    char* buffer  # ``stack`` until the header outgrows it
    Py_ssize_t size
    Py_ssize_t capacity
    char stack[_STACK_BYTES]


cdef int _grow(_Writer* out, Py_ssize_t needed) except -1:
    cdef Py_ssize_t capacity = out.capacity * 2
    cdef char* grown
    while capacity < needed:
        capacity *= 2
    grown = <char*>PyMem_Malloc(capacity)
    if grown == NULL:
        raise MemoryError()
    memcpy(grown, out.buffer, out.size)
    if out.buffer != out.stack:
        PyMem_Free(out.buffer)
    out.buffer = grown
    out.capacity = capacity
    return 0


cdef inline int _raw(_Writer* out, const char* data, Py_ssize_t size) except -1:
    if out.size + size > out.capacity:
        _grow(out, out.size + size)
    memcpy(out.buffer + out.size, data, size)
    out.size += size
    return 0


cdef inline int _text(_Writer* out, str value) except -1:
    cdef Py_ssize_t size
    cdef const char* data = PyUnicode_AsUTF8AndSize(value, &size)
    _raw(out, b'"', 1)
    _raw(out, data, size)
    return _raw(out, b'"', 1)


include "decimal_digits.pxi"


cdef inline int _number(_Writer* out, long long value) except -1:
    """A non-negative integer in decimal."""
    cdef char digits[24]
    cdef int first = _decimal_digits(value, digits)
    return _raw(out, digits + first, 24 - first)


cdef bint _write(_Writer* out, str request_id, str model_name, str model_version,
                 list outputs, list parts) except -1:
    """Write the header; False when it is not plain."""
    cdef Py_ssize_t index
    cdef long long number
    _raw(out, b"{", 1)
    if request_id:
        _raw(out, b'"id":', 5)
        _text(out, request_id)
        _raw(out, b",", 1)
    _raw(out, b'"model_name":', 13)
    _text(out, model_name)
    _raw(out, b',"model_version":', 17)
    _text(out, model_version)
    _raw(out, b',"outputs":[', 12)
    for index in range(len(outputs)):
        tensor = outputs[index]
        name = tensor.name
        wire_name = tensor.datatype.wire_name
        shape = tensor.shape
        part = parts[index]
        if (not PyUnicode_CheckExact(name) or not _plain(name)
                or not PyUnicode_CheckExact(wire_name) or not _plain(wire_name)
                or not PyTuple_CheckExact(shape)):
            return False
        if index:
            _raw(out, b",", 1)
        _raw(out, b'{"name":', 8)
        _text(out, name)
        _raw(out, b',"datatype":', 12)
        _text(out, wire_name)
        _raw(out, b',"shape":[', 10)
        for dim_index in range(len(<tuple>shape)):
            number = _small((<tuple>shape)[dim_index])
            if number < 0:
                return False
            if dim_index:
                _raw(out, b",", 1)
            _number(out, number)
        if PyBytes_CheckExact(part):
            # orjson writes NaN and infinities as null: such data (or the word in a
            # string) is the general encode's to write as Triton does.
            if memmem(PyBytes_AS_STRING(part), PyBytes_GET_SIZE(part), b"null", 4) != NULL:
                return False
            _raw(out, b'],"data":', 9)
            _raw(out, PyBytes_AS_STRING(part), PyBytes_GET_SIZE(part))
            _raw(out, b"}", 1)
        else:
            number = _small(part)
            if number < 0:
                return False
            _raw(out, b'],"parameters":{"binary_data_size":', 35)
            _number(out, number)
            _raw(out, b"}}", 2)
    _raw(out, b"]}", 2)
    return True


def response_header(str request_id not None, str model_name not None,
                    str model_version not None, list outputs not None, list parts not None):
    """The JSON header of a response with ``outputs`` (tensors: ``name``, ``datatype`` with
    ``wire_name``, ``shape``), ``parts`` one per output: an int for an output sent binary
    (its blob's byte size), bytes for one carried in JSON (its ``data`` as orjson writes
    it); None when a name, a shape or a part is not plain, or a JSON part holds ``null``
    (the general encode writes it)."""
    cdef _Writer out
    if len(parts) != len(outputs) or not (
            _plain(request_id) and _plain(model_name) and _plain(model_version)):
        return None
    out.buffer = out.stack
    out.size = 0
    out.capacity = _STACK_BYTES
    try:
        if not _write(&out, request_id, model_name, model_version, outputs, parts):
            return None
        return PyBytes_FromStringAndSize(out.buffer, out.size)
    finally:
        if out.buffer != out.stack:
            PyMem_Free(out.buffer)
