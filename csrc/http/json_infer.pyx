# cython: language_level=3, autotestdict=False
"""The common all-JSON infer request, read from its bytes in one pass.

What tritonclient sends with ``binary_data=False`` (and what curl users write): an ``id``
string, at most the ``binary_data_output`` request parameter, inputs that each carry
``name``, ``datatype``, ``shape`` and their numbers or booleans in ``data`` (flat or nested),
outputs named with at most a ``binary_data`` flag. Each value is read from the bytes into its
typed array; no Python object is built per element, nor a dict per JSON object (the general
decode parses the body with orjson first, then stores each element from its Python object).

Anything else, and anything the general decode would refuse or read otherwise, is answered
None, so that the general decode (``frontends/http/infer_codec.py``) reads it and words its
errors alone: other keys, a key given twice, strings with escapes, BYTES, FP16 and BF16
inputs, integers of more than 18 digits, a number out of its datatype's range, data that does
not fill the shape, a body past the JSON limits. What is taken is read as orjson and the
general decode read it: numbers by their decimal value correctly rounded (Python's own
``PyOS_string_to_double``, or one exact operation for a short decimal: ``_short_decimal``),
an integer written for a float datatype converted from its
integer value (``-0`` is 0.0), FP32 as the double narrowed.

The JSON limits (``--http-max-json-depth``, ``--http-max-json-elements``) are counted as
``json_limits`` counts them: each array and object opened, and each comma, is one value.
"""

cimport numpy as cnp
from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.object cimport PyObject
from libc.math cimport isinf
from libc.stdint cimport int8_t, int16_t, int32_t, int64_t, uint8_t, uint16_t, uint32_t, uint64_t
from libc.string cimport memcmp, memcpy

cnp.import_array()


cdef extern from "Python.h":
    const Py_ssize_t PY_SSIZE_T_MAX
    double PyOS_string_to_double(const char* text, char** end, PyObject* overflow) except? -1.0
    object PyUnicode_DecodeUTF8(const char* data, Py_ssize_t size, const char* errors)


cdef enum:
    _MAX_DIMS = 32  # more dimensions than this: the general decode reads it
    _MAX_DATA_DEPTH = 100  # json_tensor's limit on the nesting of a 'data' array
    _MAX_INTEGER_DIGITS = 18  # every integer of 18 digits fits an int64
    _MAX_NUMBER_BYTES = 63


cdef enum Kind:
    K_NONE = -1
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


# Kind -> its numpy type number: the datatypes JSON data is read for.
cdef int _TYPE_NUMBERS[11]
_TYPE_NUMBERS[:] = [cnp.NPY_BOOL, cnp.NPY_UINT8, cnp.NPY_UINT16, cnp.NPY_UINT32, cnp.NPY_UINT64,
                    cnp.NPY_INT8, cnp.NPY_INT16, cnp.NPY_INT32, cnp.NPY_INT64, cnp.NPY_FLOAT32,
                    cnp.NPY_FLOAT64]
# The inclusive range of each integer kind (BOOL and the floats have none); UINT64's is what
# an integer of 18 digits, the most the walk reads, can be.
cdef int64_t _LOWEST[11]
cdef int64_t _HIGHEST[11]
_LOWEST[:] = [0, 0, 0, 0, 0, -128, -32768, -2147483648, -9223372036854775807 - 1, 0, 0]
_HIGHEST[:] = [1, 255, 65535, 4294967295, 999999999999999999, 127, 32767, 2147483647,
               9223372036854775807, 0, 0]


cdef extern from *:
    """
    static const char* const pytriton_json_wire_names[11] = {
        "BOOL", "UINT8", "UINT16", "UINT32", "UINT64", "INT8", "INT16", "INT32", "INT64",
        "FP32", "FP64"};
    """
    const char* const* _WIRE_NAME_BYTES "pytriton_json_wire_names"
    size_t strlen(const char* text) nogil


# Kind -> its wire name as the key of the server's datatypes (the C names are compared with
# the body's bytes).
cdef tuple _WIRE_NAMES = tuple((<bytes>_WIRE_NAME_BYTES[kind]).decode() for kind in range(11))


cdef Kind _kind_of(const unsigned char* name, Py_ssize_t size) noexcept nogil:
    cdef int kind
    for kind in range(11):
        if <Py_ssize_t>strlen(_WIRE_NAME_BYTES[kind]) == size and memcmp(
                _WIRE_NAME_BYTES[kind], name, size) == 0:
            return <Kind>kind
    return K_NONE


cdef struct Scan:
    const unsigned char* data
    Py_ssize_t pos
    Py_ssize_t size
    Py_ssize_t depth  # arrays and objects open, for --http-max-json-depth
    Py_ssize_t values  # json_limits' count, for --http-max-json-elements
    Py_ssize_t max_depth
    Py_ssize_t max_values


cdef inline void _space(Scan* s) noexcept nogil:
    cdef unsigned char c
    while s.pos < s.size:
        c = s.data[s.pos]
        if c != c' ' and c != c'\n' and c != c'\r' and c != c'\t':
            return
        s.pos += 1


cdef inline bint _at(Scan* s, unsigned char c) noexcept nogil:
    """Whether the next byte is ``c`` (not consumed)."""
    return s.pos < s.size and s.data[s.pos] == c


cdef inline bint _open(Scan* s, unsigned char c) noexcept nogil:
    """Consume ``c`` (``[`` or ``{``) and what follows it up to the first token."""
    if not _at(s, c):
        return False
    s.pos += 1
    s.depth += 1
    s.values += 1
    _space(s)
    return s.depth <= s.max_depth and s.values <= s.max_values


cdef inline int _next(Scan* s, unsigned char close) noexcept nogil:
    """After a member or element: 1 for a comma (another follows), 0 for ``close`` (the
    array or object ends), -1 for anything else."""
    _space(s)
    if s.pos >= s.size:
        return -1
    if s.data[s.pos] == c',':
        s.pos += 1
        s.values += 1
        _space(s)
        return 1 if s.values <= s.max_values else -1
    if s.data[s.pos] == close:
        s.pos += 1
        s.depth -= 1
        return 0
    return -1


cdef inline bint _empty(Scan* s, unsigned char close) noexcept nogil:
    """Whether the array or object just opened closes at once (consumed if so)."""
    if not _at(s, close):
        return False
    s.pos += 1
    s.depth -= 1
    return True


cdef inline bint _string(Scan* s, Py_ssize_t* start, Py_ssize_t* length) noexcept nogil:
    """A string without escapes or control characters: its bytes' span (not validated as
    UTF-8 here: ``_text`` decodes it strictly)."""
    cdef unsigned char c
    if not _at(s, c'"'):
        return False
    s.pos += 1
    start[0] = s.pos
    while s.pos < s.size:
        c = s.data[s.pos]
        if c == c'"':
            length[0] = s.pos - start[0]
            s.pos += 1
            return True
        if c == c'\\' or c < 0x20:
            return False
        s.pos += 1
    return False


cdef inline bint _key(Scan* s, Py_ssize_t* start, Py_ssize_t* length) noexcept nogil:
    """A member's key and the colon after it."""
    if not _string(s, start, length):
        return False
    _space(s)
    if not _at(s, c':'):
        return False
    s.pos += 1
    _space(s)
    return True


cdef inline bint _is(Scan* s, Py_ssize_t start, Py_ssize_t length, const char* word,
                     Py_ssize_t word_length) noexcept nogil:
    return length == word_length and memcmp(s.data + start, word, length) == 0


cdef bint _flag_object(Scan* s, const char* key, Py_ssize_t key_length, bint* flag) noexcept nogil:
    """An object that is empty or holds ``key`` alone, true or false (into ``flag``)."""
    cdef Py_ssize_t start, length
    if not _open(s, c'{'):
        return False
    if _empty(s, c'}'):
        return True
    if not _key(s, &start, &length) or not _is(s, start, length, key, key_length):
        return False
    if _literal(s, b"true", 4):
        flag[0] = True
    elif _literal(s, b"false", 5):
        flag[0] = False
    else:
        return False
    return _next(s, c'}') == 0


cdef object _text(Scan* s, Py_ssize_t start, Py_ssize_t length):
    """The string at the span, or None when its bytes are not UTF-8 (orjson refuses those)."""
    try:
        return PyUnicode_DecodeUTF8(<const char*>s.data + start, length, NULL)
    except UnicodeDecodeError:
        return None


cdef inline bint _literal(Scan* s, const char* word, Py_ssize_t length) noexcept nogil:
    if s.size - s.pos < length or memcmp(s.data + s.pos, word, length) != 0:
        return False
    s.pos += length
    return True


cdef inline bint _digits(Scan* s) noexcept nogil:
    """One or more decimal digits."""
    cdef Py_ssize_t first = s.pos
    while s.pos < s.size and c'0' <= s.data[s.pos] <= c'9':
        s.pos += 1
    return s.pos > first


cdef inline bint _number(Scan* s, bint* integer) noexcept nogil:
    """A number as JSON writes one (no leading zeros, no bare dot, no sign but a minus);
    ``integer``: without a fraction or an exponent."""
    if _at(s, c'-'):
        s.pos += 1
    if _at(s, c'0'):
        s.pos += 1
    elif not _digits(s):
        return False
    integer[0] = True
    if _at(s, c'.'):
        s.pos += 1
        integer[0] = False
        if not _digits(s):
            return False
    if _at(s, c'e') or _at(s, c'E'):
        s.pos += 1
        integer[0] = False
        if _at(s, c'+') or _at(s, c'-'):
            s.pos += 1
        if not _digits(s):
            return False
    return True


cdef inline bint _integer_value(const unsigned char* text, Py_ssize_t length,
                                int64_t* value) noexcept nogil:
    """An integer token's value; False past 18 digits."""
    cdef bint negative = text[0] == c'-'
    cdef Py_ssize_t i = 1 if negative else 0
    cdef int64_t total = 0
    if length - i > _MAX_INTEGER_DIGITS:
        return False
    while i < length:
        total = total * 10 + (text[i] - c'0')
        i += 1
    value[0] = -total if negative else total
    return True


# The powers of ten a double holds exactly (10^22 is the last: 5^22 < 2^53).
cdef double _EXACT_POWERS[23]
cdef double _power = 1.0
for _i in range(23):
    _EXACT_POWERS[_i] = _power
    _power *= 10.0  # exact: each is an integer below 2^53 times a power of two


cdef inline bint _short_decimal(const unsigned char* text, Py_ssize_t length,
                                double* value) noexcept nogil:
    """A number token (checked by ``_number``) of at most 15 significant digits and a
    decimal exponent within 22 of them: its value, correctly rounded, with one exact
    multiplication or division (both operands are exact doubles, so IEEE rounds the
    one result as a correctly rounding parser does: Clinger's fast path). False for any
    other, which ``PyOS_string_to_double`` reads. Most numbers people and programs write
    (``0.25``, ``1.5e-3``) are such; a float32 written with 17 digits is not."""
    cdef Py_ssize_t i = 0
    cdef bint negative = False, fraction = False, exponent_negative = False
    cdef uint64_t mantissa = 0
    cdef int digits = 0, scale = 0, exponent = 0, exponent_digits = 0
    cdef unsigned char c
    if text[0] == c'-':
        negative = True
        i = 1
    while i < length:  # the significand: digits, at most one dot among them
        c = text[i]
        if c == c'e' or c == c'E':
            break
        if c == c'.':
            fraction = True
        else:
            if mantissa or c != c'0':  # (leading zeros are not significant)
                digits += 1
                if digits > 15:
                    return False
            mantissa = mantissa * 10 + (c - c'0')
            if fraction:
                scale -= 1
        i += 1
    if i < length:  # the exponent
        i += 1
        if text[i] == c'-' or text[i] == c'+':
            exponent_negative = text[i] == c'-'
            i += 1
        while i < length:
            exponent = exponent * 10 + (text[i] - c'0')
            exponent_digits += 1
            if exponent_digits > 4:
                return False
            i += 1
    scale += -exponent if exponent_negative else exponent
    if scale < -22 or scale > 22:
        return False
    value[0] = <double>mantissa
    if scale >= 0:
        value[0] = value[0] * _EXACT_POWERS[scale]
    else:
        value[0] = value[0] / _EXACT_POWERS[-scale]
    if negative:
        value[0] = -value[0]
    return True


cdef bint _skip_data(Scan* s, int depth, Py_ssize_t* leaves) noexcept nogil:
    """A ``data`` value (an array nested at most 100 deep, or one leaf), checked for JSON's
    grammar and counted; its leaves' kinds are checked when they are stored."""
    cdef bint integer
    cdef int more
    if _at(s, c'['):
        if depth > _MAX_DATA_DEPTH or not _open(s, c'['):
            return False
        if _empty(s, c']'):
            return True
        while True:
            if not _skip_data(s, depth + 1, leaves):
                return False
            more = _next(s, c']')
            if more < 0:
                return False
            if more == 0:
                return True
    leaves[0] += 1
    if _at(s, c't'):
        return _literal(s, b"true", 4)
    if _at(s, c'f'):
        return _literal(s, b"false", 5)
    return _number(s, &integer)


cdef int _store(Scan* s, Kind kind, char* base, Py_ssize_t index) except -1:
    """The leaf at the scan's position, stored as element ``index`` of ``base`` (a kind it
    cannot be stored as, or a value out of the kind's range: False)."""
    cdef Py_ssize_t start = s.pos, length
    cdef bint integer
    cdef int64_t value
    cdef double number
    cdef char text[_MAX_NUMBER_BYTES + 1]
    cdef char* end
    if kind == K_BOOL:
        if _literal(s, b"true", 4):
            (<uint8_t*>base)[index] = 1
            return True
        if _literal(s, b"false", 5):
            (<uint8_t*>base)[index] = 0
            return True
        return False
    if not _number(s, &integer):
        return False
    length = s.pos - start
    if integer:
        if not _integer_value(s.data + start, length, &value):
            return False
        if kind == K_FP32:
            (<float*>base)[index] = <float><double>value
        elif kind == K_FP64:
            (<double*>base)[index] = <double>value
        elif value < _LOWEST[<int>kind] or value > _HIGHEST[<int>kind]:
            return False
        elif kind == K_INT64 or kind == K_UINT64:
            (<int64_t*>base)[index] = value
        elif kind == K_INT32:
            (<int32_t*>base)[index] = <int32_t>value
        elif kind == K_UINT32:
            (<uint32_t*>base)[index] = <uint32_t>value
        elif kind == K_INT16:
            (<int16_t*>base)[index] = <int16_t>value
        elif kind == K_UINT16:
            (<uint16_t*>base)[index] = <uint16_t>value
        elif kind == K_INT8:
            (<int8_t*>base)[index] = <int8_t>value
        else:
            (<uint8_t*>base)[index] = <uint8_t>value
        return True
    if (kind != K_FP32 and kind != K_FP64) or length > _MAX_NUMBER_BYTES:
        return False
    if not _short_decimal(s.data + start, length, &number):
        memcpy(text, s.data + start, length)
        text[length] = 0
        number = PyOS_string_to_double(text, &end, NULL)
        if end != text + length or isinf(number):  # orjson refuses what overflows a double
            return False
    if kind == K_FP32:
        (<float*>base)[index] = <float>number
    else:
        (<double*>base)[index] = number
    return True


cdef int _fill(Scan* s, Kind kind, char* base, Py_ssize_t* index) except -1:
    """Store the leaves of the ``data`` value ``_skip_data`` checked, in row-major order."""
    if _at(s, c'['):
        s.pos += 1
        while True:
            _space(s)
            if _at(s, c']'):
                s.pos += 1
                return True
            if not _fill(s, kind, base, index):
                return False
            _space(s)
            if _at(s, c','):
                s.pos += 1
    if not _store(s, kind, base, index[0]):
        return False
    index[0] += 1
    return True


cdef int _input(Scan* s, dict datatypes, tensor_type, dict inputs) except -1:
    """One input object, added to ``inputs``; False when it is not the common one."""
    cdef Py_ssize_t key, key_length, name_start = -1, name_length = 0
    cdef Py_ssize_t type_start = -1, type_length = 0, data_start = -1, leaves = 0
    cdef Py_ssize_t dims[_MAX_DIMS]
    cdef int ndim = -1, more
    cdef bint integer
    cdef int64_t dim
    cdef Py_ssize_t total = 1, index = 0, end
    cdef Kind kind
    cdef Scan data
    if not _open(s, c'{') or _at(s, c'}'):
        return False
    more = 1
    while more == 1:
        if not _key(s, &key, &key_length):
            return False
        if _is(s, key, key_length, b"name", 4) and name_start < 0:
            if not _string(s, &name_start, &name_length):
                return False
        elif _is(s, key, key_length, b"datatype", 8) and type_start < 0:
            if not _string(s, &type_start, &type_length):
                return False
        elif _is(s, key, key_length, b"shape", 5) and ndim < 0:
            if not _open(s, c'['):
                return False
            ndim = 0
            if not _empty(s, c']'):
                while True:
                    end = s.pos
                    if _at(s, c'-') or not _number(s, &integer) or not integer:
                        return False
                    if ndim == _MAX_DIMS or not _integer_value(s.data + end, s.pos - end, &dim):
                        return False
                    dims[ndim] = dim
                    ndim += 1
                    more = _next(s, c']')
                    if more < 0:
                        return False
                    if more == 0:
                        break
        elif _is(s, key, key_length, b"data", 4) and data_start < 0:
            data_start = s.pos
            if not _skip_data(s, 1, &leaves):
                return False
        else:
            return False  # another key, or one given twice
        more = _next(s, c'}')
        if more < 0:
            return False
    if name_start < 0 or type_start < 0 or ndim < 0 or data_start < 0:
        return False
    for index in range(ndim):
        if dims[index] and total > PY_SSIZE_T_MAX // dims[index]:
            return False
        total *= dims[index]
    if total != leaves:
        return False
    kind = _kind_of(s.data + type_start, type_length)
    if kind == K_NONE:
        return False
    name = _text(s, name_start, name_length)
    if name is None or name in inputs:
        return False
    datatype = datatypes.get(_WIRE_NAMES[<int>kind])
    if datatype is None:
        return False
    array = cnp.PyArray_EMPTY(ndim, <cnp.npy_intp*>dims, _TYPE_NUMBERS[<int>kind], 0)
    data = s[0]
    data.pos = data_start
    index = 0
    if not _fill(&data, kind, <char*>cnp.PyArray_DATA(array), &index):
        return False
    inputs[name] = tensor_type(name, datatype, array)
    return True


cdef int _output(Scan* s, output_type, dict requested, dict binary_outputs) except -1:
    """One requested output; False when it is not the common one."""
    cdef Py_ssize_t key, key_length, name_start = -1, name_length = 0
    cdef bint parameters_seen = False
    cdef int more
    cdef bint binary = False
    if not _open(s, c'{') or _at(s, c'}'):
        return False
    more = 1
    while more == 1:
        if not _key(s, &key, &key_length):
            return False
        if _is(s, key, key_length, b"name", 4) and name_start < 0:
            if not _string(s, &name_start, &name_length):
                return False
        elif _is(s, key, key_length, b"parameters", 10) and not parameters_seen:
            parameters_seen = True
            if not _flag_object(s, b"binary_data", 11, &binary):
                return False
        else:
            return False
        more = _next(s, c'}')
        if more < 0:
            return False
    if name_start < 0:
        return False
    name = _text(s, name_start, name_length)
    if name is None:
        return False
    requested[name] = output_type(name, 0, False)
    binary_outputs[name] = binary
    return True


cdef int _entries(Scan* s, bint of_inputs, dict datatypes, make, dict target,
                  dict binary_outputs) except -1:
    """The ``inputs`` array (``of_inputs``) or the ``outputs`` array, each entry added to
    ``target``; False when one is not the common one."""
    cdef int more
    if not _open(s, c'['):
        return False
    if _empty(s, c']'):
        return True
    while True:
        if of_inputs:
            if not _input(s, datatypes, make, target):
                return False
        elif not _output(s, make, target, binary_outputs):
            return False
        more = _next(s, c']')
        if more <= 0:
            return more == 0


cdef object _walk(Scan* s, dict datatypes, tensor_type, output_type):
    cdef Py_ssize_t key, key_length, start, length
    cdef int more
    cdef bint parameters_seen = False
    cdef dict inputs = None
    cdef dict requested = None
    cdef dict binary_outputs = {}
    cdef bint binary_by_default = False
    request_id = None
    _space(s)
    if not _open(s, c'{') or _at(s, c'}'):
        return None
    more = 1
    while more == 1:
        if not _key(s, &key, &key_length):
            return None
        if _is(s, key, key_length, b"id", 2) and request_id is None:
            if not _string(s, &start, &length):
                return None
            request_id = _text(s, start, length)
            if request_id is None:
                return None
        elif _is(s, key, key_length, b"inputs", 6) and inputs is None:
            inputs = {}
            if not _entries(s, True, datatypes, tensor_type, inputs, None):
                return None
        elif _is(s, key, key_length, b"outputs", 7) and requested is None:
            requested = {}
            if not _entries(s, False, None, output_type, requested, binary_outputs):
                return None
        elif _is(s, key, key_length, b"parameters", 10) and not parameters_seen:
            parameters_seen = True
            if not _flag_object(s, b"binary_data_output", 18, &binary_by_default):
                return None
        else:
            return None  # another key, or one given twice
        more = _next(s, c'}')
        if more < 0:
            return None
    _space(s)
    if s.pos != s.size or inputs is None:
        return None
    return ("" if request_id is None else request_id, binary_by_default, inputs, requested,
            binary_outputs)


def walk_json_infer(body, dict datatypes not None, tensor_type, output_type,
                    Py_ssize_t max_depth, Py_ssize_t max_values):
    """The common all-JSON request's parts, or None for the general decode.

    ``body``: the whole JSON body (any bytes-like); ``datatypes``: wire name -> DataType;
    ``tensor_type(name, datatype, array)`` and ``output_type(name, 0, False)`` make the
    inputs and requested outputs; ``max_depth`` and ``max_values``: the server's JSON limits
    (a body past them is the general decode's to refuse). Returns what ``walk_binary_infer``
    returns: (id, binary_data_output, inputs: name -> tensor, requested outputs: name ->
    output or None when the request names none, outputs' binary_data: name -> bool).
    """
    cdef Py_buffer view
    cdef Scan scan
    PyObject_GetBuffer(body, &view, PyBUF_SIMPLE)
    try:
        scan.data = <const unsigned char*>view.buf
        scan.pos = 0
        scan.size = view.len
        scan.depth = 0
        scan.values = 0
        scan.max_depth = max_depth
        scan.max_values = max_values
        return _walk(&scan, datatypes, tensor_type, output_type)
    finally:
        PyBuffer_Release(&view)
