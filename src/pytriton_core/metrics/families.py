"""Every metric family the server exposes, defined once: name, type, HELP text, group, and
how its samples are read. Names, types, HELP texts and labels are Triton's.

Per-model families read a model's ``ModelStatistics`` (the counters the statistics
extension reports: one source of truth) and carry the labels ``model`` and ``version``;
durations are the statistics' nanoseconds in whole microseconds. Server families read the
``SystemSnapshot`` the CPU and GPU collectors refresh every ``--metrics-interval-ms``.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from pytriton_core.inference.statistics import (
    COMPUTE_INFER_HISTOGRAM,
    COMPUTE_INPUT_HISTOGRAM,
    COMPUTE_OUTPUT_HISTOGRAM,
    FIRST_RESPONSE_HISTOGRAM,
    QUEUE_HISTOGRAM,
    REQUEST_HISTOGRAM,
    FailureReason,
    Histogram,
    LatencyHistograms,
    LatencySummaries,
    Summary,
)
from pytriton_core.runtime.model import Model

Labels = tuple[tuple[str, str], ...]


class Kind(enum.Enum):
    COUNTER = "counter"
    GAUGE = "gauge"
    SUMMARY = "summary"
    HISTOGRAM = "histogram"


class Group(enum.Enum):
    """What turns a family on (see ``enabled_groups``)."""

    INFERENCE = "inference"  # always, with metrics on
    COUNTER_LATENCIES = "counter_latencies"  # --metrics-config counter_latencies (default on)
    SUMMARY_LATENCIES = "summary_latencies"  # --metrics-config summary_latencies
    HISTOGRAM_LATENCIES = "histogram_latencies"  # --metrics-config histogram_latencies
    PINNED = "pinned"  # the host staging pool, with metrics on
    CACHE = "cache"  # the response cache's own gauges, with --cache-config
    GPU = "gpu"  # --allow-gpu-metrics, and NVML found a GPU
    CPU = "cpu"  # --allow-cpu-metrics


@dataclass(frozen=True, slots=True)
class Sample:
    """One line of the exposition: ``<family><suffix>{labels} value``."""

    labels: Labels
    value: float
    suffix: str = ""


@dataclass(frozen=True, slots=True)
class GpuReading:
    uuid: str
    utilization: float  # 0.0 - 1.0
    memory_total_bytes: int
    memory_used_bytes: int
    power_usage_w: float
    power_limit_w: float
    energy_j: float  # since the server started


@dataclass(frozen=True, slots=True)
class CacheReading:
    """The response cache's state at a scrape (the local cache's ``nv_cache_*`` gauges)."""

    utilization: float
    entries: int
    hits: int
    misses: int
    lookups: int
    evictions: int
    lookup_us: int
    insertion_us: int


@dataclass(frozen=True, slots=True)
class SystemSnapshot:
    cpu_utilization: float = 0.0
    cpu_memory_total_bytes: int = 0
    cpu_memory_used_bytes: int = 0
    gpus: tuple[GpuReading, ...] = ()
    pinned_total_bytes: int = 0  # 0: no pinned pool (staging falls back to pageable memory)
    pinned_used_bytes: int = 0
    cache: CacheReading | None = None


@dataclass(frozen=True, slots=True)
class ReadContext:
    """What a reader needs beyond the model: the summary quantiles and the time."""

    quantiles: Sequence[float]
    now_ns: int


ModelReader = Callable[[Model, ReadContext], Iterable[Sample]]
SystemReader = Callable[[SystemSnapshot], Iterable[Sample]]


@dataclass(frozen=True)
class Family:
    name: str
    kind: Kind
    help: str
    group: Group
    per_model: ModelReader | None = None  # samples without the model/version labels
    system: SystemReader | None = None
    # Per-model families only some models have (the cache's: models with the cache on);
    # a family no model has is left off the page.
    has: Callable[[Model], bool] | None = None


def _one(value: float) -> Iterable[Sample]:
    return (Sample((), value),)


def _us(ns: int) -> int:
    return ns // 1000


def _failures(model: Model, context: ReadContext) -> Iterable[Sample]:
    return (
        Sample((("reason", reason.value),), model.stats.snapshot().failures[reason])
        for reason in FailureReason
    )


def summary_samples(
    summary: Summary | None, quantiles: Sequence[float], now_ns: int
) -> Iterable[Sample]:
    if summary is None:
        return ()
    values = summary.quantiles(quantiles, now_ns)
    return (
        Sample((), summary.count, "_count"),
        Sample((), summary.sum, "_sum"),
        *(Sample((("quantile", _number(q)),), v) for q, v in zip(quantiles, values, strict=True)),
    )


def histogram_samples(histogram: Histogram | None) -> Iterable[Sample]:
    if histogram is None:
        return ()
    bounds = [*(_number(b) for b in histogram.bounds), "+Inf"]
    return (
        Sample((), histogram.count, "_count"),
        Sample((), histogram.sum, "_sum"),
        *(
            Sample((("le", bound),), count, "_bucket")
            for bound, count in zip(bounds, histogram.cumulative(), strict=True)
        ),
    )


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def _summary(pick: Callable[[LatencySummaries], Summary]) -> ModelReader:
    def read(model: Model, context: ReadContext) -> Iterable[Sample]:
        summaries = model.stats.snapshot().summaries
        if summaries is None:
            return ()
        return summary_samples(pick(summaries), context.quantiles, context.now_ns)

    return read


def _histogram(pick: Callable[[LatencyHistograms], Histogram]) -> ModelReader:
    def read(model: Model, context: ReadContext) -> Iterable[Sample]:
        histograms = model.stats.snapshot().histograms
        return histogram_samples(pick(histograms)) if histograms is not None else ()

    return read


def _cached(model: Model) -> bool:
    return model.cache_enabled


def _cache(read: Callable[[CacheReading], float]) -> SystemReader:
    return lambda snapshot: _one(read(snapshot.cache)) if snapshot.cache is not None else ()


def _gpu(read: Callable[[GpuReading], float]) -> SystemReader:
    return lambda snapshot: (Sample((("gpu_uuid", g.uuid),), read(g)) for g in snapshot.gpus)


_I, _C, _S, _H = (
    Group.INFERENCE,
    Group.COUNTER_LATENCIES,
    Group.SUMMARY_LATENCIES,
    Group.HISTOGRAM_LATENCIES,
)

FAMILIES: tuple[Family, ...] = (
    Family(
        "nv_inference_request_success",
        Kind.COUNTER,
        "Number of successful inference requests, all batch sizes",
        _I,
        per_model=lambda m, c: _one(m.stats.snapshot().success.count),
    ),
    Family(
        "nv_inference_request_failure",
        Kind.COUNTER,
        "Number of failed inference requests, all batch sizes",
        _I,
        per_model=_failures,
    ),
    Family(
        "nv_inference_count",
        Kind.COUNTER,
        "Number of inferences performed (does not include cached requests)",
        _I,
        per_model=lambda m, c: _one(m.stats.snapshot().inference_count),
    ),
    Family(
        "nv_inference_exec_count",
        Kind.COUNTER,
        "Number of model executions performed (does not include cached requests)",
        _I,
        per_model=lambda m, c: _one(m.stats.snapshot().execution_count),
    ),
    Family(
        "nv_inference_request_duration_us",
        Kind.COUNTER,
        "Cumulative inference request duration in microseconds (includes cached requests)",
        _C,
        per_model=lambda m, c: _one(_us(m.stats.snapshot().success.ns)),
    ),
    Family(
        "nv_inference_queue_duration_us",
        Kind.COUNTER,
        "Cumulative inference queuing duration in microseconds (includes cached requests)",
        _C,
        per_model=lambda m, c: _one(_us(m.stats.snapshot().queue.ns)),
    ),
    Family(
        "nv_inference_compute_input_duration_us",
        Kind.COUNTER,
        "Cumulative compute input duration in microseconds (does not include cached requests)",
        _C,
        per_model=lambda m, c: _one(_us(m.stats.snapshot().compute_input.ns)),
    ),
    Family(
        "nv_inference_compute_infer_duration_us",
        Kind.COUNTER,
        "Cumulative compute inference duration in microseconds (does not include cached requests)",
        _C,
        per_model=lambda m, c: _one(_us(m.stats.snapshot().compute_infer.ns)),
    ),
    Family(
        "nv_inference_compute_output_duration_us",
        Kind.COUNTER,
        "Cumulative inference compute output duration in microseconds (does not include "
        "cached requests)",
        _C,
        per_model=lambda m, c: _one(_us(m.stats.snapshot().compute_output.ns)),
    ),
    Family(
        "nv_cache_num_hits_per_model",
        Kind.COUNTER,
        "Number of cache hits per model",
        _C,
        per_model=lambda m, c: _one(m.stats.snapshot().cache_hit.count),
        has=_cached,
    ),
    Family(
        "nv_cache_hit_duration_per_model",
        Kind.COUNTER,
        "Total cache hit duration per model, in microseconds",
        _C,
        per_model=lambda m, c: _one(_us(m.stats.snapshot().cache_hit.ns)),
        has=_cached,
    ),
    Family(
        "nv_cache_num_misses_per_model",
        Kind.COUNTER,
        "Number of cache misses per model",
        _C,
        per_model=lambda m, c: _one(m.stats.snapshot().cache_miss.count),
        has=_cached,
    ),
    Family(
        "nv_cache_miss_duration_per_model",
        Kind.COUNTER,
        "Total cache miss (insert+lookup) duration per model, in microseconds",
        _C,
        per_model=lambda m, c: _one(_us(m.stats.snapshot().cache_miss.ns)),
        has=_cached,
    ),
    Family(
        "nv_inference_pending_request_count",
        Kind.GAUGE,
        "Instantaneous number of pending requests awaiting execution per-model.",
        _I,
        per_model=lambda m, c: _one(m.pending_request_count()),
    ),
    Family(
        "nv_inference_request_summary_us",
        Kind.SUMMARY,
        "Summary of inference request duration in microseconds (includes cached requests)",
        _S,
        per_model=_summary(lambda s: s.request),
    ),
    Family(
        "nv_inference_queue_summary_us",
        Kind.SUMMARY,
        "Summary of inference queuing duration in microseconds (includes cached requests)",
        _S,
        per_model=_summary(lambda s: s.queue),
    ),
    Family(
        "nv_inference_compute_input_summary_us",
        Kind.SUMMARY,
        "Cumulative compute input duration in microseconds (does not include cached requests)",
        _S,
        per_model=_summary(lambda s: s.compute_input),
    ),
    Family(
        "nv_inference_compute_infer_summary_us",
        Kind.SUMMARY,
        "Cumulative compute inference duration in microseconds (does not include cached requests)",
        _S,
        per_model=_summary(lambda s: s.compute_infer),
    ),
    Family(
        "nv_inference_compute_output_summary_us",
        Kind.SUMMARY,
        "Cumulative inference compute output duration in microseconds (does not include "
        "cached requests)",
        _S,
        per_model=_summary(lambda s: s.compute_output),
    ),
    Family(
        FIRST_RESPONSE_HISTOGRAM,
        Kind.HISTOGRAM,
        "Duration from request to first response in milliseconds",
        _H,
        per_model=lambda m, c: histogram_samples(m.stats.snapshot().first_response),
    ),
    Family(
        REQUEST_HISTOGRAM,
        Kind.HISTOGRAM,
        "Histogram of end-to-end inference request duration, in microseconds",
        _H,
        per_model=_histogram(lambda h: h.request),
    ),
    Family(
        QUEUE_HISTOGRAM,
        Kind.HISTOGRAM,
        "Histogram of inference queuing duration, in microseconds",
        _H,
        per_model=_histogram(lambda h: h.queue),
    ),
    Family(
        COMPUTE_INPUT_HISTOGRAM,
        Kind.HISTOGRAM,
        "Histogram of compute input duration, in microseconds",
        _H,
        per_model=_histogram(lambda h: h.compute_input),
    ),
    Family(
        COMPUTE_INFER_HISTOGRAM,
        Kind.HISTOGRAM,
        "Histogram of compute inference duration, in microseconds",
        _H,
        per_model=_histogram(lambda h: h.compute_infer),
    ),
    Family(
        COMPUTE_OUTPUT_HISTOGRAM,
        Kind.HISTOGRAM,
        "Histogram of compute output duration, in microseconds",
        _H,
        per_model=_histogram(lambda h: h.compute_output),
    ),
    Family(
        "nv_pinned_memory_pool_total_bytes",
        Kind.GAUGE,
        "Pinned memory pool total memory size, in bytes",
        Group.PINNED,
        system=lambda s: _one(s.pinned_total_bytes),
    ),
    Family(
        "nv_pinned_memory_pool_used_bytes",
        Kind.GAUGE,
        "Pinned memory pool used memory size, in bytes",
        Group.PINNED,
        system=lambda s: _one(s.pinned_used_bytes),
    ),
    Family(
        "nv_cache_util",
        Kind.GAUGE,
        "Cache utilization [0.0 - 1.0]",
        Group.CACHE,
        system=_cache(lambda r: r.utilization),
    ),
    Family(
        "nv_cache_num_entries",
        Kind.GAUGE,
        "Number of responses stored in response cache",
        Group.CACHE,
        system=_cache(lambda r: r.entries),
    ),
    Family(
        "nv_cache_num_hits",
        Kind.GAUGE,
        "Number of cache hits in response cache",
        Group.CACHE,
        system=_cache(lambda r: r.hits),
    ),
    Family(
        "nv_cache_num_misses",
        Kind.GAUGE,
        "Number of cache misses in response cache",
        Group.CACHE,
        system=_cache(lambda r: r.misses),
    ),
    Family(
        "nv_cache_num_lookups",
        Kind.GAUGE,
        "Number of cache lookups in response cache",
        Group.CACHE,
        system=_cache(lambda r: r.lookups),
    ),
    Family(
        "nv_cache_num_evictions",
        Kind.GAUGE,
        "Number of cache evictions in response cache",
        Group.CACHE,
        system=_cache(lambda r: r.evictions),
    ),
    Family(
        "nv_cache_lookup_duration",
        Kind.GAUGE,
        "Total cache lookup duration (hit and miss), in microseconds",
        Group.CACHE,
        system=_cache(lambda r: r.lookup_us),
    ),
    Family(
        "nv_cache_insertion_duration",
        Kind.GAUGE,
        "Total cache insertion duration, in microseconds",
        Group.CACHE,
        system=_cache(lambda r: r.insertion_us),
    ),
    Family(
        "nv_gpu_utilization",
        Kind.GAUGE,
        "GPU utilization rate [0.0 - 1.0)",
        Group.GPU,
        system=_gpu(lambda g: g.utilization),
    ),
    Family(
        "nv_gpu_memory_total_bytes",
        Kind.GAUGE,
        "GPU total memory, in bytes",
        Group.GPU,
        system=_gpu(lambda g: g.memory_total_bytes),
    ),
    Family(
        "nv_gpu_memory_used_bytes",
        Kind.GAUGE,
        "GPU used memory, in bytes",
        Group.GPU,
        system=_gpu(lambda g: g.memory_used_bytes),
    ),
    Family(
        "nv_gpu_power_usage",
        Kind.GAUGE,
        "GPU power usage in watts",
        Group.GPU,
        system=_gpu(lambda g: g.power_usage_w),
    ),
    Family(
        "nv_gpu_power_limit",
        Kind.GAUGE,
        "GPU power management limit in watts",
        Group.GPU,
        system=_gpu(lambda g: g.power_limit_w),
    ),
    Family(
        "nv_energy_consumption",
        Kind.COUNTER,
        "GPU energy consumption in joules since the Triton Server started",
        Group.GPU,
        system=_gpu(lambda g: g.energy_j),
    ),
    Family(
        "nv_cpu_utilization",
        Kind.GAUGE,
        "CPU utilization rate [0.0 - 1.0]",
        Group.CPU,
        system=lambda s: _one(s.cpu_utilization),
    ),
    Family(
        "nv_cpu_memory_total_bytes",
        Kind.GAUGE,
        "CPU total memory (RAM), in bytes",
        Group.CPU,
        system=lambda s: _one(s.cpu_memory_total_bytes),
    ),
    Family(
        "nv_cpu_memory_used_bytes",
        Kind.GAUGE,
        "CPU used memory (RAM), in bytes",
        Group.CPU,
        system=lambda s: _one(s.cpu_memory_used_bytes),
    ),
)
