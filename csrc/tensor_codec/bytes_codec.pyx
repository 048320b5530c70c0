# cython: language_level=3, autotestdict=False
"""BYTES tensor (de)serialization: each element a 4-byte little-endian length + raw bytes.

The wire form is spec/protocol.md §0.3. Both directions size everything first and then fill
one preallocated object, so a tensor costs one allocation for the output plus, when
deserializing, one ``bytes`` per element.
"""

cimport numpy as cnp
from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytearray cimport PyByteArray_AS_STRING, PyByteArray_Check, PyByteArray_GET_SIZE
from cpython.bytes cimport (
    PyBytes_AS_STRING,
    PyBytes_Check,
    PyBytes_FromStringAndSize,
    PyBytes_GET_SIZE,
)
from cpython.mem cimport PyMem_Free, PyMem_Malloc
from cpython.ref cimport PyObject, Py_INCREF, Py_XDECREF
from cpython.unicode cimport PyUnicode_AsUTF8AndSize, PyUnicode_AsUTF8String, PyUnicode_Check
from libc.stdint cimport uint32_t
from libc.string cimport memcpy

import numpy as np

cnp.import_array()

cdef extern from "Python.h":
    const Py_ssize_t PY_SSIZE_T_MAX

# Work on fixed-width (S/U) arrays and framing scans drops the GIL above this many bytes;
# below it the release/reacquire costs more than it frees.
cdef Py_ssize_t _NOGIL_THRESHOLD = 1 << 20
cdef Py_ssize_t _MAX_ELEMENT = 0xFFFFFFFF  # what a uint32 length prefix can describe


cdef struct Span:
    const char* data
    Py_ssize_t size


cdef inline uint32_t _load_le32(const unsigned char* p) noexcept nogil:
    return (<uint32_t>p[0]) | (<uint32_t>p[1] << 8) | (<uint32_t>p[2] << 16) | (<uint32_t>p[3] << 24)


cdef inline void _store_le32(char* p, uint32_t v) noexcept nogil:
    p[0] = <char>(v & 0xFF)
    p[1] = <char>((v >> 8) & 0xFF)
    p[2] = <char>((v >> 16) & 0xFF)
    p[3] = <char>((v >> 24) & 0xFF)


cdef inline Py_ssize_t _add_element(Py_ssize_t total, Py_ssize_t size, Py_ssize_t index) except -1:
    """total + 4 + size, refusing elements a uint32 prefix cannot describe and size overflow."""
    if size > _MAX_ELEMENT:
        raise ValueError(
            f"BYTES element {index} is {size} bytes; a 4-byte length prefix allows at most "
            f"{_MAX_ELEMENT}"
        )
    if total > PY_SSIZE_T_MAX - 4 - size:
        raise OverflowError("serialized BYTES tensor is too large")
    return total + 4 + size


cdef inline cnp.ndarray _flat_c_order(object array):
    """The elements as a 1-D C-contiguous array (a view when the input already is one)."""
    if type(array) is not np.ndarray:
        array = np.asarray(array)  # subclasses (np.matrix) may not ravel to 1-D
    cdef cnp.ndarray flat = cnp.PyArray_Ravel(<cnp.ndarray>array, cnp.NPY_CORDER)
    if not cnp.PyArray_IS_C_CONTIGUOUS(flat):
        flat = np.ascontiguousarray(flat)
    return flat


# ----------------------------------------------------------------------------------------
# object arrays


cdef Py_ssize_t _resolve_objects(cnp.ndarray flat, Span* spans, list keep) except -1:
    """Point spans[i] at the encoded bytes of element i; return the serialized size.

    bytes (and subclasses such as numpy.bytes_) are used as they are, str (and numpy.str_)
    as its UTF-8 form, bytearray as a copy, anything else as ``str(x).encode()`` like
    tritonclient. Every pointer must stay valid until the caller has copied it out, so:
    objects created here are held in ``keep``; and before the first ``str(x)`` call, which
    may run arbitrary code able to replace elements of the caller's array, the pointer
    array is copied so the elements already resolved stay referenced.
    """
    cdef Py_ssize_t n = cnp.PyArray_SIZE(flat)
    cdef PyObject** items = <PyObject**>cnp.PyArray_DATA(flat)
    cdef Py_ssize_t i, size, total = 0
    cdef bint private = False
    cdef object item
    cdef bytes encoded
    for i in range(n):
        # numpy treats a NULL slot in an object array as None
        item = <object>items[i] if items[i] != NULL else None
        if PyBytes_Check(item):
            spans[i].data = PyBytes_AS_STRING(item)
            size = PyBytes_GET_SIZE(item)
        elif PyUnicode_Check(item):
            # No allocation for ASCII strings; otherwise CPython caches the UTF-8 form on the
            # str object, which keeps the pointer alive as long as the element.
            spans[i].data = PyUnicode_AsUTF8AndSize(item, &size)
        else:
            if PyByteArray_Check(item):
                encoded = PyBytes_FromStringAndSize(
                    PyByteArray_AS_STRING(item), PyByteArray_GET_SIZE(item))
            else:
                if not private:
                    flat = flat.copy()
                    keep.append(flat)
                    items = <PyObject**>cnp.PyArray_DATA(flat)
                    private = True
                # str() may return a str subclass: encode its data, whatever its methods
                encoded = PyUnicode_AsUTF8String(str(item))
            keep.append(encoded)
            spans[i].data = PyBytes_AS_STRING(encoded)
            size = PyBytes_GET_SIZE(encoded)
        spans[i].size = size
        total = _add_element(total, size, i)
    return total


cdef void _write_spans(char* out, const Span* spans, Py_ssize_t n) noexcept nogil:
    cdef Py_ssize_t i
    for i in range(n):
        _store_le32(out, <uint32_t>spans[i].size)
        memcpy(out + 4, spans[i].data, spans[i].size)
        out += 4 + spans[i].size


cdef object _serialize_objects(cnp.ndarray flat, bint size_only):
    cdef Py_ssize_t n = cnp.PyArray_SIZE(flat)
    cdef Span* spans = <Span*>PyMem_Malloc(max(n, 1) * sizeof(Span))
    cdef list keep = []
    cdef Py_ssize_t total
    cdef bytes out
    if spans == NULL:
        raise MemoryError()
    try:
        total = _resolve_objects(flat, spans, keep)
        if size_only:
            return total
        out = PyBytes_FromStringAndSize(NULL, total)
        # The GIL stays held: spans may point into objects owned by the caller's array,
        # which another thread could replace (and free) while we copy.
        _write_spans(PyBytes_AS_STRING(out), spans, n)
        return out
    finally:
        PyMem_Free(spans)


# ----------------------------------------------------------------------------------------
# numpy fixed-width arrays: 'S' (bytes, NUL-padded) and 'U' (UCS4, NUL-padded)


cdef inline Py_ssize_t _s_length(const char* item, Py_ssize_t width) noexcept nogil:
    # numpy drops trailing NULs when it hands out an 'S' element
    while width > 0 and item[width - 1] == 0:
        width -= 1
    return width


cdef Py_ssize_t _s_total(const char* data, Py_ssize_t n, Py_ssize_t width) noexcept nogil:
    # Bounded by 5 * (n * width): n * width bytes already exist in memory, so no overflow.
    cdef Py_ssize_t i, total = 0
    for i in range(n):
        total += 4 + _s_length(data + i * width, width)
    return total


cdef void _s_write(char* out, const char* data, Py_ssize_t n, Py_ssize_t width) noexcept nogil:
    cdef Py_ssize_t i, size
    for i in range(n):
        size = _s_length(data + i * width, width)
        _store_le32(out, <uint32_t>size)
        memcpy(out + 4, data + i * width, size)
        out += 4 + size


cdef inline Py_ssize_t _u_length(const uint32_t* item, Py_ssize_t width) noexcept nogil:
    while width > 0 and item[width - 1] == 0:
        width -= 1
    return width


cdef Py_ssize_t _u_total(const uint32_t* data, Py_ssize_t n, Py_ssize_t width,
                         Py_ssize_t* bad_index) noexcept nogil:
    """Serialized size of a UCS4 array encoded as UTF-8; -1 (and *bad_index) on a code
    point UTF-8 cannot encode (a surrogate or one past U+10FFFF)."""
    cdef Py_ssize_t i, j, length, total = 0
    cdef uint32_t c
    cdef const uint32_t* item
    for i in range(n):
        item = data + i * width
        length = _u_length(item, width)
        total += 4
        for j in range(length):
            c = item[j]
            if c < 0x80:
                total += 1
            elif c < 0x800:
                total += 2
            elif c < 0x10000:
                if 0xD800 <= c <= 0xDFFF:
                    bad_index[0] = i
                    return -1
                total += 3
            elif c <= 0x10FFFF:
                total += 4
            else:
                bad_index[0] = i
                return -1
    return total


cdef void _u_write(char* out, const uint32_t* data, Py_ssize_t n,
                   Py_ssize_t width) noexcept nogil:
    # Code points were validated by _u_total.
    cdef Py_ssize_t i, j, length
    cdef uint32_t c
    cdef const uint32_t* item
    cdef char* start
    for i in range(n):
        item = data + i * width
        length = _u_length(item, width)
        start = out
        out += 4
        for j in range(length):
            c = item[j]
            if c < 0x80:
                out[0] = <char>c
                out += 1
            elif c < 0x800:
                out[0] = <char>(0xC0 | (c >> 6))
                out[1] = <char>(0x80 | (c & 0x3F))
                out += 2
            elif c < 0x10000:
                out[0] = <char>(0xE0 | (c >> 12))
                out[1] = <char>(0x80 | ((c >> 6) & 0x3F))
                out[2] = <char>(0x80 | (c & 0x3F))
                out += 3
            else:
                out[0] = <char>(0xF0 | (c >> 18))
                out[1] = <char>(0x80 | ((c >> 12) & 0x3F))
                out[2] = <char>(0x80 | ((c >> 6) & 0x3F))
                out[3] = <char>(0x80 | (c & 0x3F))
                out += 4
        _store_le32(start, <uint32_t>(out - start - 4))


cdef inline void _fixed_write(char* out, const char* data, Py_ssize_t n, Py_ssize_t width,
                              bint is_unicode) noexcept nogil:
    if is_unicode:
        _u_write(out, <const uint32_t*>data, n, width)
    else:
        _s_write(out, data, n, width)


cdef object _serialize_fixed(cnp.ndarray flat, bint is_unicode, bint size_only):
    cdef Py_ssize_t n = cnp.PyArray_SIZE(flat)
    cdef Py_ssize_t itemsize = cnp.PyArray_ITEMSIZE(flat)
    cdef const char* data = <const char*>cnp.PyArray_DATA(flat)
    cdef bint nogil_ok = n * itemsize >= _NOGIL_THRESHOLD
    cdef Py_ssize_t total, bad = -1, width
    cdef bytes out
    cdef char* dst
    if is_unicode:
        width = itemsize // 4
        if nogil_ok:
            with nogil:
                total = _u_total(<const uint32_t*>data, n, width, &bad)
        else:
            total = _u_total(<const uint32_t*>data, n, width, &bad)
        if total < 0:
            # Let Python's codec raise its own UnicodeEncodeError for that element.
            flat[bad].encode("utf-8")
            raise ValueError(f"BYTES element {bad} is not encodable as UTF-8")
    else:
        width = itemsize
        if nogil_ok:
            with nogil:
                total = _s_total(data, n, width)
        else:
            total = _s_total(data, n, width)
    # No element can outgrow its uint32 prefix: numpy itemsizes fit in a C int, and UTF-8
    # needs at most 4 bytes per 4-byte UCS4 code unit.
    if size_only:
        return total
    out = PyBytes_FromStringAndSize(NULL, total)
    dst = PyBytes_AS_STRING(out)
    if nogil_ok:
        with nogil:
            _fixed_write(dst, data, n, width, is_unicode)
    else:
        _fixed_write(dst, data, n, width, is_unicode)
    return out


cdef object _serialize(object array, bint size_only):
    if not isinstance(array, np.ndarray):
        raise TypeError(f"expected a numpy.ndarray, got {type(array).__name__}")
    cdef cnp.ndarray flat = _flat_c_order(array)
    cdef int type_num = cnp.PyArray_TYPE(flat)
    if type_num == cnp.NPY_OBJECT:
        return _serialize_objects(flat, size_only)
    if type_num == cnp.NPY_STRING:
        return _serialize_fixed(flat, False, size_only)
    if type_num == cnp.NPY_UNICODE:
        if not cnp.PyArray_ISNOTSWAPPED(flat):
            flat = flat.astype(flat.dtype.newbyteorder("="))
        return _serialize_fixed(flat, True, size_only)
    raise TypeError(
        f"cannot serialize a {flat.dtype} array as a BYTES tensor: "
        "expected an object, bytes ('S') or str ('U') array"
    )


def serialize_bytes_tensor(array):
    """Serialize a BYTES tensor: per element in C order, a uint32 LE length + the bytes."""
    return _serialize(array, False)


def bytes_tensor_byte_size(array):
    """The size in bytes ``serialize_bytes_tensor(array)`` returns, without building it."""
    return _serialize(array, True)


# ----------------------------------------------------------------------------------------
# deserialization


cdef enum ScanResult:
    SCAN_OK
    SCAN_TRUNCATED_PREFIX  # fewer than 4 bytes left where a length prefix should start
    SCAN_PAST_END  # a length prefix points past the end of the buffer
    SCAN_EXTRA_DATA  # bytes left over after the expected number of elements


cdef struct Scan:
    ScanResult result
    Py_ssize_t count  # elements fully inside the buffer
    size_t offset  # where scanning stopped
    uint32_t length  # the offending length prefix for SCAN_PAST_END


cdef void _scan(const unsigned char* data, size_t size, Py_ssize_t expected,
                Scan* scan) noexcept nogil:
    """Walk the framing without touching memory outside [data, data + size).

    ``offset <= size`` holds throughout, so ``size - offset`` never wraps.
    """
    cdef size_t offset = 0
    cdef Py_ssize_t count = 0
    cdef uint32_t length
    scan.result = SCAN_OK
    while offset < size:
        if count == expected:
            scan.result = SCAN_EXTRA_DATA
            break
        if size - offset < 4:
            scan.result = SCAN_TRUNCATED_PREFIX
            break
        length = _load_le32(data + offset)
        if length > size - offset - 4:
            scan.result = SCAN_PAST_END
            scan.length = length
            break
        offset += 4 + <size_t>length
        count += 1
    scan.count = count
    scan.offset = offset


cdef Py_ssize_t _count(const unsigned char* data, size_t size, Py_ssize_t expected) except -1:
    """Validate the framing and return the number of elements (== expected when >= 0)."""
    cdef Scan scan
    if size >= <size_t>_NOGIL_THRESHOLD:
        with nogil:
            _scan(data, size, expected, &scan)
    else:
        _scan(data, size, expected, &scan)
    if scan.result == SCAN_TRUNCATED_PREFIX:
        raise ValueError(
            f"malformed BYTES tensor: element {scan.count} at byte offset {scan.offset} "
            f"has a truncated length prefix ({size - scan.offset} of 4 bytes)"
        )
    if scan.result == SCAN_PAST_END:
        raise ValueError(
            f"malformed BYTES tensor: element {scan.count} at byte offset {scan.offset} "
            f"declares {scan.length} bytes but only {size - scan.offset - 4} remain"
        )
    if scan.result == SCAN_EXTRA_DATA:
        raise ValueError(
            f"BYTES tensor holds more than the expected {expected} elements: "
            f"{size - scan.offset} bytes left over"
        )
    if expected >= 0 and scan.count != expected:
        raise ValueError(f"BYTES tensor holds {scan.count} elements, expected {expected}")
    return scan.count


def count_bytes_elements(buffer):
    """Number of elements in a serialized BYTES tensor; ValueError if the framing is broken."""
    cdef Py_buffer view
    PyObject_GetBuffer(buffer, &view, PyBUF_SIMPLE)
    try:
        return _count(<const unsigned char*>view.buf, <size_t>view.len, -1)
    finally:
        PyBuffer_Release(&view)


def deserialize_bytes_tensor(buffer, Py_ssize_t count=-1):
    """Split a serialized BYTES tensor into a 1-D object array of ``bytes``."""
    if count < -1:
        raise ValueError(f"count must be -1 or a non-negative element count, got {count}")
    cdef Py_buffer view
    cdef const unsigned char* data
    cdef size_t size, offset = 0
    cdef uint32_t length
    cdef Py_ssize_t n, i
    cdef cnp.ndarray out
    cdef PyObject** items
    cdef PyObject* old
    cdef object element
    PyObject_GetBuffer(buffer, &view, PyBUF_SIMPLE)
    try:
        data = <const unsigned char*>view.buf
        size = <size_t>view.len
        n = _count(data, size, count)
        out = np.empty(n, dtype=object)
        items = <PyObject**>cnp.PyArray_DATA(out)
        for i in range(n):
            # Checked again: a writable buffer may have been changed by another thread
            # while _count ran without the GIL.
            if size - offset < 4:
                raise ValueError("BYTES tensor buffer changed while it was being read")
            length = _load_le32(data + offset)
            if length > size - offset - 4:
                raise ValueError("BYTES tensor buffer changed while it was being read")
            element = PyBytes_FromStringAndSize(<const char*>data + offset + 4, length)
            offset += 4 + <size_t>length
            old = items[i]
            items[i] = <PyObject*>element
            Py_INCREF(element)
            Py_XDECREF(old)
        return out
    finally:
        PyBuffer_Release(&view)
