# The typed parts of inference_service.py (compiled from it, csrc/compiled_modules.txt).

from pytriton_core.inference.request cimport InferenceRequest
from pytriton_core.inference.response cimport InferenceResponse
from pytriton_core.inference.tensor_data cimport RequestLimits, check_tensor_limits
from pytriton_core.runtime.model cimport Model


cdef class InferenceService:
    cdef public object options
    cdef readonly RequestLimits request_limits
    cdef object _peers_ready
    cdef object _peers
    cdef object _manager
    cdef dict _lookups
    cdef object _tracer
    cdef object _log_control
    cdef object _shared_memory
    cdef public bint live
    cdef public bint exiting

    cpdef Model model(self, object name, object version)
    cpdef void submit(self, Model model, InferenceRequest request) except *
    cpdef SingleAnswer begin_infer(self, Model model, InferenceRequest request)


cdef class SingleAnswer:
    cdef public InferenceResponse first
    cdef public Py_ssize_t count
    cdef public InferenceResponse value
    cdef public object future
    cdef public object on_answer
