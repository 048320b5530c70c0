"""The statistics of a decoupled request's responses, one by one: ``response_stats`` per
response index (what Triton's statistics extension reports for decoupled models) and the
first-response histogram, both from the moments the backend sent each response.

A response the backend sent counts at the next index: a success, a failure (an error
response), a cancellation (an error with code CANCELLED) or, for a flag-only completion (FINAL
without a response), an empty response. Responses the backend did not send (a request failed
before it ran) count in neither, as in Triton, except that the first of them is the request's
first response for the histogram.
"""

from __future__ import annotations

import time

from pytriton_core.errors import ErrorCode
from pytriton_core.inference.response import InferenceResponse
from pytriton_core.inference.statistics import ModelStatistics, ResponseKind, ResponseTiming


class ResponseCounter:
    """A request's ``observer`` (``InferenceRequest.deliver`` calls it on the event loop)."""

    __slots__ = ("_arrival_ns", "_first_seen", "_index", "_stats")

    def __init__(self, stats: ModelStatistics, arrival_ns: int) -> None:
        self._stats = stats
        self._arrival_ns = arrival_ns
        self._index = 0
        self._first_seen = False

    def __call__(
        self, response: InferenceResponse | None, final: bool, timing: ResponseTiming | None
    ) -> None:
        if response is not None and not self._first_seen:
            self._first_seen = True
            sent_ns = timing.end_ns if timing is not None else time.monotonic_ns()
            self._stats.record_first_response(self._arrival_ns, sent_ns)
        if timing is None:
            return
        if response is None:
            kind = ResponseKind.EMPTY
        elif response.error is None:
            kind = ResponseKind.SUCCESS
        elif response.error.code is ErrorCode.CANCELLED:
            kind = ResponseKind.CANCEL
        else:
            kind = ResponseKind.FAIL
        self._stats.record_response(self._index, kind, timing)
        self._index += 1
