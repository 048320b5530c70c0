"""Builds the ``/metrics`` page: the families of the table for every loaded model version,
the server gauges, then the custom families models made with ``pb_utils.MetricFamily``."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from pytriton_core.backends.custom_metrics import MetricFamilySnapshot, MetricKind
from pytriton_core.inference.response_cache import ResponseCache
from pytriton_core.metrics.exposition import write_family
from pytriton_core.metrics.families import (
    FAMILIES,
    CacheReading,
    Family,
    Group,
    Labels,
    ReadContext,
    Sample,
    SystemSnapshot,
)
from pytriton_core.metrics.system import CpuCollector, GpuCollector
from pytriton_core.options import MetricsOptions
from pytriton_core.runtime.model import Model

log = logging.getLogger(__name__)

_CUSTOM_KINDS = {
    MetricKind.COUNTER: "counter",
    MetricKind.GAUGE: "gauge",
    MetricKind.HISTOGRAM: "histogram",
}


def enabled_groups(
    options: MetricsOptions,
    gpus_found: bool = False,
    pinned_pool: bool = False,
    response_cache: bool = False,
) -> frozenset[Group]:
    groups = {Group.INFERENCE}
    if pinned_pool:
        groups.add(Group.PINNED)
    if response_cache:
        groups.add(Group.CACHE)
    if options.counter_latencies:
        groups.add(Group.COUNTER_LATENCIES)
    if options.summary_latencies:
        groups.add(Group.SUMMARY_LATENCIES)
    if options.histogram_latencies:
        groups.add(Group.HISTOGRAM_LATENCIES)
    if options.allow_cpu_metrics:
        groups.add(Group.CPU)
    if options.allow_gpu_metrics and gpus_found:
        groups.add(Group.GPU)
    return frozenset(groups)


class MetricsReporter:
    """Renders the exposition; ``start`` begins refreshing the CPU and GPU gauges."""

    def __init__(
        self,
        options: MetricsOptions,
        models: Callable[[], Sequence[Model]],
        custom: Callable[[], Sequence[MetricFamilySnapshot]] | None = None,
        pinned_pool: Callable[[], Mapping[str, Any]] | None = None,
        response_cache: ResponseCache | None = None,
    ) -> None:
        self._options = options
        self._response_cache = response_cache
        self._models = models
        # The custom families' snapshot: the server's registry, or every worker's, added.
        self._custom = custom
        # The staging pool's stats(): pinned_limit_bytes (0: fell back to pageable memory)
        # and pinned_in_use_bytes, read at each scrape.
        self._pinned_pool = pinned_pool
        self._quantiles = tuple(q for q, _ in options.summary_quantiles)
        self._cpu = CpuCollector() if options.allow_cpu_metrics else None
        self._gpu: GpuCollector | None = None
        self._groups = enabled_groups(
            options, pinned_pool=pinned_pool is not None, response_cache=response_cache is not None
        )
        self._snapshot = SystemSnapshot()
        self._refresher: asyncio.Task[None] | None = None

    async def start(self) -> None:
        if self._options.allow_gpu_metrics:
            self._gpu = await asyncio.to_thread(GpuCollector.open)
            self._groups = enabled_groups(
                self._options,
                self._gpu is not None,
                self._pinned_pool is not None,
                self._response_cache is not None,
            )
        await self._refresh()
        if self._cpu is not None or self._gpu is not None:
            self._refresher = asyncio.get_running_loop().create_task(self._refresh_forever())

    async def stop(self) -> None:
        if self._refresher is not None:
            self._refresher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._refresher
            self._refresher = None
        if self._gpu is not None:
            self._gpu.close()
            self._gpu = None

    async def _refresh_forever(self) -> None:
        interval_s = max(0.01, self._options.interval_ms / 1000)
        while True:
            await asyncio.sleep(interval_s)
            try:
                await self._refresh()
            except Exception:
                log.exception("refreshing the CPU/GPU metrics failed")

    async def _refresh(self) -> None:
        cpu, gpu = self._cpu, self._gpu
        if cpu is not None:
            cpu.refresh()  # two small /proc reads
        if gpu is not None:
            await asyncio.to_thread(gpu.refresh)  # NVML calls may take milliseconds
        self._snapshot = SystemSnapshot(
            cpu_utilization=cpu.utilization if cpu else 0.0,
            cpu_memory_total_bytes=cpu.memory_total_bytes if cpu else 0,
            cpu_memory_used_bytes=cpu.memory_used_bytes if cpu else 0,
            gpus=gpu.readings if gpu else (),
        )

    def families(self) -> list[Family]:
        """The families on the page, in the table's order."""
        return [f for f in FAMILIES if f.group in self._groups]

    def render(self) -> str:
        out: list[str] = []
        models = self._models()
        context = ReadContext(self._quantiles, time.monotonic_ns())
        snapshot = self._snapshot
        if self._pinned_pool is not None:
            pool = self._pinned_pool()
            snapshot = dataclasses.replace(
                snapshot,
                pinned_total_bytes=int(pool.get("pinned_limit_bytes", 0)),
                pinned_used_bytes=int(pool.get("pinned_in_use_bytes", 0)),
            )
        if self._response_cache is not None:
            snapshot = dataclasses.replace(snapshot, cache=_cache_reading(self._response_cache))
        for family in self.families():
            series: Iterable[tuple[Labels, Iterable[Sample]]]
            if family.per_model is not None:
                read = family.per_model
                shown = models if family.has is None else [m for m in models if family.has(m)]
                if not shown and family.has is not None:
                    continue
                series = [
                    ((("model", m.name), ("version", str(m.version))), read(m, context))
                    for m in shown
                ]
            else:
                assert family.system is not None
                series = [((), family.system(snapshot))]
            write_family(out, family.name, family.kind.value, family.help, series)
        if self._custom is not None:
            for custom in self._custom():
                write_family(
                    out,
                    custom.name,
                    _CUSTOM_KINDS[custom.kind],
                    custom.description,
                    _custom_series(custom),
                )
        return "".join(out)


def _cache_reading(cache: ResponseCache) -> CacheReading:
    counters = cache.counters
    return CacheReading(
        utilization=cache.utilization,
        entries=len(cache),
        hits=counters.hits,
        misses=counters.misses,
        lookups=counters.lookups,
        evictions=counters.evictions,
        lookup_us=counters.lookup_ns // 1000,
        insertion_us=counters.insert_ns // 1000,
    )


def _custom_series(family: MetricFamilySnapshot) -> Iterable[tuple[Labels, Iterable[Sample]]]:
    for sample in family.samples:
        if family.kind is MetricKind.HISTOGRAM:
            bounds = [*(_bound(b) for b in sample.buckets), "+Inf"]
            samples: list[Sample] = [
                Sample((), sample.count, "_count"),
                Sample((), sample.value, "_sum"),
                *(
                    Sample((("le", bound),), count, "_bucket")
                    for bound, count in zip(bounds, sample.bucket_counts, strict=True)
                ),
            ]
        else:
            samples = [Sample((), sample.value)]
        yield sample.labels, samples


def _bound(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(float(value))
