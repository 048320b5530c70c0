# The typed parts of server.py (compiled from it, csrc/compiled_modules.txt): a connection
# is an extension type, so every request's path through it (bytes in, the handler's first
# step, the answer out) reads typed fields and makes C calls.

from pytriton_core cimport clock

from pytriton_core.frontends.busy_poll cimport BusyPoll
from pytriton_core.frontends.http.exchange cimport Exchange
from pytriton_core.frontends.http.held_writes cimport HeldWrites
from pytriton_core.frontends.http.messages cimport HttpResponse


cdef class HttpProtocol:
    cdef object _router
    cdef object _registry
    cdef object _limits
    cdef Py_ssize_t _max_pipelined
    cdef object _assembler
    cdef object _transport
    cdef object _pending
    cdef Py_ssize_t _pending_bytes
    cdef long long _receiving_since
    cdef bint _broken
    cdef bint _busy
    cdef bint _driving
    cdef bint _paused
    cdef bint _write_paused
    cdef bint _eof
    cdef bint _closing
    cdef Exchange _exchange
    cdef object _deferred_request
    cdef bint _http11
    cdef bint _head_sent
    cdef bint _streaming
    cdef object _drain_waiter
    cdef object _idle_timeout_s
    cdef object _idle_timer
    cdef double _idle_since
    cdef object _peer_check
    cdef BusyPoll _busy_poll
    cdef HeldWrites _held_writes
    cdef list _held

    cdef void _update_reading(self) except *
    cpdef void _start_next(self) except *
    # (``request`` untyped: the framing's HttpRequest has no .pxd to cimport)
    cdef void _begin(self, object request, long long received_start, long long received_end) except *
    cdef void _answered(self, Exchange exchange) except *
    cpdef void _deferred_answered(self, HttpResponse response) except *
    cdef void _answer_in_coroutine(self, object request, object routed, Exchange exchange) except *
    cdef void _write(self, HttpResponse response, bint keep_alive) except *
    cdef void _arm_idle_timer(self) except *
    cdef void _close_transport(self) except *
    cpdef void write_held(self) except *


cpdef void _drive(object coroutine, object context) except *
