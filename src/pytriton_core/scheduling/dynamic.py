"""Triton's dynamic batcher: queued requests are merged into batches for idle instances.

Batches form from the head of the queue (highest priority level first, FIFO within a
level), up to ``max_batch_size``, never merging requests whose shape-checked inputs differ.
A batch leaves at once when it reaches a preferred size, is cut short by the size limit or
a shape change, or when ``max_queue_delay_microseconds`` has passed for its oldest request;
otherwise the instance waits for more requests. Instances call ``next_batch`` from their
worker threads, so all state is guarded by one condition variable.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass

from pytriton_core.config.spec import ModelSpec, QueuePolicy, TensorSpec
from pytriton_core.errors import ServerError, UnavailableError
from pytriton_core.inference.request import InferenceRequest
from pytriton_core.scheduling.base import Scheduler

RejectRequest = Callable[[InferenceRequest, ServerError], None]


def shape_checked_inputs(tensors: Iterable[TensorSpec]) -> frozenset[str]:
    """Inputs whose shapes must agree across a batch (Triton's enforce_equal_shape_tensors):
    shape tensors and inputs with a variable dim, unless they allow ragged batching."""
    return frozenset(
        tensor.name
        for tensor in tensors
        if (-1 in tensor.dims or tensor.is_shape_tensor) and not tensor.allow_ragged_batch
    )


@dataclass(frozen=True)
class BatchingSettings:
    max_batch_size: int
    preferred_batch_sizes: frozenset[int]
    max_queue_delay_ns: int
    preserve_ordering: bool
    priority_levels: int  # 0: a single level
    default_priority_level: int
    policies: Mapping[int, QueuePolicy]  # level -> policy
    shape_checked_inputs: frozenset[str]
    # Whether requests may differ in which inputs they carry (an optional input): with
    # neither this nor shape-checked inputs, every request fits every batch.
    has_optional_inputs: bool = True

    @classmethod
    def from_spec(cls, spec: ModelSpec) -> BatchingSettings:
        batching = spec.dynamic_batching
        if batching is None:
            raise ValueError(f"model '{spec.name}' has no dynamic_batching")
        levels = batching.priority_levels
        default_level = batching.default_priority_level or 1
        overrides = batching.priority_queue_policies
        policies = {
            level: overrides.get(level, batching.default_queue_policy)
            for level in range(1, max(levels, 1) + 1)
        }
        checked = shape_checked_inputs(spec.inputs.values())
        return cls(
            max_batch_size=max(1, spec.max_batch_size),
            preferred_batch_sizes=frozenset(batching.preferred_batch_sizes),
            max_queue_delay_ns=batching.max_queue_delay_us * 1000,
            preserve_ordering=batching.preserve_ordering,
            priority_levels=levels,
            default_priority_level=default_level if levels else 1,
            policies=policies,
            shape_checked_inputs=checked,
            has_optional_inputs=any(tensor.optional for tensor in spec.inputs.values()),
        )


class _Entry:
    """A queued request. A plain class with ``__slots__`` (not a dataclass): compiled, its
    ``__init__`` is a C function, and one is made per request."""

    __slots__ = ("deadline_ns", "key", "request", "since_ns")

    def __init__(
        self,
        request: InferenceRequest,
        deadline_ns: int,
        since_ns: int = 0,
        key: tuple[object, ...] | None = None,
    ) -> None:
        self.request = request
        self.deadline_ns = deadline_ns  # 0: no queue timeout
        # When it entered this batcher (Triton's batcher start): the delay counts from here.
        # The oldest-strategy sequence batcher hands a request on long after it was queued.
        self.since_ns = since_ns
        # What must agree across a batch (``_shape_key``), worked out once at enqueue; None
        # for every request where nothing must.
        self.key = key


@dataclass(slots=True)
class _Level:
    policy: QueuePolicy
    waiting: deque[_Entry]
    delayed: deque[_Entry]  # timed out under the DELAY action: behind everything else

    def __len__(self) -> int:
        return len(self.waiting) + len(self.delayed)


class DynamicBatchScheduler(Scheduler):
    hands_over_per_turn = True

    def __init__(self, settings: BatchingSettings, reject: RejectRequest) -> None:
        self._settings = settings
        self._reject = reject
        # Without a queue delay a lone request leaves as a batch of its own at once.
        self.dispatches_lone_at_once = settings.max_queue_delay_ns == 0
        self._checked = tuple(sorted(settings.shape_checked_inputs))
        self._keyed = bool(self._checked) or settings.has_optional_inputs
        self._levels = [
            _Level(settings.policies[level], deque(), deque())
            for level in sorted(settings.policies)
        ]
        self._count = 0
        self._stopping = False
        # The loop's own calls take the lock itself: entering a Condition is a Python-level
        # call, its lock's a C one.
        self._lock = lock = threading.Lock()
        self._cond = threading.Condition(lock)  # idle instances wait here
        self._deadline_cond = threading.Condition(lock)  # the timeout watcher waits here
        # Queue timeouts must fire while every instance is busy, so a thread of their own
        # watches the deadlines (only when some queue policy has a timeout).
        self._reaper: threading.Thread | None = None
        # Only a policy's default timeout gives requests deadlines (QueuePolicy.timeout_us).
        self._timeouts = any(policy.default_timeout_us for policy in settings.policies.values())
        self._largest_preferred = max(settings.preferred_batch_sizes, default=0)
        if self._timeouts:
            self._reaper = threading.Thread(
                target=self._reap_timeouts, name="queue-timeouts", daemon=True
            )
            self._reaper.start()

    def enqueue(self, request: InferenceRequest) -> None:
        self._enqueue(request, wake=True)

    def enqueue_for_turn(self, request: InferenceRequest) -> None:
        self._enqueue(request, wake=False)

    def wake(self) -> None:
        with self._lock:
            if self._count:
                self._cond.notify()

    def take_ready_batch(self) -> list[InferenceRequest]:
        with self._lock:
            if self._stopping:
                return []
            now = time.monotonic_ns()
            self._expire(now)
            batch, _ = self._form_batch(now)
            self._count -= len(batch)
            return batch

    def _enqueue(self, request: InferenceRequest, *, wake: bool) -> None:
        self.refuse_if_stopped()
        levels = len(self._levels)
        level = (
            request.priority
            if 1 <= request.priority <= levels
            else (self._settings.default_priority_level)
        )
        queue = self._levels[level - 1]
        policy = queue.policy
        deadline = 0
        if self._timeouts:
            timeout_us = policy.timeout_us(request.timeout_us)
            if timeout_us:
                deadline = request.queue_start_ns + timeout_us * 1000
        entry = _Entry(
            request,
            deadline,
            time.monotonic_ns(),
            self._shape_key(request) if self._keyed else None,
        )
        with self._lock:
            if policy.max_queue_size and len(queue) >= policy.max_queue_size:
                raise UnavailableError("Exceeds maximum queue size")
            queue.waiting.append(entry)
            self._count += 1
            if wake:
                self._cond.notify()
            if deadline:
                self._deadline_cond.notify()

    def next_batch(self, instance: int = 0) -> list[InferenceRequest] | None:
        with self._cond:
            while not self._stopping:
                now = time.monotonic_ns()
                self._expire(now)
                batch, wait_ns = self._form_batch(now)
                if batch:
                    self._count -= len(batch)
                    if self._count:
                        self._cond.notify()  # another idle instance may take the rest
                    return batch
                self._cond.wait(None if wait_ns is None else wait_ns / 1e9)
            return None

    def cancel(self, request: InferenceRequest) -> bool:
        with self._cond:
            for level in self._levels:
                for queue in (level.waiting, level.delayed):
                    for entry in queue:
                        if entry.request is request:
                            queue.remove(entry)
                            self._count -= 1
                            # The batch an idle instance waits to complete may have lost
                            # its head: let it look again.
                            self._cond.notify()
                            return True
        return False

    def stop(self, instance_count: int) -> None:
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
            self._deadline_cond.notify_all()
        if self._reaper is not None:
            self._reaper.join()

    def _reap_timeouts(self) -> None:
        with self._cond:
            while not self._stopping:
                now = time.monotonic_ns()
                self._expire(now)
                wait_ns = self._next_deadline_in(now)
                self._deadline_cond.wait(None if wait_ns is None else wait_ns / 1e9)

    def pending_count(self) -> int:
        return self._count

    # ------------------------------------------------------------ internals

    def _entries(self) -> Iterator[tuple[deque[_Entry], _Entry]]:
        for level in self._levels:
            for entry in level.waiting:
                yield level.waiting, entry
            for entry in level.delayed:
                yield level.delayed, entry

    def _expire(self, now: int) -> None:
        if not self._timeouts:
            return
        for level in self._levels:
            if not level.waiting or not any(
                e.deadline_ns and e.deadline_ns <= now for e in level.waiting
            ):
                continue
            kept: deque[_Entry] = deque()
            for entry in level.waiting:
                if not entry.deadline_ns or entry.deadline_ns > now:
                    kept.append(entry)
                elif level.policy.delay_on_timeout:
                    entry.deadline_ns = 0
                    level.delayed.append(entry)
                else:
                    self._count -= 1
                    self._reject(entry.request, UnavailableError("Request timeout expired"))
            level.waiting = kept

    def _shape_key(self, request: InferenceRequest) -> tuple[object, ...]:
        inputs = request.inputs
        dims = []
        for name in self._checked:
            tensor = inputs.get(name)
            dims.append(None if tensor is None else tensor.shape[1:])
        shapes = tuple(dims)
        if self._settings.has_optional_inputs:  # the same set of inputs, in any order
            return (frozenset(inputs), shapes)
        return shapes

    def _form_batch(self, now: int) -> tuple[list[InferenceRequest], int | None]:
        settings = self._settings
        chosen: list[tuple[deque[_Entry], _Entry]] = []
        size = 0
        preferred_len = 0
        cut_short = False
        past_preferred = False
        first_key: tuple[object, ...] | None = None
        largest_preferred = self._largest_preferred
        for queue, entry in self._entries():
            request = entry.request
            if size + request.batch_size > largest_preferred and chosen and not past_preferred:
                # Growing past the largest preferred size: what we have is the best candidate.
                past_preferred = True
                preferred_len = max(preferred_len, len(chosen))
            if size + request.batch_size > settings.max_batch_size:
                cut_short = True
                break
            if not chosen:
                first_key = entry.key
            elif entry.key != first_key:
                cut_short = True
                break
            chosen.append((queue, entry))
            size += request.batch_size
            if size in settings.preferred_batch_sizes:
                preferred_len = len(chosen)
            if size == settings.max_batch_size:
                cut_short = True
                break
        if not chosen:
            return [], self._next_deadline_in(now)
        waited = now - chosen[0][1].since_ns
        delay = settings.max_queue_delay_ns
        delay_over = delay != 0 and waited >= delay  # no delay: never "over", as in Triton
        if preferred_len and not delay_over:
            take = chosen[:preferred_len]
        elif cut_short or delay_over or delay == 0:
            take = chosen
        else:
            wait = delay - waited
            deadline = self._next_deadline_in(now)
            return [], wait if deadline is None else min(wait, deadline)
        for queue, entry in take:
            popped = queue.popleft()
            assert popped is entry
        return [entry.request for _, entry in take], None

    def _next_deadline_in(self, now: int) -> int | None:
        if not self._timeouts:
            return None
        deadlines = [
            e.deadline_ns for level in self._levels for e in level.waiting if e.deadline_ns
        ]
        return max(0, min(deadlines) - now) if deadlines else None
