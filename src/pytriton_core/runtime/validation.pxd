# The typed parts of validation.py (compiled from it, csrc/compiled_modules.txt).

cimport cython

from pytriton_core.inference.request cimport InferenceRequest
from pytriton_core.types cimport DataType


cdef class RequestRules:
    cdef object spec
    cdef object model_name
    cdef dict inputs
    cdef tuple required
    cdef long long max_batch_size
    cdef object outputs
    cdef bint sequences

    @cython.locals(
        inputs=dict,
        declared=dict,
        given=Py_ssize_t,
        max_batch_size="long long",
        batch_size="long long",
        expected=tuple,
        datatype=DataType,
        want_dims=tuple,
        shape=tuple,
        first=Py_ssize_t,
        index=Py_ssize_t,
        want="long long",
        mismatch=bint,
    )
    cpdef void check(self, InferenceRequest request) except *


cpdef void validate_request(InferenceRequest request, object spec) except *
