# cython: language_level=3, autotestdict=False
"""Depth and size of a JSON body, measured before it is parsed.

A JSON parser builds a Python object per value: 64 MiB of ``[],`` become 22 million lists
(1.8 GB). One pass over the bytes, without the GIL and without allocating, counts the
nesting and the values first, so that a body past ``--http-max-json-depth`` or
``--http-max-json-elements`` is refused before anything is built. Strings are skipped
(their brackets and commas are text). The scan does not validate the JSON: the parser that
runs next does.
"""

from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer


cdef enum Verdict:
    FITS = 0
    TOO_DEEP = 1
    TOO_MANY = 2


cdef Verdict _scan(const unsigned char* data, Py_ssize_t size, Py_ssize_t max_depth,
                   Py_ssize_t max_elements) noexcept nogil:
    cdef Py_ssize_t i = 0, depth = 0, elements = 0
    cdef unsigned char c
    while i < size:
        c = data[i]
        i += 1
        if c == b'"':
            while i < size:  # to the closing quote, past escaped characters
                c = data[i]
                i += 1
                if c == b'\\':
                    i += 1
                elif c == b'"':
                    break
        elif c == b'[' or c == b'{':
            depth += 1
            elements += 1
            if depth > max_depth:
                return TOO_DEEP
            if elements > max_elements:
                return TOO_MANY
        elif c == b']' or c == b'}':
            depth -= 1
        elif c == b',':
            elements += 1
            if elements > max_elements:
                return TOO_MANY
    return FITS


def check_json_limits(body, Py_ssize_t max_depth, Py_ssize_t max_elements):
    """Raise ValueError if ``body`` (any bytes-like) nests arrays and objects deeper than
    ``max_depth`` or holds more than ``max_elements`` values (each array, object and each
    comma-separated entry after the first counts one)."""
    cdef Py_buffer view
    cdef Verdict verdict
    PyObject_GetBuffer(body, &view, PyBUF_SIMPLE)
    try:
        with nogil:
            verdict = _scan(<const unsigned char*>view.buf, view.len, max_depth, max_elements)
    finally:
        PyBuffer_Release(&view)
    if verdict == TOO_DEEP:
        raise ValueError(
            f"the JSON body nests arrays and objects deeper than {max_depth} levels "
            "(--http-max-json-depth)")
    if verdict == TOO_MANY:
        raise ValueError(
            f"the JSON body holds more than {max_elements} values (--http-max-json-elements)")
