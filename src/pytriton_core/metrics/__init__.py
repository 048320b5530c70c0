"""Prometheus metrics: the family table, the page renderer and the ``/metrics`` listener."""

from __future__ import annotations

from pytriton_core.metrics.endpoint import MetricsEndpoint
from pytriton_core.metrics.families import FAMILIES, Family, Group, Kind
from pytriton_core.metrics.reporter import MetricsReporter

__all__ = ["FAMILIES", "Family", "Group", "Kind", "MetricsEndpoint", "MetricsReporter"]
