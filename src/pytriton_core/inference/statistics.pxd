# The typed parts of statistics.py (compiled from it, csrc/compiled_modules.txt): what the
# compiled runtime updates for every request and execution, as C fields and calls.

from pytriton_core cimport clock

cimport cython


cdef class Duration:
    cdef public long long count
    cdef public long long ns

    cpdef void add(self, long long ns, long long count=*) except *


cdef class BatchDurations:
    cdef public Duration compute_input
    cdef public Duration compute_infer
    cdef public Duration compute_output


cdef class ComputeTiming:
    cdef public long long start_ns
    cdef public long long input_end_ns
    cdef public long long infer_end_ns
    cdef public long long end_ns

    cpdef void mark_input_done(self) except *
    cpdef void mark_infer_done(self) except *
    cpdef void close(self) except *


cdef class Histogram:
    cdef public tuple bounds
    cdef public list counts
    cdef public long long count
    cdef public double sum

    cpdef void observe(self, double value) except *


cdef class LatencyHistograms:
    cdef public Histogram request
    cdef public Histogram queue
    cdef public Histogram compute_input
    cdef public Histogram compute_infer
    cdef public Histogram compute_output


cdef class ModelStatistics:
    cdef public Duration success
    cdef public Duration fail
    cdef public Duration queue
    cdef public Duration compute_input
    cdef public Duration compute_infer
    cdef public Duration compute_output
    cdef public Duration cache_hit
    cdef public Duration cache_miss
    cdef public long long inference_count
    cdef public long long execution_count
    cdef public long long last_inference_ms
    cdef public dict batch_stats
    cdef public dict response_stats
    cdef public dict failures
    cdef public object summaries
    cdef public LatencyHistograms histograms
    cdef public Histogram first_response
    cdef public tuple memory_usage

    @cython.locals(per_batch=BatchDurations, duration=Duration)
    cpdef void record_execution(
        self, long long batch_size, ComputeTiming timing, object inferences=*
    ) except *
    @cython.locals(
        duration=Duration,
        histograms=LatencyHistograms,
        request_ns="long long",
        queue_ns="long long",
        input_ns="long long",
        infer_ns="long long",
        output_ns="long long",
    )
    cpdef void record_request_success(
        self, long long arrival_ns, long long queue_start_ns, ComputeTiming timing,
        long long end_ns
    ) except *
    cpdef void record_request_failure(
        self, long long arrival_ns, long long end_ns, object reason=*
    ) except *
    cpdef void record_first_response(self, long long arrival_ns, long long now_ns) except *
