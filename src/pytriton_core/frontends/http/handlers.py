"""HTTP handlers: each reads the wire, calls the core service, renders the answer.

Errors raised by the core are ServerErrors; ``HttpFrontend`` maps them to a status and
``{"error": ...}`` in one place.
"""

from __future__ import annotations

import base64
import binascii

from pytriton_core.config import config_to_json_dict
from pytriton_core.errors import InternalError, InvalidArgumentError, UnsupportedError
from pytriton_core.frontends.http.generate import add_generate_routes
from pytriton_core.frontends.http.infer_handler import InferHandler
from pytriton_core.frontends.http.json_body import parse_json
from pytriton_core.frontends.http.messages import (
    EMPTY_OK,
    HttpResponse,
    json_response,
    plain_error,
)
from pytriton_core.frontends.http.router import Request, RouteMatch, Router
from pytriton_core.frontends.http.settings_handlers import add_settings_routes
from pytriton_core.frontends.http.shm_handlers import add_shared_memory_routes
from pytriton_core.inference.header_forwarding import compile_pattern
from pytriton_core.options import ApiCategory, LimitOptions
from pytriton_core.repository.overrides import FILE_PREFIX
from pytriton_core.service import InferenceService

_MODEL = r"/v2/models/(?P<model>[^/]+)(?:/versions/(?P<version>[0-9]+))?"
# A named repository ("/v2/repository/<name>/...") is not supported, as in Triton.
_REPOSITORY = r"/v2/repository(?:/(?P<repository>[^/]+))?"


def build_router(service: InferenceService) -> Router:
    router = Router(service.options.restricted.http)
    forwarded = compile_pattern(service.options.http_header_forward_pattern)

    async def live(request: Request, match: RouteMatch) -> HttpResponse:
        return EMPTY_OK if service.is_live() else HttpResponse(400)

    async def ready(request: Request, match: RouteMatch) -> HttpResponse:
        return EMPTY_OK if service.is_ready() else HttpResponse(400)

    async def server_metadata(request: Request, match: RouteMatch) -> HttpResponse:
        return json_response(service.server_metadata())

    async def model_metadata(request: Request, match: RouteMatch) -> HttpResponse:
        return json_response(service.model_metadata(match.get("model") or "", match.get("version")))

    async def model_ready(request: Request, match: RouteMatch) -> HttpResponse:
        try:
            ready = service.is_model_ready(match.get("model") or "", match.get("version"))
        except InvalidArgumentError:
            ready = False  # an unknown model is just not ready, as Triton answers it
        return EMPTY_OK if ready else plain_error(400, "Model version not ready")

    async def model_config(request: Request, match: RouteMatch) -> HttpResponse:
        config = service.model_config(match.get("model") or "", match.get("version"))
        return json_response(config_to_json_dict(config))

    async def model_stats(request: Request, match: RouteMatch) -> HttpResponse:
        return json_response(service.statistics(match.get("model"), match.get("version")))

    async def repository_index(request: Request, match: RouteMatch) -> HttpResponse:
        _reject_named_repository(match)
        ready = _json_body(request, service.options.limits).get("ready", False)
        if not isinstance(ready, bool):
            raise InvalidArgumentError("Unable to parse 'ready', expecting a bool")
        entries = []
        for entry in service.repository_index(ready):
            item: dict[str, str] = {"name": entry.name}
            if entry.version is not None:
                item["version"] = str(entry.version)
            if entry.state is not None:
                item["state"] = entry.state.value
                if entry.reason:
                    item["reason"] = entry.reason
            entries.append(item)
        return json_response(entries)

    async def repository_load(request: Request, match: RouteMatch) -> HttpResponse:
        _reject_named_repository(match)
        config: str | None = None
        files: dict[str, bytes] = {}
        for key, value in _body_parameters(request, service.options.limits).items():
            if key == "config" and isinstance(value, str):
                config = value
            elif key.startswith(FILE_PREFIX) and isinstance(value, str):
                try:
                    files[key] = base64.b64decode(value, validate=True)
                except binascii.Error:
                    raise InvalidArgumentError(
                        f"file override '{key}' is not valid base64"
                    ) from None
            else:
                raise InternalError("unexpected error on creating Triton parameter")
        await service.load_model(match.get("model") or "", config, files)
        return EMPTY_OK

    async def repository_unload(request: Request, match: RouteMatch) -> HttpResponse:
        _reject_named_repository(match)
        value = _body_parameters(request, service.options.limits).get("unload_dependents", False)
        if not isinstance(value, bool):
            raise InvalidArgumentError("Unable to parse 'unload_dependents', expecting a bool")
        await service.unload_model(match.get("model") or "", value)
        return EMPTY_OK

    router.add(r"/v2/health/live", ApiCategory.HEALTH, GET=live)
    router.add(r"/v2/health/ready", ApiCategory.HEALTH, GET=ready)
    router.add(r"/v2", ApiCategory.METADATA, GET=server_metadata)
    router.add(r"/v2/models/stats", ApiCategory.STATISTICS, GET=model_stats)
    router.add(_MODEL, ApiCategory.METADATA, GET=model_metadata)
    router.add(_MODEL + r"/ready", ApiCategory.HEALTH, GET=model_ready)
    router.add(_MODEL + r"/config", ApiCategory.MODEL_CONFIG, GET=model_config)
    router.add(_MODEL + r"/stats", ApiCategory.STATISTICS, GET=model_stats)
    router.add(_MODEL + r"/infer", ApiCategory.INFERENCE, POST=InferHandler(service, forwarded))
    add_generate_routes(router, service, _MODEL)
    router.add(_REPOSITORY + r"/index", ApiCategory.MODEL_REPOSITORY, POST=repository_index)
    router.add(
        _REPOSITORY + r"/models/(?P<model>[^/]+)/load",
        ApiCategory.MODEL_REPOSITORY,
        POST=repository_load,
    )
    router.add(
        _REPOSITORY + r"/models/(?P<model>[^/]+)/unload",
        ApiCategory.MODEL_REPOSITORY,
        POST=repository_unload,
    )
    add_shared_memory_routes(router, service)
    add_settings_routes(router, service)
    if service.options.debug_live_objects:

        async def live_objects(request: Request, match: RouteMatch) -> HttpResponse:
            return json_response(service.live_objects())

        router.add(r"/v2/debug/live_objects", ApiCategory.STATISTICS, GET=live_objects)
    return router


def _reject_named_repository(match: RouteMatch) -> None:
    if match.get("repository"):
        raise UnsupportedError("'repository_name' specification is not supported")


def _json_body(request: Request, limits: LimitOptions) -> dict[str, object]:
    """An optional JSON object body; an empty body reads as ``{}``."""
    if not len(request.body):
        return {}
    document = parse_json(request.body, limits)
    if not isinstance(document, dict):
        raise InvalidArgumentError("the request body must be a JSON object")
    return document


def _body_parameters(request: Request, limits: LimitOptions) -> dict[str, object]:
    """The ``parameters`` object of the load / unload body."""
    parameters = _json_body(request, limits).get("parameters", {})
    if not isinstance(parameters, dict):
        raise InvalidArgumentError("'parameters' must be a JSON object")
    return parameters
