"""Triton's sequence batcher: stateful models get each sequence's requests in order, on the
slot that holds the sequence (scheduling.md §5).

A request carries a correlation ID (uint64 or string, 0 and "" meaning none) and the
START and END flags. START binds a new sequence to a free slot (the lowest slot number
first, across instances); with every slot taken, the whole sequence waits in the backlog
until one frees. Its requests then go to that slot until END releases it. A sequence that
sends nothing for ``max_sequence_idle_microseconds`` is released too, and its next request
fails as one without START does. The per-instance batchers (``sequence_batchers``) turn
the slots' queues into batches, adding the control inputs and the implicit state.

Iterative sequences (``iterative_sequence: true``): a request without a correlation ID is
a sequence of its own (an ID is assigned, START set); the model re-queues it with
``TRITONSERVER_REQUEST_RELEASE_RESCHEDULE`` (flags cleared) until it releases it, which ends
the sequence. Rescheduling anywhere else is answered with an error (Triton leaves such a
request unanswered).

Decoupled models with implicit state answer through their response sender, possibly after
``execute`` has returned: each response that carries a state output replaces the state (in
the order sent; Triton's ``TRITONBACKEND_StateUpdate`` replaces it at each call too), and
the sequence's slot is held from the end of the execution until the final response is sent,
so its next request reads the state that request left. A request the model reschedules is
queued again at once: it reads the state its responses sent during ``execute`` left.

Triton's messages and codes throughout; errors a request gets at enqueue (no correlation
ID, no START, batch size above 1) are validation errors: Triton counts no statistics for
them and gives them no request-id prefix.
"""

from __future__ import annotations

import functools
import heapq
import logging
import threading
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from pytriton_core import types
from pytriton_core.config.spec import ModelSpec, OldestStrategy, QueuePolicy
from pytriton_core.errors import (
    CancelledError,
    InvalidArgumentError,
    ServerError,
    UnavailableError,
)
from pytriton_core.inference.request import SEQUENCE_END, SEQUENCE_START, InferenceRequest
from pytriton_core.inference.response import InferenceResponse
from pytriton_core.inference.tensor import Tensor
from pytriton_core.inference.tensor_data import zeros
from pytriton_core.scheduling.base import (
    STOPPING_MESSAGE,
    Requeued,
    Retained,
    Scheduler,
    no_reschedule_error,
)
from pytriton_core.scheduling.dynamic import (
    BatchingSettings,
    RejectRequest,
    shape_checked_inputs,
)
from pytriton_core.scheduling.response_order import ResponseOrder
from pytriton_core.scheduling.sequence_batchers import (
    RELEASE,
    DirectBatcher,
    InstanceBatcher,
    Issued,
    OldestBatcher,
    SlotItem,
    SlotRef,
)
from pytriton_core.scheduling.sequence_controls import ControlTensors, CorrelationId
from pytriton_core.scheduling.sequence_state import SequenceStates, state_templates

log = logging.getLogger(__name__)

# What a request cancelled with the rest of its sequence is answered (the model's wording).
CANCELLED_MESSAGE = "Request was cancelled"
# How many distinct filler input shapes are kept for reuse.
FILLER_SHAPES_KEPT = 64


@dataclass(slots=True, eq=False)
class _Backlog:
    """One sequence waiting for a slot: its requests so far."""

    queue: deque[SlotItem] = field(default_factory=deque)
    expires_ns: int = 0  # 0: no sequence timeout


def _sooner(a: int | None, b: int | None) -> int | None:
    """The earlier of two waits (None: no wait)."""
    if a is None:
        return b
    return a if b is None else min(a, b)


def _in_sequence(correlation_id: CorrelationId) -> bool:
    return correlation_id not in (0, "")


class SequenceBatchScheduler(Scheduler):
    enqueue_errors_name_request = False
    reads_responses = True  # ``completed`` keeps the implicit state the responses carry

    def __init__(self, spec: ModelSpec, reject: RejectRequest, model_dir: Path | None) -> None:
        sequence = spec.sequence_batching
        if sequence is None:
            raise ValueError(f"model '{spec.name}' has no sequence_batching")
        self._spec = spec
        self._reject = reject
        self.controls = ControlTensors(spec)
        self._filler_controls = self.controls.for_filler()
        self._filler_inputs: dict[tuple[str, str, tuple[int, ...]], Tensor] = {}
        self._templates = state_templates(spec, model_dir)
        self._idle_ns = sequence.max_sequence_idle_us * 1000
        self._iterative = sequence.iterative_sequence
        # A decoupled model's state comes with its responses, after the execution.
        self._state_from_sends = spec.decoupled and bool(self._templates)
        strategy = sequence.strategy
        slots = max(1, spec.max_batch_size)
        if isinstance(strategy, OldestStrategy) and strategy.max_candidate_sequences > 0:
            slots = strategy.max_candidate_sequences
        self._slots_per_instance = slots
        self.lock = threading.Lock()
        self.stopping = False
        self._reaper_cond = threading.Condition(self.lock)
        self._slot_of: dict[CorrelationId, SlotRef] = {}
        self._backlog_of: dict[CorrelationId, _Backlog] = {}
        self._backlogs: deque[_Backlog] = deque()
        self._free: list[SlotRef] = []  # a heap
        self._last_seen_ns: dict[CorrelationId, int] = {}
        self._batchers: list[InstanceBatcher] = []
        self._next_iterative_id = 1
        self._reaper: threading.Thread | None = None

    # -------------------------------------------------------------- lifecycle

    def start(self, instance_count: int) -> None:
        spec = self._spec
        sequence = spec.sequence_batching
        assert sequence is not None
        strategy = sequence.strategy
        state_inputs = [
            spec.model_inputs[t.input_name] for t in self._templates
        ]  # shapes of a variable-size state must agree within a batch too
        checked = shape_checked_inputs(spec.inputs.values())
        for instance in range(instance_count):
            batcher: InstanceBatcher
            if isinstance(strategy, OldestStrategy):
                settings = BatchingSettings(
                    max_batch_size=max(1, spec.max_batch_size),
                    preferred_batch_sizes=frozenset(strategy.preferred_batch_sizes),
                    max_queue_delay_ns=strategy.max_queue_delay_us * 1000,
                    preserve_ordering=strategy.preserve_ordering,
                    priority_levels=0,
                    default_priority_level=1,
                    policies={1: QueuePolicy()},
                    shape_checked_inputs=checked | shape_checked_inputs(state_inputs),
                )
                # Responses of a model that answers once leave in order anyway.
                order = ResponseOrder() if strategy.preserve_ordering and spec.decoupled else None
                batcher = OldestBatcher(
                    self, instance, self._slots_per_instance, settings, self._reject, order
                )
            else:
                batcher = DirectBatcher(self, instance, self._slots_per_instance, spec, checked)
            self._batchers.append(batcher)
            self._free.extend(SlotRef(slot, instance) for slot in range(self._slots_per_instance))
        heapq.heapify(self._free)
        self._reaper = threading.Thread(target=self._reap, name="sequence-reaper", daemon=True)
        self._reaper.start()

    def stop(self, instance_count: int) -> None:
        with self.lock:
            self.stopping = True
            for batcher in self._batchers:
                batcher.stop()
            self._reaper_cond.notify_all()
        if self._reaper is not None:
            self._reaper.join()

    def active_sequences(self) -> int:
        with self.lock:  # Triton counts the sequences holding a slot (the backlog waits on them)
            return len(self._slot_of)

    def pending_count(self) -> int:
        with self.lock:
            backlogged = sum(len(b.queue) for b in self._backlogs)
            return backlogged + sum(b.pending_count() for b in self._batchers)

    # -------------------------------------------------------------- requests

    def enqueue(self, request: InferenceRequest) -> None:
        model = self._spec.name
        if request.batch_size > 1:
            raise InvalidArgumentError(
                f"inference request to model '{model}' must specify batch-size 1 due to "
                "requirements of sequence batcher"
            )
        with self.lock:
            if self._iterative and not _in_sequence(request.correlation_id):
                request.correlation_id = self._next_iterative_id
                request.flags = SEQUENCE_START
                self._next_iterative_id += 1
            self._route(request)

    def _route(self, request: InferenceRequest) -> None:
        """Triton's SequenceBatchScheduler::Enqueue, under the lock."""
        model = self._spec.name
        correlation_id = request.correlation_id
        if not _in_sequence(correlation_id):
            raise InvalidArgumentError(
                f"inference request to model '{model}' must specify a non-zero or non-empty "
                "correlation ID"
            )
        start = bool(request.flags & SEQUENCE_START)
        end = bool(request.flags & SEQUENCE_END)
        if start and not self.accepting:  # the server is exiting: only sequences in flight
            raise UnavailableError(STOPPING_MESSAGE)
        slot = self._slot_of.get(correlation_id)
        backlog = self._backlog_of.get(correlation_id)
        if not start and slot is None and backlog is None:
            raise InvalidArgumentError(
                f"inference request for sequence {correlation_id} to model '{model}' must "
                "specify the START flag on the first request of the sequence"
            )
        now = time.monotonic_ns()
        if not self._last_seen_ns:
            self._reaper_cond.notify()  # the reaper sleeps while there is nothing to watch
        # Re-inserted, so the dict stays in last-seen order and the reaper looks only at its
        # head; an ended sequence has nothing left to release.
        self._last_seen_ns.pop(correlation_id, None)
        if not end:
            self._last_seen_ns[correlation_id] = now
        if start and (slot is not None or backlog is not None):
            log.warning(
                "sequence %s for model '%s' has a conflict. The previous sequence did not end "
                "before this sequence start. Previous sequence will be terminated early.",
                correlation_id,
                model,
            )
        if slot is None and backlog is not None:
            self._add_to_backlog(backlog, request, now)
            if end:
                del self._backlog_of[correlation_id]
            return
        if slot is None:
            if not self._free:
                backlog = _Backlog()
                self._backlogs.append(backlog)
                self._add_to_backlog(backlog, request, now)
                if not end:
                    self._backlog_of[correlation_id] = backlog
                return
            slot = self._slot_of[correlation_id] = heapq.heappop(self._free)
        if end:
            del self._slot_of[correlation_id]
        self._batchers[slot.instance].enqueue(slot.slot, correlation_id, request)

    def _add_to_backlog(self, backlog: _Backlog, request: InferenceRequest, now: int) -> None:
        if request.timeout_us:
            expires = now + request.timeout_us * 1000
            if not backlog.expires_ns or expires < backlog.expires_ns:
                backlog.expires_ns = expires
                self._reaper_cond.notify()
        backlog.queue.append(request)

    # -------------------------------------------------------- slot handling (SlotOwner)

    def release_slot(self, ref: SlotRef, queue: deque[SlotItem]) -> CorrelationId | None:
        """Triton's ReleaseSequenceSlot: what is left in ``queue`` (a cancelled sequence's
        requests) is cancelled; the first backlogged sequence, if any, takes the slot."""
        if queue and isinstance(queue[0], InferenceRequest):
            cancelled_id = queue[0].correlation_id
            self._slot_of.pop(cancelled_id, None)
            self._last_seen_ns.pop(cancelled_id, None)
        self._cancel(queue)
        while self._backlogs:
            backlog = self._backlogs.popleft()
            last = backlog.queue[-1]
            assert isinstance(last, InferenceRequest)
            correlation_id = last.correlation_id
            cancelled = any(isinstance(r, InferenceRequest) and r.cancelled for r in backlog.queue)
            if not last.flags & SEQUENCE_END:
                self._backlog_of.pop(correlation_id, None)
                if not cancelled:
                    self._slot_of[correlation_id] = ref
                    # Idle time counts from when the sequence got its slot (waiting in the
                    # backlog is not idleness).
                    self._last_seen_ns.pop(correlation_id, None)
                    self._last_seen_ns[correlation_id] = time.monotonic_ns()
            if cancelled:
                self._cancel(backlog.queue)
                continue
            queue.extend(backlog.queue)
            return correlation_id
        heapq.heappush(self._free, ref)
        return None

    def forget(self, correlation_id: CorrelationId, ref: SlotRef) -> None:
        if self._slot_of.get(correlation_id) == ref:
            del self._slot_of[correlation_id]
            self._last_seen_ns.pop(correlation_id, None)

    def cancel(self, request: InferenceRequest) -> bool:
        """A cancelled request still waiting leaves, and so does the rest of its sequence
        (Triton cancels all of a sequence's pending requests)."""
        with self.lock:
            for backlog in self._backlogs:
                if any(item is request for item in backlog.queue):
                    self._backlogs.remove(backlog)
                    if self._backlog_of.get(request.correlation_id) is backlog:
                        del self._backlog_of[request.correlation_id]
                    self._last_seen_ns.pop(request.correlation_id, None)
                    backlog.queue.remove(request)
                    self._cancel(backlog.queue)
                    return True
            return any(batcher.cancel(request) for batcher in self._batchers)

    def _cancel(self, queue: deque[SlotItem]) -> None:
        while queue:
            item = queue.popleft()
            if isinstance(item, InferenceRequest):
                self._reject(item, CancelledError(CANCELLED_MESSAGE))

    def prepare(
        self, request: InferenceRequest, states: list[SequenceStates | None], slot: int
    ) -> SequenceStates | None:
        request.inputs.update(self.controls.for_request(request.flags, request.correlation_id))
        if not self._templates:
            return None
        slot_states = states[slot]
        if slot_states is None or request.flags & SEQUENCE_START:
            # A new object, not a reset: a late response of the sequence that had the slot
            # before must not write into this one's state.
            slot_states = states[slot] = SequenceStates(self._templates)
        request.inputs.update(slot_states.inputs())
        return slot_states

    def issue(
        self,
        request: InferenceRequest,
        states: list[SequenceStates | None],
        slot: int,
        instance: int,
    ) -> Issued:
        entry = Issued(request, slot, self.prepare(request, states, slot), instance)
        if self._state_from_sends:
            request.sent_hook = functools.partial(self._sent, entry)
        return entry

    def _sent(self, entry: Issued, response: InferenceResponse | None, final: bool) -> None:
        """A decoupled model sent a response of ``entry`` (on the sending thread): its state
        outputs replace the state; the final one lets the held slot go on."""
        with self.lock:
            if entry.final_sent:
                return
            if response is not None:
                if entry.states is not None and response.error is None:
                    entry.states.update(response)
                self._drop_unrequested_states(entry.request, response)
            if final:
                entry.final_sent = True
                if entry.held:
                    entry.held = False
                    self._batchers[entry.instance].advance(entry.slot)

    def filler(
        self, representative: InferenceRequest, states: SequenceStates | None
    ) -> InferenceRequest:
        declared = self._spec.inputs
        inputs = {
            name: self._zeros(name, tensor.datatype, tensor.shape)
            for name, tensor in representative.inputs.items()
            if name in declared
        }
        inputs.update(self._filler_controls)
        if states is not None:
            inputs.update(states.filler_inputs())
        return InferenceRequest(
            model_name=representative.model_name,
            model_version=representative.model_version,
            inputs=inputs,
            requested_outputs={},
            loop=representative.loop,
            queue_start_ns=representative.queue_start_ns,
            padding=True,
        )

    def _zeros(self, name: str, datatype: types.DataType, shape: tuple[int, ...]) -> Tensor:
        """A read-only tensor of zeros, made once per name, type and shape (fillers are
        made for every idle slot of every batch)."""
        key = (name, datatype.wire_name, shape)
        tensor = self._filler_inputs.get(key)
        if tensor is None:
            data = zeros(datatype, shape)
            data.flags.writeable = False
            tensor = Tensor(name, datatype, data)
            if len(self._filler_inputs) < FILLER_SHAPES_KEPT:  # variable dims: not unbounded
                self._filler_inputs[key] = tensor
        return tensor

    # -------------------------------------------------------------- execution

    def next_batch(self, instance: int = 0) -> list[InferenceRequest] | None:
        return self._batchers[instance].next_batch()

    def completed(
        self,
        instance: int,
        batch: Sequence[InferenceRequest],
        responses: Sequence[InferenceResponse | None] | ServerError,
    ) -> Retained:
        retained: dict[int, ServerError | Requeued] = {}
        batcher = self._batchers[instance]
        with self.lock:
            for index, issued in batcher.executed(batch):
                request = issued.request
                failed = isinstance(responses, ServerError)
                response = None if isinstance(responses, ServerError) else responses[index]
                if response is not None:
                    if issued.states is not None and response.error is None:
                        issued.states.update(response)
                    self._drop_unrequested_states(request, response)
                requeued = False
                if request.reschedule and not failed:
                    retained[index] = kept = self._reschedule(request)
                    requeued = isinstance(kept, Requeued)
                elif self._iterative and not request.flags & SEQUENCE_END:
                    self._end_iteration(request.correlation_id)
                if (
                    self._state_from_sends
                    and response is None
                    and not (failed or requeued or issued.final_sent)
                ):
                    # Its final response (and so its state) is still to come.
                    issued.held = True
                    batcher.hold(issued.slot)
                else:
                    batcher.advance(issued.slot)
        return retained

    def _drop_unrequested_states(
        self, request: InferenceRequest, response: InferenceResponse
    ) -> None:
        states = self._spec.state_outputs
        if not states or not response.outputs:
            return
        wanted = request.requested_outputs
        listed = self._spec.outputs
        response.outputs = [
            t
            for t in response.outputs
            if t.name not in states
            or (t.name in wanted if wanted is not None else t.name in listed)
        ]

    def _reschedule(self, request: InferenceRequest) -> ServerError | Requeued:
        """Queue a request the model released with RESCHEDULE again (Triton's
        IterativeSequencer), else say the error to answer it with."""
        if not self._iterative:
            return no_reschedule_error(self._spec.name)
        executed = Requeued(request.queue_start_ns)
        flags, request.flags = request.flags, 0
        request.queue_start_ns = time.monotonic_ns()
        try:
            self._route(request)
        except ServerError as exc:
            request.flags, request.queue_start_ns = flags, executed.queue_start_ns
            return exc
        request.reschedule = False
        return executed

    def _end_iteration(self, correlation_id: CorrelationId) -> None:
        """An iterative sequence's request was released: the sequence is over."""
        slot = self._slot_of.pop(correlation_id, None)
        self._last_seen_ns.pop(correlation_id, None)
        if slot is not None:
            self._batchers[slot.instance].enqueue(slot.slot, correlation_id, RELEASE)

    # -------------------------------------------------------------- the reaper

    def _reap(self) -> None:
        """Release idle sequences' slots and fail backlogged sequences whose timeout passed."""
        with self.lock:
            while not self.stopping:
                now = time.monotonic_ns()
                wait_ns = _sooner(self._release_idle(now), self._expire_backlogs(now))
                self._reaper_cond.wait(None if wait_ns is None else wait_ns / 1e9)

    def _release_idle(self, now: int) -> int | None:
        """Release the sequences idle too long; returns when the next one would be. The dict
        is in last-seen order, so only its head is looked at."""
        idle: list[CorrelationId] = []
        wait: int | None = None
        for correlation_id, seen in self._last_seen_ns.items():
            remaining = self._idle_ns - (now - seen)
            if remaining > 0:
                wait = remaining
                break
            idle.append(correlation_id)
        for correlation_id in idle:
            del self._last_seen_ns[correlation_id]
            slot = self._slot_of.pop(correlation_id, None)
            if slot is not None:
                log.debug(
                    "sequence %s of model '%s' idle: slot released", correlation_id, self._spec.name
                )
                self._batchers[slot.instance].enqueue(slot.slot, correlation_id, RELEASE)
            # A sequence still in the backlog is watched again once it has a slot.
        return wait

    def _expire_backlogs(self, now: int) -> int | None:
        wait: int | None = None
        expired = [b for b in self._backlogs if b.expires_ns and b.expires_ns <= now]
        for backlog in expired:
            self._backlogs.remove(backlog)
            head = backlog.queue[0]
            assert isinstance(head, InferenceRequest)
            if self._backlog_of.get(head.correlation_id) is backlog:
                del self._backlog_of[head.correlation_id]
            for item in backlog.queue:
                if isinstance(item, InferenceRequest):
                    self._reject(
                        item,
                        UnavailableError("timeout of the corresponding sequence has been expired"),
                    )
        for backlog in self._backlogs:
            if backlog.expires_ns:
                wait = _sooner(wait, backlog.expires_ns - now)
        return wait
