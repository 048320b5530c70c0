# The typed parts of busy_poll.py (compiled from it, csrc/compiled_modules.txt).

from pytriton_core cimport clock


cdef class BusyPoll:
    cdef object _loop
    cdef long long _window_ns
    cdef long long _until_ns
    cdef bint _polling

    cpdef void answered(self) except *
    cpdef void waiting(self) except *
