# The typed parts of exchange.py (compiled from it, csrc/compiled_modules.txt).

from pytriton_core.inference.request cimport InferenceRequest


cdef class Exchange:
    cdef list _hooks
    cdef InferenceRequest _cancelled
    cdef public bint client_gone
    cdef public long long received_start_ns
    cdef public long long received_end_ns

    cpdef void on_client_gone(self, object hook) except *
    cpdef void cancel_on_gone(self, InferenceRequest request) except *
    cpdef void mark_client_gone(self) except *
    cpdef void finish(self) except *
