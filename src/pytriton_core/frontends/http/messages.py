"""HTTP responses as the handlers build them, before framing."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import orjson

from pytriton_core.errors import ServerError

if TYPE_CHECKING:
    from pytriton_core.frontends.http.streaming import ResponseStream

JSON = b"application/json"
Buffer = bytes | bytearray | memoryview


@dataclass(slots=True)
class HttpResponse:
    status: int = 200
    # Written to the socket as they are (header JSON, then tensor memoryviews): no join.
    body: Sequence[Buffer] = ()
    content_type: bytes | None = None
    headers: list[tuple[bytes, bytes]] = field(default_factory=list)
    # Called with (send start, send end) monotonic ns once written (request tracing).
    on_sent: Callable[[int, int], None] | None = None
    # A body sent as it comes, in chunks (server-sent events); ``body`` is then unused.
    stream: ResponseStream | None = None

    @property
    def content_length(self) -> int:
        return sum(
            len(part) if not isinstance(part, memoryview) else part.nbytes for part in self.body
        )


def json_response(value: object, status: int = 200) -> HttpResponse:
    return HttpResponse(status, (orjson.dumps(value),), JSON)


def error_response(error: ServerError) -> HttpResponse:
    return json_response({"error": error.message}, error.http_status)


def plain_error(status: int, message: str) -> HttpResponse:
    return json_response({"error": message}, status)


EMPTY_OK = HttpResponse(200)
