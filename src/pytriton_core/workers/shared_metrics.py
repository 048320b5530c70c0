"""The custom metric families of Python models (``pb_utils.MetricFamily``) summed over the
workers of ``--workers N``, as the built-in families are.

Their label sets are made at run time, so they do not fit the board's fixed entries. Each
worker instead keeps one file of its own in the board's folder, ``custom-<index>.json``:
its registry's snapshot, written whole to a temporary file and renamed over the last one
(a reader opens either the old file or the new one, never half of one). A worker writes it
each second when it changed, and at each scrape it serves; the scraping worker reads every
other worker's file and adds them up:

- counters and histograms: the sum over every worker, live or dead. A worker started in a
  dead one's place continues its counts (it takes them from the file it replaces), as the
  board's statistics do.
- gauges: the sum over the workers that are not down. A gauge a model moves up and down
  (requests in flight, items queued in its instances) is then what one server's shared
  gauge would read, as every instance of a Triton model updates the same series. A gauge
  that every worker *sets* to one server-wide value reads N times that value: such a value
  is better set from one worker, or read with ``max`` in the query.

A histogram series whose buckets differ between workers keeps the first worker's buckets
(the others' observations of it are left out and a warning is logged once), as a Triton
series keeps the buckets it was created with. A family of one name but another kind in
another worker is left out the same way.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from pytriton_core.backends.custom_metrics import (
    LabelKey,
    MetricFamilySnapshot,
    MetricKind,
    MetricRegistry,
    MetricSample,
)
from pytriton_core.workers.board import WorkerBoard, WorkerState

log = logging.getLogger(__name__)

CustomMetrics = Callable[[], Sequence[MetricFamilySnapshot]]


def custom_metrics_path(board: WorkerBoard, index: int) -> Path:
    return board.path.parent / f"custom-{index}.json"


class SharedCustomMetrics:
    """One worker's side: publishes its registry, and sums every worker's on a scrape."""

    def __init__(self, board: WorkerBoard, index: int, registry: MetricRegistry) -> None:
        self._board = board
        self._index = index
        self._registry = registry
        self._published: list[MetricFamilySnapshot] | None = None
        self._warned: set[str] = set()
        # Counted by this slot's earlier workers (their gauges died with them).
        predecessor = _read(custom_metrics_path(board, index))
        self._inherited = [family for family in predecessor if family.kind is not MetricKind.GAUGE]

    def publish(self) -> list[MetricFamilySnapshot]:
        """This worker's families (with what its predecessors counted), written to its file
        when they changed since the last time."""
        own = _add([self._inherited, self._registry.snapshot()], self._warned, log.warning)
        if own != self._published:
            path = custom_metrics_path(self._board, self._index)
            staged = path.with_suffix(".tmp")
            staged.write_text(json.dumps([_encoded(family) for family in own]))
            os.replace(staged, path)
            self._published = own
        return own

    def summed(self) -> list[MetricFamilySnapshot]:
        """Every worker's families added up (this worker's as of now, the others' as of
        their last write)."""
        parts = [self.publish()]
        for index, slot in enumerate(self._board.slots()):
            if index == self._index:
                continue
            families = _read(custom_metrics_path(self._board, index))
            if slot.state() is WorkerState.DOWN:
                families = [f for f in families if f.kind is not MetricKind.GAUGE]
            parts.append(families)
        return _add(parts, self._warned, log.warning)


def _add(
    parts: Iterable[Sequence[MetricFamilySnapshot]],
    warned: set[str],
    warn: Callable[..., None],
) -> list[MetricFamilySnapshot]:
    """The families of ``parts`` added up, in the order first seen."""
    families: dict[str, tuple[MetricFamilySnapshot, dict[LabelKey, MetricSample]]] = {}
    for part in parts:
        for family in part:
            seen = families.get(family.name)
            if seen is None:
                families[family.name] = (family, {s.labels: s for s in family.samples})
                continue
            first, samples = seen
            if first.kind is not family.kind:
                _warn_once(
                    warned,
                    warn,
                    f"kind:{family.name}",
                    "custom metric family '%s' is a %s in one worker and a %s in another: "
                    "only the first is shown",
                    family.name,
                    first.kind.name.lower(),
                    family.kind.name.lower(),
                )
                continue
            for sample in family.samples:
                old = samples.get(sample.labels)
                if old is None:
                    samples[sample.labels] = sample
                elif old.buckets != sample.buckets:
                    _warn_once(
                        warned,
                        warn,
                        f"buckets:{family.name}",
                        "custom histogram '%s' has other buckets in another worker: that "
                        "worker's observations are left out",
                        family.name,
                    )
                else:
                    samples[sample.labels] = MetricSample(
                        sample.labels,
                        old.value + sample.value,
                        old.count + sample.count,
                        old.buckets,
                        tuple(
                            a + b
                            for a, b in zip(old.bucket_counts, sample.bucket_counts, strict=True)
                        ),
                    )
    return [
        MetricFamilySnapshot(f.name, f.description, f.kind, tuple(samples.values()))
        for f, samples in families.values()
    ]


def _warn_once(
    warned: set[str], warn: Callable[..., None], key: str, message: str, *args: object
) -> None:
    if key not in warned:
        warned.add(key)
        warn(message, *args)


def _encoded(family: MetricFamilySnapshot) -> dict[str, Any]:
    return {
        "name": family.name,
        "description": family.description,
        "kind": int(family.kind),
        "samples": [
            [[list(pair) for pair in s.labels], s.value, s.count, s.buckets, s.bucket_counts]
            for s in family.samples
        ],
    }


def _decoded(data: dict[str, Any]) -> MetricFamilySnapshot:
    return MetricFamilySnapshot(
        data["name"],
        data["description"],
        MetricKind(data["kind"]),
        tuple(
            MetricSample(
                tuple((str(k), str(v)) for k, v in labels),
                float(value),
                int(count),
                tuple(float(b) for b in buckets),
                tuple(int(c) for c in bucket_counts),
            )
            for labels, value, count, buckets, bucket_counts in data["samples"]
        ),
    )


def _read(path: Path) -> list[MetricFamilySnapshot]:
    """A worker's last published families (none if it never published)."""
    try:
        return [_decoded(family) for family in json.loads(path.read_text())]
    except FileNotFoundError:
        return []
