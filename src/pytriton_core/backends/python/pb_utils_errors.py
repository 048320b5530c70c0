"""``pb_utils.TritonError`` and ``pb_utils.TritonModelException`` (re-exported there).

Own module so that the other ``pb_utils_*`` modules can raise them without importing
``pb_utils`` itself.
"""

from __future__ import annotations

import enum

from pytriton_core.errors import ErrorCode, ServerError


class TritonErrorCode(enum.IntEnum):
    """TRITONSERVER_Error_Code values; the names are those of :class:`ErrorCode`."""

    UNKNOWN = 0
    INTERNAL = 1
    NOT_FOUND = 2
    INVALID_ARG = 3
    UNAVAILABLE = 4
    UNSUPPORTED = 5
    ALREADY_EXISTS = 6
    CANCELLED = 7


class TritonError:
    """An error to put in an ``InferenceResponse`` (not an exception: models return it)."""

    UNKNOWN = TritonErrorCode.UNKNOWN
    INTERNAL = TritonErrorCode.INTERNAL
    NOT_FOUND = TritonErrorCode.NOT_FOUND
    INVALID_ARG = TritonErrorCode.INVALID_ARG
    UNAVAILABLE = TritonErrorCode.UNAVAILABLE
    UNSUPPORTED = TritonErrorCode.UNSUPPORTED
    ALREADY_EXISTS = TritonErrorCode.ALREADY_EXISTS
    CANCELLED = TritonErrorCode.CANCELLED

    __slots__ = ("_code", "_message")

    def __init__(self, message: str, code: int = TritonErrorCode.INTERNAL) -> None:
        if not isinstance(message, str):
            raise TypeError(f"TritonError message must be a str, not {type(message).__name__}")
        try:
            self._code = TritonErrorCode(code)
        except ValueError:
            raise TypeError(f"{code!r} is not a TritonError code") from None
        self._message = message

    def code(self) -> TritonErrorCode:
        return self._code

    def message(self) -> str:
        return self._message

    def __str__(self) -> str:
        return self._message

    def __repr__(self) -> str:
        return f"TritonError({self._message!r}, code=TritonError.{self._code.name})"

    @classmethod
    def _from_exception(cls, exc: BaseException) -> TritonError:
        """Server hook: a ServerError keeps its code; anything else is INTERNAL."""
        if isinstance(exc, ServerError):
            return cls(exc.message, TritonErrorCode[exc.code.name])
        return cls(str(exc) or type(exc).__name__)

    def _to_server_error(self) -> ServerError:
        """Server hook: the core error with the same code and message."""
        return ServerError.from_code(ErrorCode[self._code.name], self._message)


class TritonModelException(Exception):
    """Raised by pb_utils on misuse, and by models to fail initialize/execute/finalize."""

    def message(self) -> str:
        return str(self.args[0]) if self.args else ""
