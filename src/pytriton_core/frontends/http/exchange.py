"""One request being answered on an HTTP connection, as its handler sees it: whether the
client is still there to read the answer.

The protocol sets ``CURRENT_EXCHANGE`` for each request's task (as it sets ``RECEIVED``), so
a handler whose work can be given up (an inference) registers what to do when the client
goes away, without the connection being threaded through every signature. Handlers that
must finish whatever happens (a model load) register nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from contextvars import ContextVar


class Exchange:
    __slots__ = ("_hooks", "client_gone")

    def __init__(self) -> None:
        self._hooks: list[Callable[[], None]] = []
        self.client_gone = False

    @property
    def watched(self) -> bool:
        """Whether anything waits to hear that the client went away."""
        return bool(self._hooks)

    def on_client_gone(self, hook: Callable[[], None]) -> None:
        """Run ``hook`` (on the event loop) if the client goes away before the answer is
        written; at once if it already has."""
        if self.client_gone:
            hook()
        else:
            self._hooks.append(hook)

    def mark_client_gone(self) -> None:
        """The connection closed (or the client is known to have left): run the hooks."""
        if self.client_gone:
            return
        self.client_gone = True
        hooks, self._hooks = self._hooks, []
        for hook in hooks:
            hook()

    def finish(self) -> None:
        """The answer is written: nothing is left to give up."""
        self._hooks = []


# Outside a connection (a handler called directly) the exchange is one nobody closes.
CURRENT_EXCHANGE: ContextVar[Exchange | None] = ContextVar("pytriton_http_exchange", default=None)


def current_exchange() -> Exchange:
    exchange = CURRENT_EXCHANGE.get()
    return exchange if exchange is not None else Exchange()
