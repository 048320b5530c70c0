# The typed parts of messages.py (compiled from it, csrc/compiled_modules.txt).

cdef class HttpResponse:
    cdef public object status
    cdef public object body
    cdef public object content_type
    cdef public list headers
    cdef public object on_sent
    cdef public object stream


cdef class DeferredResponse:
    cdef public HttpResponse response
    cdef object _callback

    cpdef void on_ready(self, object callback) except *
    cpdef void set(self, HttpResponse response) except *
