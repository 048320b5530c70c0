"""Statistics that every worker of ``--workers N`` can read: a worker's counters, written
through to its slot of the board at each update, and read back summed over the workers.

The worker's own counters stay the in-process ``ModelStatistics`` (what the scheduler and
the instances update); each ``record_*`` then copies the scalars (and the executed batch
size's entry) into the slot, which costs a ``struct.pack_into`` per executed batch and per
completed request. ``snapshot()`` is what the statistics extension and the Prometheus
page read: this worker's counters plus every other live worker's from the board.
"""

from __future__ import annotations

import hashlib
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
from pytriton_core.workers.board import (
    BATCH_SIZES,
    NAME_BYTES,
    EntryCounters,
    WorkerBoard,
    WorkerState,
)

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
    model_name: str = ""  # the board's key: the model's name, with its namespace if any
    model_version: int = 0
    load_stamp: int = 0  # the load these counters count from (see ``board``)
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

    def release(self) -> None:
        """This version was unloaded: its entry is freed (the board keeps no counters of
        a load that is gone). A draining worker keeps them, as a dead one does: the
        server stops, or this worker alone does and the one started in its place goes on
        counting them."""
        if self.board is None or self.entry < 0:
            return
        slot = self.board.slot(self.worker)
        if slot.state() is not WorkerState.DRAINING:
            slot.release_entry(self.entry)
        self.entry = -1
        self.board = None

    def snapshot(self) -> ModelStatistics:
        """These counters plus every other worker's (live or dead) for the same load of
        the same model version."""
        if self.board is None:
            return self
        key = (self.model_name, self.model_version, self.load_stamp)
        peers = [
            counters
            for index, slot in enumerate(self.board.slots())
            if index != self.worker  # a dead worker's completed requests still count
            for counters in (slot.find(*key),)
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
    """Makes each loaded model version's statistics: claims its entry in this worker's slot.

    ``stamp`` is the load the versions made now count from: the number the parent gave
    the load change being applied (0 for the models loaded at start); ``stamps`` (by
    model name) overrides it while a worker started in a dead one's place loads what the
    others serve, each model with the stamp it has there. The first version of a load
    made in this process continues the counters a predecessor in this slot left for the
    same load; a version loaded again in this process starts from zeros."""

    def __init__(self, board: WorkerBoard, worker: int) -> None:
        self._board = board
        self._worker = worker
        self._claimed: set[tuple[str, int, int]] = set()
        self.stamp = 0
        self.stamps: dict[str, int] = {}

    def __call__(
        self,
        name: str,
        version: int,
        metrics: MetricsOptions | None,
        histogram_buckets: Mapping[str, Sequence[float]] | None,
    ) -> ModelStatistics:
        stats = SharedStatistics.create(metrics, histogram_buckets)
        assert isinstance(stats, SharedStatistics)
        key = board_key(name)
        stamp = self.stamps.get(name.rpartition("::")[2], self.stamp)
        slot = self._board.slot(self._worker)
        claim = (key, version, stamp)
        entry, counters = slot.claim_entry(key, version, stamp, inherit=claim not in self._claimed)
        self._claimed.add(claim)
        stats.entry = entry
        stats.board, stats.worker = self._board, self._worker
        stats.model_name, stats.model_version, stats.load_stamp = key, version, stamp
        _seed(stats, counters)
        return stats


def board_key(identifier: str) -> str:
    """A model's key on the board: its identifier (``namespace::name`` with
    ``--model-namespacing``, so that one name in two repositories is two keys), with a
    namespace too long for the entry replaced by its digest."""
    if len(identifier.encode()) <= NAME_BYTES:
        return identifier
    namespace, _, name = identifier.rpartition("::")
    digest = hashlib.sha256(namespace.encode()).hexdigest()[:32]
    key = f"{digest}::{name}"
    if len(key.encode()) > NAME_BYTES:
        raise ValueError(f"model name longer than {NAME_BYTES - 34} bytes: '{name}'")
    return key


def _seed(stats: SharedStatistics, counters: EntryCounters) -> None:
    """Start ``stats`` from a predecessor's counters (zeros for a fresh entry)."""
    _fill(stats, counters)
    for position, (size, *_) in enumerate(counters.batches):
        stats.batch_positions[size] = position
