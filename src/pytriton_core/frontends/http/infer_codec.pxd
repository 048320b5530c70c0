# The typed parts of infer_codec.py (compiled from it, csrc/compiled_modules.txt): every
# HTTP infer request is decoded and answered through these.

cimport cython

from pytriton_core.inference.request cimport InferenceRequest
from pytriton_core.inference.response cimport InferenceResponse
from pytriton_core.inference.tensor_data cimport RequestLimits
from pytriton_core.runtime.model cimport Model
from pytriton_core.types cimport DataType
from pytriton_core.service.inference_service cimport InferenceService


cdef class DecodedInfer:
    cdef public InferenceRequest request
    cdef public dict binary_outputs
    cdef public bint binary_by_default
    cdef public dict shm_outputs
    cdef public dict reserved


cdef class _ShmPlan:
    cdef str request_id
    cdef bint binary_by_default
    cdef tuple inputs
    cdef tuple outputs

    @cython.locals(decoded=DecodedInfer, inputs=dict, requested=dict)
    cpdef DecodedInfer apply(self, InferenceRequest request, object service, str model_name)


@cython.locals(
    request=InferenceRequest, walked=tuple, binary_start=Py_ssize_t, plan=_ShmPlan,
    decoded=DecodedInfer, remembering=bint, limits=RequestLimits,
)
cpdef DecodedInfer decode_infer_request(
    Model model,
    object body,
    object header_length,
    InferenceService service,
    tuple allowed_reserved=*,
    bint general=*,
    object memo=*,
)


cdef DecodedInfer _walked(InferenceRequest request, tuple walked)


@cython.locals(
    request=InferenceRequest,
    document=dict,
    outputs=list,
    blobs=list,
    entry=dict,
    json_entries=list,
    non_finite=bint,
    shm_outputs=dict,
    binary_outputs=dict,
    binary_by_default=bint,
    size=Py_ssize_t,
)
cpdef encode_infer_response(
    Model model, DecodedInfer decoded, InferenceResponse response, bint general=*
)


@cython.locals(
    binary_outputs=dict,
    binary_by_default=bint,
    outputs=list,
    blobs=list,
    parts=list,
    size=Py_ssize_t,
    data=bytes,
)
cdef object _direct_response(Model model, DecodedInfer decoded, InferenceResponse response)


@cython.locals(datatype=DataType, wire=str)
cpdef object json_output_values(object tensor)
