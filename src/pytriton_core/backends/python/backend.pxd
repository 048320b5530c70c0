# The typed parts of backend.py (compiled from it, csrc/compiled_modules.txt): what every
# request of a Python model crosses on its way into pb_utils and back.

from pytriton_core cimport clock

cimport cython

from pytriton_core.backends.python.pb_utils cimport (
    InferenceRequest as PbRequest,
    InferenceResponse as PbResponse,
    request_from_server,
)
from pytriton_core.backends.python.pb_utils_tensor cimport Tensor as PbTensor, tensor_from_server
from pytriton_core.backends.python.convert cimport from_pb_tensor, to_pb_tensor
from pytriton_core.inference.request cimport InferenceRequest
from pytriton_core.inference.statistics cimport ComputeTiming
from pytriton_core.inference.tensor cimport Tensor as ServerTensor
from pytriton_core.inference.response cimport InferenceResponse


cdef class _Conversions:
    cdef public bint decoupled
    cdef public bint gpu_inputs
    cdef public list output_names
    cdef public object all_outputs_kept
    cdef public object state_outputs
    cdef public object staging
    cdef public object responder
    cdef public object model_name
    cdef public object batch_runner
    cdef public object worker
    cdef public object python_model
    cdef public object scope
    cdef public object inline
    cdef public bint elsewhere


@cython.locals(batch=list, pb_requests=list)
cdef object _execute(_Conversions conversions, object requests, ComputeTiming timing)

@cython.locals(elsewhere=bint)
cdef object _call_execute(_Conversions conversions, list pb_requests, object requests)

cpdef object _execute_in_scope(_Conversions conversions, list pb_requests, object requests)


@cython.locals(t=ServerTensor, untyped=object, inputs=list)
cdef PbRequest _to_pb_request(_Conversions conversions, InferenceRequest request)

@cython.locals(answer=PbResponse, tensor=PbTensor, outputs=list)
cdef InferenceResponse _from_pb_response(
    _Conversions conversions, object response, InferenceRequest request
)

@cython.locals(count=Py_ssize_t, request=InferenceRequest)
cdef list _responses(
    _Conversions conversions, object model_name, list requests, list pb_requests, object result
)

@cython.locals(request=PbRequest)
cdef object _rescheduled(list pb_requests)
