"""The logging and trace extensions over gRPC (``LogSettings``, ``TraceSetting``): a request
without settings reads them, one with settings changes them; the same core calls as HTTP,
with Triton's gRPC answers (``log_format`` refused as INVALID_ARGUMENT, not 503)."""

from __future__ import annotations

from typing import Any

from pytriton_core import proto
from pytriton_core.errors import InvalidArgumentError, UnsupportedError
from pytriton_core.logging_settings import SETTABLE, parse_log_format
from pytriton_core.options import LogFormat
from pytriton_core.service import InferenceService
from pytriton_core.tracing import SettingChange

# Python type of a log setting -> the SettingValue field that carries it.
_LOG_FIELDS: dict[type, str] = {
    bool: "bool_param",
    int: "uint32_param",
    LogFormat: "string_param",
    str: "string_param",
}


async def log_settings(service: InferenceService, request: Any) -> Any:
    if request.settings:
        settings = await service.update_log_settings(_log_changes(request.settings))
    else:
        settings = service.log_settings()
    response: Any = proto.inference("LogSettingsResponse")()
    for key, value in settings.items():
        entry = response.settings[key]
        if isinstance(value, bool):
            entry.bool_param = value
        elif isinstance(value, int):
            entry.uint32_param = value
        else:
            entry.string_param = value
    return response


def _log_changes(settings: Any) -> dict[str, Any]:
    changes: dict[str, Any] = {}
    for key, entry in settings.items():
        which = entry.WhichOneof("parameter_choice")
        if which is None:
            continue  # no value: nothing to change
        if key == "log_file":
            raise UnsupportedError("log file location can not be updated through network protocol")
        kind = SETTABLE.get(key)
        if kind is None:
            continue
        if which != _LOG_FIELDS[kind]:
            raise InvalidArgumentError(f"expecting {_LOG_FIELDS[kind]} for '{key}', got {which}")
        value = getattr(entry, which)
        if kind is LogFormat:
            log_format = parse_log_format(value)
            if log_format is None:
                raise InvalidArgumentError(f"invalid argument for log_format, got: {value}")
            value = log_format
        changes[key] = value
    return changes


async def trace_setting(service: InferenceService, request: Any) -> Any:
    model = request.model_name or None
    if request.settings:
        changes: dict[str, SettingChange] = {
            key: list(entry.value) or None for key, entry in request.settings.items()
        }
        answer = await service.update_trace_settings(model, changes)
    else:
        answer = service.trace_settings(model)
    response: Any = proto.inference("TraceSettingResponse")()
    for key, value in answer.items():
        response.settings[key].value.extend([value] if isinstance(value, str) else value)
    return response
