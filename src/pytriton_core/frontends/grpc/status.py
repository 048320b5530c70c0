"""gRPC status codes (the numbers on the wire, ``grpc-status``) and the statuses this front
end answers with itself, besides the core's errors (``ServerError.grpc_status_name``)."""

from __future__ import annotations

import enum

from pytriton_core.errors import ServerError


class StatusCode(enum.IntEnum):
    """gRPC's codes, named as ``grpc.StatusCode`` names them."""

    OK = 0
    CANCELLED = 1
    UNKNOWN = 2
    INVALID_ARGUMENT = 3
    DEADLINE_EXCEEDED = 4
    NOT_FOUND = 5
    ALREADY_EXISTS = 6
    PERMISSION_DENIED = 7
    RESOURCE_EXHAUSTED = 8
    FAILED_PRECONDITION = 9
    ABORTED = 10
    OUT_OF_RANGE = 11
    UNIMPLEMENTED = 12
    INTERNAL = 13
    UNAVAILABLE = 14
    DATA_LOSS = 15
    UNAUTHENTICATED = 16


class CallStatus(Exception):
    """Ends a call with ``code`` and ``message``: what the transport refuses (sizes,
    deadlines, compression), which no core error stands for."""

    def __init__(self, code: StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def status_of(error: ServerError) -> tuple[StatusCode, str]:
    """The status a core error answers with: its code's, and its message."""
    return StatusCode[error.grpc_status_name], error.message


# gRPC core's words, which clients show.
METHOD_NOT_FOUND = "Method not found!"
DEADLINE_EXCEEDED = "Deadline Exceeded"
