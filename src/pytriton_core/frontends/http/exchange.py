"""One request being answered on an HTTP connection, as its handler sees it: when it arrived,
and whether the client is still there to read the answer.

The protocol makes one per request and hands it over on the request itself
(``HttpRequest.exchange``), so a handler whose work can be given up (an inference)
registers what to do when the client goes away, and a traced one reads when its request
arrived, without the connection being threaded through every signature. A handler that
waits (a coroutine) also finds it as ``current_exchange()``: the protocol sets
``CURRENT_EXCHANGE`` in the context it runs that handler's steps in. Handlers that must
finish whatever happens (a model load) register nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from contextvars import ContextVar

from pytriton_core.inference.request import InferenceRequest


class Exchange:
    """An extension type (exchange.pxd): the protocol makes one per request."""

    def __init__(self, received_start_ns: int = 0, received_end_ns: int = 0) -> None:
        self._hooks: list[Callable[[], None]] | None = None
        # A request to cancel if the client goes (``cancel_on_gone``).
        self._cancelled: InferenceRequest | None = None
        self.client_gone = False
        # When the request's first bytes and its last bytes arrived (monotonic ns); 0 for
        # an exchange outside a connection.
        self.received_start_ns = received_start_ns
        self.received_end_ns = received_end_ns

    @property
    def watched(self) -> bool:
        """Whether anything waits to hear that the client went away."""
        return self._cancelled is not None or bool(self._hooks)

    def on_client_gone(self, hook: Callable[[], None]) -> None:
        """Run ``hook`` (on the event loop) if the client goes away before the answer is
        written; at once if it already has."""
        if self.client_gone:
            hook()
        elif self._hooks is None:
            self._hooks = [hook]
        else:
            self._hooks.append(hook)

    def cancel_on_gone(self, request: InferenceRequest) -> None:
        """Cancel ``request`` if the client goes away before the answer is written (at once
        if it already has): ``on_client_gone(request.cancel)`` without a bound method and a
        list made for every inference. One request per exchange (an HTTP request makes one
        inference); anything else registers a hook."""
        if self.client_gone:
            request.cancel()
        else:
            self._cancelled = request

    def mark_client_gone(self) -> None:
        """The connection closed (or the client is known to have left): run the hooks."""
        if self.client_gone:
            return
        self.client_gone = True
        cancelled, self._cancelled = self._cancelled, None
        hooks, self._hooks = self._hooks, None
        if cancelled is not None:
            cancelled.cancel()
        for hook in hooks or ():
            hook()

    def finish(self) -> None:
        """The answer is written: nothing is left to give up."""
        self._hooks = None
        self._cancelled = None


# Outside a connection (a handler called directly) the exchange is one nobody closes.
CURRENT_EXCHANGE: ContextVar[Exchange | None] = ContextVar("pytriton_http_exchange", default=None)


def current_exchange() -> Exchange:
    exchange = CURRENT_EXCHANGE.get()
    return exchange if exchange is not None else Exchange()
