"""HTTP handlers: each reads the wire, calls the core service, renders the answer.

Errors raised by the core are ServerErrors; ``HttpFrontend`` maps them to a status and
``{"error": ...}`` in one place.
"""

from __future__ import annotations

import orjson

from pytriton_core.config import config_to_json_dict
from pytriton_core.core.service import InferenceService
from pytriton_core.errors import InvalidArgumentError, UnsupportedError
from pytriton_core.frontends.http import compression
from pytriton_core.frontends.http.infer_codec import decode_infer_request, encode_infer_response
from pytriton_core.frontends.http.messages import (
    EMPTY_OK,
    HttpResponse,
    json_response,
    plain_error,
)
from pytriton_core.frontends.http.router import Request, RouteMatch, Router

_MODEL = r"/v2/models/(?P<model>[^/]+)(?:/versions/(?P<version>[0-9]+))?"
_SHM_ACTIONS = r"(?:/region/[^/]+)?/(?:status|register|unregister)"
_UNSUPPORTED_EXTENSIONS = {
    "system shared memory": r"/v2/systemsharedmemory" + _SHM_ACTIONS,
    "CUDA shared memory": r"/v2/cudasharedmemory" + _SHM_ACTIONS,
    "trace": r"/v2(?:/models/[^/]+)?/trace/setting",
    "logging": r"/v2/logging",
}


def build_router(service: InferenceService) -> Router:
    router = Router()

    async def live(request: Request, match: RouteMatch) -> HttpResponse:
        return EMPTY_OK if service.is_live() else HttpResponse(400)

    async def ready(request: Request, match: RouteMatch) -> HttpResponse:
        return EMPTY_OK if service.is_ready() else HttpResponse(400)

    async def server_metadata(request: Request, match: RouteMatch) -> HttpResponse:
        return json_response(service.server_metadata())

    async def model_metadata(request: Request, match: RouteMatch) -> HttpResponse:
        return json_response(service.model_metadata(match.get("model") or "", match.get("version")))

    async def model_ready(request: Request, match: RouteMatch) -> HttpResponse:
        if service.is_model_ready(match.get("model") or "", match.get("version")):
            return EMPTY_OK
        return plain_error(400, "Model version not ready")

    async def model_config(request: Request, match: RouteMatch) -> HttpResponse:
        model = service.model(match.get("model") or "", match.get("version"))
        return json_response(config_to_json_dict(model.config))

    async def model_stats(request: Request, match: RouteMatch) -> HttpResponse:
        return json_response(service.statistics(match.get("model"), match.get("version")))

    async def infer(request: Request, match: RouteMatch) -> HttpResponse:
        model = service.model(match.get("model") or "", match.get("version"))
        if model.decoupled:
            raise UnsupportedError(
                "HTTP end point doesn't support models with decoupled transaction policy"
            )
        body = compression.decode_body(
            request.body,
            request.headers.get("content-encoding"),
            service.options.http_max_input_size,
        )
        header_length = _header_length(request, len(body))
        decoded = decode_infer_request(model, body, header_length)
        response = await service.infer(model, decoded.request)
        if response.error is not None:
            raise response.error
        http_response = encode_infer_response(model, decoded, response)
        return compression.encode_response(http_response, request.headers.get("accept-encoding"))

    async def repository_index(request: Request, match: RouteMatch) -> HttpResponse:
        ready_only = False
        if len(request.body):
            try:
                document = orjson.loads(request.body)
            except orjson.JSONDecodeError as exc:
                raise InvalidArgumentError(
                    f"failed to parse the request JSON buffer: {exc}"
                ) from None
            ready = document.get("ready", False) if isinstance(document, dict) else None
            if not isinstance(ready, bool):
                raise InvalidArgumentError("Unable to parse 'ready', expecting a bool")
            ready_only = ready
        entries = []
        for entry in service.manager.index(ready_only):
            item: dict[str, str] = {"name": entry.name}
            if entry.version is not None:
                item["version"] = str(entry.version)
            if entry.state is not None:
                item["state"] = entry.state.value
                if entry.reason:
                    item["reason"] = entry.reason
            entries.append(item)
        return json_response(entries)

    async def repository_control(request: Request, match: RouteMatch) -> HttpResponse:
        raise UnsupportedError("explicit model load / unload is not allowed if polling is enabled")

    router.add(r"/v2/health/live", GET=live)
    router.add(r"/v2/health/ready", GET=ready)
    router.add(r"/v2", GET=server_metadata)
    router.add(r"/v2/models/stats", GET=model_stats)
    router.add(_MODEL, GET=model_metadata)
    router.add(_MODEL + r"/ready", GET=model_ready)
    router.add(_MODEL + r"/config", GET=model_config)
    router.add(_MODEL + r"/stats", GET=model_stats)
    router.add(_MODEL + r"/infer", POST=infer)
    router.add(r"/v2/repository/index", POST=repository_index)
    router.add(r"/v2/repository/models/[^/]+/(?:load|unload)", POST=repository_control)
    for feature, pattern in _UNSUPPORTED_EXTENSIONS.items():
        router.add(pattern, GET=_unsupported(feature), POST=_unsupported(feature))
    return router


def _unsupported(feature: str):  # type: ignore[no-untyped-def]
    async def handler(request: Request, match: RouteMatch) -> HttpResponse:
        raise UnsupportedError(f"the {feature} extension is not supported by this server yet")

    return handler


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
