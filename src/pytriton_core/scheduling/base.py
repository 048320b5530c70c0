"""The scheduler contract (after Triton's scheduler.h).

Ownership: ``enqueue`` takes the request; from then on the scheduler owns it until an
instance takes it in a batch from ``next_batch`` (or the scheduler fails it, e.g. on a
queue timeout). ``next_batch`` is called by the worker thread of each model instance and
blocks; every idle instance pulls, so work goes to whichever instance is free first.

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

from pytriton_core.inference.request import InferenceRequest


class Scheduler(abc.ABC):
    # True when a request that arrives with nothing else queued is handed to the next idle
    # instance at once (no queue delay to wait for batch mates): the model may then run
    # such a request without queueing it (runtime/instance.py, ``execute_inline``).
    dispatches_lone_at_once: bool = False

    @abc.abstractmethod
    def enqueue(self, request: InferenceRequest) -> None:
        """Queue a validated request; raises a ServerError if it cannot be accepted."""

    @abc.abstractmethod
    def next_batch(self) -> list[InferenceRequest] | None:
        """Block until a batch is ready for the calling instance; None once stopped."""

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
