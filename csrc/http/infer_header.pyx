# cython: language_level=3
"""The JSON header of a binary infer response, written directly.

The common response (every output binary, no response parameters, names of printable
ASCII) is written here byte for byte as the general encode writes it through a dict and
orjson (``frontends/http/infer_codec.py``): the same keys in the same order, no spaces.
Anything else returns None and the general encode writes it.
"""

cimport cython
from cpython.bytes cimport PyBytes_FromStringAndSize
from cpython.long cimport PyLong_CheckExact
from cpython.tuple cimport PyTuple_CheckExact
from cpython.unicode cimport PyUnicode_CheckExact
from libc.string cimport memcpy


cdef extern from "Python.h":
    const char* PyUnicode_AsUTF8AndSize(object text, Py_ssize_t* size) except NULL
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


cdef bint _small(value) except -1:
    """A non-negative Python int that a long long holds (every shape and size)."""
    return PyLong_CheckExact(value) and 0 <= value < (1 << 62)


cdef enum:
    # Headers longer than this go to the general encode (a response with many outputs).
    _CAPACITY = 2048


cdef struct _Writer:
    char buffer[_CAPACITY]
    Py_ssize_t size


cdef inline bint _raw(_Writer* out, const char* data, Py_ssize_t size) noexcept:
    if out.size + size > _CAPACITY:
        return False
    memcpy(out.buffer + out.size, data, size)
    out.size += size
    return True


cdef inline bint _text(_Writer* out, str value) except -1:
    cdef Py_ssize_t size
    cdef const char* data = PyUnicode_AsUTF8AndSize(value, &size)
    return _raw(out, b'"', 1) and _raw(out, data, size) and _raw(out, b'"', 1)


cdef inline bint _number(_Writer* out, long long value) noexcept:
    """A non-negative integer in decimal (not snprintf: a thousand instructions a call)."""
    cdef char digits[24]
    cdef int start = 24
    while True:
        start -= 1
        digits[start] = c'0' + <char>(value % 10)
        value //= 10
        if value == 0:
            break
    return _raw(out, digits + start, 24 - start)


def binary_response_header(str request_id not None, str model_name not None,
                           str model_version not None, list outputs not None,
                           list sizes not None):
    """The JSON header of a response whose ``outputs`` (tensors: ``name``, ``datatype``
    with ``wire_name``, ``shape``) are all sent binary, ``sizes`` their blobs' byte sizes;
    None when a name, a shape or the whole is not plain (the general encode writes it)."""
    cdef _Writer out
    cdef Py_ssize_t index, count = len(outputs)
    cdef bint ok
    if len(sizes) != count or not (
            _plain(request_id) and _plain(model_name) and _plain(model_version)):
        return None
    out.size = 0
    ok = _raw(&out, b"{", 1)
    if request_id:
        ok = ok and _raw(&out, b'"id":', 5) and _text(&out, request_id) and _raw(&out, b",", 1)
    ok = (ok and _raw(&out, b'"model_name":', 13) and _text(&out, model_name)
          and _raw(&out, b',"model_version":', 17) and _text(&out, model_version)
          and _raw(&out, b',"outputs":[', 12))
    for index in range(count):
        tensor = outputs[index]
        name = tensor.name
        wire_name = tensor.datatype.wire_name
        shape = tensor.shape
        size = sizes[index]
        if (not PyUnicode_CheckExact(name) or not _plain(name)
                or not PyUnicode_CheckExact(wire_name) or not _plain(wire_name)
                or not PyTuple_CheckExact(shape) or not _small(size)):
            return None
        if index:
            ok = ok and _raw(&out, b",", 1)
        ok = (ok and _raw(&out, b'{"name":', 8) and _text(&out, name)
              and _raw(&out, b',"datatype":', 12) and _text(&out, wire_name)
              and _raw(&out, b',"shape":[', 10))
        for dim_index in range(len(<tuple>shape)):
            dim = (<tuple>shape)[dim_index]
            if not _small(dim):
                return None
            if dim_index:
                ok = ok and _raw(&out, b",", 1)
            ok = ok and _number(&out, dim)
        ok = (ok and _raw(&out, b'],"parameters":{"binary_data_size":', 35)
              and _number(&out, size) and _raw(&out, b"}}", 2))
    ok = ok and _raw(&out, b"]}", 2)
    if not ok:
        return None
    return PyBytes_FromStringAndSize(out.buffer, out.size)

