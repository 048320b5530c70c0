"""``pb_utils.Logger``: model logging, as Triton's Python backend names its levels."""

from __future__ import annotations

import enum
import logging

__all__ = ["Logger"]

_log = logging.getLogger("pytriton_core.model")


class _LogLevel(enum.IntEnum):
    INFO = 0
    WARNING = 1
    ERROR = 2
    VERBOSE = 3


_STDLIB_LEVEL = {
    _LogLevel.INFO: logging.INFO,
    _LogLevel.WARNING: logging.WARNING,
    _LogLevel.ERROR: logging.ERROR,
    _LogLevel.VERBOSE: logging.DEBUG,
}


class Logger:
    """Model logging, through the stdlib logger ``pytriton_core.model`` (VERBOSE = DEBUG)."""

    LogLevel = _LogLevel
    INFO = _LogLevel.INFO
    WARNING = _LogLevel.WARNING
    ERROR = _LogLevel.ERROR
    VERBOSE = _LogLevel.VERBOSE

    @staticmethod
    def log(message: str, level: int = _LogLevel.INFO) -> None:
        _emit(message, _LogLevel(level))

    @staticmethod
    def log_info(message: str) -> None:
        _emit(message, _LogLevel.INFO)

    @staticmethod
    def log_warn(message: str) -> None:
        _emit(message, _LogLevel.WARNING)

    @staticmethod
    def log_error(message: str) -> None:
        _emit(message, _LogLevel.ERROR)

    @staticmethod
    def log_verbose(message: str) -> None:
        _emit(message, _LogLevel.VERBOSE)


def _emit(message: str, level: _LogLevel) -> None:
    # stacklevel 3: the record names the model's line, not Logger's or this function's.
    _log.log(_STDLIB_LEVEL[level], "%s", message, stacklevel=3)
