"""The logging and trace extensions over HTTP: ``/v2/logging`` and
``/v2[/models/{m}]/trace/setting``, GET and POST, with Triton's answers to bad values."""

from __future__ import annotations

from typing import Any

from pytriton_core.errors import (
    InternalError,
    UnavailableError,
    UnsupportedError,
)
from pytriton_core.frontends.http.json_body import parse_json
from pytriton_core.frontends.http.messages import HttpResponse, json_response
from pytriton_core.frontends.http.router import Request, RouteMatch, Router
from pytriton_core.logging_settings import SETTABLE, parse_log_format
from pytriton_core.options import ApiCategory, LimitOptions, LogFormat
from pytriton_core.service import InferenceService
from pytriton_core.tracing import changes_from_json


def add_settings_routes(router: Router, service: InferenceService) -> None:
    async def get_logging(request: Request, match: RouteMatch) -> HttpResponse:
        return json_response(service.log_settings())

    async def post_logging(request: Request, match: RouteMatch) -> HttpResponse:
        changes = log_changes_from_json(_json_document(request, service.options.limits))
        return json_response(await service.update_log_settings(changes))

    async def get_trace(request: Request, match: RouteMatch) -> HttpResponse:
        return json_response(service.trace_settings(match.get("model")))

    async def post_trace(request: Request, match: RouteMatch) -> HttpResponse:
        model = match.get("model")
        service.check_trace_model(model)  # refused before the body is read, as in Triton
        document = _json_document(request, service.options.limits)
        body = document if isinstance(document, dict) else {}
        return json_response(await service.update_trace_settings(model, changes_from_json(body)))

    router.add(r"/v2/logging", ApiCategory.LOGGING, GET=get_logging, POST=post_logging)
    router.add(r"/v2/trace/setting", ApiCategory.TRACE, GET=get_trace, POST=post_trace)
    router.add(
        r"/v2/models/(?P<model>[^/]+)/trace/setting",
        ApiCategory.TRACE,
        GET=get_trace,
        POST=post_trace,
    )


def _json_document(request: Request, limits: LimitOptions) -> Any:
    """The body as JSON; Triton answers an empty or malformed one with 500."""
    return parse_json(request.body, limits, InternalError)


def log_changes_from_json(document: Any) -> dict[str, Any]:
    """The settings a POST changes; JSON nulls and unknown keys are ignored, as in Triton."""
    if not isinstance(document, dict):
        return {}
    if document.get("log_file") is not None:
        raise UnsupportedError("log file location can not be updated through network protocol")
    changes: dict[str, Any] = {}
    for key, kind in SETTABLE.items():
        value = document.get(key)
        if value is None:
            continue
        if kind is bool:
            if not isinstance(value, bool):
                raise InternalError("attempt to access JSON non-boolean as boolean")
            changes[key] = value
        elif kind is int:
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise InternalError(
                    "attempt to access JSON non-unsigned-integer as unsigned-integer"
                )
            changes[key] = value
        else:
            if not isinstance(value, str):
                raise InternalError("attempt to access JSON non-string as string")
            log_format: LogFormat | None = parse_log_format(value)
            if log_format is None:
                # Triton answers this one with UNAVAILABLE (503) over HTTP.
                raise UnavailableError(f"invalid argument for --log_format, got: {value}")
            changes[key] = log_format
    return changes
