# The typed parts of request.py (compiled from it, csrc/compiled_modules.txt): the request
# is an extension type whose fields the compiled runtime and front end read as C fields.

from pytriton_core cimport clock

from pytriton_core.inference.response cimport InferenceResponse


cdef class InferenceRequest:
    cdef public object model_name
    cdef public object model_version
    cdef public object id
    cdef public dict inputs
    cdef public object requested_outputs
    cdef public dict parameters
    cdef public object priority
    cdef public object timeout_us
    cdef public object correlation_id
    cdef public object flags
    cdef public object on_response
    cdef public object loop
    cdef public int batch_size
    cdef public long long arrival_ns
    cdef public long long queue_start_ns
    cdef public bint final_sent
    cdef public bint padding
    cdef public bint reschedule
    cdef public object trace
    cdef public object compute_observer
    cdef public bint executing
    cdef public object response_window
    cdef public object observer
    cdef public object sent_hook
    cdef public object delivery_gate
    cdef public bint _cancelled
    cdef public object _cancel_hooks

    cpdef void cancel(self) except *
    cpdef void on_cancel(self, object hook) except *
    cpdef void deliver(
        self, InferenceResponse response, bint final, object timing=*, bint past_gate=*
    ) except *
    cpdef void hand_over(self, InferenceResponse response, bint final, object timing=*) except *


cdef class RequestedOutput:
    cdef public object name
    cdef public object class_count
    cdef public bint to_region
