# cython: language_level=3
"""Process mode's shared arenas (``backends/python/process_transport.Arena``): the mapping of
one shared file, tensors copied into it and out of it with ``memcpy``, read-only array
views over it, and the two counters in the header of a worker's arena.

The mapping is made once and undone only when its last reference goes (``__dealloc__``):
every array viewing it holds it as its base, and so does a memoryview of it, so no copy and
no view can ever reach unmapped memory, whatever the arena's owner closes in between.
Every offset and size is checked against the mapping's size before a byte moves, and the
mapping against the file's size when it is made.
"""

cimport cython
cimport numpy as cnp
from cpython.buffer cimport (
    PyBUF_FORMAT,
    PyBUF_ND,
    PyBUF_SIMPLE,
    PyBUF_WRITABLE,
    PyBuffer_Release,
    PyObject_GetBuffer,
)
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_CheckExact, PyBytes_GET_SIZE
from cpython.object cimport PyTypeObject
from cpython.ref cimport PyObject
from cpython.tuple cimport PyTuple_GET_SIZE
from libc.errno cimport errno
from libc.stdint cimport uint64_t
from libc.string cimport memcpy
from posix.mman cimport MAP_FAILED, MAP_SHARED, PROT_READ, PROT_WRITE, mmap, munmap
from posix.stat cimport fstat, struct_stat

import os

cnp.import_array()

cdef extern from "numpy/arrayobject.h":
    # Steals a reference to descr.
    object PyArray_NewFromDescr(PyTypeObject* subtype, cnp.PyArray_Descr* descr, int nd,
                                cnp.npy_intp* dims, cnp.npy_intp* strides, void* data,
                                int flags, PyObject* obj)
    bint PyDataType_REFCHK(cnp.PyArray_Descr* descr)

cdef extern from "Python.h":
    void Py_INCREF_descr "Py_INCREF"(cnp.PyArray_Descr* descr)

cdef extern from *:
    """
    static inline uint64_t arena_load(const uint64_t* at) {
        return __atomic_load_n(at, __ATOMIC_ACQUIRE);
    }
    static inline void arena_store(uint64_t* at, uint64_t value) {
        __atomic_store_n(at, value, __ATOMIC_RELEASE);
    }
    """
    uint64_t arena_load(const uint64_t* at) nogil
    void arena_store(uint64_t* at, uint64_t value) nogil

# Copies of at least this many bytes drop the GIL (as the batching gather does).
cdef Py_ssize_t _NOGIL_THRESHOLD = 1 << 16
# The header of a worker's arena: bytes written, bytes taken (two u64, native order).
cdef Py_ssize_t _COUNTERS_BYTES = 16
cdef char* _FORMAT_BYTE = "B"


cdef class ArenaMemory:
    """The shared mapping of ``fd``'s first ``size`` bytes, read and written by offset."""

    cdef char* _base
    cdef readonly Py_ssize_t size

    def __cinit__(self, int fd, Py_ssize_t size):
        if size < _COUNTERS_BYTES:
            raise ValueError(f"an arena of {size} bytes is too small")
        # The other process names the size: mapped past the file's end, a read there would
        # be a SIGBUS, not an error.
        cdef struct_stat status
        if fstat(fd, &status) != 0:
            raise OSError(errno, f"an arena's descriptor: {os.strerror(errno)}")
        if size > status.st_size:
            raise ValueError(
                f"an arena of {size} bytes over a file of {status.st_size} bytes")
        cdef void* mapped = mmap(NULL, <size_t>size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)
        if mapped == MAP_FAILED:
            raise OSError(errno, f"mapping an arena of {size} bytes: {os.strerror(errno)}")
        self._base = <char*>mapped
        self.size = size

    def __dealloc__(self):
        if self._base != NULL:
            munmap(self._base, <size_t>self.size)
            self._base = NULL

    cdef inline int _check(self, Py_ssize_t offset, Py_ssize_t nbytes) except -1:
        if offset < 0 or nbytes < 0 or nbytes > self.size - offset:
            raise ValueError(
                f"{nbytes} bytes at offset {offset} lie outside the arena's {self.size}")
        return 0

    cpdef void write(self, Py_ssize_t offset, object source) except *:
        """Copy ``source`` (a C-contiguous array, bytes, or any contiguous buffer) to
        ``offset``."""
        cdef const char* data
        cdef Py_ssize_t nbytes
        cdef Py_buffer view
        if cnp.PyArray_Check(source):
            # Directly from the array: some dtypes (ml_dtypes' bfloat16) export no buffer.
            if not cnp.PyArray_IS_C_CONTIGUOUS(<cnp.ndarray>source):
                raise ValueError("an arena takes C-contiguous arrays only")
            if PyDataType_REFCHK(cnp.PyArray_DESCR(<cnp.ndarray>source)):
                raise ValueError("an arena takes no arrays of objects")
            data = <const char*>cnp.PyArray_DATA(<cnp.ndarray>source)
            nbytes = cnp.PyArray_NBYTES(<cnp.ndarray>source)
            self._copy_in(offset, data, nbytes)
        elif PyBytes_CheckExact(source):
            self._copy_in(offset, PyBytes_AS_STRING(source), PyBytes_GET_SIZE(source))
        else:
            PyObject_GetBuffer(source, &view, PyBUF_SIMPLE)
            try:
                self._copy_in(offset, <const char*>view.buf, view.len)
            finally:
                PyBuffer_Release(&view)

    cdef inline int _copy_in(self, Py_ssize_t offset, const char* data,
                             Py_ssize_t nbytes) except -1:
        self._check(offset, nbytes)
        cdef char* target = self._base + offset
        if nbytes >= _NOGIL_THRESHOLD:
            with nogil:
                memcpy(target, data, <size_t>nbytes)
        elif nbytes:
            memcpy(target, data, <size_t>nbytes)
        return 0

    cpdef object array(self, Py_ssize_t offset, Py_ssize_t nbytes, cnp.dtype dtype,
                       tuple shape, bint copy):
        """The ``nbytes`` at ``offset`` as an array of ``dtype`` and ``shape``: a copy
        (``copy``), or a read-only view that keeps this mapping alive."""
        cdef int ndim = <int>PyTuple_GET_SIZE(shape)
        cdef cnp.npy_intp dims[cnp.NPY_MAXDIMS]
        cdef Py_ssize_t count = 1
        cdef Py_ssize_t extent
        cdef int i
        if PyDataType_REFCHK(<cnp.PyArray_Descr*>dtype):
            raise ValueError("an arena holds no arrays of objects")
        if ndim > cnp.NPY_MAXDIMS:
            raise ValueError(f"a tensor of {ndim} dimensions")
        for i in range(ndim):
            extent = shape[i]
            if extent < 0:
                raise ValueError(f"shape {shape} has a negative dimension")
            dims[i] = extent
            if count and extent and count > (1 << 62) // extent:
                raise ValueError(f"shape {shape} is too large")
            count *= extent
        if count * dtype.itemsize != nbytes:
            raise ValueError(f"{nbytes} bytes do not hold {dtype} of shape {shape}")
        self._check(offset, nbytes)
        cdef cnp.ndarray result
        Py_INCREF_descr(<cnp.PyArray_Descr*>dtype)  # PyArray_NewFromDescr steals it
        if copy:
            result = <cnp.ndarray>PyArray_NewFromDescr(
                <PyTypeObject*>cnp.ndarray, <cnp.PyArray_Descr*>dtype, ndim, dims, NULL,
                NULL, 0, NULL)
            if nbytes >= _NOGIL_THRESHOLD:
                with nogil:
                    memcpy(cnp.PyArray_DATA(result), self._base + offset, <size_t>nbytes)
            elif nbytes:
                memcpy(cnp.PyArray_DATA(result), self._base + offset, <size_t>nbytes)
            return result
        result = <cnp.ndarray>PyArray_NewFromDescr(
            <PyTypeObject*>cnp.ndarray, <cnp.PyArray_Descr*>dtype, ndim, dims, NULL,
            self._base + offset, 0, NULL)  # flags 0: read-only
        cnp.set_array_base(result, self)
        return result

    # ------------------------------------------------ the worker arena's counters

    cpdef uint64_t written(self):
        return arena_load(<const uint64_t*>self._base)

    cpdef uint64_t taken(self):
        return arena_load(<const uint64_t*>(self._base + 8))

    cpdef void set_written(self, uint64_t value):
        arena_store(<uint64_t*>self._base, value)

    cpdef void add_taken(self, uint64_t count):
        # Only one side (the server) writes this counter; the other only reads it.
        cdef uint64_t* at = <uint64_t*>(self._base + 8)
        arena_store(at, arena_load(at) + count)

    # ------------------------------------------------ a buffer over the whole mapping

    def __getbuffer__(self, Py_buffer* view, int flags):
        # For what reads raw bytes out (the BYTES codec, through a memoryview slice). Read
        # only: numpy lets a view's writeable flag be set again when its base exports a
        # writable buffer, and views over an arena stay read-only (writes go by ``write``).
        if flags & PyBUF_WRITABLE:
            raise BufferError("an arena's buffer is read-only; write with ArenaMemory.write")
        view.buf = self._base
        view.obj = self
        view.len = self.size
        view.readonly = 1
        view.itemsize = 1
        view.format = _FORMAT_BYTE if flags & PyBUF_FORMAT else NULL
        view.ndim = 1
        view.shape = &self.size if flags & PyBUF_ND else NULL
        view.strides = NULL
        view.suboffsets = NULL
        view.internal = NULL
