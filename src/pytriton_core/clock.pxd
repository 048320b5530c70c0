# The compiled face of clock.py: inline clock_gettime calls for the modules that cimport
# this (CPython's time.monotonic / monotonic_ns / time_ns read the same clocks).

from posix.time cimport CLOCK_MONOTONIC, CLOCK_REALTIME, clock_gettime, timespec


cdef inline long long now_ns() noexcept nogil:
    cdef timespec ts
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return <long long>ts.tv_sec * 1000000000 + ts.tv_nsec


cdef inline double now_s() noexcept nogil:
    cdef timespec ts
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return <double>ts.tv_sec + <double>ts.tv_nsec * 1e-9


cdef inline long long wall_ns() noexcept nogil:
    cdef timespec ts
    clock_gettime(CLOCK_REALTIME, &ts)
    return <long long>ts.tv_sec * 1000000000 + ts.tv_nsec
