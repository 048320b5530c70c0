"""The server log and the logging extension (``/v2/logging``, gRPC ``LogSettings``).

Triton switches info, warning and error messages on and off separately and has a verbose
level; Python logging has one threshold per logger. ``LogControl`` keeps Triton's settings
and applies them to Python logging: the ``pytriton_core`` logger's level lets through the
lowest enabled level, and a filter on the server's handler drops the disabled ones.
Verbose level N lets through records at ``DEBUG - (N - 1)`` and above (level 1 is DEBUG).
"""

from __future__ import annotations

import importlib.machinery
import logging
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from pytriton_core.errors import InvalidArgumentError
from pytriton_core.options import LogFormat, LogOptions

SERVER_LOGGER = "pytriton_core"


@dataclass(frozen=True)
class LogSettings:
    """What the logging extension reports, in Triton's names and order."""

    log_file: str
    log_info: bool
    log_warning: bool
    log_error: bool
    log_verbose_level: int
    log_format: LogFormat

    def to_json(self) -> dict[str, Any]:
        return {
            "log_file": self.log_file,
            "log_info": self.log_info,
            "log_warning": self.log_warning,
            "log_error": self.log_error,
            "log_verbose_level": self.log_verbose_level,
            "log_format": self.log_format.value,
        }


# The settings a client may change, and the Python type each takes.
SETTABLE: dict[str, type] = {
    "log_info": bool,
    "log_warning": bool,
    "log_error": bool,
    "log_verbose_level": int,
    "log_format": LogFormat,
}


def parse_log_format(text: str) -> LogFormat | None:
    """``default`` or ``ISO8601`` (Triton's spellings); None for anything else."""
    for candidate in LogFormat:
        if candidate.value == text:
            return candidate
    return None


def _verbosity_needed(levelno: int) -> int:
    return logging.DEBUG - levelno + 1


class _LevelFilter(logging.Filter):
    def __init__(self, control: LogControl) -> None:
        super().__init__()
        self._control = control

    def filter(self, record: logging.LogRecord) -> bool:
        return self._control.enabled(record.levelno)


_EXTENSION_SUFFIXES = tuple(importlib.machinery.EXTENSION_SUFFIXES)


def _location(record: logging.LogRecord) -> str:
    """``file.py:line`` of the code that logged. A module compiled from its ``.py``
    (csrc/compiled_modules.txt) makes no Python frame, so logging names its nearest Python
    caller instead: its records name the module's own file, at line 0 (not known)."""
    module = sys.modules.get(record.name)
    path = getattr(module, "__file__", None)
    if path is not None and path.endswith(_EXTENSION_SUFFIXES):
        source = Path(path).name.split(".", 1)[0] + ".py"
        if source != record.filename:
            return f"{source}:0"
    return f"{record.filename}:{record.lineno}"


class TritonFormatter(logging.Formatter):
    """Triton's line layouts: ``I1130 08:52:31.777173 1234 file.py:12] message`` (default)
    or ``2024-11-30T08:52:31Z I 1234 file.py:12] message`` (ISO8601)."""

    def __init__(self, log_format: LogFormat) -> None:
        super().__init__()
        self.log_format = log_format

    def format(self, record: logging.LogRecord) -> str:
        letter = _LETTERS.get(record.levelno, "V" if record.levelno < logging.INFO else "E")
        where = f"{record.process} {_location(record)}]"
        message = record.getMessage()
        if record.exc_info:
            message = f"{message}\n{self.formatException(record.exc_info)}"
        if self.log_format is LogFormat.ISO8601:
            stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(record.created))
            return f"{stamp} {letter} {where} {message}"
        local = time.localtime(record.created)
        micros = int((record.created % 1) * 1_000_000)
        stamp = time.strftime("%m%d %H:%M:%S", local)
        return f"{letter}{stamp}.{micros:06d} {where} {message}"


_LETTERS = {
    logging.DEBUG: "V",
    logging.INFO: "I",
    logging.WARNING: "W",
    logging.ERROR: "E",
    logging.CRITICAL: "E",
}


class LogControl:
    """The server log's current settings; ``update`` is the logging extension's POST."""

    def __init__(self, options: LogOptions) -> None:
        self._settings = LogSettings(
            log_file=str(options.file) if options.file is not None else "",
            log_info=options.info,
            log_warning=options.warning,
            log_error=options.error,
            log_verbose_level=max(0, options.verbose),
            log_format=options.format,
        )
        self._formatter = TritonFormatter(options.format)
        self._handler: logging.Handler | None = None
        self._logger: logging.Logger | None = None
        self._apply()

    @property
    def settings(self) -> LogSettings:
        return self._settings

    def enabled(self, levelno: int) -> bool:
        s = self._settings
        if levelno >= logging.ERROR:
            return s.log_error
        if levelno >= logging.WARNING:
            return s.log_warning
        if levelno >= logging.INFO:
            return s.log_info
        return s.log_verbose_level >= _verbosity_needed(levelno)

    def update(self, changes: dict[str, Any]) -> LogSettings:
        """Apply already-validated values (keys of ``SETTABLE``); returns the new settings."""
        unknown = set(changes) - set(SETTABLE)
        if unknown:
            raise InvalidArgumentError(f"not a settable log setting: {', '.join(sorted(unknown))}")
        self._settings = replace(self._settings, **changes)
        self._formatter.log_format = self._settings.log_format
        self._apply()
        return self._settings

    def install(self, logger: logging.Logger | None = None) -> None:
        """Send ``logger``'s records (the root logger by default) to the server log:
        ``--log-file`` or standard error, in Triton's layout, filtered by the settings."""
        target = logger if logger is not None else logging.getLogger()
        handler: logging.Handler
        if self._settings.log_file:
            path = Path(self._settings.log_file)
            path.parent.mkdir(parents=True, exist_ok=True)
            handler = logging.FileHandler(path, encoding="utf-8")
        else:
            handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(self._formatter)
        handler.addFilter(_LevelFilter(self))
        for existing in list(target.handlers):
            target.removeHandler(existing)
        target.addHandler(handler)
        self._handler = handler
        self._logger = target
        self._apply()

    def close(self) -> None:
        if self._handler is not None and self._logger is not None:
            self._logger.removeHandler(self._handler)
            self._handler.close()
            self._handler = None

    def _apply(self) -> None:
        """Let the server's loggers produce the lowest level any setting enables."""
        s = self._settings
        if s.log_verbose_level > 0:
            level = logging.DEBUG - (s.log_verbose_level - 1)
        elif s.log_info:
            level = logging.INFO
        elif s.log_warning:
            level = logging.WARNING
        else:
            level = logging.ERROR
        logging.getLogger(SERVER_LOGGER).setLevel(max(1, level))
        if self._logger is logging.getLogger():
            # The server's own records reach the handler whatever the root's level; other
            # libraries' stay at INFO and above, or --log-verbose would turn on their
            # debug output too (grpc's logs every poll of its completion queue).
            self._logger.setLevel(max(logging.INFO, level))
