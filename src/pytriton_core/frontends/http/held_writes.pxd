# The typed parts of held_writes.py (compiled from it, csrc/compiled_modules.txt).

cdef class HeldWrites:
    cdef object _loop
    cdef list _holders

    cpdef void hold(self, object holder) except *
    cpdef void flush(self) except *
