"""The per-instance halves of the sequence batcher: the direct and the oldest strategies.

Each model instance has one batcher with a fixed number of sequence slots; the scheduler
(``scheduling.sequence``) binds a sequence to one slot of one batcher from its START to
its END and queues the sequence's requests in that slot. A batcher forms the batches its
instance executes:

* ``DirectBatcher``: one request per slot, slot i at position i of the batch; a slot below
  the highest active one that has nothing ready (or whose request's shape does not fit the
  batch) gets a filler request whose READY control is false. With
  ``max_queue_delay_microseconds`` and ``minimum_slot_utilization`` it waits, up to the
  delay, for enough slots to be ready.
* ``OldestBatcher``: at most one request of each of its candidate sequences is in a
  dynamic batcher at a time (the oldest waiting one); batches form there as the dynamic
  batcher forms them (preferred sizes, delay), and a sequence's next request is handed on
  once the previous one has executed. With ``preserve_ordering`` a decoupled model's
  responses leave in the order their requests left the dynamic batcher
  (``response_order``).

Every call runs under the scheduler's lock (``owner.lock``), except ``next_batch``, which
takes it. Requests in a slot's queue may be followed by ``RELEASE``: the sequence was idle
too long (or an iterative sequence finished), and the slot is given up when it is reached.

A slot is *held* after its request executed and until the scheduler says it may go on
(``advance``): a decoupled model with implicit state answers after its ``execute`` has
returned, and the sequence's next request must wait for the state its final response
settles. Nothing of a held slot is taken (a direct batch gets a filler in its place).
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, Protocol

from pytriton_core.config.spec import ModelSpec
from pytriton_core.inference.request import SEQUENCE_END, InferenceRequest
from pytriton_core.scheduling.dynamic import BatchingSettings, DynamicBatchScheduler, RejectRequest
from pytriton_core.scheduling.response_order import ResponseOrder
from pytriton_core.scheduling.sequence_controls import CorrelationId
from pytriton_core.scheduling.sequence_state import SequenceStates


class _Release:
    """The marker that gives a slot up when its queue reaches it."""

    def __repr__(self) -> str:
        return "RELEASE"


RELEASE: Final = _Release()

SlotItem = InferenceRequest | _Release


@dataclass(frozen=True, slots=True, order=True)
class SlotRef:
    """A sequence slot: ordered by slot first, so new sequences spread over instances."""

    slot: int
    instance: int


@dataclass(slots=True, eq=False)
class Issued:
    """A request handed to the instance, with where it came from."""

    request: InferenceRequest
    slot: int
    states: SequenceStates | None
    instance: int = 0
    final_sent: bool = False  # a decoupled model sent its final response
    held: bool = False  # executed, its slot held until the final response


class SlotOwner(Protocol):
    """What the batchers use of the scheduler."""

    lock: threading.Lock
    stopping: bool

    def release_slot(self, ref: SlotRef, queue: deque[SlotItem]) -> CorrelationId | None:
        """Give a slot up (or to the next backlogged sequence, whose requests it moves into
        ``queue``); returns the correlation ID that now holds the slot, if any."""

    def prepare(
        self, request: InferenceRequest, states: list[SequenceStates | None], slot: int
    ) -> SequenceStates | None:
        """Add the control and state inputs to a request about to execute in ``slot``."""

    def issue(
        self,
        request: InferenceRequest,
        states: list[SequenceStates | None],
        slot: int,
        instance: int,
    ) -> Issued:
        """``prepare`` the request and follow it until it is done."""

    def filler(
        self, representative: InferenceRequest, states: SequenceStates | None
    ) -> InferenceRequest:
        """A not-ready request shaped like ``representative``, for an idle slot."""

    def forget(self, correlation_id: CorrelationId, ref: SlotRef) -> None:
        """The sequence in ``ref`` is over (cancelled): later requests need a new START."""


class InstanceBatcher(Protocol):
    states: list[SequenceStates | None]

    def enqueue(self, slot: int, correlation_id: CorrelationId, item: SlotItem) -> None: ...

    def next_batch(self) -> list[InferenceRequest] | None: ...

    def executed(self, batch: Sequence[InferenceRequest]) -> list[tuple[int, Issued]]: ...

    def advance(self, slot: int) -> None: ...

    def hold(self, slot: int) -> None: ...

    def cancel(self, request: InferenceRequest) -> bool: ...

    def stop(self) -> None: ...

    def pending_count(self) -> int: ...


def _ends(request: InferenceRequest) -> bool:
    return bool(request.flags & SEQUENCE_END)


class DirectBatcher:
    def __init__(
        self, owner: SlotOwner, instance: int, slots: int, spec: ModelSpec, checked: frozenset[str]
    ) -> None:
        self._owner = owner
        self._instance = instance
        self._queues: list[deque[SlotItem]] = [deque() for _ in range(slots)]
        self._holders: list[CorrelationId | None] = [None] * slots
        self.states: list[SequenceStates | None] = [None] * slots
        self._max_active = -1
        self._cond = threading.Condition(owner.lock)
        sequence = spec.sequence_batching
        assert sequence is not None
        strategy = sequence.strategy
        self._delay_ns = getattr(strategy, "max_queue_delay_us", 0) * 1000
        self._min_utilization = float(getattr(strategy, "minimum_slot_utilization", 0.0))
        self._max_batch = max(1, spec.max_batch_size)
        self._declared = frozenset(spec.inputs)
        self._checked = checked
        self._check_shapes = bool(checked) or any(t.optional for t in spec.inputs.values())
        self._issued: list[Issued | None] = []
        self._held: set[int] = set()

    def enqueue(self, slot: int, correlation_id: CorrelationId, item: SlotItem) -> None:
        self._queues[slot].append(item)
        self._holders[slot] = correlation_id
        self._max_active = max(self._max_active, slot)
        self._cond.notify()

    def next_batch(self) -> list[InferenceRequest] | None:
        with self._cond:
            while not self._owner.stopping:
                batch, wait_ns = self._form(time.monotonic_ns())
                if batch:
                    return batch
                self._cond.wait(None if wait_ns is None else wait_ns / 1e9)
            return None

    def _release_front(self, slot: int) -> None:
        """Drop a timed-out marker or a cancelled sequence at the head of a slot."""
        queue = self._queues[slot]
        if not queue:
            return
        head = queue[0]
        if head is RELEASE:
            queue.popleft()
        elif not (isinstance(head, InferenceRequest) and head.cancelled):
            return
        self._holders[slot] = self._owner.release_slot(SlotRef(slot, self._instance), queue)

    def _key(self, request: InferenceRequest) -> tuple[object, ...]:
        inputs = request.inputs
        return (
            frozenset(n for n in inputs if n in self._declared),
            frozenset((n, t.shape[1:]) for n, t in inputs.items() if n in self._checked),
        )

    def _form(self, now: int) -> tuple[list[InferenceRequest], int | None]:
        representative: InferenceRequest | None = None
        representative_slot = -1
        key: tuple[object, ...] | None = None
        highest = -1
        earliest = now
        ready = 0
        held = self._held
        for slot in range(self._max_active + 1):
            if slot in held:
                continue
            self._release_front(slot)
            queue = self._queues[slot]
            if not queue:
                continue
            head = queue[0]
            assert isinstance(head, InferenceRequest)
            if representative is None:
                representative, representative_slot = head, slot
                if self._check_shapes:
                    key = self._key(head)
            earliest = min(earliest, head.queue_start_ns)
            ready += 1
            highest = slot
        wait_ns: int | None = None
        if highest >= 0 and self._delay_ns and self._min_utilization:
            waited = now - earliest
            if waited <= self._delay_ns and ready / self._max_batch < self._min_utilization:
                wait_ns, highest = self._delay_ns - waited, -1
        batch: list[InferenceRequest] = []
        issued: list[Issued | None] = []
        owner = self._owner
        if highest >= 0:
            assert representative is not None
            # The representative's state (its slot may just be starting) shapes the fillers.
            owner.prepare(representative, self.states, representative_slot)
        for slot in range(highest + 1):
            queue = self._queues[slot]
            front = queue[0] if queue and slot not in held else None
            if not isinstance(front, InferenceRequest) or (
                key is not None and self._key(front) != key
            ):
                assert representative is not None
                batch.append(owner.filler(representative, self.states[representative_slot]))
                issued.append(None)
                continue
            queue.popleft()
            batch.append(front)
            issued.append(owner.issue(front, self.states, slot, self._instance))
            if _ends(front):
                self._holders[slot] = owner.release_slot(SlotRef(slot, self._instance), queue)
        while self._max_active >= 0 and self._holders[self._max_active] is None:
            self._max_active -= 1
        self._issued = issued
        return batch, wait_ns

    def executed(self, batch: Sequence[InferenceRequest]) -> list[tuple[int, Issued]]:
        issued, self._issued = self._issued, []
        return [(index, entry) for index, entry in enumerate(issued) if entry is not None]

    def advance(self, slot: int) -> None:
        """The next batch takes whatever is queued: only a held slot needs freeing."""
        if slot in self._held:
            self._held.discard(slot)
            self._cond.notify()

    def hold(self, slot: int) -> None:
        self._held.add(slot)

    def cancel(self, request: InferenceRequest) -> bool:
        """Drop a cancelled request still queued, and with it the rest of its sequence
        (answered CANCELLED by the release); the slot goes to the next sequence."""
        for slot, queue in enumerate(self._queues):
            if any(item is request for item in queue):
                queue.remove(request)
                ref = SlotRef(slot, self._instance)
                self._owner.forget(request.correlation_id, ref)
                self._holders[slot] = self._owner.release_slot(ref, queue)
                self._cond.notify()
                return True
        return False

    def stop(self) -> None:
        self._cond.notify_all()

    def pending_count(self) -> int:
        return sum(1 for queue in self._queues for item in queue if item is not RELEASE)


class OldestBatcher:
    def __init__(
        self,
        owner: SlotOwner,
        instance: int,
        slots: int,
        settings: BatchingSettings,
        reject: RejectRequest,
        order: ResponseOrder | None = None,
    ) -> None:
        self._owner = owner
        self._order = order
        self._instance = instance
        self._queues: list[deque[SlotItem]] = [deque() for _ in range(slots)]
        self._in_flight: list[Issued | None] = [None] * slots
        self.states: list[SequenceStates | None] = [None] * slots
        self._dynamic = DynamicBatchScheduler(settings, reject)

    def enqueue(self, slot: int, correlation_id: CorrelationId, item: SlotItem) -> None:
        self._queues[slot].append(item)
        if self._in_flight[slot] is None:
            self.advance(slot)

    def next_batch(self) -> list[InferenceRequest] | None:
        # The dynamic batcher has its own lock; ours is not held while it waits.
        batch = self._dynamic.next_batch()
        if batch is not None and self._order is not None:
            self._order.place(batch)
        return batch

    def advance(self, slot: int) -> None:
        """Hand the slot's next request to the dynamic batcher (Triton's CompleteAndNext)."""
        queue = self._queues[slot]
        owner = self._owner
        retry = True
        while retry:
            retry = False
            release = False
            self._in_flight[slot] = None
            if queue:
                head = queue[0]
                keep_head = False
                if head is RELEASE:
                    release = True
                elif isinstance(head, InferenceRequest) and head.cancelled:
                    release = keep_head = True  # the release cancels it with the rest
                else:
                    assert isinstance(head, InferenceRequest)
                    release = _ends(head)
                    entry = owner.issue(head, self.states, slot, self._instance)
                    self._in_flight[slot] = entry
                    self._dynamic.enqueue(head)
                if not keep_head:
                    queue.popleft()
            if release:
                holder = owner.release_slot(SlotRef(slot, self._instance), queue)
                # A request of the ending sequence still executing holds the slot's
                # resources: the new sequence starts when it completes.
                if holder is not None and self._in_flight[slot] is None:
                    retry = True

    def hold(self, slot: int) -> None:
        """Nothing to do: the slot's next request goes on at ``advance``."""

    def executed(self, batch: Sequence[InferenceRequest]) -> list[tuple[int, Issued]]:
        slots = {id(entry.request): entry for entry in self._in_flight if entry is not None}
        return [
            (index, slots[id(request)])
            for index, request in enumerate(batch)
            if id(request) in slots
        ]

    def cancel(self, request: InferenceRequest) -> bool:
        """Drop a cancelled request still waiting (in its slot, or in the dynamic batcher)
        and the rest of its sequence; a request already executing is the model's to see."""
        for slot, queue in enumerate(self._queues):
            issued = self._in_flight[slot]
            queued = any(item is request for item in queue)
            if not queued and (issued is None or issued.request is not request):
                continue
            if issued is not None and not self._dynamic.cancel(issued.request):
                if not queued:
                    return False  # executing
                issued = None  # an earlier request of the sequence is executing
            if queued:
                queue.remove(request)
            ref = SlotRef(slot, self._instance)
            owner = self._owner
            owner.forget(request.correlation_id, ref)
            if issued is not None:
                self._in_flight[slot] = None
                if issued.request is not request:
                    queue.appendleft(issued.request)  # cancelled with the rest
            holder = owner.release_slot(ref, queue)
            if holder is not None and self._in_flight[slot] is None:
                self.advance(slot)
            return True
        return False

    def stop(self) -> None:
        self._dynamic.stop(1)

    def pending_count(self) -> int:
        queued = sum(1 for queue in self._queues for item in queue if item is not RELEASE)
        return queued + self._dynamic.pending_count()
