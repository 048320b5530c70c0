# The typed parts of tensor_data.py (compiled from it, csrc/compiled_modules.txt).

cimport cython

from pytriton_core.inference.request cimport InferenceRequest
from pytriton_core.inference.tensor cimport Tensor
from pytriton_core.types cimport DataType


cdef class RequestLimits:
    cdef readonly long long max_tensor_element_count
    cdef readonly long long max_bytes_elements
    cdef readonly long long max_tensor_byte_size
    cdef readonly long long http_max_json_depth
    cdef readonly long long http_max_json_elements


@cython.locals(datatype=DataType, tensor=Tensor)
cpdef void check_tensor_limits(InferenceRequest request, RequestLimits limits) except *

@cython.locals(datatype=DataType)
cpdef object array_to_bytes(object tensor)
