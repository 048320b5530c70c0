# The typed parts of infer_handler.py (compiled from it, csrc/compiled_modules.txt).

from pytriton_core.frontends.http.exchange cimport Exchange
from pytriton_core.frontends.http.infer_codec cimport (
    DecodedInfer,
    decode_infer_request,
    encode_infer_response,
)
from pytriton_core.frontends.http.messages cimport DeferredResponse, HttpResponse
from pytriton_core.inference.response cimport InferenceResponse
from pytriton_core.runtime.model cimport Model
from pytriton_core.service.inference_service cimport InferenceService, SingleAnswer


cdef class InferHandler:
    cdef InferenceService _service
    cdef object _forwarded
    cdef object _header_memo

    cdef object _infer_now(self, object request, object match)
    cdef Model _model(self, object match)
    cdef DecodedInfer _decoded(self, Model model, object request, object body, tuple reserved)
    cdef SingleAnswer _submit(self, Model model, DecodedInfer decoded, Exchange exchange)


cdef class _Encoder:
    cdef Model _model
    cdef DecodedInfer _decoded
    cdef Exchange _exchange
    cdef DeferredResponse _deferred


cdef void _refuse_decoupled(Model model, bint event_stream) except *
cdef HttpResponse _encoded(
    Model model,
    DecodedInfer decoded,
    InferenceResponse response,
    Exchange exchange,
    bint finish_trace=*,
)
cdef object _header_length(object request, Py_ssize_t body_length)
