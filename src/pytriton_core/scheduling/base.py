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

from pytriton_core.errors import ServerError, UnsupportedError
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


def no_reschedule_error(model: str) -> ServerError:
    """The answer to a request a model asked to reschedule where that cannot be done."""
    return UnsupportedError(
        "request rescheduling (TRITONSERVER_REQUEST_RELEASE_RESCHEDULE) needs "
        f"sequence_batching {{ iterative_sequence: true }}, which model '{model}' does not set"
    )


class Scheduler(abc.ABC):
    def start(self, instance_count: int) -> None:  # noqa: B027 - optional hook
        """Called once before the instances start pulling, with how many there are."""

    @abc.abstractmethod
    def enqueue(self, request: InferenceRequest) -> None:
        """Queue a validated request; raises a ServerError if it cannot be accepted."""

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
        return {
            index: no_reschedule_error(request.model_name)
            for index, request in enumerate(batch)
            if request.reschedule
        }

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
