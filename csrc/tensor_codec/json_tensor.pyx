# cython: language_level=3
"""KServe v2 JSON ``data`` fields <-> numpy arrays (spec/protocol.md §1.4).

Input arrives already decoded by orjson into Python lists. Each element is type-checked
while it is stored into the typed output buffer, so a flat numeric list costs one pass of C
per element and no intermediate Python objects.
"""

cimport cython
cimport numpy as cnp
from cpython.bool cimport PyBool_Check
from cpython.bytearray cimport PyByteArray_AS_STRING, PyByteArray_Check, PyByteArray_GET_SIZE
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_Check, PyBytes_GET_SIZE
from cpython.float cimport PyFloat_AS_DOUBLE, PyFloat_Check
from cpython.list cimport PyList_Check
from cpython.long cimport (
    PyLong_AsDouble,
    PyLong_AsLongLongAndOverflow,
    PyLong_AsUnsignedLongLong,
    PyLong_Check,
)
from cpython.ref cimport PyObject, Py_INCREF, Py_XDECREF
from cpython.unicode cimport (
    PyUnicode_AsUTF8AndSize,
    PyUnicode_AsUTF8String,
    PyUnicode_Check,
    PyUnicode_DecodeUTF8,
)
from libc.stdint cimport (
    INT8_MAX,
    INT8_MIN,
    INT16_MAX,
    INT16_MIN,
    INT32_MAX,
    INT32_MIN,
    UINT8_MAX,
    UINT16_MAX,
    UINT32_MAX,
    int8_t,
    int16_t,
    int32_t,
    int64_t,
    uint8_t,
    uint16_t,
    uint32_t,
    uint64_t,
)

import numpy as np

cnp.import_array()

cdef extern from "Python.h":
    const Py_ssize_t PY_SSIZE_T_MAX

cdef enum:
    # Triton's limit on the nesting of a 'data' array (the outermost list is level 1).
    _MAX_DEPTH = 100

# Triton's own wording (http_server.cc), so the front end can reproduce its error text.
SHAPE_MISMATCH = "Shape does not match true shape of 'data' field"


cdef enum Kind:
    K_BOOL
    K_UINT8
    K_UINT16
    K_UINT32
    K_UINT64
    K_INT8
    K_INT16
    K_INT32
    K_INT64
    K_FP32
    K_FP64
    K_BYTES


# wire name -> (kind, numpy dtype, what a JSON element must be, for error messages)
_KINDS = {
    "BOOL": (K_BOOL, np.dtype(np.bool_), "a boolean (true/false)"),
    "UINT8": (K_UINT8, np.dtype(np.uint8), "a non-negative integer"),
    "UINT16": (K_UINT16, np.dtype(np.uint16), "a non-negative integer"),
    "UINT32": (K_UINT32, np.dtype(np.uint32), "a non-negative integer"),
    "UINT64": (K_UINT64, np.dtype(np.uint64), "a non-negative integer"),
    "INT8": (K_INT8, np.dtype(np.int8), "an integer"),
    "INT16": (K_INT16, np.dtype(np.int16), "an integer"),
    "INT32": (K_INT32, np.dtype(np.int32), "an integer"),
    "INT64": (K_INT64, np.dtype(np.int64), "an integer"),
    "FP32": (K_FP32, np.dtype(np.float32), "a number"),
    "FP64": (K_FP64, np.dtype(np.float64), "a number"),
    "BYTES": (K_BYTES, np.dtype(object), "a string"),
}
_NOT_IN_JSON = frozenset(("FP16", "BF16"))
_RANGES = {
    K_UINT8: (0, UINT8_MAX), K_UINT16: (0, UINT16_MAX), K_UINT32: (0, UINT32_MAX),
    K_UINT64: (0, 2**64 - 1), K_INT8: (INT8_MIN, INT8_MAX), K_INT16: (INT16_MIN, INT16_MAX),
    K_INT32: (INT32_MIN, INT32_MAX), K_INT64: (-2**63, 2**63 - 1),
}


cdef str _json_kind(object item):
    if item is None:
        return "null"
    if PyBool_Check(item):
        return "a boolean"
    if PyLong_Check(item):
        return "an integer"
    if PyFloat_Check(item):
        return "a float"
    if PyUnicode_Check(item):
        return "a string"
    if isinstance(item, dict):
        return "an object"
    return type(item).__name__


@cython.final
cdef class _Target:
    """Where the walk stores elements: the typed buffer and how to check what goes in."""
    cdef Kind kind
    cdef char* base
    cdef Py_ssize_t total
    cdef Py_ssize_t pos
    cdef str datatype
    cdef str expected

    cdef int type_error(self, object item) except -1:
        raise TypeError(
            f"{self.datatype} data must hold {self.expected} per element, got "
            f"{_json_kind(item)} at element {self.pos}"
        )

    cdef int range_error(self, object item) except -1:
        lo, hi = _RANGES[self.kind]
        raise ValueError(
            f"value {item} at element {self.pos} is out of range for {self.datatype} "
            f"[{lo}, {hi}]"
        )

    cdef inline int store_int(self, object item) except -1:
        cdef int overflow = 0
        cdef long long v
        cdef unsigned long long u
        cdef Py_ssize_t i = self.pos
        if not PyLong_Check(item) or PyBool_Check(item):
            return self.type_error(item)
        v = PyLong_AsLongLongAndOverflow(item, &overflow)
        if self.kind == K_UINT64:
            if overflow > 0:
                try:
                    u = PyLong_AsUnsignedLongLong(item)
                except OverflowError:
                    return self.range_error(item)
            elif overflow < 0 or v < 0:
                return self.range_error(item)
            else:
                u = <unsigned long long>v
            (<uint64_t*>self.base)[i] = u
            return 0
        if overflow != 0:
            return self.range_error(item)
        if self.kind == K_INT64:
            (<int64_t*>self.base)[i] = v
        elif self.kind == K_INT32:
            if v < INT32_MIN or v > INT32_MAX:
                return self.range_error(item)
            (<int32_t*>self.base)[i] = <int32_t>v
        elif self.kind == K_INT16:
            if v < INT16_MIN or v > INT16_MAX:
                return self.range_error(item)
            (<int16_t*>self.base)[i] = <int16_t>v
        elif self.kind == K_INT8:
            if v < INT8_MIN or v > INT8_MAX:
                return self.range_error(item)
            (<int8_t*>self.base)[i] = <int8_t>v
        elif self.kind == K_UINT32:
            if v < 0 or v > UINT32_MAX:
                return self.range_error(item)
            (<uint32_t*>self.base)[i] = <uint32_t>v
        elif self.kind == K_UINT16:
            if v < 0 or v > UINT16_MAX:
                return self.range_error(item)
            (<uint16_t*>self.base)[i] = <uint16_t>v
        else:  # K_UINT8
            if v < 0 or v > UINT8_MAX:
                return self.range_error(item)
            (<uint8_t*>self.base)[i] = <uint8_t>v
        return 0

    cdef inline int store(self, object item) except -1:
        cdef double d
        cdef PyObject* old
        cdef object encoded
        if self.pos >= self.total:
            raise ValueError(SHAPE_MISMATCH)
        if self.kind == K_FP32 or self.kind == K_FP64:
            if PyFloat_Check(item):
                d = PyFloat_AS_DOUBLE(item)
            elif PyLong_Check(item) and not PyBool_Check(item):
                try:
                    d = PyLong_AsDouble(item)
                except OverflowError:
                    raise ValueError(
                        f"value {item} at element {self.pos} is out of range for "
                        f"{self.datatype}"
                    ) from None
            else:
                return self.type_error(item)
            if self.kind == K_FP32:
                # Out-of-range doubles become +-inf, as in Triton (IEEE 754 conversion).
                (<float*>self.base)[self.pos] = <float>d
            else:
                (<double*>self.base)[self.pos] = d
        elif self.kind == K_BOOL:
            if item is True:
                self.base[self.pos] = 1
            elif item is False:
                self.base[self.pos] = 0
            else:
                return self.type_error(item)
        elif self.kind == K_BYTES:
            if not PyUnicode_Check(item):
                return self.type_error(item)
            encoded = PyUnicode_AsUTF8String(item)
            old = (<PyObject**>self.base)[self.pos]
            Py_INCREF(encoded)
            (<PyObject**>self.base)[self.pos] = <PyObject*>encoded
            Py_XDECREF(old)
        else:
            self.store_int(item)
        self.pos += 1
        return 0

    cdef int fill(self, list data, int depth) except -1:
        if depth > _MAX_DEPTH:
            raise ValueError(f"'data' is nested more than {_MAX_DEPTH} levels deep")
        for item in data:
            if PyList_Check(item):
                self.fill(<list>item, depth + 1)
            else:
                self.store(item)
        return 0


cdef Py_ssize_t _count(list data, int depth) except -1:
    """Leaf elements of a (possibly nested, possibly ragged) list, row-major."""
    if depth > _MAX_DEPTH:
        raise ValueError(f"'data' is nested more than {_MAX_DEPTH} levels deep")
    cdef Py_ssize_t total = 0
    for item in data:
        if PyList_Check(item):
            total += _count(<list>item, depth + 1)
        else:
            total += 1
    return total


cdef Py_ssize_t _element_count(tuple shape) except -1:
    cdef Py_ssize_t count = 1, dim
    for d in shape:
        if not PyLong_Check(d) or PyBool_Check(d):
            raise TypeError(f"shape entries must be integers, got {shape!r}")
        if d < 0:
            raise ValueError(f"shape entries must be non-negative, got {shape!r}")
        if d > PY_SSIZE_T_MAX:
            raise ValueError(f"shape {shape!r} has too many elements")
        dim = d
        if dim != 0 and count > PY_SSIZE_T_MAX // dim:
            raise ValueError(f"shape {shape!r} has too many elements")
        count *= dim
    return count


def array_from_json_data(data, str datatype, shape):
    """Build a C-contiguous array of ``datatype`` and ``shape`` from a decoded JSON ``data``."""
    entry = _KINDS.get(datatype)
    if entry is None:
        if datatype in _NOT_IN_JSON:
            raise ValueError(f"receiving {datatype} data via JSON is not supported")
        raise ValueError(f"invalid datatype {datatype!r}")
    cdef tuple dims = tuple(shape)
    cdef Py_ssize_t total = _element_count(dims)
    cdef bint nested = PyList_Check(data)
    cdef Py_ssize_t found = _count(<list>data, 1) if nested else 1
    if found != total:
        raise ValueError(SHAPE_MISMATCH)
    cdef cnp.ndarray out = np.empty(total, dtype=entry[1])
    cdef _Target target = _Target.__new__(_Target)
    target.kind = entry[0]
    target.expected = entry[2]
    target.datatype = datatype
    target.base = <char*>cnp.PyArray_DATA(out)
    target.total = total
    target.pos = 0
    if nested:
        target.fill(<list>data, 1)
    else:
        target.store(data)
    if target.pos != total:  # only if the lists changed under us
        raise ValueError(SHAPE_MISMATCH)
    return out.reshape(dims)


cdef object _to_json_str(object item, Py_ssize_t index):
    """A BYTES element as the str JSON will carry; ValueError if it is not valid UTF-8."""
    cdef Py_ssize_t size
    try:
        if PyBytes_Check(item):
            return PyUnicode_DecodeUTF8(PyBytes_AS_STRING(item), PyBytes_GET_SIZE(item), NULL)
        if PyByteArray_Check(item):
            return PyUnicode_DecodeUTF8(
                PyByteArray_AS_STRING(item), PyByteArray_GET_SIZE(item), NULL)
        if not PyUnicode_Check(item):
            item = str(item)  # as serialize_bytes_tensor does for other objects
        PyUnicode_AsUTF8AndSize(item, &size)  # rejects lone surrogates
        return item
    except UnicodeError as exc:
        raise ValueError(
            f"BYTES element {index} is not valid UTF-8 ({exc.reason} at byte {exc.start}) "
            "and cannot be sent as JSON"
        ) from exc


def array_to_json_data(array):
    """The elements of ``array`` in C order as a flat list of JSON-ready Python values."""
    if not isinstance(array, np.ndarray):
        raise TypeError(f"expected a numpy.ndarray, got {type(array).__name__}")
    cdef object dtype = array.dtype
    cdef str kind = dtype.kind
    cdef list values
    cdef Py_ssize_t i
    if dtype == np.float16:
        raise ValueError("sending FP16 data via JSON is not supported")
    if dtype.name == "bfloat16":
        raise ValueError("sending BF16 data via JSON is not supported")
    if kind in "biu" or (kind == "f" and dtype.itemsize in (4, 8)):
        # ndarray.tolist is already one C loop creating the Python ints/floats/bools.
        return np.ravel(array, order="C").tolist()
    if kind in "OSU":
        values = np.ravel(array, order="C").tolist()
        for i in range(len(values)):
            values[i] = _to_json_str(values[i], i)
        return values
    raise TypeError(f"a {dtype} array has no Triton datatype that JSON can carry")
