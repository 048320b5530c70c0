"""Inference requests: what a front end (or a model, through BLS) asks of a model.

A request yields a stream of zero or more responses ending with a final flag; the
one-response case is the common special case. Responses are always delivered on the
server's event loop through ``on_response``; threads hand them over with
``send_threadsafe`` (batched by the instance in the common case).

Cancellation (a client that went away, a gRPC deadline, a BLS caller's ``cancel()``) goes
through ``cancel`` on the event loop, ``cancel_threadsafe`` from any other thread. It sets
``cancelled`` at once, so a backend polling it (a Python model's ``is_cancelled()``) sees
it, and runs the hooks registered with ``on_cancel``: the model's scheduler drops the
request if it still waits in a queue and answers it CANCELLED.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING

from pytriton_core import clock
from pytriton_core.inference.flow import ResponseWindow, response_bytes
from pytriton_core.inference.response import InferenceResponse, ParameterValue
from pytriton_core.inference.statistics import ComputeTiming, ResponseTiming
from pytriton_core.inference.tensor import GuardedTensor, Tensor

if TYPE_CHECKING:
    from pytriton_core.tracing import RequestTrace

SEQUENCE_START = 1
SEQUENCE_END = 2

ResponseCallback = Callable[[InferenceResponse | None, bool], None]
"""Called on the event loop with (response or None for a flag-only completion, final)."""
CancelHook = Callable[[], None]
"""Called once, on the event loop, when the request is cancelled."""
ResponseObserver = Callable[[InferenceResponse | None, bool, ResponseTiming | None], None]
"""Sees each delivery before ``on_response``, with the backend's timing when it has one."""
SentHook = Callable[[InferenceResponse | None, bool], None]
"""Called on the sending thread with (response or None, final) before the hand-off."""
DeliveryGate = Callable[
    ["InferenceRequest", InferenceResponse | None, bool, ResponseTiming | None], None
]
"""Takes a delivery on the event loop; passes it on with ``InferenceRequest.hand_over``."""


class RequestedOutput:
    """An output a client named (an extension type, request.pxd)."""

    def __init__(self, name: str, class_count: int = 0, to_region: bool = False) -> None:
        self.name = name
        self.class_count = class_count  # > 0: the classification extension's top-k
        # Bound for a client's shared-memory region, which copies from device memory
        # directly: GPU backends leave such an output on the device.
        self.to_region = to_region

    def __repr__(self) -> str:
        return (
            f"RequestedOutput(name={self.name!r}, class_count={self.class_count!r}, "
            f"to_region={self.to_region!r})"
        )

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, RequestedOutput):
            return NotImplemented
        return (self.name, self.class_count, self.to_region) == (
            other.name,
            other.class_count,
            other.to_region,
        )

    __hash__ = None  # type: ignore[assignment]  # mutable and compared by value


class InferenceRequest:
    """One request to one model version.

    An extension type (request.pxd): every request makes one and the compiled runtime reads
    its fields as C fields. The constructor takes what a front end, a scheduler or a model
    sets; the rest is filled in by the core.
    """

    def __init__(
        self,
        model_name: str,
        model_version: int = -1,  # -1: the latest ready version
        id: str = "",
        inputs: dict[str, Tensor] | None = None,
        # None: every output of the model, as Triton does when a client names none.
        requested_outputs: dict[str, RequestedOutput] | None = None,
        parameters: dict[str, ParameterValue] | None = None,
        priority: int = 0,
        timeout_us: int = 0,
        correlation_id: int | str = 0,
        flags: int = 0,
        on_response: ResponseCallback | None = None,
        loop: asyncio.AbstractEventLoop | None = None,
        batch_size: int = 1,
        arrival_ns: int | None = None,  # None: now
        queue_start_ns: int = 0,
        final_sent: bool = False,
        padding: bool = False,
        reschedule: bool = False,
        trace: RequestTrace | None = None,
        compute_observer: Callable[[ComputeTiming | None], None] | None = None,
        executing: bool = False,
        response_window: ResponseWindow | None = None,
        observer: ResponseObserver | None = None,
        sent_hook: SentHook | None = None,
        delivery_gate: DeliveryGate | None = None,
    ) -> None:
        self.model_name = model_name
        self.model_version = model_version
        self.id = id
        self.inputs: dict[str, Tensor] = {} if inputs is None else inputs
        self.requested_outputs = requested_outputs
        self.parameters: dict[str, ParameterValue] = {} if parameters is None else parameters
        self.priority = priority
        self.timeout_us = timeout_us
        self.correlation_id = correlation_id
        self.flags = flags
        self.on_response = on_response
        self.loop = loop
        # Filled in by the core.
        self.batch_size = batch_size
        self.arrival_ns: int = clock.now_ns() if arrival_ns is None else arrival_ns
        self.queue_start_ns = queue_start_ns
        self.final_sent = final_sent
        # The sequence batcher's filler for an idle slot of a batch (READY false): executed,
        # never answered, not counted as an inference.
        self.padding = padding
        # Set by a backend when the model released the request with RELEASE_RESCHEDULE: the
        # scheduler queues it again (iterative sequences) instead of completing it.
        self.reschedule = reschedule
        self.trace = trace  # set when tracing sampled this request
        # Called on the loop with the execution's timing when the request has run (None:
        # the execution failed): an ensemble sums its steps' compute times (Triton's
        # secondary stats aggregator).
        self.compute_observer = compute_observer
        # True from when an instance starts executing the request until the loop has its
        # outcome (``Model._batch_done``): a decoupled model's final response may come first.
        self.executing = executing
        # Set by a front end that streams to a client who may read slowly (inference.flow).
        self.response_window = response_window
        # Set by the model (decoupled models' statistics per response).
        self.observer = observer
        # Set by a scheduler that must see each response a backend sends from its own
        # thread (``send_threadsafe``), before it leaves that thread: the sequence batcher
        # takes a decoupled model's implicit state from it, and learns when the final one
        # is sent.
        self.sent_hook = sent_hook
        # Set by a scheduler that must order responses (``oldest.preserve_ordering``): it
        # takes every response ``deliver`` gets and passes each on through ``hand_over``,
        # possibly later.
        self.delivery_gate = delivery_gate
        # Read through ``cancelled``; set only by ``cancel`` so that the hooks run.
        self._cancelled = False
        self._cancel_hooks: list[CancelHook] | None = None

    def __repr__(self) -> str:
        return (
            f"InferenceRequest(model_name={self.model_name!r}, "
            f"model_version={self.model_version!r}, id={self.id!r})"
        )

    @property
    def cancelled(self) -> bool:
        """True once the request is cancelled; safe to poll from any thread."""
        return self._cancelled

    def cancel(self) -> None:
        """Cancel the request; call on the event loop (idempotent). The hooks run here, once
        each, in the order they were registered. A request cancelled before it is
        submitted is refused when it is."""
        if not self._cancelled:
            self._cancelled = True
            self._run_cancel_hooks()
            if self.response_window is not None:
                self.response_window.close()  # a sender waiting for the client goes on

    def cancel_threadsafe(self) -> None:
        """``cancel`` from any thread: ``cancelled`` turns true at once, the hooks run on
        the event loop soon after."""
        if self._cancelled:
            return
        self._cancelled = True
        if self.response_window is not None:
            self.response_window.close()
        if self.loop is not None:  # submitted: hooks may be registered
            self.loop.call_soon_threadsafe(self._run_cancel_hooks)

    def on_cancel(self, hook: CancelHook) -> None:
        """Run ``hook`` on the event loop when the request is cancelled (at once if it
        already is); call on the event loop. Hooks are dropped once the final response
        is delivered."""
        if self._cancelled:
            hook()
        elif self._cancel_hooks is None:
            self._cancel_hooks = [hook]
        else:
            self._cancel_hooks.append(hook)

    def _run_cancel_hooks(self) -> None:
        hooks, self._cancel_hooks = self._cancel_hooks, None
        for hook in hooks or ():
            hook()

    def output_names(self, model_outputs: list[str]) -> list[str]:
        """The names to return, in the model's order when the client named none."""
        if self.requested_outputs is None:
            return model_outputs
        return list(self.requested_outputs)

    def deliver(
        self,
        response: InferenceResponse | None,
        final: bool,
        timing: ResponseTiming | None = None,
        past_gate: bool = False,
    ) -> None:
        """Hand a response to whoever sent the request; call on the event loop.
        ``timing``: when the backend worked on it (decoupled responses). A
        ``delivery_gate`` may hold it back (it passes it on with ``hand_over``, which is
        this with ``past_gate``).

        A response computed from an input whose memory its client took away meanwhile
        (``GuardedTensor``) is replaced by that error."""
        if self.final_sent:
            return
        if self.delivery_gate is not None and not past_gate:
            self.delivery_gate(self, response, final, timing)
            return
        # (the hand-over itself, here rather than in ``hand_over``: one call per response)
        self.final_sent = final
        if final:
            self._cancel_hooks = None  # nothing left to cancel; what they hold can go
        if response is not None and response.error is None:
            for tensor in self.inputs.values():
                if isinstance(tensor, GuardedTensor) and (lost := tensor.lost()) is not None:
                    response = InferenceResponse.failed(lost)
                    break
        if self.observer is not None:
            self.observer(response, final, timing)
        if self.trace is not None:
            self._trace_delivery(self.trace, response, final)
        if self.on_response is not None:
            self.on_response(response, final)

    def hand_over(
        self,
        response: InferenceResponse | None,
        final: bool,
        timing: ResponseTiming | None = None,
    ) -> None:
        """``deliver`` past the ``delivery_gate``; call on the event loop."""
        self.deliver(response, final, timing, True)

    @staticmethod
    def _trace_delivery(
        trace: RequestTrace, response: InferenceResponse | None, final: bool
    ) -> None:
        if response is not None:
            if not trace.parent_id:  # a front end's stamp: a child trace has none
                trace.stamp("INFER_RESPONSE_COMPLETE")
            for tensor in response.outputs:
                trace.record_tensor(
                    "TENSOR_BACKEND_OUTPUT",
                    tensor.name,
                    tensor.datatype.wire_name,
                    tensor.shape,
                    tensor.data,
                )
        if final:
            trace.stamp("REQUEST_END")
            if trace.parent_id:  # no front end finishes a child trace (tracing.py)
                trace.finish()

    def send_threadsafe(
        self,
        response: InferenceResponse | None,
        final: bool,
        timing: ResponseTiming | None = None,
    ) -> None:
        """``deliver`` from any thread but the event loop's (decoupled response senders).

        With a ``response_window`` this waits while the client is behind (flow control).
        """
        assert self.loop is not None, "request submitted without an event loop"
        if self.sent_hook is not None:
            self.sent_hook(response, final)
        window = self.response_window
        if window is not None and response is not None and not self._cancelled:
            response.window_bytes = response_bytes(response)
            window.acquire(response.window_bytes)
        self.loop.call_soon_threadsafe(self.deliver, response, final, timing)
