"""Request tracing and the trace extension (``/v2[/models/{m}]/trace/setting``, gRPC
``TraceSetting``).

A sampled request carries a ``RequestTrace``; the core and the front ends stamp it at each
stage (Triton's names: ``HTTP_RECV_START`` ... ``REQUEST_START``, ``QUEUE_START``,
``COMPUTE_START``, ``COMPUTE_INPUT_END``, ``COMPUTE_OUTPUT_START``, ``COMPUTE_END``,
``REQUEST_END`` ... ``HTTP_SEND_END``), in monotonic nanoseconds as Triton's steady clock.
The front end that answered the request calls ``finish``, and the trace goes to its file in
Triton's trace JSON (``triton`` mode) or to an OpenTelemetry exporter (``opentelemetry``
mode, when the opentelemetry packages are installed).

Settings: one global scope, plus a scope per model that has its own settings; a model's
scope inherits every setting it does not set from the global one. Each scope samples one
request in ``trace_rate`` and stops after ``trace_count`` traces (-1: never).

Child traces, as Triton's: a request the server makes for a traced request (an ensemble's
step; a BLS call from a Python model that passes ``trace=request.trace()``) gets a trace of
its own from ``RequestTrace.child``, with the next id and ``parent_id`` naming the request's.
It goes to the same writer as its parent, counts against no ``trace_count``, and is
finished when its final response is delivered (so it is written before its parent); it has
the core's stamps, none of a front end's. A child may be made and finished on a model's
thread (BLS), so ids come from an atomic counter and the file writer takes a lock.
"""

from __future__ import annotations

import itertools
import logging
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from pytriton_core.errors import InternalError, InvalidArgumentError, UnsupportedError
from pytriton_core.options import TraceMode, TraceOptions

log = logging.getLogger(__name__)

LEVELS = ("TIMESTAMPS", "TENSORS")  # what trace_level may hold besides "OFF"
_OTEL_DEFAULTS = {
    "url": "localhost:4318/v1/traces",
    "resource": "service.name=triton-inference-server",
}
OPENTELEMETRY_PACKAGES = (
    "opentelemetry-api opentelemetry-sdk opentelemetry-exporter-otlp-proto-http"
)


@dataclass(frozen=True)
class TraceSettings:
    level: frozenset[str]
    rate: int
    count: int
    log_frequency: int
    file: str
    mode: TraceMode
    opentelemetry: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def from_options(cls, options: TraceOptions) -> TraceSettings:
        return cls(
            level=frozenset(options.level),
            rate=options.rate,
            count=options.count,
            log_frequency=options.log_frequency,
            file=str(options.file) if options.file is not None else "",
            mode=options.mode,
            opentelemetry={**_OTEL_DEFAULTS, **options.opentelemetry},
        )

    def wire(self, remaining: int) -> dict[str, list[str] | str]:
        """The settings as the extension reports them (every value a string but the level)."""
        answer: dict[str, list[str] | str] = {
            "trace_level": [lvl for lvl in LEVELS if lvl in self.level] or ["OFF"],
            "trace_rate": str(self.rate),
            "trace_count": str(remaining),
        }
        if self.mode is TraceMode.TRITON:
            answer["log_frequency"] = str(self.log_frequency)
            answer["trace_file"] = self.file
        answer["trace_mode"] = self.mode.value
        if self.mode is TraceMode.OPENTELEMETRY:
            answer.update(self.opentelemetry)
        return answer


# A change: the setting's new value as strings, or None to fall back (see ``update``).
SettingChange = Sequence[str] | None
_FIELDS = {
    "trace_level": "level",
    "trace_rate": "rate",
    "trace_count": "count",
    "log_frequency": "log_frequency",
}


def _parse_int(key: str, values: Sequence[str], minimum: int) -> int:
    text = values[0] if values else ""
    try:
        value = int(text)
    except ValueError:
        raise InvalidArgumentError(f"Unable to parse '{key}', got: {text}") from None
    if value < minimum:
        raise InvalidArgumentError(
            f"Unable to parse '{key}'. Expecting value >= {minimum}, got:{text}"
        )
    return value


def _parse_change(key: str, values: Sequence[str], current: Any) -> Any:
    if key == "trace_level":
        if "OFF" in values:
            return frozenset()
        levels = frozenset(v for v in values if v in LEVELS)
        return levels or current  # nothing recognisable: unchanged, as Triton answers
    if key == "trace_rate":
        rate = _parse_int(key, values, 0)
        if rate == 0:
            raise InvalidArgumentError(
                "Attempting to set invalid trace setting :sample rate must be non-zero"
            )
        return rate
    if key == "trace_count":
        return _parse_int(key, values, -1)
    return _parse_int(key, values, 0)  # log_frequency


class RequestTrace:
    """The stamps of one sampled request; ``finish`` hands them to the trace's writer."""

    __slots__ = (
        "_on_finish",
        "_spawn",
        "_stamps",
        "_tensors",
        "finished",
        "id",
        "model_name",
        "model_version",
        "parent_id",
        "request_id",
        "tensors",
    )

    def __init__(
        self,
        trace_id: int,
        model_name: str,
        tensors: bool,
        on_finish: Callable[[RequestTrace], None],
        spawn: Callable[[str, RequestTrace], RequestTrace] | None = None,
    ) -> None:
        """``spawn``: makes a child trace for a model name (``child``); None: no children."""
        self.id = trace_id
        self.model_name = model_name
        self.model_version = -1
        self.request_id = ""
        self.parent_id = 0
        self.tensors = tensors  # TENSORS level: record tensor contents too
        self.finished = False
        self._stamps: list[tuple[str, int]] = []
        self._tensors: list[tuple[str, str, str, Sequence[int], Any]] = []
        self._on_finish = on_finish
        self._spawn = spawn

    def child(self, model_name: str) -> RequestTrace | None:
        """The trace of a request made for this one to ``model_name`` (see the module
        docstring), or None where this trace makes none."""
        if self._spawn is None:
            return None
        return self._spawn(model_name, self)

    def stamp(self, name: str, ns: int | None = None) -> None:
        self._stamps.append((name, time.monotonic_ns() if ns is None else ns))

    def record_tensor(
        self, activity: str, name: str, datatype: str, shape: Sequence[int], data: Any
    ) -> None:
        if self.tensors:
            self._tensors.append((activity, name, datatype, shape, data))

    def stamps(self) -> list[tuple[str, int]]:
        return sorted(self._stamps, key=lambda stamp: stamp[1])

    def finish(self) -> None:
        if not self.finished:
            self.finished = True
            self._on_finish(self)

    def to_json(self) -> list[dict[str, Any]]:
        """Triton's trace file entries for this request."""
        header: dict[str, Any] = {
            "id": self.id,
            "model_name": self.model_name,
            "model_version": self.model_version,
        }
        if self.request_id:
            header["request_id"] = self.request_id
        if self.parent_id:
            header["parent_id"] = self.parent_id
        entries: list[dict[str, Any]] = [header]
        entries.extend(
            {"id": self.id, "timestamps": [{"name": name, "ns": ns}]} for name, ns in self.stamps()
        )
        entries.extend(
            {
                "id": self.id,
                "activity": activity,
                "tensor": {
                    "name": name,
                    "data": _tensor_text(data),
                    "shape": ",".join(str(d) for d in shape),
                    "dtype": datatype,
                },
            }
            for activity, name, datatype, shape, data in self._tensors
        )
        return entries


def _tensor_text(data: Any) -> str:
    array = np.asarray(data)
    if array.dtype == np.object_:
        return ",".join(
            v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v) for v in array.flat
        )
    return ",".join(str(v) for v in array.reshape(-1).tolist())


class _TraceFile:
    """Triton's trace JSON: an array of entries per dump. With ``log_frequency`` N > 0 every
    N traces go to ``<file>.<index>``; with 0 they go to ``<file>`` when the settings change
    or the server stops, and to ``<file>.<index>`` when ``trace_count`` runs out (as
    Triton names them)."""

    def __init__(self, path: str, log_frequency: int, written: set[str]) -> None:
        self.path = path
        self.log_frequency = log_frequency
        self._pending: list[list[dict[str, Any]]] = []
        self._index = 0
        self._written = written  # files this server wrote: a later dump extends them
        self._lock = threading.Lock()  # a BLS child trace finishes on a model's thread

    def add(self, entries: list[dict[str, Any]]) -> None:
        with self._lock:
            self._pending.append(entries)
            if self.log_frequency and len(self._pending) >= self.log_frequency:
                self._dump()

    def flush(self, indexed: bool = False) -> None:
        with self._lock:
            if self._pending:
                self._dump(indexed)

    def _dump(self, indexed: bool = False) -> None:
        entries = [entry for trace in self._pending for entry in trace]
        self._pending = []
        if self.log_frequency or indexed:
            target = Path(f"{self.path}.{self._index}")
            self._index += 1
        else:
            target = Path(self.path)
            if self.path in self._written and target.is_file():
                try:
                    entries = list(orjson.loads(target.read_bytes())) + entries
                except (OSError, orjson.JSONDecodeError):
                    pass
        # Written beside it, then renamed over it: a reader of the file (a test waiting for
        # it, a user's tool) never sees it created but not yet written.
        partial = target.with_name(f"{target.name}.{os.getpid()}.partial")
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            partial.write_bytes(orjson.dumps(entries))
            os.replace(partial, target)
            self._written.add(self.path)
        except OSError as exc:
            log.error("failed to write trace file '%s': %s", target, exc)
            partial.unlink(missing_ok=True)


class _OpenTelemetryExporter:
    """Sends each finished trace as one span, with a span event per timestamp."""

    def __init__(self, settings: Mapping[str, str]) -> None:
        try:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
                OTLPSpanExporter,
            )
            from opentelemetry.sdk.resources import Resource
            from opentelemetry.sdk.trace import TracerProvider
            from opentelemetry.sdk.trace.export import (
                BatchSpanProcessor,
            )
        except ImportError as exc:
            raise InvalidArgumentError(
                "trace mode 'opentelemetry' needs the OpenTelemetry packages, which are not "
                f"installed ({exc.name} is missing): pip install {OPENTELEMETRY_PACKAGES}"
            ) from None
        attributes = {}
        for item in settings.get("resource", "").split(","):
            key, sep, value = item.partition("=")
            if sep:
                attributes[key.strip()] = value.strip()
        url = settings.get("url", _OTEL_DEFAULTS["url"])
        if "://" not in url:
            url = "http://" + url
        self._provider = TracerProvider(resource=Resource.create(attributes))
        self._provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=url)))
        self._tracer = self._provider.get_tracer("pytriton-core")
        # Spans take wall-clock ns; the stamps are monotonic.
        self._offset_ns = time.time_ns() - time.monotonic_ns()

    def export(self, trace: RequestTrace) -> None:
        stamps = trace.stamps()
        if not stamps:
            return
        offset = self._offset_ns
        span = self._tracer.start_span(
            "InferRequest",
            start_time=stamps[0][1] + offset,
            attributes={
                "triton.model_name": trace.model_name,
                "triton.model_version": trace.model_version,
                "triton.trace_id": trace.id,
                "triton.trace_parent_id": trace.parent_id,
                "triton.request_id": trace.request_id,
            },
        )
        for name, ns in stamps:
            span.add_event(name, timestamp=ns + offset)
        span.end(end_time=stamps[-1][1] + offset)

    def close(self) -> None:
        self._provider.shutdown()


@dataclass
class _Scope:
    """The global settings, or one model's: its overrides, counters and writer."""

    overrides: dict[str, Any]
    settings: TraceSettings
    remaining: int = -1
    seen: int = 0
    writer: _TraceFile | None = None


class TraceManager:
    """Samples requests, keeps the trace settings and writes finished traces."""

    def __init__(self, options: TraceOptions) -> None:
        self._startup = TraceSettings.from_options(options)
        self._written: set[str] = set()
        self._files: dict[tuple[str, int], _TraceFile] = {}
        self._ids = itertools.count(1)  # atomic: child traces are made on models' threads
        self._exporter: _OpenTelemetryExporter | None = None
        if self._startup.mode is TraceMode.OPENTELEMETRY:
            self._exporter = _OpenTelemetryExporter(self._startup.opentelemetry)
        self._global = self._new_scope({}, self._startup)
        self._models: dict[str, _Scope] = {}
        self.idle = not self._startup.level  # see ``_note_idle``

    # ------------------------------------------------------------- settings

    def settings(self, model: str | None = None) -> dict[str, list[str] | str]:
        scope = self._scope(model)
        return scope.settings.wire(scope.remaining)

    def model_overrides(self) -> dict[str, dict[str, list[str] | str]]:
        """Each model's settings of its own (those it does not take from the global ones),
        as they are shown on the wire."""
        overridden = {}
        for model, scope in self._models.items():
            shown = scope.settings.wire(scope.remaining)
            keys = [key for key, attribute in _FIELDS.items() if attribute in scope.overrides]
            overridden[model] = {key: shown[key] for key in keys if key in shown}
        return overridden

    def update(
        self, model: str | None, changes: Mapping[str, SettingChange]
    ) -> dict[str, list[str] | str]:
        """Apply a POST. A value sets the setting; None clears it: a model's setting then
        follows the global one again, and a global setting returns to its value at start.
        ``trace_file`` cannot change over the network; unknown keys are ignored."""
        if changes.get("trace_file") is not None:
            raise UnsupportedError(
                "trace file location can not be updated through network protocol"
            )
        base = self._global.settings if model is not None else self._startup
        scope = self._models.get(model) if model is not None else self._global
        overrides = dict(scope.overrides) if scope is not None else {}
        for key, values in changes.items():
            attribute = _FIELDS.get(key)
            if attribute is None:
                continue  # trace_mode, trace_file (null) and unknown keys
            if values is None:
                overrides.pop(attribute, None)
            else:
                current = overrides.get(attribute, getattr(base, attribute))
                overrides[attribute] = _parse_change(key, values, current)
        if model is None:
            self._global = self._rebuild(self._global, overrides, self._startup)
            for name, model_scope in list(self._models.items()):
                self._models[name] = self._rebuild(
                    model_scope, model_scope.overrides, self._global.settings
                )
        elif overrides:
            self._models[model] = self._rebuild(scope, overrides, self._global.settings)
        elif model in self._models:
            self._retire(self._models.pop(model))
        self._note_idle()
        return self.settings(model)

    def _note_idle(self) -> None:
        """``idle``: no scope can sample a request (the global level is off and no model
        has settings of its own), so the infer path need not call ``sample``."""
        self.idle = not self._global.settings.level and not self._models

    def _rebuild(
        self, scope: _Scope | None, overrides: dict[str, Any], base: TraceSettings
    ) -> _Scope:
        settings = replace(base, **overrides)
        if scope is not None and scope.settings == settings and scope.overrides == overrides:
            return scope
        if scope is not None:
            self._retire(scope)
        return self._new_scope(overrides, settings)

    def _new_scope(self, overrides: dict[str, Any], settings: TraceSettings) -> _Scope:
        writer = None
        if settings.mode is TraceMode.TRITON and settings.file:
            key = (settings.file, settings.log_frequency)
            writer = self._files.get(key)
            if writer is None:
                writer = self._files[key] = _TraceFile(
                    settings.file, settings.log_frequency, self._written
                )
        return _Scope(overrides, settings, remaining=settings.count, writer=writer)

    def _retire(self, scope: _Scope) -> None:
        """A scope whose settings changed: write out what it collected."""
        if scope.writer is not None:
            scope.writer.flush()

    def _scope(self, model: str | None) -> _Scope:
        if model is None:
            return self._global
        return self._models.get(model, self._global)

    # ------------------------------------------------------------- sampling

    def sample(self, model_name: str) -> RequestTrace | None:
        """A trace for this request when its scope's level and rate select it; else None."""
        scope = self._models.get(model_name, self._global) if self._models else self._global
        settings = scope.settings
        if not settings.level or scope.remaining == 0:
            return None
        scope.seen += 1
        if (scope.seen - 1) % settings.rate:
            return None
        if scope.remaining > 0:
            scope.remaining -= 1
        tensors = "TENSORS" in settings.level

        def finished(trace: RequestTrace) -> None:
            self._finished(scope, trace)

        def spawn(child_model: str, parent: RequestTrace) -> RequestTrace:
            child = RequestTrace(next(self._ids), child_model, tensors, finished, spawn)
            child.parent_id = parent.id
            return child

        return RequestTrace(next(self._ids), model_name, tensors, finished, spawn)

    def _finished(self, scope: _Scope, trace: RequestTrace) -> None:
        if self._exporter is not None:
            try:
                self._exporter.export(trace)
            except Exception:
                log.exception("exporting trace %d failed", trace.id)
            return
        if scope.writer is not None:
            scope.writer.add(trace.to_json())
            if scope.remaining == 0 and not trace.parent_id:  # children precede their parent
                scope.writer.flush(indexed=True)

    def close(self) -> None:
        """Write every trace still held (at shutdown)."""
        for writer in self._files.values():
            writer.flush()
        if self._exporter is not None:
            self._exporter.close()


def changes_from_json(body: Mapping[str, Any]) -> dict[str, SettingChange]:
    """The HTTP body's settings: ``trace_level`` an array of strings, the rest strings,
    null to clear; other JSON types are refused as Triton refuses them."""
    changes: dict[str, SettingChange] = {}
    for key, value in body.items():
        if value is None:
            changes[key] = None
        elif key == "trace_level":
            if not isinstance(value, list):
                raise InternalError("attempt to access JSON non-array as array")
            if not all(isinstance(v, str) for v in value):
                raise InternalError("attempt to access JSON non-string as string")
            changes[key] = list(value)
        elif isinstance(value, str):
            changes[key] = [value]
        else:
            raise InternalError("attempt to access JSON non-string as string")
    return changes
