# The typed parts of process_transport.py (compiled from it, csrc/compiled_modules.txt):
# the channel and the arenas every process-mode bundle crosses on both sides, and the
# headers made for each of its requests and responses.

cimport cython

from pytriton_core.inference.request cimport InferenceRequest
from pytriton_core.inference.response cimport InferenceResponse
from pytriton_core.inference.tensor cimport Tensor


cdef class Channel:
    cdef object _sock
    cdef object _sending
    cdef int _receiving_fd
    cdef int _sending_fd
    cdef object _send_lock
    cdef bytes _data
    cdef object _fds

    @cython.locals(size=Py_ssize_t, length=Py_ssize_t)
    cpdef bint buffered(self) except -1
    cpdef bint arrived(self) except -1


cdef class Arena:
    cdef public int fd
    cdef public Py_ssize_t size
    cdef object _memory

    cpdef tuple write(self, Py_ssize_t offset, Tensor tensor, object data, Py_ssize_t nbytes)
    cpdef Tensor read(self, tuple ref, bint copy)


cpdef tuple request_header(InferenceRequest request)
cpdef tuple response_header(InferenceResponse response)
@cython.locals(count=Py_ssize_t)
cpdef tuple read_responses(Arena arena, object headers, object refs, Py_ssize_t position)
