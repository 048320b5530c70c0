# cython: language_level=3
# The C++ under the shm extension (cpp/posix_region.h): the contract shm.pyx binds.
#
# (Named apart from the module: a pxd named after it is not found by the build, whose
# module name is pytriton_core._native.shm while the file sits in csrc/shm.)

from libc.stdint cimport uint64_t


cdef extern from "cpp/posix_region.h" namespace "pytriton::shm" nogil:
    cdef enum RangeStatus:
        kInRange
        kBadOffset
        kBadEnd

    cdef enum MapStatus:
        kMapped
        kOpenFailed
        kStatFailed
        kOutOfObject
        kMapFailed
        kGuardFailed

    cdef struct Mapping:
        long guard
        void* base
        size_t length
        char* data
        uint64_t offset
        uint64_t size
        uint64_t device
        uint64_t inode

    RangeStatus check_range(uint64_t extent, uint64_t offset, uint64_t size) noexcept
    MapStatus map_region(const char* key, uint64_t offset, uint64_t size, Mapping* out,
                         int* err, uint64_t* object_size) noexcept
    MapStatus map_private(const char* key, const Mapping& region, uint64_t offset,
                          uint64_t size, Mapping* out, int* err) noexcept
    bint aliases_object_range(const Mapping& copy, const void* src, size_t n,
                              const Mapping& region, uint64_t offset) noexcept
    void unmap_region(Mapping* mapping) noexcept
    bint region_backed(const Mapping& mapping) noexcept
    # Unchecked: [offset, offset + n) must lie inside the region.
    void copy_into_unchecked(const Mapping& mapping, uint64_t offset, const void* src,
                             size_t n) noexcept
