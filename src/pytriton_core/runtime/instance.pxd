# The typed parts of instance.py (compiled from it, csrc/compiled_modules.txt): the instance
# is an extension type, so the model's calls into it and its own steps are C calls.

from pytriton_core cimport clock

cimport cython

from pytriton_core.inference.statistics cimport ComputeTiming


cdef class ModelInstance:
    cdef object _deferral
    cdef public object spec
    cdef object _model_name
    cdef public int index
    cdef object _rate_limit
    cdef object _warmup
    cdef object _backend_model
    cdef object _scheduler
    cdef object _on_batch_done
    cdef object _schedule_on_loop
    cdef object _ready
    cdef object _startup_error
    cdef public tuple memory_usage
    cdef object _backend_instance
    cdef int _short_streak
    cdef object _executing
    cdef object _running_batch
    cdef object _begun
    cdef Py_ssize_t _bundles_in_flight
    cdef object _thread

    cpdef bint claim(self) except -1
    cpdef bint claim_for_loop(self) except -1
    cpdef bint claim_next(self) except -1
    cpdef void release(self) except *
    cpdef void execute_inline(self, list batch) except *
    cpdef tuple execute_claimed(self, list batch)
    @cython.locals(timing=ComputeTiming)
    cdef tuple _execute(self, object backend_instance, list batch, bint defer=*)
    @cython.locals(timing=ComputeTiming)
    cdef ComputeTiming _started(self, list batch)
    @cython.locals(short=bint)
    cdef tuple _settled(self, list batch, ComputeTiming timing, object responses)
    @cython.locals(timing=ComputeTiming)
    cdef void _next_executing(self, ComputeTiming previous) except *
