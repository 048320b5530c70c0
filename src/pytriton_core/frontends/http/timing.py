"""When the request being handled arrived: the protocol sets it for each request's task, so
handlers that trace read it without it being threaded through every signature."""

from __future__ import annotations

from collections.abc import Callable
from contextvars import ContextVar

from pytriton_core.tracing import RequestTrace

# (first byte seen, request complete), monotonic ns; (0, 0) outside a request.
RECEIVED: ContextVar[tuple[int, int]] = ContextVar("pytriton_http_received", default=(0, 0))


def stamp_received(trace: RequestTrace) -> None:
    start, end = RECEIVED.get()
    if end:
        trace.stamp("HTTP_RECV_START", start)
        trace.stamp("HTTP_RECV_END", end)


def finish_when_sent(trace: RequestTrace) -> Callable[[int, int], None]:
    """The response's ``on_sent``: stamps the send and hands the trace to its writer."""

    def sent(start_ns: int, end_ns: int) -> None:
        trace.stamp("HTTP_SEND_START", start_ns)
        trace.stamp("HTTP_SEND_END", end_ns)
        trace.finish()

    return sent
