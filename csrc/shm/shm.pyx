# cython: language_level=3
"""Client system shared memory: mapped regions, range checks and copies.

A :class:`SystemRegion` is one client region (``offset``/``byte_size`` of the POSIX
shared-memory object ``key``), mapped read/write by :meth:`SystemRegion.open` and unmapped
when its last reference goes. Every use of a region goes through a check here, on uint64
values and without forming ``offset + byte_size`` (``check_range``): Python ints that are
negative or above 2**64 - 1 are refused, not wrapped.

A region holds no file descriptor. A client that shrinks its object (``ftruncate``) under a
mapping cannot crash the server: the compiled SIGBUS guard (cpp/fault_guard.h) lets the touch
of a page past the new end complete on anonymous memory and marks the region truncated;
:meth:`SystemRegion.backed` reads the mark, every later use raises
:class:`RegionTruncatedError`, and so does a write that met the fault.

Zero-copy inputs: :meth:`SystemRegion.view` hands out a read-only :class:`RegionView` over
a checked range; ``np.frombuffer`` over it makes the input array, which keeps the view,
which keeps the region (so the mapping outlives every array over it, however long a model
keeps one, and a region unregistered while a request uses it stays mapped until that
request lets go). Outputs: :meth:`SystemRegion.write` copies a buffer into a checked range,
with the GIL released for large copies.

Writable inputs without a copy: a model that asks for its input writable (the Python
backend's ``as_numpy``, whose inputs under Triton's stub are its own copies) gets, for a large
range, a :class:`PrivateCopy` from :meth:`SystemRegion.private_copy`: the same bytes mapped
again copy-on-write, so a page is copied only if the model writes it. Such a mapping aliases
the client's pages through other addresses; :meth:`SystemRegion.write` sees when an output it
copies comes from one over the very bytes it writes, and copies through a buffer then.
"""

cimport cython
from cpython.buffer cimport (
    PyBUF_FORMAT,
    PyBUF_ND,
    PyBUF_SIMPLE,
    PyBUF_STRIDES,
    PyBUF_WRITABLE,
    PyBuffer_Release,
    PyObject_GetBuffer,
)
from cpython.ref cimport PyObject
from libc.stdint cimport uint64_t, uintptr_t
from libc.stdlib cimport free, malloc
from libc.string cimport memcpy

from shm_cpp cimport (
    Mapping,
    aliases_object_range,
    check_range as _check_range,
    copy_into_unchecked,
    kBadEnd,
    kBadOffset,
    kGuardFailed,
    kInRange,
    kMapFailed,
    kMapped,
    kOpenFailed,
    kOutOfObject,
    map_private,
    map_region,
    region_backed,
    unmap_region,
)

from operator import index as _index

UINT64_MAX = 0xFFFFFFFFFFFFFFFF

# Copies of at least this many bytes drop the GIL (as in the batching extension: below it
# the copy is cheaper than getting the GIL back from a busy event loop).
cdef Py_ssize_t _NOGIL_THRESHOLD = 1 << 16

# strides for the 1-D byte export of a RegionView; must outlive every Py_buffer
cdef Py_ssize_t _UNIT_STRIDE = 1
cdef const char* _FORMAT_BYTE = "B"

cdef inline void _export_bytes(Py_buffer* view, object owner, char* data, Py_ssize_t* nbytes,
                               bint readonly, int flags):
    """Fill ``view`` as 1-D unsigned bytes over ``data`` (``*nbytes`` long, owned by
    ``owner``, whose field ``nbytes`` points to: the shape must outlive the view)."""
    view.buf = data
    view.obj = owner
    view.len = nbytes[0]
    view.readonly = readonly
    view.itemsize = 1
    view.format = <char*>_FORMAT_BYTE if flags & PyBUF_FORMAT else NULL
    view.ndim = 1
    view.shape = nbytes if flags & PyBUF_ND else NULL
    view.strides = &_UNIT_STRIDE if flags & PyBUF_STRIDES else NULL
    view.suboffsets = NULL
    view.internal = NULL


# The live private copies, linked through borrowed references (a copy unlinks itself as it
# goes): ``SystemRegion.write`` walks them. Touched with the GIL held only.
cdef PyObject* _live_copies = NULL


class RegionRangeError(ValueError):
    """A range that is not inside a region (or object).

    ``part`` names what is wrong as Triton's messages do: ``"offset"`` when the offset
    itself lies outside (or is negative, or above 2**64 - 1), ``"offset + byte size"`` when
    the offset is inside but the range does not end inside.
    """

    def __init__(self, part, offset, byte_size, extent):
        super().__init__(
            f"{part} out of range: offset {offset}, byte size {byte_size}, extent {extent}"
        )
        self.part = part
        self.offset = offset
        self.byte_size = byte_size
        self.extent = extent


class RegionTruncatedError(ValueError):
    """The client shrank the region's object under the mapping (seen at a touch of a page
    past its new end); the region can no longer be used."""

    def __init__(self, key):
        super().__init__(f"shared memory object {key!r} was truncated under its mapping")
        self.key = key


class RegionOpenError(OSError):
    """shm_open failed for the key (no such object, no permission, an invalid name)."""


class RegionMapError(OSError):
    """fstat or mmap failed for an object that could be opened."""


class OutputTooLargeError(ValueError):
    """Data larger than the byte size reserved for it; ``needed`` is its size."""

    def __init__(self, needed, byte_size):
        super().__init__(f"{needed} bytes do not fit in {byte_size}")
        self.needed = needed
        self.byte_size = byte_size


cdef int _as_u64(object value, uint64_t* out) except -1:
    """value (an int) as uint64 into *out: 0; negative or above UINT64_MAX: 1."""
    value = _index(value)  # TypeError for anything that is not an integer
    if value < 0 or value > UINT64_MAX:
        return 1
    out[0] = <uint64_t>value
    return 0


cdef int _check(uint64_t extent, object offset, object byte_size) except -1:
    """Raise RegionRangeError unless [offset, offset + byte_size) lies within extent."""
    cdef uint64_t off = 0, size = 0
    cdef int status
    if _as_u64(offset, &off):
        status = kBadOffset
    elif _as_u64(byte_size, &size):
        # No uint64 size fits; still, an offset beyond the extent is the first thing wrong.
        status = _check_range(extent, off, 0)
        if status == kInRange:
            status = kBadEnd
    else:
        status = _check_range(extent, off, size)
    if status == kBadOffset:
        raise RegionRangeError("offset", offset, byte_size, extent)
    if status == kBadEnd:
        raise RegionRangeError("offset + byte size", offset, byte_size, extent)
    return 0


def check_range(extent, offset, byte_size):
    """Raise RegionRangeError unless ``[offset, offset + byte_size)`` lies in ``[0, extent)``.

    All three are ints; negative values and values above 2**64 - 1 are refused (an extent
    outside that range raises ValueError), and the sum is never formed, so it cannot wrap.
    """
    cdef uint64_t ext = 0
    if _as_u64(extent, &ext):
        raise ValueError(f"extent must be in [0, 2**64 - 1], got {extent}")
    _check(ext, offset, byte_size)


@cython.final
cdef class SystemRegion:
    """A mapped client region of POSIX shared memory (see the module docstring).

    Made by :meth:`open`; unmapped (and the object's descriptor closed) when the last
    reference goes, every :class:`RegionView` and every array over one included.
    """

    cdef Mapping _mapping
    cdef str _key
    cdef object __weakref__  # so that owners can watch when it is unmapped

    def __cinit__(self):
        self._mapping.guard = -1  # the memory starts zeroed, and 0 is a slot

    def __init__(self):
        raise TypeError("SystemRegion objects come from SystemRegion.open()")

    def __dealloc__(self):
        # No view can be alive here: each one holds a reference to self.
        unmap_region(&self._mapping)

    @staticmethod
    def open(str key, offset, byte_size):
        """Map ``[offset, offset + byte_size)`` of the shared-memory object ``key``.

        Raises RegionOpenError (an OSError with errno) when the object cannot be opened,
        RegionRangeError when the range is empty, negative, above 2**64 - 1 or not inside
        the object, RegionMapError when mmap fails, ValueError for a key with a NUL.
        """
        cdef uint64_t off = 0, size = 0, object_size = 0
        cdef int err = 0
        cdef int status
        cdef bytes encoded
        cdef const char* name
        cdef SystemRegion region
        if not key or "\0" in key:
            raise ValueError(f"invalid shared memory key {key!r}")
        if _as_u64(offset, &off):
            raise RegionRangeError("offset", offset, byte_size, None)
        if _as_u64(byte_size, &size):
            raise RegionRangeError("offset + byte size", offset, byte_size, None)
        encoded = key.encode()
        name = encoded
        region = SystemRegion.__new__(SystemRegion)
        with nogil:
            status = map_region(name, off, size, &region._mapping, &err, &object_size)
        if status == kOpenFailed:
            raise RegionOpenError(err, f"cannot open shared memory object {key!r}")
        if status == kOutOfObject:
            if size == 0:
                raise RegionRangeError("byte size", offset, byte_size, object_size)
            _check(object_size, offset, byte_size)
        if status == kGuardFailed:
            raise RegionMapError(0, f"cannot guard the mapping of shared memory object {key!r}")
        if status != kMapped:
            raise RegionMapError(err, f"cannot map shared memory object {key!r}")
        region._key = key
        return region

    @property
    def key(self):
        return self._key

    @property
    def offset(self):
        """The region's offset in the object."""
        return self._mapping.offset

    @property
    def byte_size(self):
        return self._mapping.size

    @property
    def address(self):
        """Where the region's first byte is mapped."""
        return <uintptr_t>self._mapping.data

    def backed(self):
        """False once a touch found the object shrunk under the mapping (the guard's mark);
        a shrink is seen at the first touch of a page past the object's new end."""
        return region_backed(self._mapping)

    cdef int _check_use(self, object offset, object byte_size) except -1:
        _check(self._mapping.size, offset, byte_size)
        if not region_backed(self._mapping):
            raise RegionTruncatedError(self._key)
        return 0

    def check(self, offset, byte_size):
        """Raise RegionRangeError unless the range lies inside the region and the object
        still holds it."""
        self._check_use(offset, byte_size)

    def view(self, offset, byte_size):
        """A read-only :class:`RegionView` of the checked range (zero-copy)."""
        cdef RegionView view
        self._check_use(offset, byte_size)
        view = RegionView.__new__(RegionView)
        view._region = self
        view._data = self._mapping.data + <uint64_t>offset
        view._nbytes = <Py_ssize_t>byte_size
        return view

    def private_copy(self, offset, byte_size):
        """A writable :class:`PrivateCopy` of the checked range (copy-on-write), or None
        where the object cannot be mapped so (gone or replaced under its name since it was
        registered, or shrunk): the caller copies then."""
        cdef PrivateCopy copy
        cdef int status, err = 0
        cdef bytes encoded
        cdef const char* name
        cdef uint64_t off, size
        self._check_use(offset, byte_size)
        off = <uint64_t>offset
        size = <uint64_t>byte_size
        encoded = self._key.encode()
        name = encoded
        copy = PrivateCopy.__new__(PrivateCopy)
        with nogil:
            status = map_private(name, self._mapping, off, size, &copy._mapping, &err)
        if status != kMapped:
            return None
        copy._region = self
        copy._nbytes = <Py_ssize_t>byte_size
        copy._link()
        return copy

    cdef bint _aliased(self, const void* source, Py_ssize_t n, uint64_t offset):
        """Whether ``source`` is a live private copy's view of bytes this write overlaps."""
        cdef PrivateCopy copy
        cdef PyObject* node = _live_copies
        while node != NULL:
            copy = <PrivateCopy>node
            if aliases_object_range(copy._mapping, source, <size_t>n, self._mapping, offset):
                return True
            node = copy._next
        return False

    def write(self, offset, byte_size, data):
        """Copy ``data`` (any C-contiguous buffer) to the region at ``offset``.

        ``[offset, offset + byte_size)`` must lie inside the region (RegionRangeError) and
        the data must fit in ``byte_size`` (OutputTooLargeError). Returns the bytes copied.
        """
        cdef Py_buffer source
        cdef Py_ssize_t n
        cdef uint64_t off
        cdef void* staged = NULL
        self._check_use(offset, byte_size)
        PyObject_GetBuffer(data, &source, PyBUF_SIMPLE)
        try:
            n = source.len
            if <uint64_t>n > <uint64_t>byte_size:
                raise OutputTooLargeError(n, byte_size)
            off = <uint64_t>offset
            if _live_copies != NULL and self._aliased(source.buf, n, off):
                staged = malloc(<size_t>n)
                if staged == NULL:
                    raise MemoryError()
                with nogil:
                    memcpy(staged, source.buf, <size_t>n)
                    copy_into_unchecked(self._mapping, off, staged, <size_t>n)
                free(staged)
            elif n >= _NOGIL_THRESHOLD:
                with nogil:
                    copy_into_unchecked(self._mapping, off, source.buf, <size_t>n)
            else:
                copy_into_unchecked(self._mapping, off, source.buf, <size_t>n)
        finally:
            PyBuffer_Release(&source)
        if not region_backed(self._mapping):  # the copy met a shrunk object
            raise RegionTruncatedError(self._key)
        return n

    def __repr__(self):
        return (f"<SystemRegion {self._key!r} [{self._mapping.offset}, +"
                f"{self._mapping.size}) at 0x{<uintptr_t>self._mapping.data:x}>")


@cython.final
cdef class RegionView:
    """Read-only bytes of a :class:`SystemRegion` (buffer protocol, 1-D, ``nbytes`` long).

    Keeps its region mapped while it, or any array or memoryview over it, lives.
    """

    cdef SystemRegion _region
    cdef char* _data
    cdef Py_ssize_t _nbytes

    def __init__(self):
        raise TypeError("RegionView objects come from SystemRegion.view()")

    @property
    def nbytes(self):
        return self._nbytes

    @property
    def region(self):
        return self._region

    def __getbuffer__(self, Py_buffer* view, int flags):
        if flags & PyBUF_WRITABLE:
            raise BufferError("a shared memory input view is read-only")
        _export_bytes(view, self, self._data, &self._nbytes, True, flags)


@cython.final
cdef class PrivateCopy:
    """A writable, copy-on-write mapping of a :class:`SystemRegion`'s range (buffer
    protocol, 1-D, ``nbytes`` long): reads see the client's bytes, writes stay here.

    Keeps its region (and so the region's guard slot, which its faults also mark) alive;
    unmapped when the last reference goes.
    """

    cdef Mapping _mapping
    cdef SystemRegion _region
    cdef Py_ssize_t _nbytes
    cdef PyObject* _next
    cdef PyObject* _previous

    def __cinit__(self):
        self._mapping.guard = -1

    def __init__(self):
        raise TypeError("PrivateCopy objects come from SystemRegion.private_copy()")

    cdef void _link(self):
        """Join the live copies; once mapped (``private_copy``), so a copy is linked exactly
        when its mapping is there."""
        global _live_copies
        self._next = _live_copies
        self._previous = NULL
        if _live_copies != NULL:
            (<PrivateCopy>_live_copies)._previous = <PyObject*>self
        _live_copies = <PyObject*>self

    def __dealloc__(self):
        global _live_copies
        if self._mapping.base != NULL:  # mapped, hence linked
            if self._previous != NULL:
                (<PrivateCopy>self._previous)._next = self._next
            else:
                _live_copies = self._next
            if self._next != NULL:
                (<PrivateCopy>self._next)._previous = self._previous
        unmap_region(&self._mapping)

    @property
    def nbytes(self):
        return self._nbytes

    @property
    def region(self):
        return self._region

    def __getbuffer__(self, Py_buffer* view, int flags):
        _export_bytes(view, self, self._mapping.data, &self._nbytes, False, flags)
