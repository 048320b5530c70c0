"""Statistics that every worker of ``--workers N`` can read: a worker's counters, written
through to its slot of the board at each update, and read back summed over the workers.

The worker's own counters stay the in-process ``ModelStatistics`` (what the scheduler and
the instances update); each ``record_*`` then copies the scalars (and the executed batch
size's entry) into the slot, which costs a ``struct.pack_into`` per executed batch and per
completed request. ``snapshot()`` is what the statistics extension and the Prometheus
page read: this worker's counters plus every other live worker's from the board.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from pytriton_core.inference.statistics import (
    BatchDurations,
    ComputeTiming,
    Duration,
    FailureReason,
    ModelStatistics,
)
from pytriton_core.options import MetricsOptions
from pytriton_core.workers.board import BATCH_SIZES, EntryCounters, WorkerBoard

log = logging.getLogger(__name__)

_DURATIONS = (
    "success",
    "fail",
    "queue",
    "compute_input",
    "compute_infer",
    "compute_output",
    "cache_hit",
    "cache_miss",
)
_BATCH_DURATIONS = ("compute_input", "compute_infer", "compute_output")


@dataclass(slots=True)
class SharedStatistics(ModelStatistics):
    """A worker's ``ModelStatistics`` that publishes itself to its board slot."""

    board: WorkerBoard | None = None
    worker: int = 0
    entry: int = -1
    model_name: str = ""
    model_version: int = 0
    # batch size -> its position in the entry's batch table
    batch_positions: dict[int, int] = field(default_factory=dict)

    def scalars(self) -> tuple[int, ...]:
        values: list[int] = []
        for name in _DURATIONS:
            duration: Duration = getattr(self, name)
            values += (duration.count, duration.ns)
        values += (self.inference_count, self.execution_count, self.last_inference_ms)
        values += (self.failures[reason] for reason in FailureReason)
        return tuple(values)

    def _publish(self, batch_size: int | None = None) -> None:
        if self.board is None:
            return
        slot = self.board.slot(self.worker)
        base = slot.begin_write(self.entry)
        try:
            slot.write_scalars(base, self.scalars())
            if batch_size is not None:
                position = self.batch_positions.get(batch_size)
                if position is None:
                    position = len(self.batch_positions)
                    if position >= BATCH_SIZES:
                        log.warning(
                            "batch size %d: only %d distinct batch sizes per model are "
                            "summed over workers; this one stays with its worker",
                            batch_size,
                            BATCH_SIZES,
                        )
                        return
                    self.batch_positions[batch_size] = position
                values = (batch_size, *_batch_values(self.batch_stats[batch_size]))
                slot.write_batch(base, position, values)
        finally:
            slot.end_write(base)

    def record_execution(
        self, batch_size: int, timing: ComputeTiming, inferences: int | None = None
    ) -> None:
        ModelStatistics.record_execution(self, batch_size, timing, inferences)
        self._publish(batch_size)

    def record_request_success(
        self, arrival_ns: int, queue_start_ns: int, timing: ComputeTiming, end_ns: int
    ) -> None:
        ModelStatistics.record_request_success(self, arrival_ns, queue_start_ns, timing, end_ns)
        self._publish()

    def record_request_failure(
        self, arrival_ns: int, end_ns: int, reason: FailureReason = FailureReason.OTHER
    ) -> None:
        ModelStatistics.record_request_failure(self, arrival_ns, end_ns, reason)
        self._publish()

    def record_cache_hit(
        self, start_ns: int, queue_start_ns: int, lookup_start_ns: int, lookup_end_ns: int
    ) -> None:
        ModelStatistics.record_cache_hit(
            self, start_ns, queue_start_ns, lookup_start_ns, lookup_end_ns
        )
        self._publish()

    def record_cache_miss(self, miss_ns: int) -> None:
        ModelStatistics.record_cache_miss(self, miss_ns)
        self._publish()

    def snapshot(self) -> ModelStatistics:
        """These counters plus every other live worker's for the same model version."""
        if self.board is None:
            return self
        peers = [
            counters
            for index, slot in enumerate(self.board.slots())
            if index != self.worker  # a dead worker's completed requests still count
            for counters in (slot.find(self.model_name, self.model_version),)
            if counters is not None
        ]
        if not peers:
            return self
        return _summed(self, peers)


_LAST_INFERENCE = 2 * len(_DURATIONS) + 2  # the scalar that is a time, not a count


def _summed(own: SharedStatistics, peers: Sequence[EntryCounters]) -> ModelStatistics:
    total = ModelStatistics(
        summaries=own.summaries,
        histograms=own.histograms,
        first_response=own.first_response,
        memory_usage=own.memory_usage,
        response_stats=own.response_stats,
    )
    scalars = list(own.scalars())
    for peer in peers:
        scalars = [a + b for a, b in zip(scalars, peer.scalars, strict=True)]
    # The latest inference of any worker.
    scalars[_LAST_INFERENCE] = max(
        [own.last_inference_ms, *(p.scalars[_LAST_INFERENCE] for p in peers)]
    )
    batches = [(size, *_batch_values(b)) for size, b in own.batch_stats.items()]
    _fill(total, EntryCounters(tuple(scalars), ()))
    for counters in (EntryCounters((), tuple(batches)), *peers):
        for size, *values in counters.batches:
            mine = total.batch_stats.setdefault(size, BatchDurations())
            for j, name in enumerate(_BATCH_DURATIONS):
                getattr(mine, name).add(values[2 * j + 1], values[2 * j])
    return total


def _batch_values(batch: BatchDurations) -> tuple[int, ...]:
    values: list[int] = []
    for name in _BATCH_DURATIONS:
        duration: Duration = getattr(batch, name)
        values += (duration.count, duration.ns)
    return tuple(values)


def _fill(stats: ModelStatistics, counters: EntryCounters) -> None:
    """Set ``stats``'s scalars from ``counters`` and add its batch entries."""
    values = counters.scalars
    for i, name in enumerate(_DURATIONS):
        setattr(stats, name, Duration(values[2 * i], values[2 * i + 1]))
    rest = values[2 * len(_DURATIONS) :]
    stats.inference_count, stats.execution_count, stats.last_inference_ms = rest[:3]
    stats.failures = {reason: rest[3 + i] for i, reason in enumerate(FailureReason)}
    for size, *batch in counters.batches:
        stats.batch_stats[size] = BatchDurations(
            *(Duration(batch[2 * j], batch[2 * j + 1]) for j in range(len(_BATCH_DURATIONS)))
        )


class SharedStatisticsFactory:
    """Makes each loaded model version's statistics: claims its entry in this worker's slot
    (a version loaded again gets a fresh, zeroed entry, as its counters restart)."""

    def __init__(self, board: WorkerBoard, worker: int) -> None:
        self._board = board
        self._worker = worker
        self._entries: dict[tuple[str, int], int] = {}

    def __call__(
        self,
        name: str,
        version: int,
        metrics: MetricsOptions | None,
        histogram_buckets: Mapping[str, Sequence[float]] | None,
    ) -> ModelStatistics:
        stats = SharedStatistics.create(metrics, histogram_buckets)
        assert isinstance(stats, SharedStatistics)
        slot = self._board.slot(self._worker)
        # Loaded again in this process: fresh counters. Loaded first in this process:
        # continue those of the worker that had this slot before, if any.
        previous = self._entries.pop((name, version), None)
        if previous is not None:
            slot.release_entry(previous)
        entry, counters = slot.claim_entry(name, version, inherit=previous is None)
        stats.entry = self._entries[(name, version)] = entry
        stats.board, stats.worker = self._board, self._worker
        stats.model_name, stats.model_version = name, version
        _seed(stats, counters)
        return stats


def _seed(stats: SharedStatistics, counters: EntryCounters) -> None:
    """Start ``stats`` from a predecessor's counters (zeros for a fresh entry)."""
    _fill(stats, counters)
    for position, (size, *_) in enumerate(counters.batches):
        stats.batch_positions[size] = position
