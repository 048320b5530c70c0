# The typed parts of tensor_data.py (compiled from it, csrc/compiled_modules.txt).

cimport cython

from pytriton_core.inference.request cimport InferenceRequest
from pytriton_core.inference.tensor cimport Tensor
from pytriton_core.types cimport DataType


@cython.locals(datatype=DataType, tensor=Tensor)
cpdef void check_tensor_limits(InferenceRequest request, object limits) except *

@cython.locals(datatype=DataType)
cpdef object array_to_bytes(object tensor)
