"""Statistics that every worker of ``--workers N`` can read: a worker's counters, written
through to its slot of the board at each update, and read back summed over the workers.

The worker's own counters stay the in-process ``ModelStatistics`` (what the scheduler and
the instances update); each ``record_*`` then copies the scalars (and the executed batch
size's entry) into the slot, which costs a ``struct.pack_into`` per executed batch and per
completed request. ``snapshot()`` is what the statistics extension and the Prometheus
page read: this worker's counters plus every other live worker's from the board.

The latency summaries (``summary_latencies``) do not fit the board: their windows live in
the summaries file beside it (``summary_board.py``), one block per board entry, and a
snapshot's summaries rank every worker's windows together.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Mapping, Sequence
from typing import Any

from pytriton_core.inference.statistics import (
    BatchDurations,
    ComputeTiming,
    Duration,
    FailureReason,
    Histogram,
    LatencyHistograms,
    LatencySummaries,
    ModelStatistics,
    ResponseDurations,
    ResponseKind,
    ResponseTiming,
)
from pytriton_core.options import MetricsOptions
from pytriton_core.workers.board import (
    BATCH_SIZES,
    HISTOGRAM_BUCKETS,
    NAME_BYTES,
    RESPONSE_INDEXES,
    EntryCounters,
    HistogramCounts,
    WorkerBoard,
    WorkerState,
)
from pytriton_core.workers.summary_board import (
    FAMILY_NAMES,
    SUMMARIES_FILE,
    SummaryBoard,
    WorkersSummary,
    summary_tag,
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
_RESPONSE_DURATIONS = (
    "compute_infer",
    "compute_output",
    "success",
    "fail",
    "empty_response",
    "cancel",
)
# The board's histograms 0-4 (``LatencyHistograms``' fields); 5 is the first response's.
_LATENCY = ("request", "queue", "compute_input", "compute_infer", "compute_output")
_FIRST_RESPONSE = len(_LATENCY)
_ALL_LATENCY = tuple(range(len(_LATENCY)))


class SharedStatistics(ModelStatistics):
    """A worker's ``ModelStatistics`` that publishes itself to its board slot."""

    def __init__(self, **counters: Any) -> None:
        """``counters``: ``ModelStatistics``'s; the board's place is set once claimed."""
        super().__init__(**counters)
        self.board: WorkerBoard | None = None
        self.worker = 0
        self.entry = -1
        # The board's key: the model's name, with its namespace if any.
        self.model_name = ""
        self.model_version = 0
        self.load_stamp = 0  # the load these counters count from (see ``board``)
        # batch size -> its position in the entry's batch table; response index -> its
        # position in the response table
        self.batch_positions: dict[int, int] = {}
        self.response_positions: dict[int, int] = {}
        self.overflow: set[str] = set()  # what did not fit those tables
        # With summary_latencies: the file of every worker's summary windows
        # (``summaries`` are then this worker's rings in it), and what this version's
        # blocks there are named.
        self.summary_board: SummaryBoard | None = None
        self.summary_tag: tuple[bytes, int, int] = (b"", 0, 0)

    def scalars(self) -> tuple[int, ...]:
        values = list(_duration_values(self, _DURATIONS))
        values += (self.inference_count, self.execution_count, self.last_inference_ms)
        values += (self.failures[reason] for reason in FailureReason)
        return tuple(values)

    def _publish(
        self,
        batch_size: int | None = None,
        response: int | None = None,
        histograms: Sequence[int] = (),
    ) -> None:
        if self.board is None:
            return
        slot = self.board.slot(self.worker)
        base = slot.begin_write(self.entry)
        try:
            slot.write_scalars(base, self.scalars())
            if batch_size is not None:
                position = _position(
                    self.batch_positions, self.overflow, batch_size, BATCH_SIZES, "batch size"
                )
                if position is not None:
                    values = (batch_size, *_batch_values(self.batch_stats[batch_size]))
                    slot.write_batch(base, position, values)
            if response is not None:
                position = _position(
                    self.response_positions,
                    self.overflow,
                    response,
                    RESPONSE_INDEXES,
                    "response index",
                )
                if position is not None:
                    values = (response, *_response_values(self.response_stats[response]))
                    slot.write_response(base, position, values)
            for which in histograms:
                histogram = self.histogram(which)
                if histogram is not None and len(histogram.counts) <= HISTOGRAM_BUCKETS + 1:
                    slot.write_histogram(base, which, _histogram_counts(histogram))
        finally:
            slot.end_write(base)

    def histogram(self, which: int) -> Histogram | None:
        """The board's histogram ``which``: a latency one (0-4) or the first response's."""
        if which == _FIRST_RESPONSE:
            return self.first_response
        histograms = self.histograms
        return None if histograms is None else getattr(histograms, _LATENCY[which])

    def record_execution(
        self, batch_size: int, timing: ComputeTiming, inferences: int | None = None
    ) -> None:
        ModelStatistics.record_execution(self, batch_size, timing, inferences)
        self._publish(batch_size)

    def record_request_success(
        self, arrival_ns: int, queue_start_ns: int, timing: ComputeTiming, end_ns: int
    ) -> None:
        ModelStatistics.record_request_success(self, arrival_ns, queue_start_ns, timing, end_ns)
        self._publish(histograms=_ALL_LATENCY if self.histograms is not None else ())

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
        self._publish(histograms=(0, 1) if self.histograms is not None else ())

    def record_cache_miss(self, miss_ns: int) -> None:
        ModelStatistics.record_cache_miss(self, miss_ns)
        self._publish()

    def record_response(self, index: int, kind: ResponseKind, timing: ResponseTiming) -> None:
        ModelStatistics.record_response(self, index, kind, timing)
        self._publish(response=index)

    def record_first_response(self, arrival_ns: int, now_ns: int) -> None:
        ModelStatistics.record_first_response(self, arrival_ns, now_ns)
        if self.first_response is not None:
            self._publish(histograms=(_FIRST_RESPONSE,))

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
            (index, *found)
            for index, slot in enumerate(self.board.slots())
            if index != self.worker  # a dead worker's completed requests still count
            for found in (slot.find(*key),)
            if found is not None
        ]
        if not peers:
            return self
        total = _summed(self, [counters for _, _, counters in peers])
        if self.summary_board is not None and self.summaries is not None:
            total.summaries = self._summed_summaries([(w, e) for w, e, _ in peers])
        return total

    def _summed_summaries(self, peers: Sequence[tuple[int, int]]) -> LatencySummaries:
        """The summaries over every worker: this worker's rings with the peers' (by worker
        and board entry) whose block is of this load; a peer's block read at a scrape."""
        assert self.summary_board is not None and self.summaries is not None
        blocks = [self.summary_board.block(worker, entry) for worker, entry in peers]
        rings = [block.rings() for block in blocks if block.tag() == self.summary_tag]
        own = self.summaries
        return LatencySummaries(
            *(
                WorkersSummary(getattr(own, name), [peer[i] for peer in rings])
                for i, name in enumerate(FAMILY_NAMES)
            )
        )


_LAST_INFERENCE = 2 * len(_DURATIONS) + 2  # the scalar that is a time, not a count


def _summed(own: SharedStatistics, peers: Sequence[EntryCounters]) -> ModelStatistics:
    total = ModelStatistics(summaries=own.summaries, memory_usage=own.memory_usage)
    scalars = list(own.scalars())
    for peer in peers:
        scalars = [a + b for a, b in zip(scalars, peer.scalars, strict=True)]
    # The latest inference of any worker.
    scalars[_LAST_INFERENCE] = max(
        [own.last_inference_ms, *(p.scalars[_LAST_INFERENCE] for p in peers)]
    )
    _fill(total, EntryCounters(tuple(scalars), ()))
    for counters in (_own_counters(own), *peers):
        for size, *values in counters.batches:
            mine = total.batch_stats.setdefault(size, BatchDurations())
            for j, name in enumerate(_BATCH_DURATIONS):
                getattr(mine, name).add(values[2 * j + 1], values[2 * j])
        for index, *values in counters.responses:
            durations = total.response_stats.setdefault(index, ResponseDurations())
            for j, name in enumerate(_RESPONSE_DURATIONS):
                getattr(durations, name).add(values[2 * j + 1], values[2 * j])
    # Histograms: each worker's bucket counts, added (the bounds are the model's, the same
    # in every worker).
    summed = [_summed_histogram(own, which, peers) for which in range(len(_LATENCY) + 1)]
    request, queue, compute_input, compute_infer, compute_output, first = summed
    if request and queue and compute_input and compute_infer and compute_output:
        total.histograms = LatencyHistograms(
            request, queue, compute_input, compute_infer, compute_output
        )
    total.first_response = first
    return total


def _own_counters(own: SharedStatistics) -> EntryCounters:
    batches = tuple((size, *_batch_values(b)) for size, b in own.batch_stats.items())
    responses = tuple((i, *_response_values(r)) for i, r in own.response_stats.items())
    return EntryCounters((), batches, responses)


def _summed_histogram(
    own: SharedStatistics, which: int, peers: Sequence[EntryCounters]
) -> Histogram | None:
    mine = own.histogram(which)
    if mine is None:
        return None
    total = Histogram(mine.bounds)
    _add_histogram(total, _histogram_counts(mine))
    for peer in peers:
        counts = peer.histograms[which] if len(peer.histograms) > which else None
        if counts is not None and counts[0] == len(total.counts):
            _add_histogram(total, counts)
    return total


def _add_histogram(histogram: Histogram, counts: HistogramCounts) -> None:
    _, observations, total, buckets = counts
    histogram.count += observations
    histogram.sum += total
    histogram.counts = [a + b for a, b in zip(histogram.counts, buckets, strict=True)]


def _histogram_counts(histogram: Histogram) -> HistogramCounts:
    return (len(histogram.counts), histogram.count, histogram.sum, tuple(histogram.counts))


def _response_values(durations: ResponseDurations) -> tuple[int, ...]:
    return _duration_values(durations, _RESPONSE_DURATIONS)


def _duration_values(record: object, names: Sequence[str]) -> tuple[int, ...]:
    """(count, ns) of each of ``record``'s durations ``names``, in that order."""
    values: list[int] = []
    for name in names:
        duration: Duration = getattr(record, name)
        values += (duration.count, duration.ns)
    return tuple(values)


def _position(
    positions: dict[int, int], overflow: set[str], key: int, capacity: int, what: str
) -> int | None:
    """``key``'s place in one of an entry's tables, taken at its first use; None once the
    table is full (that key's counters then stay with this worker, said once a key)."""
    position = positions.get(key)
    if position is None:
        position = len(positions)
        if position >= capacity:
            if f"{what} {key}" not in overflow:
                overflow.add(f"{what} {key}")
                log.warning(
                    "%s %d: only the first %d are summed over workers; the others stay "
                    "with their worker",
                    what,
                    key,
                    capacity,
                )
            return None
        positions[key] = position
    return position


def _batch_values(batch: BatchDurations) -> tuple[int, ...]:
    return _duration_values(batch, _BATCH_DURATIONS)


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
        self._summary_board: SummaryBoard | None = None  # mapped at the first summaries
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
        inherit = claim not in self._claimed
        entry, counters, inherited = slot.claim_entry(key, version, stamp, inherit=inherit)
        self._claimed.add(claim)
        stats.entry = entry
        stats.board, stats.worker = self._board, self._worker
        stats.model_name, stats.model_version, stats.load_stamp = key, version, stamp
        for which in range(len(_LATENCY) + 1):
            histogram = stats.histogram(which)
            if histogram is not None and len(histogram.bounds) > HISTOGRAM_BUCKETS:
                log.warning(
                    "model '%s': a histogram of %d buckets is not summed over workers (at "
                    "most %d): each worker shows its own",
                    name,
                    len(histogram.bounds),
                    HISTOGRAM_BUCKETS,
                )
        _seed(stats, counters)
        if stats.summaries is not None:
            try:
                self._share_summaries(stats, entry, inherited)
            except Exception:
                stats.release()  # the load fails: its board entry is not left claimed
                raise
        return stats

    def _share_summaries(self, stats: SharedStatistics, entry: int, inherited: bool) -> None:
        """Make ``stats``'s summaries its rings in the summaries file: a predecessor's
        windows where its counters were inherited, empty ones otherwise."""
        if self._summary_board is None:
            self._summary_board = SummaryBoard.open(self._board.path.with_name(SUMMARIES_FILE))
        tag = summary_tag(stats.model_name, stats.model_version, stats.load_stamp)
        block = self._summary_board.claim(self._worker, entry, tag, inherit=inherited)
        stats.summaries = block.summaries()
        stats.summary_board, stats.summary_tag = self._summary_board, tag


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
    for position, (index, *values) in enumerate(counters.responses):
        stats.response_positions[index] = position
        durations = stats.response_stats[index] = ResponseDurations()
        for j, name in enumerate(_RESPONSE_DURATIONS):
            getattr(durations, name).add(values[2 * j + 1], values[2 * j])
    for which, kept in enumerate(counters.histograms):
        histogram = stats.histogram(which)
        if kept is not None and histogram is not None and kept[0] == len(histogram.counts):
            _add_histogram(histogram, kept)
