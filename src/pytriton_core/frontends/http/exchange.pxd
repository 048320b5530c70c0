# The typed parts of exchange.py (compiled from it, csrc/compiled_modules.txt).

cdef class Exchange:
    cdef list _hooks
    cdef public bint client_gone
    cdef public long long received_start_ns
    cdef public long long received_end_ns

    cpdef void on_client_gone(self, object hook) except *
    cpdef void mark_client_gone(self) except *
    cpdef void finish(self) except *
