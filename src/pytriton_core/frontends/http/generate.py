"""The generate extension: ``POST /v2/models/{m}[/versions/{v}]/generate`` (one response, as
one JSON object) and ``.../generate_stream`` (every response, as server-sent events), for
decoupled and non-decoupled models alike, with Triton's JSON mapping (``generate_codec``)
and Triton's answers (``event_stream``).

A request that fails before the model has it (a bad body, an unknown model) is answered with
a plain JSON error and its status, as every endpoint answers one.
"""

from __future__ import annotations

from pytriton_core.errors import InvalidArgumentError
from pytriton_core.frontends.http.event_stream import Encoder, ResponseCollector
from pytriton_core.frontends.http.generate_codec import (
    ERROR_STATUS,
    ONE_RESPONSE_EXPECTED,
    decode_generate_request,
    encode_generate_response,
)
from pytriton_core.frontends.http.messages import HttpResponse
from pytriton_core.frontends.http.router import Request, RouteMatch, Router
from pytriton_core.inference.request import InferenceRequest
from pytriton_core.inference.response import InferenceResponse
from pytriton_core.options import ApiCategory
from pytriton_core.runtime.model import Model
from pytriton_core.service import InferenceService


def add_generate_routes(router: Router, service: InferenceService, model_path: str) -> None:
    """Route the two endpoints under ``model_path`` (the model/version URL pattern)."""

    async def generate(request: Request, match: RouteMatch) -> HttpResponse:
        return await _generate(service, request, match, stream=False)

    async def generate_stream(request: Request, match: RouteMatch) -> HttpResponse:
        return await _generate(service, request, match, stream=True)

    # Triton restricts them as inference (--http-restricted-api=inference:...).
    router.add(model_path + r"/generate", ApiCategory.INFERENCE, POST=generate)
    router.add(model_path + r"/generate_stream", ApiCategory.INFERENCE, POST=generate_stream)


async def _generate(
    service: InferenceService, http_request: Request, match: RouteMatch, *, stream: bool
) -> HttpResponse:
    model = service.model(match.get("model") or "", match.get("version"))
    encoding = http_request.headers.get("content-encoding")
    if encoding is not None and encoding.lower() != "identity":
        raise InvalidArgumentError("Unsupported content-encoding, only 'identity' is supported.")
    request = decode_generate_request(
        model, http_request.body, service.options.http_max_input_size, service.options.limits
    )
    collector = ResponseCollector(
        _encoder(model, request),
        stream=stream,
        single_error=ONE_RESPONSE_EXPECTED,
        error_status=ERROR_STATUS,
    )
    return await collector.answer(service, model, request)


def _encoder(model: Model, request: InferenceRequest) -> Encoder:
    def encode(response: InferenceResponse, final: bool) -> bytes:
        return encode_generate_response(model, request, response)

    return encode
