"""A request's responses as the body of one HTTP answer: a stream of server-sent events
(``/generate_stream``, ``/infer`` with ``Accept: text/event-stream``) or a single JSON
document (``/generate``), as Triton's generate extension writes them.

The status is the first response's: 200, or the status of its error (the generate
extension answers 400 for any error: Triton 2.51 reads the code of an error it has already
released, which reads as 400). Events written after that carry errors in the body
(``data: {"error": "..."}``) while the status stays what it was; a request that ends
without any response answers 200 with an empty stream.

``answer`` submits the request, and gives it up if the client goes away first (the
connection's ``Exchange``): the request is cancelled and the stream stops.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import orjson

from pytriton_core.errors import ServerError
from pytriton_core.frontends.http.exchange import current_exchange
from pytriton_core.frontends.http.messages import JSON, HttpResponse
from pytriton_core.frontends.http.streaming import ResponseStream
from pytriton_core.inference.flow import ResponseWindow
from pytriton_core.inference.request import InferenceRequest
from pytriton_core.inference.response import InferenceResponse
from pytriton_core.runtime.model import Model
from pytriton_core.service import InferenceService

# (response, final) -> its JSON document; raises a ServerError for one it cannot encode.
Encoder = Callable[[InferenceResponse, bool], bytes]


def error_document(error: ServerError) -> bytes:
    return orjson.dumps({"error": error.message})


class ResponseCollector:
    """Receives a request's responses on the event loop (its ``on_response``)."""

    def __init__(
        self,
        encode: Encoder,
        *,
        stream: bool,
        empty_final: Callable[[], bytes] | None = None,
        single_error: str = "",
        error_status: int | None = None,
    ) -> None:
        self._encode = encode
        # A flag-only completion becomes an event of its own when this is set.
        self._empty_final = empty_final
        self._single_error = single_error  # /generate: the answer when not exactly one
        self._error_status = error_status  # every error's status, when set
        self._stream = ResponseStream(ResponseWindow()) if stream else None
        self._documents: list[bytes] = []  # /generate: every response, to count them
        self.status: int | None = None  # the first response's
        self._request: InferenceRequest | None = None
        self._started: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._finished: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    @property
    def window(self) -> ResponseWindow | None:
        return None if self._stream is None else self._stream.window

    def on_response(self, response: InferenceResponse | None, final: bool) -> None:
        document: bytes | None = None
        error: ServerError | None = None
        if response is not None:
            error = response.error
            if error is None:
                try:
                    document = self._encode(response, final)
                except ServerError as exc:
                    error = exc
            if error is not None:
                document = error_document(error)
        elif final and self._empty_final is not None:
            document = self._empty_final()
        if self.status is None and (response is not None or final):
            if error is None:
                self.status = 200
            else:
                self.status = self._error_status or error.http_status
            self._started.set_result(None)
        if document is not None:
            if self._stream is not None:
                held = response.window_bytes if response is not None else 0
                self._stream.push(document, held)
            else:
                self._documents.append(document)
        if final:
            trace = None if self._request is None else self._request.trace
            if trace is not None:
                trace.finish()
            if self._stream is not None:
                self._stream.end()
            if not self._finished.done():
                self._finished.set_result(None)

    def client_gone(self) -> None:
        if self._stream is not None:
            self._stream.abandon()

    async def answer(
        self, service: InferenceService, model: Model, request: InferenceRequest
    ) -> HttpResponse:
        """Submit ``request`` and answer with its responses once the status is known."""
        self._request = request
        request.on_response = self.on_response
        request.response_window = self.window
        service.submit(model, request)  # a refusal is a plain JSON error, status and all
        exchange = current_exchange()
        exchange.on_client_gone(request.cancel)
        exchange.on_client_gone(self.client_gone)
        if self._stream is not None:
            await self._started
            assert self.status is not None
            return HttpResponse(
                self.status, stream=self._stream, content_type=self._stream.content_type
            )
        await self._finished
        assert self.status is not None
        if len(self._documents) == 1:
            body = self._documents[0]
        else:
            body = orjson.dumps({"error": self._single_error})
        return HttpResponse(self.status, (body,), JSON)
