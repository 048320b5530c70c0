# cython: language_level=3
# The C++ under the batching extension (cpp/*.h): the contract batching.pyx binds.
#
# (A pxd named after the module itself is not found by the build: its module name is
# pytriton_core._native.batching while the file sits in csrc/batching.)

from libc.stdint cimport intptr_t, uint64_t, uintptr_t
from libcpp.memory cimport shared_ptr


cdef extern from "cpp/strided_copy.h" namespace "pytriton::batching" nogil:
    const int kMaxDims

    cdef struct StridedSource:
        const char* data
        int ndim
        const intptr_t* shape
        const intptr_t* strides

    # Concatenate the sources (numpy-style strided arrays) into dst in C order. Unchecked:
    # dst must hold their total size, overlap none of them, and every source must stay alive.
    void gather_unchecked(const StridedSource* sources, size_t count, size_t itemsize,
                          char* dst) noexcept
    void byte_extent(const StridedSource& src, size_t itemsize, uintptr_t* lo,
                     uintptr_t* hi) noexcept


cdef extern from "cpp/host_pool.h" namespace "pytriton::batching" nogil:
    const size_t kPageSize

    cdef struct PoolStats:
        uint64_t allocations
        uint64_t reuses
        uint64_t frees
        size_t cached_bytes
        size_t in_use_bytes
        size_t max_cached_bytes

    cdef cppclass HostPool:
        # nullptr when too large or out of memory
        void* acquire(size_t nbytes, size_t* capacity) noexcept
        # exactly once per acquired buffer, with the capacity acquire() gave
        void release(void* ptr, size_t capacity) noexcept
        size_t trim() noexcept
        PoolStats stats() noexcept
        const char* memory_kind() noexcept

    shared_ptr[HostPool] make_pageable_pool(size_t max_cached_bytes) except +
