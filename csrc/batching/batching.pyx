# cython: language_level=3
"""The batching data path: gather a batch's inputs into one buffer, scatter outputs as views.

For each input of a batch the scheduler calls ``gather_batch(parts, pool=pool)``: the
requests' arrays (same dtype, same trailing dims) are concatenated along axis 0 with one
copy per input byte, by C++ (``cpp/strided_copy.h``) that reads any strides directly, into
a page-aligned buffer from a :class:`BufferPool` (``cpp/host_pool.h``). A batch of one is
the request's own array. ``scatter_batch(outputs, sizes)`` hands each request a view of the
batched output. BYTES (object) arrays are concatenated as references, with the GIL held.

Buffer lifetime: a :class:`PooledBuffer` goes back to its pool exactly once, by
``release()`` or when its last reference goes (``__dealloc__``), whichever comes first.
Every array over it keeps a reference: an ``np.frombuffer`` array through its memoryview
base (a buffer export, counted: ``release()`` refuses while one lives), an array from
``gather_batch`` directly as its base (such a buffer refuses ``release()`` altogether), and
views and scatter views through the array they view. So the memory cannot be reused while
any array can still read it, and nothing returns twice.
"""

cimport cython
cimport numpy as cnp
from cpython.buffer cimport PyBUF_FORMAT, PyBUF_ND, PyBUF_STRIDES
from cpython.mem cimport PyMem_Free, PyMem_Malloc
from cpython.object cimport PyTypeObject
from cpython.ref cimport PyObject, Py_XDECREF, Py_XINCREF
from libc.stdint cimport intptr_t, uintptr_t
from libc.string cimport memcpy
from libcpp.memory cimport shared_ptr
from libcpp.vector cimport vector

from batching_cpp cimport (
    HostPool,
    PoolStats,
    StridedSource,
    byte_extent,
    gather_unchecked,
    kPageSize,
    make_pageable_pool,
)

from operator import index

cnp.import_array()

cdef extern from "numpy/arrayobject.h":
    enum: NPY_ITEM_REFCOUNT
    bint PyArray_EquivTypes(cnp.PyArray_Descr* a, cnp.PyArray_Descr* b)
    # Steals a reference to descr.
    object PyArray_NewFromDescr(PyTypeObject* subtype, cnp.PyArray_Descr* descr, int nd,
                                cnp.npy_intp* dims, cnp.npy_intp* strides, void* data,
                                int flags, PyObject* obj)

cdef extern from "Python.h":
    const Py_ssize_t PY_SSIZE_T_MAX
    void Py_INCREF_descr "Py_INCREF"(cnp.PyArray_Descr* descr)

DEFAULT_MAX_CACHED_BYTES = 256 << 20
PAGE_SIZE = kPageSize

# Copies of at least this many bytes drop the GIL. Below it the copy takes a few
# microseconds, less than what getting the GIL back can cost when another thread (the event
# loop) holds it: up to the 5 ms switch interval.
cdef Py_ssize_t _NOGIL_THRESHOLD = 1 << 16

# strides for the 1-D byte view of a PooledBuffer; must outlive every Py_buffer
cdef Py_ssize_t _UNIT_STRIDE = 1
cdef const char* _FORMAT_BYTE = "B"


# ----------------------------------------------------------------------------------------
# the pool


@cython.final
cdef class PooledBuffer:
    """Writable page-aligned host memory from :meth:`BufferPool.acquire`.

    Exposes the buffer protocol (1-D, bytes, ``nbytes`` long), so
    ``np.frombuffer(buf, dtype, count).reshape(shape)`` views it. Goes back to its pool
    exactly once: :meth:`release`, or when the last reference (including the base of every
    array over it) is dropped.
    """

    cdef shared_ptr[HostPool] _pool  # keeps the pool alive as long as the buffer
    cdef char* _data  # NULL once given back
    cdef Py_ssize_t _nbytes  # the size asked for: what the buffer protocol exposes
    cdef size_t _capacity  # the size class actually held
    cdef Py_ssize_t _exports  # live buffer-protocol exports (arrays, memoryviews)
    cdef bint _array_owned  # the base of an array from gather_batch: returns with it

    def __init__(self):
        raise TypeError("PooledBuffer objects come from BufferPool.acquire()")

    def __dealloc__(self):
        # No exports can be alive here: each one holds a reference to self.
        self._give_back()

    cdef void _give_back(self) noexcept:
        cdef char* data = self._data
        if data != NULL:
            self._data = NULL
            self._pool.get().release(data, self._capacity)

    def release(self):
        """Return the memory to the pool now; a no-op when already returned.

        Raises BufferError while an array or memoryview over the buffer is alive, and
        always for the buffer under an array from gather_batch (it returns with the array).
        """
        if self._array_owned:
            raise BufferError(
                "this buffer backs an array from gather_batch; it returns to the pool when "
                "that array and every view of it are dropped"
            )
        if self._exports:
            raise BufferError(
                f"cannot release a pooled buffer while {self._exports} array(s) or "
                "memoryview(s) over it are alive"
            )
        self._give_back()

    @property
    def released(self):
        return self._data == NULL

    @property
    def nbytes(self):
        """The size asked for: the length of the buffer-protocol view."""
        return self._nbytes

    @property
    def capacity(self):
        """The size class actually held (a power of two, at least 4 KiB)."""
        return self._capacity

    @property
    def address(self):
        """The start address (page aligned); 0 once released."""
        return <uintptr_t>self._data

    def __getbuffer__(self, Py_buffer* view, int flags):
        if self._data == NULL:
            raise BufferError("the pooled buffer was released")
        view.buf = self._data
        view.obj = self
        view.len = self._nbytes
        view.readonly = 0
        view.itemsize = 1
        view.format = <char*>_FORMAT_BYTE if flags & PyBUF_FORMAT else NULL
        view.ndim = 1
        view.shape = &self._nbytes if flags & PyBUF_ND else NULL
        view.strides = &_UNIT_STRIDE if flags & PyBUF_STRIDES else NULL
        view.suboffsets = NULL
        view.internal = NULL
        self._exports += 1

    def __releasebuffer__(self, Py_buffer* view):
        self._exports -= 1

    def __repr__(self):
        state = "released" if self._data == NULL else f"at 0x{<uintptr_t>self._data:x}"
        return f"<PooledBuffer {self._nbytes} of {self._capacity} bytes {state}>"


@cython.final
cdef class BufferPool:
    """Page-aligned host buffers in power-of-two size classes (>= 4 KiB), reused.

    Thread-safe. Released buffers are cached for reuse while the cache holds at most
    ``max_cached_bytes``; past that they are freed. The memory is plain pageable memory
    (``stats()["memory_kind"]``); the allocator is a strategy in ``cpp/host_pool.h`` so
    that pinned memory can back the pool without changing its callers.
    """

    cdef shared_ptr[HostPool] _pool

    def __cinit__(self, Py_ssize_t max_cached_bytes=DEFAULT_MAX_CACHED_BYTES):
        if max_cached_bytes < 0:
            raise ValueError(f"max_cached_bytes must be >= 0, got {max_cached_bytes}")
        self._pool = make_pageable_pool(<size_t>max_cached_bytes)

    def acquire(self, Py_ssize_t nbytes):
        """A writable buffer of ``nbytes`` bytes (capacity: its size class)."""
        return self._acquire(nbytes)

    cdef PooledBuffer _acquire(self, Py_ssize_t nbytes):
        cdef size_t capacity = 0
        cdef void* data
        cdef PooledBuffer buf
        if nbytes < 0:
            raise ValueError(f"nbytes must be >= 0, got {nbytes}")
        data = self._pool.get().acquire(<size_t>nbytes, &capacity)
        if data == NULL:
            raise MemoryError(
                f"cannot allocate a {nbytes}-byte {self._pool.get().memory_kind().decode()} "
                "host buffer"
            )
        buf = PooledBuffer.__new__(PooledBuffer)
        buf._pool = self._pool
        buf._data = <char*>data
        buf._nbytes = nbytes
        buf._capacity = capacity
        return buf

    def trim(self):
        """Free every cached buffer; returns the bytes freed."""
        return self._pool.get().trim()

    def stats(self):
        """Counters: ``allocations`` (fresh allocations so far), ``reuses``, ``frees``,
        ``cached_bytes``, ``in_use_bytes`` (capacities), ``max_cached_bytes`` and
        ``memory_kind``."""
        cdef PoolStats s = self._pool.get().stats()
        return {
            "allocations": s.allocations,
            "reuses": s.reuses,
            "frees": s.frees,
            "cached_bytes": s.cached_bytes,
            "in_use_bytes": s.in_use_bytes,
            "max_cached_bytes": s.max_cached_bytes,
            "memory_kind": self._pool.get().memory_kind().decode(),
        }


# ----------------------------------------------------------------------------------------
# gather


cdef inline cnp.ndarray _as_array(object obj, str what, Py_ssize_t index=-1):
    """obj as an ndarray, else TypeError naming it (what, or "what index" when index >= 0;
    formatted only on failure: this runs once per part of every batch)."""
    if not cnp.PyArray_Check(obj):
        name = what if index < 0 else f"{what} {index}"
        raise TypeError(f"{name} must be a numpy array, not {type(obj).__name__}")
    return <cnp.ndarray>obj


cdef inline bint _same_dtype(cnp.ndarray a, cnp.ndarray b):
    cdef cnp.PyArray_Descr* x = cnp.PyArray_DESCR(a)
    cdef cnp.PyArray_Descr* y = cnp.PyArray_DESCR(b)
    return x == y or PyArray_EquivTypes(x, y)


cdef str _shape_str(cnp.ndarray arr):
    return str((<object>arr).shape)


cdef cnp.ndarray _new_array(cnp.ndarray like, cnp.npy_intp* dims, void* data):
    """A C-contiguous array with like's dtype: over data (writable), or owning fresh memory
    (zeroed for object arrays, whose slots numpy then reads as None) when data is NULL."""
    cdef cnp.PyArray_Descr* descr = cnp.PyArray_DESCR(like)
    Py_INCREF_descr(descr)
    return <cnp.ndarray>PyArray_NewFromDescr(
        <PyTypeObject*>cnp.ndarray, descr, cnp.PyArray_NDIM(like), dims, NULL, data,
        cnp.NPY_ARRAY_WRITEABLE if data != NULL else 0, NULL)


cdef void _gather_objects(const StridedSource* sources, size_t count, cnp.ndarray dest,
                          bint fresh) except *:
    """Concatenate object references into dest, which already holds references (None or
    NULL when fresh): every new element gains one, every replaced one loses one, and the
    old ones are dropped last so that no destructor runs while dest is half written."""
    cdef Py_ssize_t i, n = cnp.PyArray_SIZE(dest)
    cdef PyObject** slots = <PyObject**>cnp.PyArray_DATA(dest)
    cdef PyObject** old = NULL
    if not fresh:
        old = <PyObject**>PyMem_Malloc(max(n, 1) * sizeof(PyObject*))
        if old == NULL:
            raise MemoryError()
        memcpy(old, slots, n * sizeof(PyObject*))
    gather_unchecked(sources, count, sizeof(PyObject*), <char*>slots)
    for i in range(n):
        Py_XINCREF(slots[i])
    if old != NULL:
        for i in range(n):
            Py_XDECREF(old[i])
        PyMem_Free(old)


def gather_batch(parts, out=None, BufferPool pool=None):
    """Concatenate the parts (the requests' arrays of one input) along axis 0.

    All parts need the same dtype and the same trailing dims (ValueError otherwise). One
    part and no ``out``: that part itself, uncopied. Otherwise the result is a C-contiguous
    array: ``out`` (checked: shape, dtype, writable, no overlap with a part), else a buffer
    from ``pool`` (the array keeps it; dropping the array returns it), else new memory.
    Fixed-size dtypes are copied once, from any strides, with the GIL released for large
    batches. Object (BYTES) arrays are concatenated as references into ``out`` or a new
    array, never into the pool: numpy must own the references.
    """
    cdef tuple items = tuple(parts)  # ours: the arrays must stay alive while we copy
    cdef Py_ssize_t count = len(items)
    cdef Py_ssize_t i, axis, rows = 0, nbytes, row_bytes
    cdef int ndim
    cdef cnp.ndarray head, arr, result
    cdef cnp.npy_intp* dims
    cdef cnp.npy_intp out_dims[64]
    cdef vector[StridedSource] sources
    cdef vector[intptr_t] geometry  # private copies of every part's shape and strides
    cdef bint objects, fits
    cdef uintptr_t lo, hi, out_lo, out_hi
    cdef PooledBuffer buf
    cdef char* dst

    if count == 0:
        raise ValueError("gather_batch needs at least one part")
    head = _as_array(items[0], "part", 0)
    ndim = cnp.PyArray_NDIM(head)
    if ndim == 0:
        raise ValueError("part 0 is 0-d; a batch concatenates arrays along axis 0")
    if count == 1 and out is None:
        return head
    if out is not None and pool is not None:
        raise ValueError("pass out or pool, not both")

    objects = (head.descr.flags & NPY_ITEM_REFCOUNT) != 0
    if objects and cnp.PyArray_TYPE(head) != cnp.NPY_OBJECT:
        raise TypeError(f"gather_batch cannot copy dtype {head.dtype}: it holds references")

    dims = cnp.PyArray_DIMS(head)
    geometry.resize(2 * ndim * count)
    sources.resize(count)
    for i in range(count):
        arr = _as_array(items[i], "part", i)
        if not _same_dtype(arr, head):
            raise ValueError(f"part {i} has dtype {arr.dtype}, but part 0 has {head.dtype}")
        if cnp.PyArray_NDIM(arr) != ndim:
            raise ValueError(
                f"part {i} has shape {_shape_str(arr)}, but part 0 has {_shape_str(head)}: "
                "parts must agree on every dim after the first"
            )
        for axis in range(1, ndim):
            if cnp.PyArray_DIMS(arr)[axis] != dims[axis]:
                raise ValueError(
                    f"part {i} has shape {_shape_str(arr)}, but part 0 has "
                    f"{_shape_str(head)}: parts must agree on every dim after the first"
                )
        for axis in range(ndim):
            geometry[2 * ndim * i + axis] = cnp.PyArray_DIMS(arr)[axis]
            geometry[2 * ndim * i + ndim + axis] = cnp.PyArray_STRIDES(arr)[axis]
        sources[i].data = <const char*>cnp.PyArray_DATA(arr)
        sources[i].ndim = ndim
        sources[i].shape = &geometry[2 * ndim * i]
        sources[i].strides = &geometry[2 * ndim * i + ndim]
        if cnp.PyArray_DIMS(arr)[0] > PY_SSIZE_T_MAX - rows:
            raise ValueError("the batch is too large")
        rows += cnp.PyArray_DIMS(arr)[0]

    row_bytes = cnp.PyArray_ITEMSIZE(head)
    out_dims[0] = rows
    for axis in range(1, ndim):
        out_dims[axis] = dims[axis]
        if dims[axis] != 0 and row_bytes > PY_SSIZE_T_MAX // dims[axis]:
            raise ValueError("the batch is too large")
        row_bytes *= dims[axis]
    if row_bytes != 0 and rows > PY_SSIZE_T_MAX // row_bytes:
        raise ValueError("the batch is too large")
    nbytes = rows * row_bytes

    if out is not None:
        result = _as_array(out, "out")
        fits = (_same_dtype(result, head) and cnp.PyArray_NDIM(result) == ndim
                and cnp.PyArray_IS_C_CONTIGUOUS(result) and cnp.PyArray_ISWRITEABLE(result))
        for axis in range(ndim if fits else 0):
            fits = fits and cnp.PyArray_DIMS(result)[axis] == out_dims[axis]
        if not fits:
            raise ValueError(
                f"out is a {_shape_str(result)} {result.dtype} array; this batch needs a "
                f"writable C-contiguous {tuple(out_dims[axis] for axis in range(ndim))} "
                f"{head.dtype} array"
            )
        out_lo = <uintptr_t>cnp.PyArray_DATA(result)
        out_hi = out_lo + <uintptr_t>nbytes
        for i in range(count):
            byte_extent(sources[i], cnp.PyArray_ITEMSIZE(head), &lo, &hi)
            if lo < out_hi and out_lo < hi:
                raise ValueError(f"out overlaps the memory of part {i}")
        if objects:
            _gather_objects(sources.data(), count, result, False)
            return result
    elif objects:
        result = _new_array(head, out_dims, NULL)
        _gather_objects(sources.data(), count, result, True)
        return result
    elif pool is not None:
        buf = pool._acquire(nbytes)
        result = _new_array(head, out_dims, buf._data)
        # The buffer itself is the base (a memoryview, as np.frombuffer makes, would cost
        # more than the pool saves on small batches); with no export to count, release()
        # must refuse for good: the buffer returns when the array and its views are gone.
        buf._array_owned = True
        cnp.set_array_base(result, buf)
    else:
        result = _new_array(head, out_dims, NULL)

    dst = <char*>cnp.PyArray_DATA(result)
    if nbytes >= _NOGIL_THRESHOLD:
        with nogil:
            gather_unchecked(sources.data(), count, cnp.PyArray_ITEMSIZE(head), dst)
    else:
        gather_unchecked(sources.data(), count, cnp.PyArray_ITEMSIZE(head), dst)
    return result


# ----------------------------------------------------------------------------------------
# scatter


def scatter_batch(batched, batch_sizes):
    """Split ``batched`` along axis 0 into consecutive views of ``batch_sizes`` rows.

    The views share batched's memory (and keep it alive); the sizes must add up to
    ``batched.shape[0]`` (ValueError otherwise). One size: ``[batched]`` itself.
    """
    cdef cnp.ndarray arr = _as_array(batched, "batched")
    cdef int ndim = cnp.PyArray_NDIM(arr)
    cdef list sizes
    cdef list views = []
    cdef Py_ssize_t size, total = 0, start = 0
    cdef cnp.npy_intp dims[64]
    cdef cnp.ndarray view
    cdef cnp.PyArray_Descr* descr
    cdef char* data
    cdef int flags
    if ndim == 0:
        raise ValueError("batched is 0-d; scatter_batch splits axis 0")
    sizes = [index(s) for s in batch_sizes]
    for size in sizes:
        if size < 0:
            raise ValueError(f"batch sizes must be >= 0, got {sizes}")
        total += size
    if total != cnp.PyArray_DIMS(arr)[0]:
        raise ValueError(
            f"batch sizes {sizes} add up to {total}, but batched has "
            f"{cnp.PyArray_DIMS(arr)[0]} rows"
        )
    if len(sizes) == 1:
        return [arr]

    memcpy(dims, cnp.PyArray_DIMS(arr), ndim * sizeof(cnp.npy_intp))
    data = <char*>cnp.PyArray_DATA(arr)
    flags = cnp.NPY_ARRAY_WRITEABLE if cnp.PyArray_ISWRITEABLE(arr) else 0
    for size in sizes:
        dims[0] = size
        descr = cnp.PyArray_DESCR(arr)
        Py_INCREF_descr(descr)
        view = <cnp.ndarray>PyArray_NewFromDescr(
            <PyTypeObject*>cnp.ndarray, descr, ndim, dims, cnp.PyArray_STRIDES(arr),
            data + start * cnp.PyArray_STRIDES(arr)[0], flags, NULL)
        cnp.set_array_base(view, arr)
        views.append(view)
        start += size
    return views
