"""``POST /v2/models/{model}[/versions/{version}]/infer``: the KServe v2 inference.

Most requests are answered within ``submit`` (a lone request to a short Python model runs on
the event loop), so the handler answers without a coroutine of its own when nothing can
wait: no compressed body to inflate, no event stream, none to compress. An answer still to
come (the model executes in its thread or a worker process) is a ``DeferredResponse`` the
answer's arrival encodes and sets (``_Encoder``). Every other request takes the same steps
in a coroutine (``_infer``), awaiting where it must. An extension type (infer_handler.pxd):
every inference request runs it.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Iterator
from re import Pattern

from pytriton_core._native.infer_walk import HeaderMemo
from pytriton_core.errors import InvalidArgumentError, UnsupportedError
from pytriton_core.frontends.http import compression
from pytriton_core.frontends.http.exchange import Exchange
from pytriton_core.frontends.http.infer_codec import (
    DecodedInfer,
    decode_infer_request,
    encode_infer_response,
)
from pytriton_core.frontends.http.infer_stream import (
    STREAM_PARAMETERS,
    stream_infer,
    wants_event_stream,
)
from pytriton_core.frontends.http.messages import (
    Buffer,
    DeferredResponse,
    HttpResponse,
    error_response,
    failure_response,
)
from pytriton_core.frontends.http.router import Request, RouteMatch
from pytriton_core.frontends.http.timing import finish_when_sent, stamp_received
from pytriton_core.inference.header_forwarding import forward_headers
from pytriton_core.inference.response import InferenceResponse
from pytriton_core.runtime.model import Model
from pytriton_core.service.inference_service import InferenceService, SingleAnswer

log = logging.getLogger(__name__)


class InferHandler:
    """The infer route's handler (see the module docstring)."""

    def __init__(self, service: InferenceService, forwarded: Pattern[str] | None) -> None:
        """``forwarded``: the request headers forwarded to the model as parameters
        (``--http-header-forward-pattern``), None for none."""
        self._service = service
        self._forwarded = forwarded
        self._header_memo = HeaderMemo()  # common headers read before (csrc/http/infer_walk)

    def __call__(
        self, request: Request, match: RouteMatch
    ) -> HttpResponse | Awaitable[HttpResponse]:
        return self._infer_now(request, match)

    def _infer_now(
        self, request: Request, match: RouteMatch
    ) -> HttpResponse | Awaitable[HttpResponse]:
        """The answer, or (where something may wait) the coroutine that gets it."""
        headers = request.headers
        # Most clients send neither: no body to inflate, no media types to read.
        if "content-encoding" in headers or "accept" in headers:
            return self._infer(request, match)
        model = self._model(match)
        _refuse_decoupled(model, False)
        decoded = self._decoded(model, request, request.body, ())
        exchange = request.exchange
        answer = self._submit(model, decoded, exchange)
        response = answer.value
        if "accept-encoding" in headers:
            return self._answer(model, decoded, answer, request)
        if response is None:  # executing elsewhere (a thread, a worker process)
            deferred = DeferredResponse()
            answer.on_answer = _Encoder(model, decoded, exchange, deferred)
            return deferred
        return _encoded(model, decoded, response, exchange)

    async def _infer(self, request: Request, match: RouteMatch) -> HttpResponse:
        """Every step, awaiting where one waits."""
        model = self._model(match)
        event_stream = "accept" in request.headers and wants_event_stream(request)
        _refuse_decoupled(model, event_stream)
        body = request.body
        content_encoding = request.headers.get("content-encoding")
        if content_encoding is not None:
            try:
                body = await compression.decode_body(
                    body, content_encoding, self._service.options.http_max_input_size
                )
            except compression.UnsupportedEncodingError as exc:
                refusal = error_response(exc)
                refusal.headers.append((b"Accept-Encoding", exc.accepted))
                return refusal
        if event_stream:
            decoded = self._decoded(model, request, body, STREAM_PARAMETERS)
            return await stream_infer(self._service, model, decoded)
        decoded = self._decoded(model, request, body, ())
        answer = self._submit(model, decoded, request.exchange)
        return await self._answer(model, decoded, answer, request)

    async def _answer(
        self, model: Model, decoded: DecodedInfer, answer: SingleAnswer, request: Request
    ) -> HttpResponse:
        """The answer to come (and to compress, if the client accepts it)."""
        response = answer.value
        if response is None:
            response = await answer.wait(decoded.request)
        accept_encoding = request.headers.get("accept-encoding")
        exchange = request.exchange
        if not accept_encoding:
            return _encoded(model, decoded, response, exchange)
        trace = decoded.request.trace
        http_response = _encoded(model, decoded, response, exchange, finish_trace=False)
        try:
            http_response = await compression.encode_response(http_response, accept_encoding)
        except BaseException:
            if trace is not None:
                trace.finish()
            raise
        if trace is not None:
            http_response.on_sent = finish_when_sent(trace)
        return http_response

    def _model(self, match: RouteMatch) -> Model:
        params = match.params
        return self._service.model(params["model"] or "", params["version"])

    def _decoded(
        self, model: Model, request: Request, body: Buffer, reserved: tuple[str, ...]
    ) -> DecodedInfer:
        """The body decoded, with the headers forwarded to the model."""
        header_length = _header_length(request, len(body))
        # (positional: a keyword would make this a call through Python, not a C call)
        decoded = decode_infer_request(
            model, body, header_length, self._service, reserved, False, self._header_memo
        )
        if self._forwarded is not None:
            forward_headers(decoded.request, _text_headers(request), self._forwarded)
        return decoded

    def _submit(
        self, model: Model, decoded: DecodedInfer, exchange: Exchange | None
    ) -> SingleAnswer:
        """Submit (``service.infer`` without its coroutine); a client that goes away
        cancels the request."""
        request = decoded.request
        if exchange is not None:  # None: called outside a connection, nobody to leave
            exchange.cancel_on_gone(request)
        return self._service.begin_infer(model, request)


class _Encoder:
    """A ``SingleAnswer``'s ``on_answer`` for a request executing elsewhere: encodes the
    answer when it comes and hands it to the protocol's ``DeferredResponse`` (what the
    handler's coroutine did after its ``await``, without one)."""

    def __init__(
        self,
        model: Model,
        decoded: DecodedInfer,
        exchange: Exchange | None,
        deferred: DeferredResponse,
    ) -> None:
        self._model = model
        self._decoded = decoded
        self._exchange = exchange
        self._deferred = deferred

    def __call__(self, response: InferenceResponse) -> None:
        try:
            http_response = _encoded(self._model, self._decoded, response, self._exchange)
        except Exception as exc:
            http_response = failure_response(
                exc, log, "unhandled error answering an inference of %s", self._model.name
            )
        self._deferred.set(http_response)


def _refuse_decoupled(model: Model, event_stream: bool) -> None:
    if model.spec.decoupled and not event_stream:
        raise UnsupportedError(
            "HTTP end point doesn't support models with decoupled transaction policy"
        )


def _encoded(
    model: Model,
    decoded: DecodedInfer,
    response: InferenceResponse,
    exchange: Exchange | None,
    finish_trace: bool = True,
) -> HttpResponse:
    """The response as HTTP; a traced request's trace gets its receive stamps (which
    ``exchange`` knows) and ends once the answer is sent, or here if it fails
    (``finish_trace``: the caller ends it)."""
    trace = decoded.request.trace
    if trace is not None:
        stamp_received(trace, exchange)
    try:
        if response.error is not None:
            raise response.error
        http_response = encode_infer_response(model, decoded, response)
    except BaseException:
        if trace is not None:
            trace.finish()
        raise
    if trace is not None and finish_trace:
        http_response.on_sent = finish_when_sent(trace)
    return http_response


def _text_headers(request: Request) -> Iterator[tuple[str, str]]:
    """Every header as received, as text."""
    return ((k.decode("latin-1"), v.decode("latin-1")) for k, v in request.raw_headers)


def _header_length(request: Request, body_length: int) -> int | None:
    raw = request.headers.get("inference-header-content-length")
    if raw is None:
        return None
    try:
        value = int(raw)
    except ValueError:
        raise InvalidArgumentError(
            f"Unable to parse Inference-Header-Content-Length, got: {raw}"
        ) from None
    if value < 0 or value > body_length:
        raise InvalidArgumentError(
            f"inference header size should be in range (0, {body_length}), got: {value}"
        )
    return value
