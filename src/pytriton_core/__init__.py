"""pytriton-core: a Triton-compatible inference server with compiled hot paths."""

from __future__ import annotations

from pytriton_core._version import __version__
from pytriton_core.api import Server
from pytriton_core.errors import (
    AlreadyExistsError,
    CancelledError,
    ErrorCode,
    InternalError,
    InvalidArgumentError,
    NotFoundError,
    ServerError,
    UnavailableError,
    UnknownError,
    UnsupportedError,
)
from pytriton_core.options import ModelControlMode, ServerOptions

__all__ = [
    "AlreadyExistsError",
    "CancelledError",
    "ErrorCode",
    "InternalError",
    "InvalidArgumentError",
    "ModelControlMode",
    "NotFoundError",
    "Server",
    "ServerError",
    "ServerOptions",
    "UnavailableError",
    "UnknownError",
    "UnsupportedError",
    "__version__",
]
