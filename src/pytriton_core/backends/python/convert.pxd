# The typed parts of convert.py (compiled from it, csrc/compiled_modules.txt).

from pytriton_core.backends.python.pb_utils_tensor cimport Tensor as PbTensor, tensor_from_server


cpdef PbTensor to_pb_tensor(object tensor, bint gpu)
cpdef from_pb_tensor(PbTensor tensor, object staging)
