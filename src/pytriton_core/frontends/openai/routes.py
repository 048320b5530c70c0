"""The OpenAI-compatible API's endpoints: ``/v1/models``, ``/v1/completions``,
``/v1/chat/completions`` and ``/v1/embeddings``, each calling the service as every front end
does, every error answered in OpenAI's format (``errors.py``).

``--http-restricted-api`` restricts them as Triton's OpenAI front end groups them: the
completions and embeddings as ``inference``, the model list as ``model-repository``.
"""

from __future__ import annotations

import base64
import logging

import orjson

from pytriton_core.errors import InvalidArgumentError, NotFoundError, ServerError, UnavailableError
from pytriton_core.frontends.http.exchange import current_exchange
from pytriton_core.frontends.http.messages import JSON, HttpResponse
from pytriton_core.frontends.http.router import Handler, Request, RouteMatch, Router
from pytriton_core.frontends.openai.contract import (
    embedding_request,
    read_embeddings,
    render_chat,
    text_request,
)
from pytriton_core.frontends.openai.errors import ModelNotFoundError, error_response, render_error
from pytriton_core.frontends.openai.generation import (
    ChatShape,
    CompletionShape,
    Generation,
    Shape,
)
from pytriton_core.frontends.openai.schema import (
    GenerationRequest,
    read_chat,
    read_completion,
    read_embedding,
)
from pytriton_core.options import ApiCategory
from pytriton_core.runtime.model import Model
from pytriton_core.service import InferenceService

log = logging.getLogger(__name__)

OWNER = "pytriton-core"  # each model's "owned_by"


def openai_router(service: InferenceService) -> Router:
    router = Router(service.options.restricted.http, render_error)

    async def list_models(request: Request, match: RouteMatch) -> HttpResponse:
        names = dict.fromkeys(entry.name for entry in service.repository_index(ready_only=True))
        models = []
        for name in names:
            try:
                models.append(_model_object(_model(service, name)))
            except ModelNotFoundError:
                continue  # unloaded meanwhile
        return _json({"object": "list", "data": models})

    async def retrieve_model(request: Request, match: RouteMatch) -> HttpResponse:
        return _json(_model_object(_model(service, match.get("model") or "")))

    async def completions(request: Request, match: RouteMatch) -> HttpResponse:
        _check_encoding(request)
        parsed = read_completion(request.body)
        shape = CompletionShape(parsed.prompt if parsed.echo else "")
        return await _generate(service, parsed, shape, parsed.prompt, None)

    async def chat_completions(request: Request, match: RouteMatch) -> HttpResponse:
        _check_encoding(request)
        parsed = read_chat(request.body)
        prompt = render_chat(parsed.messages)
        return await _generate(service, parsed, ChatShape(), prompt, parsed.messages)

    async def embeddings(request: Request, match: RouteMatch) -> HttpResponse:
        _check_encoding(request)
        parsed = read_embedding(request.body)
        model = _model(service, parsed.model)
        infer_request = embedding_request(model, parsed.texts, parsed.parameters, parsed.extra)
        current_exchange().on_client_gone(infer_request.cancel)
        response = await service.infer(model, infer_request)
        if response.error is not None:
            raise response.error
        vectors, tokens = read_embeddings(model.name, response, len(parsed.texts))
        data = [
            {
                "object": "embedding",
                "index": index,
                "embedding": base64.b64encode(vector.astype("<f4").tobytes()).decode()
                if parsed.base64
                else vector.tolist(),
            }
            for index, vector in enumerate(vectors)
        ]
        usage = None if tokens is None else {"prompt_tokens": tokens, "total_tokens": tokens}
        return _json({"object": "list", "data": data, "model": parsed.model, "usage": usage})

    router.add(r"/v1/models", ApiCategory.MODEL_REPOSITORY, GET=_answering(list_models))
    router.add(
        r"/v1/models/(?P<model>[^/]+)", ApiCategory.MODEL_REPOSITORY, GET=_answering(retrieve_model)
    )
    router.add(r"/v1/completions", ApiCategory.INFERENCE, POST=_answering(completions))
    router.add(r"/v1/chat/completions", ApiCategory.INFERENCE, POST=_answering(chat_completions))
    router.add(r"/v1/embeddings", ApiCategory.INFERENCE, POST=_answering(embeddings))
    return router


async def _generate(
    service: InferenceService,
    parsed: GenerationRequest,
    shape: Shape,
    prompt: str,
    messages: list[dict[str, str]] | None,
) -> HttpResponse:
    """A completion or a chat completion (``messages`` None: a completion)."""
    model = _model(service, parsed.model)
    infer_request = text_request(
        model,
        prompt=prompt,
        messages=messages,
        stream=parsed.stream,
        sampling=parsed.sampling,
        extra=parsed.extra,
    )
    generation = Generation(
        shape, parsed.model, stream=parsed.stream, include_usage=parsed.include_usage
    )
    return await generation.answer(service, model, infer_request)


def _answering(handler: Handler) -> Handler:
    """``handler`` with every error it raises answered in OpenAI's format."""

    async def answer(request: Request, match: RouteMatch) -> HttpResponse:
        try:
            routed = handler(request, match)
            return routed if isinstance(routed, HttpResponse) else await routed
        except ServerError as exc:
            return error_response(exc)
        except Exception:
            log.exception("unhandled error on %s %s", request.method, request.path)
            return render_error(500, "internal server error")

    return answer


def _model(service: InferenceService, name: str) -> Model:
    """The model's latest ready version: OpenAI names a model without a version."""
    try:
        return service.model(name, None)
    except (NotFoundError, UnavailableError):
        raise ModelNotFoundError(name) from None


def _model_object(model: Model) -> dict[str, object]:
    return {"id": model.name, "object": "model", "created": int(model.loaded_at), "owned_by": OWNER}


def _check_encoding(request: Request) -> None:
    encoding = request.headers.get("content-encoding")
    if encoding is not None and encoding.lower() != "identity":
        raise InvalidArgumentError("Unsupported content-encoding, only 'identity' is supported.")


def _json(document: object) -> HttpResponse:
    return HttpResponse(200, (orjson.dumps(document),), JSON)
