"""The scheduler contract (after Triton's scheduler.h).

Ownership: ``enqueue`` takes the request; from then on the scheduler owns it until an
instance takes it in a batch from ``next_batch`` (or the scheduler fails it, e.g. on a
queue timeout). ``next_batch`` is called by the worker thread of each model instance and
blocks; every idle instance pulls, so work goes to whichever instance is free first
(the sequence batcher gives each instance the batches of the sequences bound to it, so it
needs to know which instance asks). After executing a batch the same worker thread calls
``completed`` before it asks for the next one: a scheduler that keeps per-sequence state
or re-queues requests does it there, in execution order.

Cancellation: when a queued request is cancelled (``InferenceRequest.cancel``), the model
calls ``cancel`` on the event loop. A scheduler that still holds the request removes it and
returns True; the model then answers it CANCELLED and counts the failure with reason
CANCELED. A request already handed to an instance is the backend's to notice (it polls
``request.cancelled``). A scheduler that cancels other requests because of this one (the
sequence batcher: the rest of the sequence) answers those through its reject callback with
a ``CancelledError``, which the model counts the same way.
"""

from __future__ import annotations

import abc
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType

from pytriton_core.errors import ServerError, UnavailableError, UnsupportedError
from pytriton_core.inference.request import InferenceRequest
from pytriton_core.inference.response import InferenceResponse


@dataclass(frozen=True, slots=True)
class Requeued:
    """The scheduler queued the request again (it is not finished); ``queue_start_ns`` is
    when the execution that just ended had been queued (the request now holds the new one)."""

    queue_start_ns: int


# What ``completed`` says about requests of the batch the runtime must not simply answer:
# position -> Requeued, or the error to answer the request with (the model asked for a
# reschedule that cannot be honoured).
Retained = Mapping[int, ServerError | Requeued]
NOTHING_RETAINED: Retained = MappingProxyType({})

# Triton's words for a request a stopped scheduler refuses (Scheduler::Stop at server exit).
STOPPING_MESSAGE = (
    "Server is stopping, scheduler for model has stopped accepting new inference requests"
)


def no_reschedule_error(model: str) -> ServerError:
    """The answer to a request a model asked to reschedule where that cannot be done."""
    return UnsupportedError(
        "request rescheduling (TRITONSERVER_REQUEST_RELEASE_RESCHEDULE) needs "
        f"sequence_batching {{ iterative_sequence: true }}, which model '{model}' does not set"
    )


class Scheduler(abc.ABC):
    # True when a request that arrives with nothing else queued is handed to the next idle
    # instance at once (no queue delay to wait for batch mates): the model may then run
    # such a request without queueing it (runtime/instance.py, ``execute_inline``).
    dispatches_lone_at_once: bool = False
    # True when the model may queue the requests of one event-loop turn without waking an
    # instance (``enqueue_for_turn``) and hand them over together at the end of
    # the turn (``take_ready_batch`` on the loop, else ``wake``): the requests a turn reads
    # then form one batch, where waking an instance per request would let it take the first
    # one alone (runtime/model.py, ``_end_of_turn``).
    hands_over_per_turn: bool = False
    # True when a request may skip the queue altogether and execute on its caller's thread
    # while an instance is idle and nothing is queued (runtime/model.py,
    # ``execute_direct``): the scheduler neither batches, orders nor times requests.
    direct_execution: bool = False
    # True when the scheduler can keep requests for the event loop to hand out itself
    # (``hold``/``take_held``): models whose executions start and finish on the loop
    # (``BackendModel.loop_dispatch``) then need no instance thread on a request's path.
    holds_for_loop: bool = False
    # True when ``completed`` reads the batch's responses (the sequence batcher keeps the
    # implicit state they carry): they are then built on the instance's thread before it,
    # never left to the event loop (backends/base.py, ``DeferredResponses``).
    reads_responses: bool = False
    # False once the server is exiting (``stop_accepting``).
    accepting = True
    # Triton's dynamic batcher names the request in its enqueue errors; the sequence
    # batcher does not (the model adds the ``[request id: ...]`` prefix where this is True).
    enqueue_errors_name_request = True

    def hold(self, request: InferenceRequest) -> None:
        """Keep ``request`` for ``take_held`` (on the loop), not for an instance's thread."""
        raise NotImplementedError(f"{type(self).__name__} does not hold requests for the loop")

    def take_held(self) -> InferenceRequest | None:
        """The oldest held request still waiting (not cancelled), or None."""
        raise NotImplementedError(f"{type(self).__name__} does not hold requests for the loop")

    def stop_accepting(self) -> None:
        """The server is exiting (Triton's ``Scheduler::Stop``): refuse new requests from
        now on with ``STOPPING_MESSAGE``; what was accepted still runs. The sequence
        batcher refuses only new sequences, so those in flight can finish."""
        self.accepting = False

    def refuse_if_stopped(self) -> None:
        if not self.accepting:
            raise UnavailableError(STOPPING_MESSAGE)

    def active_sequences(self) -> int:
        """Sequences holding a slot (in flight between their requests); 0 without
        sequences. The server's exit waits for them as for requests, as Triton does."""
        return 0

    def start(self, instance_count: int) -> None:  # noqa: B027 - optional hook
        """Called once before the instances start pulling, with how many there are."""

    @abc.abstractmethod
    def enqueue(self, request: InferenceRequest) -> None:
        """Queue a validated request; raises a ServerError if it cannot be accepted."""

    def enqueue_for_turn(self, request: InferenceRequest) -> None:
        """``enqueue`` without waking an idle instance: the caller hands the turn's
        requests over with ``take_ready_batch`` or ``wake`` (only where
        ``hands_over_per_turn``)."""
        raise NotImplementedError(f"{type(self).__name__} does not hand over per turn")

    def wake(self) -> None:  # noqa: B027 - only schedulers that hand over per turn
        """Let an idle instance look at the queue (after ``enqueue_for_turn``)."""

    def take_ready_batch(self) -> list[InferenceRequest]:
        """The batch an idle instance would take now, without blocking; [] when none is
        ready (only where ``hands_over_per_turn``; the caller has claimed an instance)."""
        raise NotImplementedError(f"{type(self).__name__} does not hand over per turn")

    @abc.abstractmethod
    def next_batch(self, instance: int = 0) -> list[InferenceRequest] | None:
        """Block until a batch is ready for instance ``instance``; None once stopped."""

    def completed(
        self,
        instance: int,
        batch: Sequence[InferenceRequest],
        responses: Sequence[InferenceResponse | None] | ServerError,
    ) -> Retained:
        """``batch`` has executed on ``instance`` (``responses``: its answers, or the error
        that failed it). Schedulers without sequences re-queue nothing: a request the model
        asked to reschedule is answered with an error."""
        for request in batch:
            if request.reschedule:
                return {
                    index: no_reschedule_error(asked.model_name)
                    for index, asked in enumerate(batch)
                    if asked.reschedule
                }
        return NOTHING_RETAINED  # (the common case: no comprehension run, no dict made)

    @abc.abstractmethod
    def stop(self, instance_count: int) -> None:
        """Wake every blocked instance with None (call after the queue has drained)."""

    @abc.abstractmethod
    def cancel(self, request: InferenceRequest) -> bool:
        """Remove a cancelled request if it still waits here (True), else False; called on
        the event loop, while instances may be pulling."""

    @abc.abstractmethod
    def pending_count(self) -> int:
        """Requests accepted but not yet handed to an instance."""
