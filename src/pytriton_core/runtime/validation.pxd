# The typed parts of validation.py (compiled from it, csrc/compiled_modules.txt).

cimport cython

from pytriton_core.inference.request cimport InferenceRequest


@cython.locals(
    given=Py_ssize_t,
    max_batch_size="long long",
    batch_size="long long",
    inputs=dict,
    shape=tuple,
    mismatch=bint,
)
cpdef void validate_request(InferenceRequest request, object spec) except *
