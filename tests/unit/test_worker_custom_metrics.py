"""Custom metric families summed over the workers of --workers N: each worker's registry
published to its file beside a real board, and read back added up."""

from __future__ import annotations

from pathlib import Path

from pytriton_core.backends.custom_metrics import MetricKind, MetricRegistry
from pytriton_core.workers.board import WorkerBoard, WorkerState
from pytriton_core.workers.shared_metrics import SharedCustomMetrics

LABELS = (("model", "m"),)


def _registry(
    count: float, level: float, observed: float, bounds: tuple[float, ...]
) -> MetricRegistry:
    registry = MetricRegistry()
    registry.series(registry.family("c", "a counter", MetricKind.COUNTER), LABELS, ()).value = count
    registry.series(registry.family("g", "a gauge", MetricKind.GAUGE), LABELS, ()).value = level
    histogram = registry.series(
        registry.family("h", "a histogram", MetricKind.HISTOGRAM), LABELS, bounds
    )
    histogram.value, histogram.count, histogram.counts[0] = observed, 1, 1
    return registry


def _values(shared: SharedCustomMetrics) -> dict[str, tuple[float, int, tuple[int, ...]]]:
    return {
        f.name: (f.samples[0].value, f.samples[0].count, f.samples[0].bucket_counts)
        for f in shared.summed()
    }


def test_every_worker_counts_a_dead_ones_gauge_does_not_and_its_successor_continues(
    tmp_path: Path,
) -> None:
    board = WorkerBoard.create(tmp_path, 2)
    for slot in board.slots():
        slot.set_state(WorkerState.SERVING, 1)
    first = SharedCustomMetrics(board, 0, _registry(3, 5, 0.5, (1.0,)))
    second = SharedCustomMetrics(board, 1, _registry(4, 2, 0.25, (1.0,)))
    second.publish()
    assert _values(first) == {"c": (7, 0, (0,)), "g": (7, 0, (0,)), "h": (0.75, 2, (2, 2))}
    board.slot(1).mark_down()  # worker 1 died: its counts stay, its gauge went with it
    assert _values(first) == {"c": (7, 0, (0,)), "g": (5, 0, (0,)), "h": (0.75, 2, (2, 2))}
    # Started in its place, worker 1 counts on from its predecessor's counts.
    board.slot(1).set_state(WorkerState.SERVING, 2)
    successor = SharedCustomMetrics(board, 1, _registry(1, 1, 0.5, (1.0,)))
    successor.publish()
    assert _values(first) == {"c": (8, 0, (0,)), "g": (6, 0, (0,)), "h": (1.25, 3, (3, 3))}
    board.close()


def test_a_histogram_of_other_buckets_in_another_worker_is_left_out(tmp_path: Path) -> None:
    board = WorkerBoard.create(tmp_path, 2)
    first = SharedCustomMetrics(board, 0, _registry(1, 1, 0.5, (1.0,)))
    SharedCustomMetrics(board, 1, _registry(1, 1, 0.5, (2.0, 4.0))).publish()
    values = _values(first)
    assert values["h"] == (0.5, 1, (1, 1))
    assert values["c"] == (2, 0, (0,))
    board.close()
