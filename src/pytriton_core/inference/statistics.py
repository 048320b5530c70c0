"""Per model-version counters: the one source for the statistics extension and metrics.

Updated only on the event loop (once per executed batch), so no locking is needed; the
statistics extension and the Prometheus endpoint read them on the same loop.
"""

from __future__ import annotations

import bisect
import enum
import math
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from pytriton_core import clock
from pytriton_core.options import (
    DEFAULT_DURATION_BUCKETS_US,
    DEFAULT_FIRST_RESPONSE_BUCKETS_MS,
    MetricsOptions,
)

FIRST_RESPONSE_HISTOGRAM = "nv_inference_first_response_histogram_ms"
REQUEST_HISTOGRAM = "nv_inference_request_duration_histogram_us"
QUEUE_HISTOGRAM = "nv_inference_queue_duration_histogram_us"
COMPUTE_INPUT_HISTOGRAM = "nv_inference_compute_input_duration_histogram_us"
COMPUTE_INFER_HISTOGRAM = "nv_inference_compute_infer_duration_histogram_us"
COMPUTE_OUTPUT_HISTOGRAM = "nv_inference_compute_output_duration_histogram_us"


class FailureReason(enum.Enum):
    """Why a request failed (the ``reason`` label of ``nv_inference_request_failure``)."""

    REJECTED = "REJECTED"  # the scheduler refused it (queue full) or its queue timeout expired
    CANCELED = "CANCELED"  # cancelled before it completed
    BACKEND = "BACKEND"  # the model's execution failed
    OTHER = "OTHER"


class Duration:
    """A count and the nanoseconds it adds up to (an extension type, statistics.pxd)."""

    def __init__(self, count: int = 0, ns: int = 0) -> None:
        self.count = count
        self.ns = ns

    def __repr__(self) -> str:
        return f"Duration(count={self.count}, ns={self.ns})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Duration):
            return NotImplemented
        return self.count == other.count and self.ns == other.ns

    def add(self, ns: int, count: int = 1) -> None:
        self.count += count
        self.ns += ns


class BatchDurations:
    """The compute durations of the executions of one batch size (an extension type)."""

    def __init__(
        self,
        compute_input: Duration | None = None,
        compute_infer: Duration | None = None,
        compute_output: Duration | None = None,
    ) -> None:
        self.compute_input = Duration() if compute_input is None else compute_input
        self.compute_infer = Duration() if compute_infer is None else compute_infer
        self.compute_output = Duration() if compute_output is None else compute_output

    def __repr__(self) -> str:
        return (
            f"BatchDurations(compute_input={self.compute_input!r}, "
            f"compute_infer={self.compute_infer!r}, compute_output={self.compute_output!r})"
        )


@dataclass(frozen=True, slots=True)
class MemoryUsage:
    """Memory a loaded model holds, as the statistics extension reports it (``memory_usage``:
    Triton's ``type``, ``id`` and ``byte_size``)."""

    kind: str  # "CPU", "CPU_PINNED" or "GPU"
    device_id: int
    byte_size: int


def merge_memory_usage(usages: Iterable[MemoryUsage]) -> tuple[MemoryUsage, ...]:
    """One entry per (kind, device), summed, in kind and device order."""
    totals: dict[tuple[str, int], int] = {}
    for usage in usages:
        key = (usage.kind, usage.device_id)
        totals[key] = totals.get(key, 0) + usage.byte_size
    return tuple(MemoryUsage(kind, device, size) for (kind, device), size in sorted(totals.items()))


class ComputeTiming:
    """Monotonic ns timestamps of one execution, marked by the instance and its backend.

    An extension type (statistics.pxd): made per execution and read by the compiled runtime
    as C fields."""

    def __init__(
        self, start_ns: int = 0, input_end_ns: int = 0, infer_end_ns: int = 0, end_ns: int = 0
    ) -> None:
        self.start_ns = start_ns
        self.input_end_ns = input_end_ns
        self.infer_end_ns = infer_end_ns
        self.end_ns = end_ns

    def __repr__(self) -> str:
        return (
            f"ComputeTiming(start_ns={self.start_ns}, input_end_ns={self.input_end_ns}, "
            f"infer_end_ns={self.infer_end_ns}, end_ns={self.end_ns})"
        )

    def mark_input_done(self) -> None:
        self.input_end_ns = clock.now_ns()

    def mark_infer_done(self) -> None:
        self.infer_end_ns = clock.now_ns()

    def close(self) -> None:
        """Fill any mark the backend did not set, so the three spans add up."""
        self.end_ns = self.end_ns or clock.now_ns()
        self.input_end_ns = self.input_end_ns or self.start_ns
        self.infer_end_ns = self.infer_end_ns or self.end_ns


@dataclass(slots=True, frozen=True)
class ResponseTiming:
    """When a backend worked on one response of a decoupled request (monotonic ns): from the
    previous response (or the execution's start) to ``output_start_ns``, when it began to
    hand over the outputs, to ``end_ns``, when the response was sent. ``output_start_ns``
    is 0 for a flag-only completion, which has no outputs."""

    start_ns: int
    output_start_ns: int
    end_ns: int


class ResponseKind(enum.Enum):
    """How a response counts in ``response_stats`` (Triton's categories)."""

    SUCCESS = "success"
    FAIL = "fail"
    EMPTY = "empty_response"  # a flag-only completion: FINAL without a response
    CANCEL = "cancel"  # an error response with code CANCELLED


@dataclass(slots=True)
class ResponseDurations:
    """``response_stats`` of one response index, as Triton aggregates them."""

    compute_infer: Duration = field(default_factory=Duration)
    compute_output: Duration = field(default_factory=Duration)
    success: Duration = field(default_factory=Duration)
    fail: Duration = field(default_factory=Duration)
    empty_response: Duration = field(default_factory=Duration)
    cancel: Duration = field(default_factory=Duration)

    def record(self, kind: ResponseKind, timing: ResponseTiming) -> None:
        total = timing.end_ns - timing.start_ns
        if kind is ResponseKind.CANCEL:
            self.cancel.add(total)
            return
        if kind is ResponseKind.EMPTY or not timing.output_start_ns:
            self.compute_infer.add(total)
            if kind is ResponseKind.EMPTY:
                self.empty_response.add(total)
            else:
                self.fail.add(total)
            return
        self.compute_infer.add(timing.output_start_ns - timing.start_ns)
        self.compute_output.add(timing.end_ns - timing.output_start_ns)
        (self.success if kind is ResponseKind.SUCCESS else self.fail).add(total)


# A summary's window, as prometheus-cpp's summaries age theirs out: the last 60 s, at most
# this many observations (the newest).
SUMMARY_MAX_AGE_NS = 60_000_000_000
SUMMARY_CAPACITY = 8192


class Summary(Protocol):
    """A Prometheus summary: cumulative count and sum, quantiles over a recent window.

    ``SlidingSummary`` in one process; with ``--workers N`` a worker's summaries are rings
    the other workers read too (``workers/summary_board.py``).
    """

    @property
    def count(self) -> int: ...

    @property
    def sum(self) -> float: ...

    def observe(self, value: float, now_ns: int) -> None: ...

    def quantiles(self, qs: Sequence[float], now_ns: int) -> list[float]:
        """The value at each quantile of the window; NaN for an empty window."""
        ...


def nearest_ranks(count: int, qs: Sequence[float]) -> list[int]:
    """Where each quantile ``qs`` is among ``count`` sorted values (not none), by nearest
    rank."""
    return [min(count - 1, max(0, math.ceil(q * count) - 1)) for q in qs]


class SlidingSummary:
    """A ``Summary`` in one process; quantiles are exact over the window (nearest rank)."""

    __slots__ = ("_capacity", "_max_age_ns", "_window", "count", "sum")

    def __init__(
        self, max_age_s: float = SUMMARY_MAX_AGE_NS / 1e9, capacity: int = SUMMARY_CAPACITY
    ) -> None:
        self.count = 0
        self.sum = 0.0
        self._max_age_ns = int(max_age_s * 1e9)
        self._capacity = capacity
        self._window: deque[tuple[int, float]] = deque(maxlen=capacity)

    def observe(self, value: float, now_ns: int) -> None:
        self.count += 1
        self.sum += value
        self._window.append((now_ns, value))

    def quantiles(self, qs: Sequence[float], now_ns: int) -> list[float]:
        cutoff = now_ns - self._max_age_ns
        while self._window and self._window[0][0] < cutoff:
            self._window.popleft()
        values = sorted(value for _, value in self._window)
        if not values:
            return [math.nan] * len(qs)
        return [values[i] for i in nearest_ranks(len(values), qs)]


class Histogram:
    """Cumulative bucket counts over fixed upper bounds (+Inf implied), with sum and count
    (an extension type, statistics.pxd: observed once per latency of every request)."""

    def __init__(self, bounds: Sequence[float]) -> None:
        self.bounds = tuple(bounds)
        self.counts = [0] * (len(self.bounds) + 1)  # per bucket; the last one is +Inf
        self.count = 0
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.count += 1
        self.sum += value
        self.counts[bisect.bisect_left(self.bounds, value)] += 1

    def cumulative(self) -> list[int]:
        total, out = 0, []
        for n in self.counts:
            total += n
            out.append(total)
        return out


@dataclass(slots=True)
class LatencySummaries:
    """The per-request latency summaries behind ``summary_latencies`` (µs observations)."""

    request: Summary = field(default_factory=SlidingSummary)
    queue: Summary = field(default_factory=SlidingSummary)
    compute_input: Summary = field(default_factory=SlidingSummary)
    compute_infer: Summary = field(default_factory=SlidingSummary)
    compute_output: Summary = field(default_factory=SlidingSummary)


class LatencyHistograms:
    """The per-request latency histograms behind ``histogram_latencies`` (µs
    observations), Triton's ``nv_inference_*_duration_histogram_us`` (an extension type)."""

    def __init__(
        self,
        request: Histogram,
        queue: Histogram,
        compute_input: Histogram,
        compute_infer: Histogram,
        compute_output: Histogram,
    ) -> None:
        self.request = request
        self.queue = queue
        self.compute_input = compute_input
        self.compute_infer = compute_infer
        self.compute_output = compute_output

    @classmethod
    def create(
        cls, buckets: Mapping[str, Sequence[float]], defaults: Mapping[str, Sequence[float]]
    ) -> LatencyHistograms:
        """``buckets`` (the model's) first, then ``defaults`` (the server's), by family."""

        def histogram(family: str) -> Histogram:
            return Histogram(
                buckets.get(family) or defaults.get(family) or DEFAULT_DURATION_BUCKETS_US[family]
            )

        return cls(
            request=histogram(REQUEST_HISTOGRAM),
            queue=histogram(QUEUE_HISTOGRAM),
            compute_input=histogram(COMPUTE_INPUT_HISTOGRAM),
            compute_infer=histogram(COMPUTE_INFER_HISTOGRAM),
            compute_output=histogram(COMPUTE_OUTPUT_HISTOGRAM),
        )


def _zero_failures() -> dict[FailureReason, int]:
    return dict.fromkeys(FailureReason, 0)


class ModelStatistics:
    """A model version's counters (an extension type, statistics.pxd: updated for every
    request by the compiled runtime)."""

    def __init__(
        self,
        success: Duration | None = None,
        fail: Duration | None = None,
        queue: Duration | None = None,
        compute_input: Duration | None = None,
        compute_infer: Duration | None = None,
        compute_output: Duration | None = None,
        cache_hit: Duration | None = None,
        cache_miss: Duration | None = None,
        inference_count: int = 0,
        execution_count: int = 0,
        last_inference_ms: int = 0,
        batch_stats: dict[int, BatchDurations] | None = None,
        response_stats: dict[int, ResponseDurations] | None = None,
        failures: dict[FailureReason, int] | None = None,
        summaries: LatencySummaries | None = None,
        histograms: LatencyHistograms | None = None,
        first_response: Histogram | None = None,
        memory_usage: tuple[MemoryUsage, ...] = (),
    ) -> None:
        self.success = Duration() if success is None else success
        self.fail = Duration() if fail is None else fail
        self.queue = Duration() if queue is None else queue
        self.compute_input = Duration() if compute_input is None else compute_input
        self.compute_infer = Duration() if compute_infer is None else compute_infer
        self.compute_output = Duration() if compute_output is None else compute_output
        self.cache_hit = Duration() if cache_hit is None else cache_hit
        self.cache_miss = Duration() if cache_miss is None else cache_miss
        self.inference_count = inference_count
        self.execution_count = execution_count
        self.last_inference_ms = last_inference_ms
        self.batch_stats: dict[int, BatchDurations] = {} if batch_stats is None else batch_stats
        # Decoupled models: by response index within a request.
        self.response_stats: dict[int, ResponseDurations] = (
            {} if response_stats is None else response_stats
        )
        # fail.count split by reason; every reason is present (the metric pre-creates all
        # four).
        self.failures: dict[FailureReason, int] = _zero_failures() if failures is None else failures
        # Only when the metrics ask for them (they cost a little per request).
        self.summaries = summaries
        self.histograms = histograms
        self.first_response = first_response
        # What the backend could tell of the memory the model holds; () when it cannot.
        self.memory_usage = memory_usage

    @classmethod
    def create(
        cls,
        metrics: MetricsOptions | None,
        histogram_buckets: Mapping[str, Sequence[float]] | None = None,
    ) -> ModelStatistics:
        """Counters for a model, with the distributions ``metrics`` enables (None: none).

        ``histogram_buckets``: the model's own bucket bounds by histogram family (the
        config's ``model_metrics``), where it sets them.
        """
        if metrics is None:
            return cls()
        histogram = histograms = None
        if metrics.histogram_latencies:
            model_buckets = histogram_buckets or {}
            histogram = Histogram(
                model_buckets.get(FIRST_RESPONSE_HISTOGRAM)
                or metrics.histogram_buckets.get(FIRST_RESPONSE_HISTOGRAM)
                or DEFAULT_FIRST_RESPONSE_BUCKETS_MS
            )
            histograms = LatencyHistograms.create(model_buckets, metrics.histogram_buckets)
        return cls(
            summaries=LatencySummaries() if metrics.summary_latencies else None,
            histograms=histograms,
            first_response=histogram,
        )

    def snapshot(self) -> ModelStatistics:
        """The counters to report: these (a worker of ``--workers N`` sums its peers')."""
        return self

    def release(self) -> None:
        """The version is unloaded (a worker of ``--workers N`` frees its board entry)."""

    def record_execution(
        self, batch_size: int, timing: ComputeTiming, inferences: int | None = None
    ) -> None:
        """One execution of ``batch_size`` (its ``batch_stats`` entry); ``inferences``: the
        inferences it made, when fewer (a sequence batch's fillers count in the size only)."""
        self.execution_count += 1
        self.inference_count += batch_size if inferences is None else inferences
        self.last_inference_ms = clock.wall_ns() // 1_000_000
        per_batch = self.batch_stats.get(batch_size)
        if per_batch is None:
            per_batch = self.batch_stats[batch_size] = BatchDurations()
        # Each add spelled out: this runs once per execution, on the loop.
        duration = per_batch.compute_input
        duration.count += 1
        duration.ns += timing.input_end_ns - timing.start_ns
        duration = per_batch.compute_infer
        duration.count += 1
        duration.ns += timing.infer_end_ns - timing.input_end_ns
        duration = per_batch.compute_output
        duration.count += 1
        duration.ns += timing.end_ns - timing.infer_end_ns

    def record_request_success(
        self, arrival_ns: int, queue_start_ns: int, timing: ComputeTiming, end_ns: int
    ) -> None:
        # Every request of a batch is charged the batch's compute time, as Triton does.
        request_ns = end_ns - arrival_ns
        queue_ns = timing.start_ns - queue_start_ns
        input_ns = timing.input_end_ns - timing.start_ns
        infer_ns = timing.infer_end_ns - timing.input_end_ns
        output_ns = timing.end_ns - timing.infer_end_ns
        # Each add spelled out: this runs once per request, on the loop.
        duration = self.success
        duration.count += 1
        duration.ns += request_ns
        duration = self.queue
        duration.count += 1
        duration.ns += queue_ns
        duration = self.compute_input
        duration.count += 1
        duration.ns += input_ns
        duration = self.compute_infer
        duration.count += 1
        duration.ns += infer_ns
        duration = self.compute_output
        duration.count += 1
        duration.ns += output_ns
        summaries = self.summaries
        if summaries is not None:
            # Triton observes whole microseconds.
            summaries.request.observe(request_ns // 1000, end_ns)
            summaries.queue.observe(queue_ns // 1000, end_ns)
            summaries.compute_input.observe(input_ns // 1000, end_ns)
            summaries.compute_infer.observe(infer_ns // 1000, end_ns)
            summaries.compute_output.observe(output_ns // 1000, end_ns)
        histograms = self.histograms
        if histograms is not None:
            histograms.request.observe(request_ns // 1000)
            histograms.queue.observe(queue_ns // 1000)
            histograms.compute_input.observe(input_ns // 1000)
            histograms.compute_infer.observe(infer_ns // 1000)
            histograms.compute_output.observe(output_ns // 1000)

    def record_cache_hit(
        self, start_ns: int, queue_start_ns: int, lookup_start_ns: int, lookup_end_ns: int
    ) -> None:
        """A request answered from the response cache (Triton's UpdateSuccessCacheHit):
        a success with its queue time, no inference, execution or compute time."""
        end_ns = clock.now_ns()
        request_ns = end_ns - start_ns
        queue_ns = lookup_start_ns - queue_start_ns
        self.success.add(request_ns)
        self.queue.add(queue_ns)
        self.cache_hit.add(lookup_end_ns - lookup_start_ns)
        summaries = self.summaries
        if summaries is not None:
            summaries.request.observe(request_ns // 1000, end_ns)
            summaries.queue.observe(queue_ns // 1000, end_ns)
        histograms = self.histograms
        if histograms is not None:
            histograms.request.observe(request_ns // 1000)
            histograms.queue.observe(queue_ns // 1000)

    def record_cache_miss(self, miss_ns: int) -> None:
        """A cache miss's lookup and insert time, added to the request's duration as
        Triton's UpdateSuccessCacheMiss adds it."""
        self.success.ns += miss_ns
        self.cache_miss.add(miss_ns)

    def record_request_failure(
        self, arrival_ns: int, end_ns: int, reason: FailureReason = FailureReason.OTHER
    ) -> None:
        self.fail.add(end_ns - arrival_ns)
        self.failures[reason] += 1

    def record_response(self, index: int, kind: ResponseKind, timing: ResponseTiming) -> None:
        durations = self.response_stats.get(index)
        if durations is None:
            durations = self.response_stats[index] = ResponseDurations()
        durations.record(kind, timing)

    def record_first_response(self, arrival_ns: int, now_ns: int) -> None:
        if self.first_response is not None:
            self.first_response.observe((now_ns - arrival_ns) / 1e6)


# Makes a loaded model version's counters: (model identifier, version, metrics, histogram
# buckets); the identifier is ``namespace::name`` with --model-namespacing, else the name.
StatisticsFactory = Callable[
    [str, int, MetricsOptions | None, Mapping[str, Sequence[float]] | None], ModelStatistics
]


def default_statistics(
    name: str,
    version: int,
    metrics: MetricsOptions | None,
    histogram_buckets: Mapping[str, Sequence[float]] | None,
) -> ModelStatistics:
    """In-process counters (one server process)."""
    return ModelStatistics.create(metrics, histogram_buckets)
