"""Cancellation on the ground request type and in the schedulers' contract: a cancelled
request that still waits is removed (never handed to an instance); one already taken is
left to its backend, which sees ``cancelled``."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable

import pytest

from pytriton_core.config.spec import QueuePolicy
from pytriton_core.errors import ServerError
from pytriton_core.inference.request import InferenceRequest
from pytriton_core.scheduling.base import Scheduler
from pytriton_core.scheduling.default import DefaultScheduler
from pytriton_core.scheduling.dynamic import BatchingSettings, DynamicBatchScheduler


def test_cancel_sets_the_flag_and_runs_each_hook_once_in_order() -> None:
    request = InferenceRequest("m")
    calls: list[str] = []
    request.on_cancel(lambda: calls.append("first"))
    request.on_cancel(lambda: calls.append("second"))
    assert not request.cancelled
    request.cancel()
    request.cancel()
    assert request.cancelled
    assert calls == ["first", "second"]
    request.on_cancel(lambda: calls.append("late"))  # already cancelled: runs at once
    assert calls == ["first", "second", "late"]


def test_the_flag_is_read_only() -> None:
    request = InferenceRequest("m")
    with pytest.raises(AttributeError):
        request.cancelled = True  # type: ignore[misc]


def test_hooks_are_dropped_once_the_final_response_is_delivered() -> None:
    request = InferenceRequest("m")
    calls: list[str] = []
    request.on_cancel(lambda: calls.append("hook"))
    request.deliver(None, True)
    request.cancel()
    assert request.cancelled
    assert calls == []


def test_cancel_threadsafe_flags_at_once_and_runs_hooks_on_the_loop() -> None:
    loop = asyncio.new_event_loop()
    try:
        request = InferenceRequest("m", loop=loop)
        ran_on: list[threading.Thread] = []
        request.on_cancel(lambda: ran_on.append(threading.current_thread()))
        worker = threading.Thread(target=request.cancel_threadsafe)
        worker.start()
        worker.join()
        assert request.cancelled
        assert ran_on == []
        loop.run_until_complete(asyncio.sleep(0))
        assert ran_on == [threading.current_thread()]
    finally:
        loop.close()


def test_cancel_threadsafe_before_submit_only_flags() -> None:
    request = InferenceRequest("m")
    request.cancel_threadsafe()
    assert request.cancelled


def _dynamic(max_batch_size: int = 4, delay_us: int = 0) -> DynamicBatchScheduler:
    settings = BatchingSettings(
        max_batch_size=max_batch_size,
        preferred_batch_sizes=frozenset(),
        max_queue_delay_ns=delay_us * 1000,
        preserve_ordering=False,
        priority_levels=0,
        default_priority_level=1,
        policies={1: QueuePolicy()},
        shape_checked_inputs=frozenset(),
    )
    rejected: list[tuple[InferenceRequest, ServerError]] = []
    return DynamicBatchScheduler(settings, lambda r, e: rejected.append((r, e)))


SCHEDULERS: dict[str, Callable[[], Scheduler]] = {
    "default": DefaultScheduler,
    "dynamic": _dynamic,
}


@pytest.mark.parametrize("make", SCHEDULERS.values(), ids=SCHEDULERS.keys())
def test_a_cancelled_queued_request_is_removed_and_never_taken(
    make: Callable[[], Scheduler],
) -> None:
    scheduler = make()
    first, second, third = (InferenceRequest("m", id=name) for name in ("a", "b", "c"))
    for request in (first, second, third):
        scheduler.enqueue(request)
    assert scheduler.pending_count() == 3
    assert scheduler.cancel(second) is True
    assert scheduler.cancel(second) is False  # gone already
    assert scheduler.pending_count() == 2
    taken: list[str] = []
    while len(taken) < 2:
        batch = scheduler.next_batch()
        assert batch is not None
        taken.extend(r.id for r in batch)
    assert taken == ["a", "c"]
    assert scheduler.pending_count() == 0
    scheduler.stop(1)


def test_requests_held_for_the_loop_come_out_in_order_without_the_cancelled() -> None:
    scheduler = DefaultScheduler()
    first, second, third = (InferenceRequest("m", id=name) for name in ("a", "b", "c"))
    for request in (first, second, third):
        scheduler.hold(request)
    assert scheduler.pending_count() == 3
    assert scheduler.cancel(second) is True
    assert scheduler.take_held() is first
    assert scheduler.cancel(first) is False  # taken: its execution's hooks cancel it now
    assert scheduler.take_held() is third
    assert scheduler.take_held() is None
    assert scheduler.pending_count() == 0
    scheduler.stop_accepting()
    with pytest.raises(ServerError):
        scheduler.hold(InferenceRequest("m"))


@pytest.mark.parametrize("make", SCHEDULERS.values(), ids=SCHEDULERS.keys())
def test_a_request_already_taken_is_not_cancelled_by_the_scheduler(
    make: Callable[[], Scheduler],
) -> None:
    scheduler = make()
    request = InferenceRequest("m")
    scheduler.enqueue(request)
    assert scheduler.next_batch() == [request]
    assert scheduler.cancel(request) is False
    scheduler.stop(1)


def test_cancel_wakes_an_instance_waiting_for_a_batch_to_fill() -> None:
    # With a long queue delay an idle instance waits for more requests; once the only one
    # is cancelled it has nothing, and the next request forms a batch on its own.
    scheduler = _dynamic(max_batch_size=2, delay_us=200_000)
    lone = InferenceRequest("m", id="lone", queue_start_ns=time.monotonic_ns())
    scheduler.enqueue(lone)
    batches: list[list[str]] = []
    worker = threading.Thread(
        target=lambda: batches.append([r.id for r in scheduler.next_batch() or []])
    )
    worker.start()
    assert scheduler.cancel(lone) is True
    scheduler.enqueue(InferenceRequest("m", id="next", queue_start_ns=time.monotonic_ns()))
    worker.join(5)
    assert batches == [["next"]]
    scheduler.stop(1)
