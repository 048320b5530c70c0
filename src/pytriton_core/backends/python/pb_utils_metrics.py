"""``pb_utils.MetricFamily`` / ``Metric``: custom metrics that models define.

Values live in the :class:`~pytriton_core.backends.custom_metrics.MetricRegistry` of the
server running the model: a family binds to the registry of the context it is created in,
which the Python backend sets around the model's code (``metric_registry_context``, or with
the rest of the model's scope, ``pb_utils_context``). A family created elsewhere (a thread
the model started itself) is refused with a message.
"""

from __future__ import annotations

import bisect
import contextlib
import itertools
import re
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from pytriton_core.backends.custom_metrics import (
    LabelKey,
    MetricFamilySnapshot,
    MetricKind,
    MetricKindConflict,
    MetricRegistry,
    MetricSample,
    Series,
)
from pytriton_core.backends.python import pb_utils_context
from pytriton_core.backends.python.pb_utils_errors import TritonModelException

__all__ = [
    "Metric",
    "MetricFamily",
    "MetricFamilySnapshot",
    "MetricKind",
    "MetricRegistry",
    "MetricSample",
    "metric_registry",
    "metric_registry_context",
    "set_metric_registry",
]

_METRIC_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*\Z")
_LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*\Z")


# The registry of the server whose model code runs in this context: the Python backend sets
# it around a model's import, initialize, execute and finalize, so that two servers in one
# process keep their families apart.


def metric_registry() -> MetricRegistry | None:
    """The registry that families created in this context go to (None outside model code)."""
    return pb_utils_context.CURRENT.get().metrics


def set_metric_registry(registry: MetricRegistry | None) -> MetricRegistry | None:
    """Make ``registry`` hold the families created from now on in this context (a thread's
    own, or an asyncio task's); returns the previous one."""
    previous = pb_utils_context.CURRENT.get().metrics
    pb_utils_context.set_part(metrics=registry)
    return previous


@contextlib.contextmanager
def metric_registry_context(registry: MetricRegistry | None) -> Iterator[None]:
    """Families created inside the block go to ``registry`` (the backends' server hook)."""
    token = pb_utils_context.set_part(metrics=registry)
    try:
        yield
    finally:
        pb_utils_context.CURRENT.reset(token)


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
        registry = pb_utils_context.CURRENT.get().metrics
        if registry is None:
            raise TritonModelException(
                f"Error when creating MetricFamily '{name}': custom metrics can be created "
                "only while the server runs the model's code (initialize, execute, finalize)"
            )
        self._registry = registry
        try:
            self._store = registry.family(name, description, metric_kind)
        except MetricKindConflict as exc:
            raise TritonModelException(str(exc)) from None

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
        return Metric(self._registry, kind, self._registry.series(self._store, key, bounds))


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

    def __init__(self, registry: MetricRegistry, kind: MetricKind, series: Series) -> None:
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
        with self._registry.lock:
            self._series.value += float(value)

    def set(self, value: float) -> None:
        """Set a gauge."""
        if self._kind != MetricKind.GAUGE:
            raise self._refuse("set", "set")
        with self._registry.lock:
            self._series.value = float(value)

    def observe(self, value: float) -> None:
        """Record one observation in a histogram."""
        if self._kind != MetricKind.HISTOGRAM:
            raise self._refuse("observe", "observe")
        series = self._series
        with self._registry.lock:
            series.value += float(value)
            series.count += 1
            series.counts[bisect.bisect_left(series.bounds, value)] += 1

    def value(self) -> float:
        """The counter or gauge value (histograms have none, as in Triton)."""
        if self._kind == MetricKind.HISTOGRAM:
            raise self._refuse("value", "get")
        with self._registry.lock:
            return self._series.value
