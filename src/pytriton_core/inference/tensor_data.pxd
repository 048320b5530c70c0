# The typed parts of tensor_data.py (compiled from it, csrc/compiled_modules.txt).


from pytriton_core.inference.request cimport InferenceRequest


cpdef void check_tensor_limits(InferenceRequest request, object limits) except *
