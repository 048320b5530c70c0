"""Responses that leave in the order their requests left a batcher (``preserve_ordering``
for decoupled models), as Triton 2.51's dynamic batcher orders them
(``DynamicBatchScheduler::DelegateResponse`` and ``FinalizeResponses``, r24.10).

Each request gets its place when it leaves the batcher in a batch. The responses of the
request at the head go out as they come; those of a later request wait until every
earlier request has sent its final response, then go out together, in the order they were
sent. A model that answers only with a final response (not decoupled) needs none of this:
an instance runs one batch at a time and its answers reach the clients in order anyway.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Sequence

from pytriton_core.inference.request import InferenceRequest
from pytriton_core.inference.response import InferenceResponse
from pytriton_core.inference.statistics import ResponseTiming

_Delivery = tuple[InferenceResponse | None, bool, ResponseTiming | None]


class ResponseOrder:
    """The order of one batcher's requests; its ``deliver`` is their ``delivery_gate``."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # places are taken on instance threads
        self._order: deque[InferenceRequest] = deque()
        self._held: dict[int, list[_Delivery]] = {}

    def place(self, requests: Sequence[InferenceRequest]) -> None:
        """``requests`` left the batcher, in this order (a request queued again, e.g.
        rescheduled, keeps the place it had)."""
        with self._lock:
            for request in requests:
                if request.delivery_gate is None:
                    request.delivery_gate = self.deliver
                    self._order.append(request)

    def deliver(
        self,
        request: InferenceRequest,
        response: InferenceResponse | None,
        final: bool,
        timing: ResponseTiming | None,
    ) -> None:
        """On the event loop (the only place that takes requests off the order)."""
        with self._lock:
            if not self._order or self._order[0] is not request:
                self._held.setdefault(id(request), []).append((response, final, timing))
                return
        request.hand_over(response, final, timing)
        if final:
            self._next()

    def _next(self) -> None:
        """The head has sent its final response: the next requests' held responses go."""
        while True:
            with self._lock:
                self._order.popleft()
                if not self._order:
                    return
                head = self._order[0]
                held = self._held.pop(id(head), [])
            for response, final, timing in held:
                head.hand_over(response, final, timing)
                if final:
                    break
            else:
                return

    def pending(self) -> int:
        """Requests with a place whose final response has not gone out (for tests)."""
        with self._lock:
            return len(self._order)
