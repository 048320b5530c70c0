"""The latency summaries of ``--workers N``: each worker's windows in the summaries file,
read by every worker: counts and sums added, quantiles over the union of the windows."""

from __future__ import annotations

import math
import time
from pathlib import Path

import numpy as np
import pytest

from pytriton_core.inference.statistics import (
    SUMMARY_CAPACITY,
    SUMMARY_MAX_AGE_NS,
    ComputeTiming,
    ModelStatistics,
    SlidingSummary,
    nearest_ranks,
)
from pytriton_core.options import MetricsOptions
from pytriton_core.workers.board import WorkerBoard
from pytriton_core.workers.shared_stats import SharedStatisticsFactory
from pytriton_core.workers.summary_board import (
    SummaryBoard,
    SummaryRing,
    summary_tag,
    untouched,
)

QUANTILES = (0.0, 0.5, 0.9, 0.99, 1.0)
SUMMARIES = MetricsOptions(summary_latencies=True)


def _boards(tmp_path: Path, workers: int) -> tuple[WorkerBoard, SummaryBoard]:
    return WorkerBoard.create(tmp_path, workers), SummaryBoard.create(tmp_path, workers)


def _succeed(stats: ModelStatistics, request_us: int, now_ns: int) -> None:
    """One request of ``request_us`` (queue 1 µs, compute 2 + 3 + 4 µs) ending at ``now_ns``."""
    start = now_ns - request_us * 1000
    timing = ComputeTiming(start + 1000, start + 3000, start + 6000, start + 10_000)
    stats.record_execution(1, timing)
    stats.record_request_success(start, start, timing, now_ns)


def _expected(values: list[float]) -> list[float]:
    ordered = sorted(values)
    return [ordered[i] for i in nearest_ranks(len(ordered), QUANTILES)]


def test_quantiles_are_over_the_union_of_every_workers_window(tmp_path: Path) -> None:
    board, _ = _boards(tmp_path, 3)
    now = time.monotonic_ns()
    workers = [
        SharedStatisticsFactory(WorkerBoard.open(board.path), i)("m", 1, SUMMARIES, None)
        for i in range(3)
    ]
    observed: list[float] = []
    rng = np.random.default_rng(7)
    for i, stats in enumerate(workers):
        # Each worker its own range: the union's quantiles are none of theirs.
        for value in rng.integers(100 * (i + 1), 100 * (i + 1) + 500, size=40 + 30 * i):
            _succeed(stats, int(value), now)
            observed.append(int(value))
    for reader in workers:
        summaries = reader.snapshot().summaries
        assert summaries is not None
        assert summaries.request.count == len(observed)
        assert summaries.request.sum == sum(observed)
        assert summaries.request.quantiles(QUANTILES, now) == _expected(observed)
        # The other families: the same requests, each family's own durations.
        assert summaries.compute_infer.count == len(observed)
        assert summaries.compute_infer.sum == 3 * len(observed)
        assert summaries.queue.quantiles(QUANTILES, now) == [1.0] * len(QUANTILES)
    # A worker's own rings stay its own.
    own = workers[0].summaries
    assert own is not None and own.request.count == 40


def test_the_union_matches_one_process_summary(tmp_path: Path) -> None:
    """What two workers report equals what one process observing it all reports."""
    board, _ = _boards(tmp_path, 2)
    now = time.monotonic_ns()
    pair = [SharedStatisticsFactory(board, i)("m", 1, SUMMARIES, None) for i in range(2)]
    alone = SlidingSummary()
    for n in range(500):
        value = (n * 7919) % 1000
        pair[n % 2].summaries.request.observe(value, now - (500 - n))  # type: ignore[union-attr]
        alone.observe(value, now - (500 - n))
    summaries = pair[1].snapshot().summaries
    assert summaries is not None
    assert summaries.request.quantiles(QUANTILES, now) == alone.quantiles(QUANTILES, now)
    assert (summaries.request.count, summaries.request.sum) == (alone.count, alone.sum)


def test_old_observations_leave_the_window_but_stay_counted(tmp_path: Path) -> None:
    board, _ = _boards(tmp_path, 2)
    now = time.monotonic_ns()
    mine, theirs = (SharedStatisticsFactory(board, i)("m", 1, SUMMARIES, None) for i in range(2))
    _succeed(theirs, 5000, now - SUMMARY_MAX_AGE_NS - 1)  # out of the window by now
    _succeed(theirs, 20, now)
    _succeed(mine, 10, now)
    summaries = mine.snapshot().summaries
    assert summaries is not None
    assert summaries.request.count == 3 and summaries.request.sum == 5030
    assert summaries.request.quantiles((0.5, 1.0), now) == [10.0, 20.0]
    later = now + SUMMARY_MAX_AGE_NS + 1
    assert all(math.isnan(v) for v in summaries.request.quantiles((0.5,), later))


def test_a_full_ring_keeps_its_newest_observations(tmp_path: Path) -> None:
    _, summaries = _boards(tmp_path, 1)
    block = summaries.claim(0, 0, summary_tag("m", 1, 0), inherit=False)
    ring = block.summaries().request
    now = time.monotonic_ns()
    total = SUMMARY_CAPACITY + 100
    for value in range(total):
        ring.observe(value, now)
    assert isinstance(ring, SummaryRing)
    window = ring.window(now)
    assert len(window) == SUMMARY_CAPACITY and window.min() == 100
    assert ring.totals() == (total, float(sum(range(total))))


def test_a_restarted_worker_continues_its_predecessors_windows(tmp_path: Path) -> None:
    board, _ = _boards(tmp_path, 2)
    now = time.monotonic_ns()
    first = SharedStatisticsFactory(board, 1)("m", 1, SUMMARIES, None)
    _succeed(first, 30, now)
    board.slot(1).mark_down()  # the parent, after worker 1 died
    reader = SharedStatisticsFactory(board, 0)("m", 1, SUMMARIES, None)
    summaries = reader.snapshot().summaries
    assert summaries is not None and summaries.request.count == 1  # the dead one's counts
    second = SharedStatisticsFactory(WorkerBoard.open(board.path), 1)("m", 1, SUMMARIES, None)
    assert second.summaries is not None and second.summaries.request.count == 1
    _succeed(second, 50, now)
    summaries = reader.snapshot().summaries
    assert summaries is not None
    assert summaries.request.count == 2 and summaries.request.sum == 80
    assert summaries.request.quantiles((0.0, 1.0), now) == [30.0, 50.0]


def test_a_later_load_does_not_see_an_earlier_loads_windows(tmp_path: Path) -> None:
    board, _ = _boards(tmp_path, 2)
    now = time.monotonic_ns()
    old = SharedStatisticsFactory(board, 1)("m", 1, SUMMARIES, None)
    _succeed(old, 30, now)
    old.release()
    factory = SharedStatisticsFactory(board, 1)
    factory.stamp = 4  # the parent's number for the load change that loaded it again
    new = factory("m", 1, SUMMARIES, None)  # claims the same board entry, emptied
    reader_factory = SharedStatisticsFactory(board, 0)
    reader_factory.stamp = 4
    reader = reader_factory("m", 1, SUMMARIES, None)
    _succeed(new, 70, now)
    summaries = reader.snapshot().summaries
    assert summaries is not None
    assert summaries.request.count == 1 and summaries.request.quantiles((0.5,), now) == [70.0]


def test_a_ring_read_while_written_keeps_only_whole_records() -> None:
    """The counts read before and after the copy bound what a reader keeps."""
    capacity = SUMMARY_CAPACITY  # the ring has one record more
    assert untouched(10, 10) == (0, 10)  # nothing written meanwhile
    assert untouched(capacity, capacity) == (0, capacity)
    assert untouched(capacity + 5, capacity + 5) == (5, capacity + 5)  # the newest
    # One observation written meanwhile (into the spare record), the next begun over 0's.
    assert untouched(capacity, capacity + 1) == (1, capacity)
    assert untouched(capacity, capacity + 2) == (2, capacity)
    assert untouched(5 * capacity, 7 * capacity) == (5 * capacity, 5 * capacity)  # none whole
    assert untouched(10, 0) == (0, 0)  # emptied meanwhile


@pytest.mark.parametrize("workers", [1, 2])
def test_without_summaries_no_block_is_claimed(tmp_path: Path, workers: int) -> None:
    board = WorkerBoard.create(tmp_path, workers)  # no summaries file: none is needed
    stats = SharedStatisticsFactory(board, 0)("m", 1, MetricsOptions(), None)
    assert stats.summaries is None and stats.summary_board is None


def test_a_load_whose_summaries_cannot_be_shared_fails_and_frees_its_entry(
    tmp_path: Path,
) -> None:
    board = WorkerBoard.create(tmp_path, 2)  # no summaries file beside it
    with pytest.raises(FileNotFoundError):
        SharedStatisticsFactory(board, 0)("m", 1, SUMMARIES, None)
    assert board.slot(0).find("m", 1, 0) is None
