"""Errors in OpenAI's format: ``{"error": {"message", "type", "param", "code"}}``.

The status is the one the error hierarchy gives every front end (``ServerError.http_status``);
what OpenAI adds is a ``type`` (from the status, as OpenAI's API types its errors) and, for
a request field the front end refuses, the field's name in ``param``.
"""

from __future__ import annotations

from typing import Any

import orjson

from pytriton_core.errors import InvalidArgumentError, NotFoundError, ServerError
from pytriton_core.frontends.http.messages import JSON, HttpResponse

INVALID_REQUEST = "invalid_request_error"


class RequestFieldError(InvalidArgumentError):
    """A field of the request the front end refuses (400), named in ``param``."""

    def __init__(self, message: str, *, param: str | None, code: str | None = None) -> None:
        super().__init__(message)
        self.param = param
        self.openai_code = code


class ModelNotFoundError(NotFoundError):
    """The request names a model that is not loaded (404, as OpenAI answers it)."""

    def __init__(self, name: str) -> None:
        super().__init__(f"The model '{name}' does not exist")
        self.param: str | None = "model"
        self.openai_code: str | None = "model_not_found"


def error_type(status: int) -> str:
    if status == 403:
        return "permission_error"
    return INVALID_REQUEST if status < 500 else "server_error"


def error_document(error: ServerError) -> dict[str, Any]:
    return {
        "error": {
            "message": error.message,
            "type": error_type(error.http_status),
            "param": getattr(error, "param", None),
            "code": getattr(error, "openai_code", None),
        }
    }


def error_response(error: ServerError) -> HttpResponse:
    return HttpResponse(error.http_status, (orjson.dumps(error_document(error)),), JSON)


def render_error(status: int, message: str) -> HttpResponse:
    """An answer the router gives itself (404, 405, a restricted 403), in OpenAI's format."""
    document = {
        "error": {"message": message, "type": error_type(status), "param": None, "code": None}
    }
    return HttpResponse(status, (orjson.dumps(document),), JSON)
