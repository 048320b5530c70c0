# cython: language_level=3, autotestdict=False
"""KServe v2 JSON ``data`` fields <-> numpy arrays (spec/protocol.md §1.4).

Input arrives already decoded by orjson into Python lists. Each element is type-checked
while it is stored into the typed output buffer: one C pass per element, with borrowed
references (no reference-count writes to the element objects) and no intermediate objects.

Output: numeric and BOOL arrays are handed to orjson as arrays (``OPT_SERIALIZE_NUMPY``
writes them faster, and shorter, than any list of Python numbers: see the module's .pyi);
only BYTES needs a list, of ``str``.
"""

from cpython.bytearray cimport PyByteArray_AS_STRING, PyByteArray_Check, PyByteArray_GET_SIZE
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_Check, PyBytes_GET_SIZE
from cpython.long cimport PyLong_AsUnsignedLongLong
from cpython.object cimport PyObject
from cpython.ref cimport Py_XDECREF
from cpython.unicode cimport PyUnicode_AsUTF8AndSize, PyUnicode_Check, PyUnicode_DecodeUTF8
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

cimport numpy as cnp

import operator

import numpy as np

cnp.import_array()

# The element loop works on borrowed PyObject* (the list owns the elements and no Python
# code runs while we walk it), so it uses these PyObject* spellings of the C API.
cdef extern from "Python.h":
    const Py_ssize_t PY_SSIZE_T_MAX
    PyObject* Py_True
    PyObject* Py_False
    Py_ssize_t PyList_GET_SIZE(PyObject* op)
    PyObject* PyList_GET_ITEM(PyObject* op, Py_ssize_t i)
    bint PyList_Check(PyObject* op)
    bint PyFloat_Check(PyObject* op)
    double PyFloat_AS_DOUBLE(PyObject* op)
    bint PyLong_Check(PyObject* op)
    bint PyBool_Check(PyObject* op)
    long long PyLong_AsLongLongAndOverflow(PyObject* op, int* overflow) except? -1
    double PyLong_AsDouble(PyObject* op) except? -1.0
    PyObject* PyUnicode_AsUTF8String_ptr "PyUnicode_AsUTF8String"(PyObject* op) except NULL
    bint PyUnicode_Check_ptr "PyUnicode_Check"(PyObject* op)

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


# One row per datatype JSON can carry: wire name, kind, numpy dtype, what an element must
# be (for error messages), integer range.
_ROWS = (
    ("BOOL", K_BOOL, np.bool_, "a boolean (true/false)", None),
    ("UINT8", K_UINT8, np.uint8, "a non-negative integer", (0, UINT8_MAX)),
    ("UINT16", K_UINT16, np.uint16, "a non-negative integer", (0, UINT16_MAX)),
    ("UINT32", K_UINT32, np.uint32, "a non-negative integer", (0, UINT32_MAX)),
    ("UINT64", K_UINT64, np.uint64, "a non-negative integer", (0, 2**64 - 1)),
    ("INT8", K_INT8, np.int8, "an integer", (INT8_MIN, INT8_MAX)),
    ("INT16", K_INT16, np.int16, "an integer", (INT16_MIN, INT16_MAX)),
    ("INT32", K_INT32, np.int32, "an integer", (INT32_MIN, INT32_MAX)),
    ("INT64", K_INT64, np.int64, "an integer", (-2**63, 2**63 - 1)),
    ("FP32", K_FP32, np.float32, "a number", None),
    ("FP64", K_FP64, np.float64, "a number", None),
    ("BYTES", K_BYTES, np.object_, "a string", None),
)
_BY_NAME = {row[0]: (row[1], np.dtype(row[2])) for row in _ROWS}
_BY_KIND = {row[1]: row for row in _ROWS}
_NOT_IN_JSON = frozenset(("FP16", "BF16"))


cdef struct Target:
    Kind kind
    char* base  # the output array's data
    Py_ssize_t total  # elements the shape holds
    Py_ssize_t pos  # the next element to store


cdef str _json_kind(object item):
    if item is None:
        return "null"
    if isinstance(item, bool):
        return "a boolean"
    if isinstance(item, int):
        return "an integer"
    if isinstance(item, float):
        return "a float"
    if isinstance(item, str):
        return "a string"
    if isinstance(item, dict):
        return "an object"
    return type(item).__name__


cdef int _type_error(Target* t, PyObject* item) except -1:
    row = _BY_KIND[t.kind]
    raise TypeError(
        f"{row[0]} data must hold {row[3]} per element, got {_json_kind(<object>item)} "
        f"at element {t.pos}"
    )


cdef int _range_error(Target* t, PyObject* item) except -1:
    row = _BY_KIND[t.kind]
    if row[4] is None:
        raise ValueError(f"value at element {t.pos} is out of range for {row[0]}")
    lo, hi = row[4]
    raise ValueError(
        f"value {<object>item} at element {t.pos} is out of range for {row[0]} [{lo}, {hi}]"
    )


cdef inline int _store_int(Target* t, PyObject* item) except -1:
    cdef int overflow = 0
    cdef long long v
    cdef Py_ssize_t i = t.pos
    if not PyLong_Check(item) or PyBool_Check(item):
        return _type_error(t, item)
    v = PyLong_AsLongLongAndOverflow(item, &overflow)
    if t.kind == K_INT64:
        if overflow:
            return _range_error(t, item)
        (<int64_t*>t.base)[i] = v
    elif t.kind == K_INT32:
        if overflow or v < INT32_MIN or v > INT32_MAX:
            return _range_error(t, item)
        (<int32_t*>t.base)[i] = <int32_t>v
    elif t.kind == K_UINT64:
        if overflow > 0:  # above INT64_MAX: may still fit 64 unsigned bits
            try:
                (<uint64_t*>t.base)[i] = PyLong_AsUnsignedLongLong(<object>item)
            except OverflowError:
                return _range_error(t, item)
        elif overflow or v < 0:
            return _range_error(t, item)
        else:
            (<uint64_t*>t.base)[i] = <uint64_t>v
    elif t.kind == K_INT16:
        if overflow or v < INT16_MIN or v > INT16_MAX:
            return _range_error(t, item)
        (<int16_t*>t.base)[i] = <int16_t>v
    elif t.kind == K_INT8:
        if overflow or v < INT8_MIN or v > INT8_MAX:
            return _range_error(t, item)
        (<int8_t*>t.base)[i] = <int8_t>v
    elif t.kind == K_UINT32:
        if overflow or v < 0 or v > UINT32_MAX:
            return _range_error(t, item)
        (<uint32_t*>t.base)[i] = <uint32_t>v
    elif t.kind == K_UINT16:
        if overflow or v < 0 or v > UINT16_MAX:
            return _range_error(t, item)
        (<uint16_t*>t.base)[i] = <uint16_t>v
    else:  # K_UINT8
        if overflow or v < 0 or v > UINT8_MAX:
            return _range_error(t, item)
        (<uint8_t*>t.base)[i] = <uint8_t>v
    return 0


cdef inline int _store(Target* t, PyObject* item) except -1:
    cdef double d
    cdef PyObject* old
    if t.pos >= t.total:  # only if the lists changed since they were counted
        raise ValueError(SHAPE_MISMATCH)
    if t.kind == K_FP32 or t.kind == K_FP64:
        if PyFloat_Check(item):
            d = PyFloat_AS_DOUBLE(item)
        elif PyLong_Check(item) and not PyBool_Check(item):
            try:
                d = PyLong_AsDouble(item)
            except OverflowError:
                return _range_error(t, item)
        else:
            return _type_error(t, item)
        if t.kind == K_FP32:
            # Out-of-range doubles become +-inf, as in Triton (IEEE 754 conversion).
            (<float*>t.base)[t.pos] = <float>d
        else:
            (<double*>t.base)[t.pos] = d
    elif t.kind == K_BOOL:
        # Branch-free on the value: random true/false data would defeat the predictor.
        t.base[t.pos] = item == Py_True
        if item != Py_True and item != Py_False:
            return _type_error(t, item)
    elif t.kind == K_BYTES:
        if not PyUnicode_Check_ptr(item):
            return _type_error(t, item)
        old = (<PyObject**>t.base)[t.pos]
        (<PyObject**>t.base)[t.pos] = PyUnicode_AsUTF8String_ptr(item)  # new reference
        Py_XDECREF(old)
    else:
        _store_int(t, item)
    t.pos += 1
    return 0


cdef int _fill(Target* t, PyObject* data, int depth) except -1:
    if depth > _MAX_DEPTH:
        raise ValueError(f"'data' is nested more than {_MAX_DEPTH} levels deep")
    cdef Py_ssize_t i
    cdef PyObject* item
    for i in range(PyList_GET_SIZE(data)):
        item = PyList_GET_ITEM(data, i)
        if PyList_Check(item):
            _fill(t, item, depth + 1)
        else:
            _store(t, item)
    return 0


cdef Py_ssize_t _count(PyObject* data, int depth) except -1:
    """Leaf elements of a (possibly nested, possibly ragged) list, row-major."""
    if depth > _MAX_DEPTH:
        raise ValueError(f"'data' is nested more than {_MAX_DEPTH} levels deep")
    cdef Py_ssize_t i, n = PyList_GET_SIZE(data), total = 0
    cdef PyObject* item
    for i in range(n):
        item = PyList_GET_ITEM(data, i)
        if PyList_Check(item):
            total += _count(item, depth + 1)
        else:
            total += 1
    return total


cdef Py_ssize_t _element_count(tuple shape) except -1:
    cdef Py_ssize_t count = 1, dim
    for entry in shape:
        if isinstance(entry, bool):
            raise TypeError(f"shape entries must be integers, got {shape!r}")
        try:
            d = operator.index(entry)  # ints and numpy integers
        except TypeError:
            raise TypeError(f"shape entries must be integers, got {shape!r}") from None
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
    entry = _BY_NAME.get(datatype)
    if entry is None:
        if datatype in _NOT_IN_JSON:
            raise ValueError(f"receiving {datatype} data via JSON is not supported")
        raise ValueError(f"invalid datatype {datatype!r}")
    cdef tuple dims = shape if type(shape) is tuple else tuple(shape)
    cdef Py_ssize_t total = _element_count(dims)
    cdef PyObject* root = <PyObject*>data
    cdef bint nested = PyList_Check(root)
    # Counted before anything is allocated, so a huge shape with little data costs nothing.
    if (_count(root, 1) if nested else 1) != total:
        raise ValueError(SHAPE_MISMATCH)
    cdef cnp.ndarray out = np.empty(dims, dtype=entry[1])  # object arrays start as None
    cdef Target target
    target.kind = entry[0]
    target.base = <char*>cnp.PyArray_DATA(out)
    target.total = total
    target.pos = 0
    if nested:
        _fill(&target, root, 1)
    else:
        _store(&target, root)
    if target.pos != total:  # only if the lists changed since they were counted
        raise ValueError(SHAPE_MISMATCH)
    return out


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


# dtypes orjson's OPT_SERIALIZE_NUMPY writes and a Triton datatype JSON can carry
cdef frozenset _JSON_NUMERIC = frozenset((
    cnp.NPY_BOOL, cnp.NPY_BYTE, cnp.NPY_UBYTE, cnp.NPY_SHORT, cnp.NPY_USHORT, cnp.NPY_INT,
    cnp.NPY_UINT, cnp.NPY_LONG, cnp.NPY_ULONG, cnp.NPY_LONGLONG, cnp.NPY_ULONGLONG,
    cnp.NPY_FLOAT, cnp.NPY_DOUBLE,
))


cdef cnp.ndarray _widened(cnp.ndarray arr):
    """A C-contiguous, aligned, native float32 array's values as a flat float64 array: one
    loop (numpy's converting copy costs some 3,000 instructions to set up, for the 16
    values of a small output)."""
    cdef cnp.npy_intp count = cnp.PyArray_SIZE(arr)
    cdef cnp.ndarray widened = cnp.PyArray_EMPTY(1, &count, cnp.NPY_DOUBLE, 0)
    cdef const float* source = <const float*>cnp.PyArray_DATA(arr)
    cdef double* target = <double*>cnp.PyArray_DATA(widened)
    cdef cnp.npy_intp i
    for i in range(count):
        target[i] = <double>source[i]
    return widened


def array_to_json_data(array, bint widen_float32=False):
    """The value of an output's JSON ``data`` field: the elements of ``array`` in C order.

    BYTES (object, 'S' or 'U' arrays): a list of str. BOOL and numeric arrays: a flat,
    C-contiguous, native-endian array for ``orjson.dumps(..., option=OPT_SERIALIZE_NUMPY)``;
    ``widen_float32``: a float32 array's values as float64 (Triton writes each float32 as
    the double it converts to).
    """
    # (C-level type checks: ``np.ndarray`` is a module attribute lookup per call)
    if not cnp.PyArray_Check(array):
        raise TypeError(f"expected a numpy.ndarray, got {type(array).__name__}")
    if type(array) is not cnp.ndarray:
        array = np.asarray(array)  # subclasses (np.matrix) may not ravel to 1-D
    cdef cnp.ndarray arr = <cnp.ndarray>array
    cdef int type_num = cnp.PyArray_TYPE(arr)
    cdef list values
    cdef Py_ssize_t i
    if type_num == cnp.NPY_FLOAT and widen_float32:
        if cnp.PyArray_IS_C_CONTIGUOUS(arr) and cnp.PyArray_ISNOTSWAPPED(arr) and \
                cnp.PyArray_ISALIGNED(arr):
            return _widened(arr)
        # The widening copy is made C-ordered (a view's ravel after it copies nothing).
        arr = cnp.PyArray_FROMANY(arr, cnp.NPY_DOUBLE, 0, 0,
                                  cnp.NPY_ARRAY_C_CONTIGUOUS | cnp.NPY_ARRAY_FORCECAST)
        return cnp.PyArray_Ravel(arr, cnp.NPY_CORDER)
    if type_num in _JSON_NUMERIC:
        if not cnp.PyArray_ISNOTSWAPPED(arr):
            arr = arr.astype(arr.dtype.newbyteorder("="))
        if cnp.PyArray_NDIM(arr) == 1 and cnp.PyArray_IS_C_CONTIGUOUS(arr):
            return arr
        return cnp.PyArray_Ravel(arr, cnp.NPY_CORDER)  # a view when already C-contiguous
    if type_num == cnp.NPY_OBJECT or type_num == cnp.NPY_STRING or type_num == cnp.NPY_UNICODE:
        values = cnp.PyArray_Ravel(arr, cnp.NPY_CORDER).tolist()
        for i in range(len(values)):
            values[i] = _to_json_str(values[i], i)
        return values
    if type_num == cnp.NPY_FLOAT16:
        raise ValueError("sending FP16 data via JSON is not supported")
    if arr.dtype.name == "bfloat16":
        raise ValueError("sending BF16 data via JSON is not supported")
    raise TypeError(f"a {arr.dtype} array has no Triton datatype that JSON can carry")
