# The typed parts of pb_utils.py (compiled from it, csrc/compiled_modules.txt): the request
# and response every execution makes are extension types.

cimport cython

from pytriton_core.backends.python.pb_utils_tensor cimport Tensor as CTensor


cdef class InferenceResponse:
    cdef public object _error
    cdef public list _output_tensors
    cdef public dict _parameters

    cpdef list output_tensors(self)
    cpdef bint has_error(self) except -1
    cpdef error(self)


cdef class InferenceRequest:
    cdef public object _correlation_id
    cdef public bint _decoupled
    cdef public object _flags
    cdef public list _inputs
    cdef public object _model_name
    cdef public object _model_version
    cdef public object _origin
    cdef public dict _parameters
    cdef public object _preferred_memory
    cdef public int _release_flags
    cdef public object _request_id
    cdef public list _requested_output_names
    cdef public object _responder
    cdef public object _send_hook
    cdef public object _sender
    cdef public object _timeout
    cdef public object _trace

    cpdef list inputs(self)
    cpdef request_id(self)
    cpdef correlation_id(self)
    cpdef flags(self)
    cpdef timeout(self)
    cpdef list requested_output_names(self)
    cpdef bint is_cancelled(self) except -1


@cython.locals(tensor=CTensor)
cpdef get_input_tensor_by_name(object inference_request, object name)
@cython.locals(tensor=CTensor)
cpdef get_output_tensor_by_name(object inference_response, object name)


@cython.locals(request=InferenceRequest)
cpdef InferenceRequest request_from_server(
    object request_id,
    object correlation_id,
    list inputs,
    list requested_output_names,
    dict parameters,
    object flags,
    object timeout,
    object send_hook=*,
    object responder=*,
    object origin=*,
    bint decoupled=*,
    object trace=*,
)
