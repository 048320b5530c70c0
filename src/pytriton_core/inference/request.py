"""Inference requests: what a front end (or a model, through BLS) asks of a model.

A request yields a stream of zero or more responses ending with a final flag; the
one-response case is the common special case. Responses are always delivered on the
server's event loop through ``on_response``; threads hand them over with
``send_threadsafe`` (batched by the instance in the common case).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from pytriton_core.inference.response import InferenceResponse, ParameterValue
from pytriton_core.inference.tensor import Tensor

if TYPE_CHECKING:
    from pytriton_core.tracing import RequestTrace

SEQUENCE_START = 1
SEQUENCE_END = 2

ResponseCallback = Callable[[InferenceResponse | None, bool], None]
"""Called on the event loop with (response or None for a flag-only completion, final)."""


@dataclass(slots=True)
class RequestedOutput:
    name: str
    class_count: int = 0  # > 0: the classification extension's top-k
    # Bound for a client's shared-memory region, which copies from device memory directly:
    # GPU backends leave such an output on the device.
    to_region: bool = False


@dataclass(slots=True, eq=False)
class InferenceRequest:
    model_name: str
    model_version: int = -1  # -1: the latest ready version
    id: str = ""
    inputs: dict[str, Tensor] = field(default_factory=dict)
    # None: every output of the model, as Triton does when a client names none.
    requested_outputs: dict[str, RequestedOutput] | None = None
    parameters: dict[str, ParameterValue] = field(default_factory=dict)
    priority: int = 0
    timeout_us: int = 0
    correlation_id: int | str = 0
    flags: int = 0
    on_response: ResponseCallback | None = None
    loop: asyncio.AbstractEventLoop | None = None

    # Filled in by the core.
    batch_size: int = 1
    arrival_ns: int = field(default_factory=time.monotonic_ns)
    queue_start_ns: int = 0
    cancelled: bool = False
    final_sent: bool = False
    # The sequence batcher's filler for an idle slot of a batch (READY false): executed,
    # never answered, not counted as an inference.
    padding: bool = False
    # Set by a backend when the model released the request with RELEASE_RESCHEDULE: the
    # scheduler queues it again (iterative sequences) instead of completing it.
    reschedule: bool = False
    trace: RequestTrace | None = None  # set when tracing sampled this request

    def output_names(self, model_outputs: list[str]) -> list[str]:
        """The names to return, in the model's order when the client named none."""
        if self.requested_outputs is None:
            return model_outputs
        return list(self.requested_outputs)

    def deliver(self, response: InferenceResponse | None, final: bool) -> None:
        """Hand a response to whoever sent the request; call on the event loop."""
        if self.final_sent:
            return
        self.final_sent = final
        if self.trace is not None:
            self._trace_delivery(self.trace, response, final)
        if self.on_response is not None:
            self.on_response(response, final)

    @staticmethod
    def _trace_delivery(
        trace: RequestTrace, response: InferenceResponse | None, final: bool
    ) -> None:
        if response is not None:
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

    def send_threadsafe(self, response: InferenceResponse | None, final: bool) -> None:
        """``deliver`` from any thread (decoupled response senders)."""
        assert self.loop is not None, "request submitted without an event loop"
        self.loop.call_soon_threadsafe(self.deliver, response, final)
