"""Decoupled models over HTTP ``/infer``, beyond Triton, as an opt-in: a request that sends
``Accept: text/event-stream`` gets its responses as server-sent events, one
``data: <infer response JSON>`` event per response, in the order the model sends them.

Each event is the JSON response ``/infer`` answers (``id``, ``model_name``,
``model_version``, ``outputs`` with their data), its ``parameters`` carrying
``triton_final_response`` as gRPC streams do. A model that ends a request with a flag-only
completion sends no event for it, unless the request's parameters set
``triton_enable_empty_final_response: true``; the body ends with the request either way.
Errors follow the generate extension's rules (``event_stream``). Outputs are JSON (or in
shared memory): an event stream cannot carry the binary tensor extension.

Without that header, a decoupled model answers ``/infer`` as Triton does: 501.
"""

from __future__ import annotations

from pytriton_core.errors import InvalidArgumentError
from pytriton_core.frontends.http.event_stream import ResponseCollector
from pytriton_core.frontends.http.infer_codec import DecodedInfer, encode_infer_response
from pytriton_core.frontends.http.messages import HttpResponse
from pytriton_core.frontends.http.router import Request
from pytriton_core.frontends.http.streaming import EVENT_STREAM
from pytriton_core.inference.response import InferenceResponse
from pytriton_core.runtime.model import Model
from pytriton_core.service import InferenceService

EMPTY_FINAL = "triton_enable_empty_final_response"
FINAL = "triton_final_response"
STREAM_PARAMETERS = (EMPTY_FINAL,)
_MEDIA_TYPE = EVENT_STREAM.split(b";", 1)[0].decode()


def wants_event_stream(request: Request) -> bool:
    """Whether the client's ``Accept`` names ``text/event-stream``."""
    accept = request.headers.get("accept")
    if not accept:
        return False
    return any(part.split(";", 1)[0].strip().lower() == _MEDIA_TYPE for part in accept.split(","))


async def stream_infer(
    service: InferenceService, model: Model, decoded: DecodedInfer
) -> HttpResponse:
    if decoded.binary_by_default or any(decoded.binary_outputs.values()):
        raise InvalidArgumentError(
            "binary tensor data cannot be sent as server-sent events: request the outputs "
            "as JSON (or in shared memory)"
        )
    empty_final = decoded.reserved.get(EMPTY_FINAL, False)
    if not isinstance(empty_final, bool):
        raise InvalidArgumentError(f"Unable to parse '{EMPTY_FINAL}', expecting a bool")

    def encode(response: InferenceResponse, final: bool) -> bytes:
        flagged = InferenceResponse(
            outputs=response.outputs, parameters={**response.parameters, FINAL: final}
        )
        (document,) = encode_infer_response(model, decoded, flagged).body
        return bytes(document)

    def final_event() -> bytes:
        return encode(InferenceResponse(), True)

    collector = ResponseCollector(
        encode, stream=True, empty_final=final_event if empty_final else None
    )
    return await collector.answer(service, model, decoded.request)
