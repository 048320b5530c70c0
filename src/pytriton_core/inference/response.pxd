# The typed parts of response.py (compiled from it, csrc/compiled_modules.txt).

cdef class InferenceResponse:
    cdef public list outputs
    cdef public dict parameters
    cdef public object error
    cdef public long long window_bytes
