"""The shared-memory extensions over HTTP: ``/v2/systemsharedmemory`` and
``/v2/cudasharedmemory`` (``[/region/{name}]/status|register|unregister``).

The registry sits behind the service's shared-memory methods; these handlers read the JSON
bodies with Triton's messages (a malformed document or a member of the wrong type: INTERNAL,
as Triton's JSON reader reports it; a missing member: INVALID_ARG) and render the answers.
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

from pytriton_core.errors import InternalError, InvalidArgumentError
from pytriton_core.frontends.http.json_body import parse_json
from pytriton_core.frontends.http.messages import EMPTY_OK, HttpResponse, json_response
from pytriton_core.frontends.http.router import Request, RouteMatch, Router
from pytriton_core.options import ApiCategory, LimitOptions
from pytriton_core.service import InferenceService

_REGION = r"(?:/region/(?P<region>[^/]+))?"
SYSTEM_SHM = r"/v2/systemsharedmemory" + _REGION
CUDA_SHM = r"/v2/cudasharedmemory" + _REGION

_NOT_STRING = "attempt to access JSON non-string as string"
_NOT_UNSIGNED = "attempt to access JSON non-unsigned-integer as unsigned-integer"
_NOT_SIGNED = "attempt to access JSON non-signed-integer as signed-integer"
_NOT_OBJECT = "attempt to access JSON non-object as object"


def _document(request: Request, limits: LimitOptions) -> dict[str, Any]:
    document = parse_json(request.body, limits, InternalError)
    if not isinstance(document, dict):
        raise InternalError(_NOT_OBJECT)
    return document


def _required(document: dict[str, Any], key: str) -> Any:
    if key not in document:
        raise InvalidArgumentError(f"Shared memory register request has no '{key}' field")
    return document[key]


def _unsigned(value: Any) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise InternalError(_NOT_UNSIGNED)
    return value


def add_shared_memory_routes(router: Router, service: InferenceService) -> None:
    async def system_status(request: Request, match: RouteMatch) -> HttpResponse:
        return json_response(service.shm_status("system", match.get("region")))

    async def system_register(request: Request, match: RouteMatch) -> HttpResponse:
        # Refusals that need no body come first, as in Triton.
        service.require_client_shm()
        name = match.get("region") or ""
        if not name:
            raise InvalidArgumentError(
                "'region name' is necessary to register system shared memory region"
            )
        document = _document(request, service.options.limits)
        key = _required(document, "key")
        if not isinstance(key, str):
            raise InternalError(_NOT_STRING)
        offset = _unsigned(document.get("offset", 0))
        byte_size = _unsigned(_required(document, "byte_size"))
        await service.register_system_shm(name, key, offset, byte_size)
        return EMPTY_OK

    async def system_unregister(request: Request, match: RouteMatch) -> HttpResponse:
        await service.unregister_shm("system", match.get("region"))
        return EMPTY_OK

    async def cuda_status(request: Request, match: RouteMatch) -> HttpResponse:
        return json_response(service.shm_status("cuda", match.get("region")))

    async def cuda_register(request: Request, match: RouteMatch) -> HttpResponse:
        service.require_client_shm()
        name = match.get("region") or ""
        if not name:
            raise InvalidArgumentError(
                "'region name' is necessary to register cuda shared memory region"
            )
        service.require_cuda_shm(name)
        document = _document(request, service.options.limits)
        handle = _required(document, "raw_handle")
        encoded = handle.get("b64") if isinstance(handle, dict) else None
        if not isinstance(encoded, str):
            raise InternalError(_NOT_STRING)
        try:
            raw_handle = base64.b64decode(encoded, validate=True)
        except binascii.Error:
            raw_handle = b""
        if len(raw_handle) != 64:
            raise InvalidArgumentError(
                "'raw_handle' must be a valid base64 encoded cudaIpcMemHandle_t"
            )
        device_id = _required(document, "device_id")
        if not isinstance(device_id, int) or isinstance(device_id, bool):
            raise InternalError(_NOT_SIGNED)
        byte_size = _unsigned(_required(document, "byte_size"))
        await service.register_cuda_shm(name, raw_handle, device_id, byte_size)
        return EMPTY_OK

    async def cuda_unregister(request: Request, match: RouteMatch) -> HttpResponse:
        await service.unregister_shm("cuda", match.get("region"))
        return EMPTY_OK

    router.add(SYSTEM_SHM + "/status", ApiCategory.SHARED_MEMORY, GET=system_status)
    router.add(SYSTEM_SHM + "/register", ApiCategory.SHARED_MEMORY, POST=system_register)
    router.add(SYSTEM_SHM + "/unregister", ApiCategory.SHARED_MEMORY, POST=system_unregister)
    router.add(CUDA_SHM + "/status", ApiCategory.SHARED_MEMORY, GET=cuda_status)
    router.add(CUDA_SHM + "/register", ApiCategory.SHARED_MEMORY, POST=cuda_register)
    router.add(CUDA_SHM + "/unregister", ApiCategory.SHARED_MEMORY, POST=cuda_unregister)
