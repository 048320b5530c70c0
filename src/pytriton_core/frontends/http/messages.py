"""HTTP responses as the handlers build them, before framing."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

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


def json_response(value: object, status: int = 200) -> HttpResponse:
    return HttpResponse(status, (orjson.dumps(value),), JSON)


def error_response(error: ServerError) -> HttpResponse:
    return json_response({"error": error.message}, error.http_status)


def plain_error(status: int, message: str) -> HttpResponse:
    return json_response({"error": message}, status)


EMPTY_OK = HttpResponse(200)
