"""Custom metric families that backends define (the Python backend's
``pb_utils.MetricFamily``): one ``MetricRegistry`` per server, owned by the server object and
handed to the backends through ``ModelLocation.custom_metrics``. The server's ``/metrics``
page reads every family with ``registry.snapshot()``.

As with prometheus-cpp, a family whose name exists is the same store when the kind matches
(models create their families in ``initialize``, once per instance), and one label set is
one series.
"""

from __future__ import annotations

import enum
import threading
from dataclasses import dataclass


class MetricKind(enum.IntEnum):
    COUNTER = 0
    GAUGE = 1
    HISTOGRAM = 2


LabelKey = tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class MetricSample:
    """One series. Counter/gauge: ``value``. Histogram: ``value`` is the sum of
    observations, ``count`` their number, ``bucket_counts[i]`` the (cumulative) number
    ``<= buckets[i]``, with a last entry for +Inf equal to ``count``."""

    labels: LabelKey
    value: float
    count: int = 0
    buckets: tuple[float, ...] = ()
    bucket_counts: tuple[int, ...] = ()


@dataclass(frozen=True)
class MetricFamilySnapshot:
    name: str
    description: str
    kind: MetricKind
    samples: tuple[MetricSample, ...]


class Series:
    """One label set's value (counter, gauge) or observations (histogram)."""

    __slots__ = ("bounds", "count", "counts", "value")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.value = 0.0
        self.count = 0
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)  # per bucket, not cumulative; +Inf last

    def sample(self, labels: LabelKey) -> MetricSample:
        cumulative, running = [], 0
        for n in self.counts:
            running += n
            cumulative.append(running)
        return MetricSample(labels, self.value, self.count, self.bounds, tuple(cumulative))


class FamilyStore:
    """One family's kind, help text and series."""

    __slots__ = ("description", "kind", "name", "series")

    def __init__(self, name: str, description: str, kind: MetricKind) -> None:
        self.name = name
        self.description = description
        self.kind = kind
        self.series: dict[LabelKey, Series] = {}


class MetricKindConflict(ValueError):
    """A family of that name exists with another kind."""


class MetricRegistry:
    """Every custom metric family of one server; safe to use from any thread.

    ``lock`` guards every value: the metric objects take it to update their series.
    """

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self._families: dict[str, FamilyStore] = {}

    def empty(self) -> bool:
        """Whether no family was created yet (a lock-free look: families are never removed)."""
        return not self._families

    def family(self, name: str, description: str, kind: MetricKind) -> FamilyStore:
        """The family of ``name``, created on first use (MetricKindConflict: other kind)."""
        with self.lock:
            family = self._families.get(name)
            if family is None:
                family = self._families[name] = FamilyStore(name, description, kind)
            elif family.kind != kind:
                raise MetricKindConflict(
                    f"Error when creating MetricFamily: '{name}' already exists as a "
                    f"{family.kind.name.lower()}, not a {kind.name.lower()}"
                )
            return family

    def series(self, family: FamilyStore, labels: LabelKey, bounds: tuple[float, ...]) -> Series:
        """The series of ``labels`` in ``family``, created on first use."""
        with self.lock:
            series = family.series.get(labels)
            if series is None:
                series = family.series[labels] = Series(bounds)
            return series

    def snapshot(self) -> list[MetricFamilySnapshot]:
        """A consistent copy of every family and series, families in creation order."""
        with self.lock:
            return [
                MetricFamilySnapshot(
                    f.name,
                    f.description,
                    f.kind,
                    tuple(s.sample(labels) for labels, s in f.series.items()),
                )
                for f in self._families.values()
            ]

    def merge(self, family: MetricFamilySnapshot, previous: MetricFamilySnapshot | None) -> None:
        """Bring in what ``family`` (a snapshot of another registry, e.g. a Python model's
        worker process) gained since ``previous``: counters and histograms add the
        difference, so several processes' series sum up; a gauge takes the value it
        changed to. MetricKindConflict: the family exists here with another kind."""
        store = self.family(family.name, family.description, family.kind)
        before = {} if previous is None else {s.labels: s for s in previous.samples}
        with self.lock:
            for sample in family.samples:
                old = before.get(sample.labels)
                series = store.series.get(sample.labels)
                if series is None:
                    series = store.series[sample.labels] = Series(sample.buckets)
                if family.kind == MetricKind.GAUGE:
                    if old is None or old.value != sample.value:
                        series.value = sample.value
                    continue
                if series.bounds != sample.buckets:
                    continue  # as in process: the series keeps the buckets it was made with
                series.value += sample.value - (0.0 if old is None else old.value)
                if family.kind == MetricKind.HISTOGRAM:
                    series.count += sample.count - (0 if old is None else old.count)
                    was = old.bucket_counts if old is not None else (0,) * len(series.counts)
                    pairs = zip(sample.bucket_counts, was, strict=True)
                    gained = [now - then for now, then in pairs]
                    for i, cumulative in enumerate(gained):
                        series.counts[i] += cumulative - (gained[i - 1] if i else 0)
