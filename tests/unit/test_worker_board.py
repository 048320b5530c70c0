"""The workers' board: counters one worker writes are read, summed, by another; a worker
started in a dead one's place continues its counters."""

from __future__ import annotations

from pathlib import Path

from pytriton_core.inference.statistics import (
    ComputeTiming,
    FailureReason,
    ModelStatistics,
    ResponseKind,
    ResponseTiming,
)
from pytriton_core.options import MetricsOptions
from pytriton_core.workers.board import WorkerBoard, WorkerState
from pytriton_core.workers.seat import WorkerSeat
from pytriton_core.workers.shared_stats import SharedStatisticsFactory


def _record(stats: ModelStatistics, batch_size: int) -> None:
    timing = ComputeTiming(start_ns=100, input_end_ns=110, infer_end_ns=150, end_ns=160)
    stats.record_execution(batch_size, timing)
    for _ in range(batch_size):
        stats.record_request_success(0, 90, timing, 170)


def test_each_worker_reports_the_sum(tmp_path: Path) -> None:
    board = WorkerBoard.create(tmp_path, 2)
    peer_board = WorkerBoard.open(board.path)  # as the other process maps it
    mine = SharedStatisticsFactory(board, 0)("m", 1, None, None)
    theirs = SharedStatisticsFactory(peer_board, 1)("m", 1, None, None)
    other_model = SharedStatisticsFactory(peer_board, 1)("other", 1, None, None)
    _record(mine, 2)
    _record(theirs, 3)
    _record(theirs, 2)
    _record(other_model, 4)
    theirs.record_request_failure(0, 5, FailureReason.BACKEND)
    total = mine.snapshot()
    assert total.success.count == 2 + 3 + 2
    assert total.success.ns == 7 * 170
    assert total.inference_count == 7 and total.execution_count == 3
    assert total.fail.count == 1 and total.failures[FailureReason.BACKEND] == 1
    assert {size: b.compute_infer.count for size, b in total.batch_stats.items()} == {2: 2, 3: 1}
    assert total.batch_stats[2].compute_infer.ns == 2 * 40
    assert theirs.snapshot().success.count == 7  # the same sum, read from the other side
    assert mine.success.count == 2  # a worker's own counters stay its own


def test_a_restarted_worker_continues_its_predecessors_counters(tmp_path: Path) -> None:
    board = WorkerBoard.create(tmp_path, 2)
    first = SharedStatisticsFactory(board, 1)("m", 1, None, None)
    _record(first, 3)
    board.slot(1).mark_down()  # the parent, after worker 1 died
    assert board.slot(1).state() is WorkerState.DOWN
    reader = SharedStatisticsFactory(board, 0)("m", 1, None, None)
    assert reader.snapshot().success.count == 3  # its completed requests still count
    factory = SharedStatisticsFactory(WorkerBoard.open(board.path), 1)
    second = factory("m", 1, None, None)
    assert second.success.count == 3 and second.batch_stats[3].compute_input.count == 1
    _record(second, 3)
    assert reader.snapshot().success.count == 6
    assert reader.snapshot().batch_stats[3].compute_input.count == 2
    # Loaded again within one process: a new version's counters start from zero, and the
    # old version's entry goes once it is unloaded.
    again = factory("m", 1, None, None)
    assert again.success.count == 0
    second.release()
    assert reader.snapshot().success.count == 0


def test_a_dead_workers_counts_of_an_earlier_load_are_not_added_to_a_later_one(
    tmp_path: Path,
) -> None:
    board = WorkerBoard.create(tmp_path, 2)
    dying = SharedStatisticsFactory(WorkerBoard.open(board.path), 1)("m", 1, None, None)
    _record(dying, 3)  # loaded at start (load stamp 0)
    board.slot(1).mark_down()
    # While worker 1 is down, the model is unloaded and loaded again (the parent's change
    # number 7): worker 0's new counters count from that load only.
    factory = SharedStatisticsFactory(board, 0)
    old = factory("m", 1, None, None)
    assert old.snapshot().success.count == 3
    old.release()
    factory.stamp = 7
    reloaded = factory("m", 1, None, None)
    _record(reloaded, 1)
    assert reloaded.snapshot().success.count == 1
    # The worker started in worker 1's place loads it as the others have it (stamp 7): it
    # does not continue the counters of the earlier load.
    successor = SharedStatisticsFactory(WorkerBoard.open(board.path), 1)
    successor.stamps = {"m": 7}
    restarted = successor("m", 1, None, None)
    assert restarted.success.count == 0
    _record(restarted, 2)
    assert reloaded.snapshot().success.count == 3


def test_one_name_in_two_namespaces_is_two_keys(tmp_path: Path) -> None:
    board = WorkerBoard.create(tmp_path, 2)
    first = SharedStatisticsFactory(board, 0)("/repo/a::m", 1, None, None)
    second = SharedStatisticsFactory(board, 0)("/repo/b::m", 1, None, None)
    peer = SharedStatisticsFactory(WorkerBoard.open(board.path), 1)("/repo/a::m", 1, None, None)
    _record(first, 2)
    _record(second, 3)
    _record(peer, 1)
    assert first.snapshot().success.count == 3
    assert second.snapshot().success.count == 3
    long_namespace = "/" + "x" * 400
    keyed = SharedStatisticsFactory(board, 0)(f"{long_namespace}::m", 1, None, None)
    assert keyed.model_name.endswith("::m") and len(keyed.model_name) < 80


def test_all_serving_needs_every_worker(tmp_path: Path) -> None:
    board = WorkerBoard.create(tmp_path, 2)
    board.slot(0).set_state(WorkerState.SERVING, 11)
    assert not board.all_serving()
    board.slot(1).set_state(WorkerState.SERVING, 12)
    assert board.all_serving() and board.slot(1).pid() == 12
    board.slot(1).set_state(WorkerState.DRAINING)
    assert not board.all_serving()


def test_response_stats_and_histograms_are_summed(tmp_path: Path) -> None:
    board = WorkerBoard.create(tmp_path, 2)
    metrics = MetricsOptions(histogram_latencies=True)
    mine = SharedStatisticsFactory(board, 0)("m", 1, metrics, None)
    theirs = SharedStatisticsFactory(WorkerBoard.open(board.path), 1)("m", 1, metrics, None)
    timing = ResponseTiming(start_ns=0, output_start_ns=700, end_ns=1000)
    for stats, requests in ((mine, 2), (theirs, 3)):
        for _ in range(requests):
            stats.record_first_response(0, 3_000_000)  # 3 ms
            stats.record_response(0, ResponseKind.SUCCESS, timing)
            stats.record_response(1, ResponseKind.SUCCESS, timing)
        _record(stats, 1)
    theirs.record_response(2, ResponseKind.EMPTY, timing)
    for total in (mine.snapshot(), theirs.snapshot()):
        assert {i: r.success.count for i, r in total.response_stats.items()} == {0: 5, 1: 5, 2: 0}
        assert total.response_stats[2].empty_response.count == 1
        assert total.response_stats[0].compute_output.ns == 5 * 300
        assert total.first_response is not None and total.first_response.count == 5
        assert total.first_response.sum == 5 * 3.0
        assert total.histograms is not None and total.histograms.request.count == 2
        assert sum(total.histograms.queue.counts) == 2
    assert mine.first_response is not None and mine.first_response.count == 2  # its own
    # A worker started in worker 1's place continues its counters, these too.
    board.slot(1).mark_down()
    successor = SharedStatisticsFactory(WorkerBoard.open(board.path), 1)("m", 1, metrics, None)
    assert successor.response_stats[1].success.count == 3
    assert successor.first_response is not None and successor.first_response.count == 3


def test_the_pinned_pools_of_live_workers_are_added(tmp_path: Path) -> None:
    board = WorkerBoard.create(tmp_path, 3)
    seats = [WorkerSeat(WorkerBoard.open(board.path), i) for i in range(3)]
    for index, seat in enumerate(seats):
        seat.set_state(WorkerState.SERVING)
        in_use = 100 * (index + 1)
        seat.summed_pinned_pool(
            lambda used=in_use: {"pinned_limit_bytes": 1000, "pinned_in_use_bytes": used}
        )()
    reading = seats[0].summed_pinned_pool(
        lambda: {"pinned_limit_bytes": 1000, "pinned_in_use_bytes": 50}
    )()
    assert reading == {"pinned_limit_bytes": 3000, "pinned_in_use_bytes": 50 + 200 + 300}
    board.slot(2).mark_down()  # a dead worker's pool is gone with it
    assert board.pinned_totals() == (2000, 250)
