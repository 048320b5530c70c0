"""``pb_utils.MetricFamily`` / ``Metric``: custom metrics that models define.

Values live in a :class:`MetricRegistry` in this process. A family binds to the registry
current when it is created (``set_metric_registry`` installs the server's); the server reads
every family with ``registry.snapshot()`` (for ``/metrics``). As with prometheus-cpp,
creating a family whose name exists returns the same series store when the kind matches
(models create their families in ``initialize``, once per instance), and one label set is
one series.
"""

from __future__ import annotations

import bisect
import enum
import itertools
import re
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pytriton_core.backends.python.pb_utils_errors import TritonModelException

_METRIC_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*\Z")
_LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*\Z")


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


class _Series:
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


class _FamilyStore:
    __slots__ = ("description", "kind", "name", "series")

    def __init__(self, name: str, description: str, kind: MetricKind) -> None:
        self.name = name
        self.description = description
        self.kind = kind
        self.series: dict[LabelKey, _Series] = {}


class MetricRegistry:
    """Every custom metric family of one server; safe to use from any thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._families: dict[str, _FamilyStore] = {}

    def _family(self, name: str, description: str, kind: MetricKind) -> _FamilyStore:
        with self._lock:
            family = self._families.get(name)
            if family is None:
                family = self._families[name] = _FamilyStore(name, description, kind)
            elif family.kind != kind:
                raise TritonModelException(
                    f"Error when creating MetricFamily: '{name}' already exists as a "
                    f"{family.kind.name.lower()}, not a {kind.name.lower()}"
                )
            return family

    def _series(self, family: _FamilyStore, labels: LabelKey, bounds: tuple[float, ...]) -> _Series:
        with self._lock:
            series = family.series.get(labels)
            if series is None:
                series = family.series[labels] = _Series(bounds)
            return series

    def snapshot(self) -> list[MetricFamilySnapshot]:
        """A consistent copy of every family and series, families in creation order."""
        with self._lock:
            return [
                MetricFamilySnapshot(
                    f.name,
                    f.description,
                    f.kind,
                    tuple(s.sample(labels) for labels, s in f.series.items()),
                )
                for f in self._families.values()
            ]


_registry = MetricRegistry()


def metric_registry() -> MetricRegistry:
    return _registry


def set_metric_registry(registry: MetricRegistry) -> MetricRegistry:
    """Make ``registry`` hold the families created from now on; returns the previous one."""
    global _registry
    previous, _registry = _registry, registry
    return previous


class MetricFamily:
    """A named metric family: ``MetricFamily(name, description, MetricFamily.COUNTER)``."""

    COUNTER = MetricKind.COUNTER
    GAUGE = MetricKind.GAUGE
    HISTOGRAM = MetricKind.HISTOGRAM

    def __init__(self, name: str, description: str, kind: int) -> None:
        if not isinstance(name, str) or not _METRIC_NAME.match(name):
            raise TritonModelException(
                f"Error when creating MetricFamily: {name!r} is not a valid metric name"
            )
        if not isinstance(description, str):
            raise TypeError("MetricFamily description must be a str")
        try:
            metric_kind = MetricKind(kind)
        except ValueError:
            raise TritonModelException(f"Unknown metric kind {kind!r}") from None
        self._registry = _registry
        self._store = self._registry._family(name, description, metric_kind)

    def Metric(  # Triton's (capitalised) name
        self,
        labels: Mapping[str, str] | None = None,
        buckets: Sequence[float] | None = None,
    ) -> Metric:
        """The series for ``labels`` (created on first use); histograms need ``buckets``."""
        kind = self._store.kind
        if labels is not None and not isinstance(labels, Mapping):
            raise TritonModelException("Failed to create metric. Labels must be a dictionary.")
        key = _label_key(labels or {})
        if buckets is None:
            if kind == MetricKind.HISTOGRAM:
                raise TritonModelException("Failed to create metric. Missing required buckets.")
            bounds: tuple[float, ...] = ()
        else:
            if isinstance(buckets, str | bytes) or not isinstance(buckets, Sequence):
                raise TritonModelException("Failed to create metric. Buckets must be a list.")
            if kind != MetricKind.HISTOGRAM:
                raise TritonModelException("Failed to create metric. Unexpected buckets found.")
            bounds = tuple(float(b) for b in buckets)
            if any(a >= b for a, b in itertools.pairwise(bounds)):
                raise TritonModelException(
                    "Failed to create metric. Buckets must be strictly increasing."
                )
        return Metric(self._registry, kind, self._registry._series(self._store, key, bounds))


def _label_key(labels: Mapping[str, Any]) -> LabelKey:
    for name, value in labels.items():
        if not isinstance(name, str) or not _LABEL_NAME.match(name) or name.startswith("__"):
            raise TritonModelException(f"Failed to create metric. Invalid label name {name!r}.")
        if not isinstance(value, str):
            raise TritonModelException(
                f"Failed to create metric. Label '{name}' must have a str value."
            )
    return tuple(sorted(labels.items()))


class Metric:
    """One series of a family (made by ``MetricFamily.Metric``)."""

    __slots__ = ("_kind", "_registry", "_series")

    def __init__(self, registry: MetricRegistry, kind: MetricKind, series: _Series) -> None:
        self._registry = registry
        self._kind = kind
        self._series = series

    def _refuse(self, operation: str, verb: str) -> TritonModelException:
        return TritonModelException(
            f"Failed to {verb} metric value: a {self._kind.name.lower()} does not support "
            f"{operation}"
        )

    def increment(self, value: float) -> None:
        """Add ``value`` (counters: only >= 0)."""
        if self._kind == MetricKind.HISTOGRAM:
            raise self._refuse("increment", "increment")
        if self._kind == MetricKind.COUNTER and value < 0:
            raise TritonModelException(
                f"Failed to increment metric value: a counter only increases; {value} is negative"
            )
        with self._registry._lock:
            self._series.value += float(value)

    def set(self, value: float) -> None:
        """Set a gauge."""
        if self._kind != MetricKind.GAUGE:
            raise self._refuse("set", "set")
        with self._registry._lock:
            self._series.value = float(value)

    def observe(self, value: float) -> None:
        """Record one observation in a histogram."""
        if self._kind != MetricKind.HISTOGRAM:
            raise self._refuse("observe", "observe")
        series = self._series
        with self._registry._lock:
            series.value += float(value)
            series.count += 1
            series.counts[bisect.bisect_left(series.bounds, value)] += 1

    def value(self) -> float:
        """The counter or gauge value (histograms have none, as in Triton)."""
        if self._kind == MetricKind.HISTOGRAM:
            raise self._refuse("value", "get")
        with self._registry._lock:
            return self._series.value
