"""HTTP responses as the handlers build them, before framing."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Generator, Sequence
from typing import TYPE_CHECKING, Any

import orjson

from pytriton_core.errors import ServerError

if TYPE_CHECKING:
    from pytriton_core.frontends.http.streaming import ResponseStream

JSON = b"application/json"
Buffer = bytes | bytearray | memoryview


class HttpResponse:
    """An answer as a handler builds it (an extension type, messages.pxd: one per request)."""

    def __init__(
        self,
        status: int = 200,
        body: Sequence[Buffer] = (),
        content_type: bytes | None = None,
        headers: list[tuple[bytes, bytes]] | None = None,
        on_sent: Callable[[int, int], None] | None = None,
        stream: ResponseStream | None = None,
    ) -> None:
        self.status = status
        # Written to the socket as they are (header JSON, then tensor memoryviews): no join.
        self.body = body
        self.content_type = content_type
        self.headers: list[tuple[bytes, bytes]] = [] if headers is None else headers
        # Called with (send start, send end) monotonic ns once written (request tracing).
        self.on_sent = on_sent
        # A body sent as it comes, in chunks (server-sent events); ``body`` is then unused.
        self.stream = stream

    def __repr__(self) -> str:
        return (
            f"HttpResponse(status={self.status!r}, body={self.body!r}, "
            f"content_type={self.content_type!r}, headers={self.headers!r})"
        )

    @property
    def content_length(self) -> int:
        total = 0
        for part in self.body:
            total += part.nbytes if isinstance(part, memoryview) else len(part)
        return total


class DeferredResponse:
    """An answer that comes later, handed over rather than awaited: a handler returns one
    where its answer waits for work elsewhere (an inference executing in an instance's
    thread or a worker process), and the protocol writes the answer when it is ``set``,
    with no coroutine, task or future made for the request. (An extension type,
    messages.pxd.)"""

    def __init__(self) -> None:
        self.response: HttpResponse | None = None
        self._callback: Callable[[HttpResponse], None] | None = None

    def on_ready(self, callback: Callable[[HttpResponse], None]) -> None:
        """Hand the answer to ``callback`` when it is set (at once if it is)."""
        if self.response is not None:
            callback(self.response)
        else:
            self._callback = callback

    def set(self, response: HttpResponse) -> None:
        """The answer (on the event loop); later ones are ignored."""
        if self.response is not None:
            return
        self.response = response
        callback, self._callback = self._callback, None
        if callback is not None:
            callback(response)

    def __await__(self) -> Generator[Any, None, HttpResponse]:
        """Awaited where a handler's answer is awaited (a wrapping handler's coroutine)."""
        if self.response is None:
            future: asyncio.Future[HttpResponse] = asyncio.get_running_loop().create_future()
            self.on_ready(future.set_result)
            return (yield from future)
        return self.response


def json_response(value: object, status: int = 200) -> HttpResponse:
    return HttpResponse(status, (orjson.dumps(value),), JSON)


def error_response(error: ServerError) -> HttpResponse:
    return json_response({"error": error.message}, error.http_status)


def plain_error(status: int, message: str) -> HttpResponse:
    return json_response({"error": message}, status)


def failure_response(
    error: Exception, log: logging.Logger, what: str, *args: object
) -> HttpResponse:
    """The answer to a handler that failed: a ``ServerError``'s own; anything else is
    logged on ``log`` (``what % args``, with its traceback) and answered 500."""
    if isinstance(error, ServerError):
        return error_response(error)
    log.error(what, *args, exc_info=error)
    return plain_error(500, "internal server error")


EMPTY_OK = HttpResponse(200)
