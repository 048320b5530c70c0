# The typed parts of messages.py (compiled from it, csrc/compiled_modules.txt).

cdef class HttpResponse:
    cdef public object status
    cdef public object body
    cdef public object content_type
    cdef public list headers
    cdef public object on_sent
    cdef public object stream
