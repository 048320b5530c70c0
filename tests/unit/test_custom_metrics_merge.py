"""MetricRegistry.merge: the custom metrics of Python models' worker processes (process
mode) brought into the server's registry, as the server's /metrics page reads them."""

from __future__ import annotations

import pytest

from pytriton_core.backends.custom_metrics import (
    MetricFamilySnapshot,
    MetricKind,
    MetricKindConflict,
    MetricRegistry,
    Series,
)

LABELS = (("model", "m"),)


def _worker_registry() -> tuple[MetricRegistry, list[Series]]:
    registry = MetricRegistry()
    counter = registry.series(registry.family("c", "a counter", MetricKind.COUNTER), LABELS, ())
    gauge = registry.series(registry.family("g", "a gauge", MetricKind.GAUGE), LABELS, ())
    histogram = registry.family("h", "a histogram", MetricKind.HISTOGRAM)
    return registry, [counter, gauge, registry.series(histogram, LABELS, (1.0, 4.0))]


def _observe(series: Series, value: float) -> None:
    series.value += value
    series.count += 1
    series.counts[0 if value <= 1 else 1 if value <= 4 else 2] += 1


def test_two_workers_counters_and_histograms_add_up_and_a_gauge_takes_the_last_change() -> None:
    server = MetricRegistry()
    seen: list[dict[str, MetricFamilySnapshot]] = [{}, {}]
    workers = [_worker_registry(), _worker_registry()]
    for worker, value in [(0, 1.0), (1, 3.0), (0, 10.0)]:
        registry, (counter, gauge, histogram) = workers[worker]
        counter.value += 1
        gauge.value = value
        _observe(histogram, value)
        for family in registry.snapshot():
            server.merge(family, seen[worker].get(family.name))
            seen[worker][family.name] = family
    by_name = {family.name: family.samples[0] for family in server.snapshot()}
    assert by_name["c"].value == 3
    assert by_name["g"].value == 10.0
    assert (by_name["h"].count, by_name["h"].value) == (3, 14.0)
    assert by_name["h"].bucket_counts == (1, 2, 3)  # cumulative, +Inf last


def test_a_family_of_another_kind_is_refused() -> None:
    server = MetricRegistry()
    server.family("c", "a gauge here", MetricKind.GAUGE)
    registry, _ = _worker_registry()
    counter = next(f for f in registry.snapshot() if f.name == "c")
    with pytest.raises(MetricKindConflict):
        server.merge(counter, None)
