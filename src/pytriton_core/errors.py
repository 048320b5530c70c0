"""One exception hierarchy, keyed by Triton's error codes.

The core raises these; each front end maps them once, through ``http_status`` and
``grpc_status_name`` (the tables below), never ad hoc in a handler.
"""

from __future__ import annotations

import enum


class ErrorCode(enum.Enum):
    """Triton's TRITONSERVER_Error codes (the names are Triton's)."""

    UNKNOWN = "UNKNOWN"
    INTERNAL = "INTERNAL"
    NOT_FOUND = "NOT_FOUND"
    INVALID_ARG = "INVALID_ARG"
    UNAVAILABLE = "UNAVAILABLE"
    UNSUPPORTED = "UNSUPPORTED"
    ALREADY_EXISTS = "ALREADY_EXISTS"
    CANCELLED = "CANCELLED"


# Triton's HttpCodeFromError: everything not listed answers 400.
_HTTP_STATUS: dict[ErrorCode, int] = {
    ErrorCode.INTERNAL: 500,
    ErrorCode.NOT_FOUND: 404,
    ErrorCode.UNAVAILABLE: 503,
    ErrorCode.UNSUPPORTED: 501,
}

# Triton's words for each code in a status rendered as text (``Status::AsString``), as in
# a failed version's reason: "Internal: ValueError: ...".
_CODE_WORDS: dict[ErrorCode, str] = {
    ErrorCode.UNKNOWN: "Unknown",
    ErrorCode.INTERNAL: "Internal",
    ErrorCode.NOT_FOUND: "Not found",
    ErrorCode.INVALID_ARG: "Invalid argument",
    ErrorCode.UNAVAILABLE: "Unavailable",
    ErrorCode.UNSUPPORTED: "Unsupported",
    ErrorCode.ALREADY_EXISTS: "Already exists",
    ErrorCode.CANCELLED: "Cancelled",
}

# grpc.StatusCode member names, so that the core never imports grpc.
_GRPC_STATUS: dict[ErrorCode, str] = {
    ErrorCode.UNKNOWN: "UNKNOWN",
    ErrorCode.INTERNAL: "INTERNAL",
    ErrorCode.NOT_FOUND: "NOT_FOUND",
    ErrorCode.INVALID_ARG: "INVALID_ARGUMENT",
    ErrorCode.UNAVAILABLE: "UNAVAILABLE",
    ErrorCode.UNSUPPORTED: "UNIMPLEMENTED",
    ErrorCode.ALREADY_EXISTS: "ALREADY_EXISTS",
    ErrorCode.CANCELLED: "CANCELLED",
}


class ServerError(Exception):
    """Base of every error the server reports to a client."""

    code: ErrorCode = ErrorCode.UNKNOWN

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    @property
    def http_status(self) -> int:
        return _HTTP_STATUS.get(self.code, 400)

    @property
    def grpc_status_name(self) -> str:
        return _GRPC_STATUS[self.code]

    @property
    def status_text(self) -> str:
        """``<code words>: <message>``, as Triton writes a status into a reason or a log."""
        return f"{_CODE_WORDS[self.code]}: {self.message}"

    def with_request_id(self, request_id: str) -> ServerError:
        """The same error with Triton's per-request prefix ``[request id: <id>] ``."""
        shown = request_id or "<id_unknown>"
        return type(self)(f"[request id: {shown}] {self.message}")

    @staticmethod
    def from_code(code: ErrorCode, message: str) -> ServerError:
        return _BY_CODE[code](message)


class UnknownError(ServerError):
    code = ErrorCode.UNKNOWN


class InternalError(ServerError):
    code = ErrorCode.INTERNAL


class NotFoundError(ServerError):
    code = ErrorCode.NOT_FOUND


class InvalidArgumentError(ServerError):
    code = ErrorCode.INVALID_ARG


class UnavailableError(ServerError):
    code = ErrorCode.UNAVAILABLE


class UnsupportedError(ServerError):
    code = ErrorCode.UNSUPPORTED


class AlreadyExistsError(ServerError):
    code = ErrorCode.ALREADY_EXISTS


class CancelledError(ServerError):
    code = ErrorCode.CANCELLED


_BY_CODE: dict[ErrorCode, type[ServerError]] = {
    cls.code: cls
    for cls in (
        UnknownError,
        InternalError,
        NotFoundError,
        InvalidArgumentError,
        UnavailableError,
        UnsupportedError,
        AlreadyExistsError,
        CancelledError,
    )
}


class ModelConfigError(InvalidArgumentError):
    """A config.pbtxt (or config override) that cannot be used; names the file and field."""
