"""Request tracing's HTTP stamps: when the request arrived (its ``Exchange`` knows) and when
its answer was sent."""

from __future__ import annotations

from collections.abc import Callable

from pytriton_core.frontends.http.exchange import Exchange
from pytriton_core.tracing import RequestTrace


def stamp_received(trace: RequestTrace, exchange: Exchange | None) -> None:
    """The receive stamps, when ``exchange`` (None outside a connection) knows them."""
    if exchange is not None and exchange.received_end_ns:
        trace.stamp("HTTP_RECV_START", exchange.received_start_ns)
        trace.stamp("HTTP_RECV_END", exchange.received_end_ns)


def finish_when_sent(trace: RequestTrace) -> Callable[[int, int], None]:
    """The response's ``on_sent``: stamps the send and hands the trace to its writer."""

    def sent(start_ns: int, end_ns: int) -> None:
        trace.stamp("HTTP_SEND_START", start_ns)
        trace.stamp("HTTP_SEND_END", end_ns)
        trace.finish()

    return sent
