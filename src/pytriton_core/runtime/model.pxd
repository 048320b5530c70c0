# The typed parts of model.py (compiled from it, csrc/compiled_modules.txt): a loaded model
# version is an extension type, and what every request crosses in it (submit, admission,
# an inline execution's outcome, statistics, delivery) runs as C calls over typed fields.

from pytriton_core cimport clock

cimport cython

from pytriton_core.inference.request cimport InferenceRequest, RequestedOutput
from pytriton_core.inference.response cimport InferenceResponse
from pytriton_core.inference.statistics cimport ComputeTiming, ModelStatistics
from pytriton_core.runtime.instance cimport ModelInstance
from pytriton_core.runtime.validation cimport RequestRules


cdef class Model:
    cdef public object spec
    cdef public object name
    cdef public object version
    cdef readonly str version_text
    cdef public object config
    cdef public object model_dir
    cdef public double loaded_at
    cdef object _state
    cdef public ModelStatistics stats
    cdef object _loop
    cdef readonly object _backend_model
    cdef object _scheduler
    cdef readonly list _instances
    cdef dict _reported_executions
    cdef bint _inline
    cdef bint _per_turn
    cdef bint _turn_end_scheduled
    cdef public long long _in_flight
    cdef object _drained
    cdef object _release_order
    cdef object _sent_order
    cdef bint _ordered
    cdef dict _held
    cdef dict _labels
    cdef public object _cache
    cdef public bint cache_enabled
    cdef dict _misses
    cdef object _rate_limiter
    cdef bint _loop_dispatch
    cdef bint _dispatching
    cdef bint _dispatch_scheduled
    cdef list _rate_limit_slots
    cdef object _deferral
    cdef object _defer_counts
    cdef bint _direct
    cdef bint _decoupled
    cdef RequestRules _rules
    cdef bint _asks_health

    cdef object _current_state(self)
    cpdef bint serving(self) except -1

    @cython.locals(instance=ModelInstance)
    cpdef void submit(self, InferenceRequest request) except *
    cpdef void _admit(self, InferenceRequest request) except *
    @cython.locals(
        request=InferenceRequest,
        response=InferenceResponse,
        stats=ModelStatistics,
        size=int,
        inferences=int,
        end_ns="long long",
        index=Py_ssize_t,
    )
    cpdef void _batch_done(
        self, list batch, object responses, ComputeTiming timing, object retained
    ) except *
    @cython.locals(stats=ModelStatistics)
    cdef void _count_success(
        self, InferenceRequest request, ComputeTiming timing, long long end_ns, bint refused
    ) except *
    cpdef void _forget_miss(self, InferenceRequest request) except *
    cpdef void _release(self, InferenceRequest request, InferenceResponse response) except *
    cpdef void _signal_if_drained(self) except *
    @cython.locals(requested=dict, wanted=RequestedOutput, outputs=list, i=Py_ssize_t)
    cpdef InferenceResponse _apply_classification(
        self, InferenceRequest request, InferenceResponse response
    )
