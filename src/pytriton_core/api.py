"""The in-process Python API: serve models and run inference without any socket.

    from pytriton_core import Server

    with Server(model_repository="models") as server:
        outputs = server.infer("add_sub", {"INPUT0": a, "INPUT1": b})

The server runs on an event loop in a background thread, exactly as ``pytriton-server``
runs it; requests go through the same validation, schedulers and backends. Front ends are
off unless asked for (``allow_http=True``...).
"""

from __future__ import annotations

import asyncio
import dataclasses
import threading
from collections.abc import Callable, Coroutine, Iterable, Mapping
from concurrent.futures import Future
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

import numpy as np
import uvloop

from pytriton_core import types
from pytriton_core.errors import InvalidArgumentError
from pytriton_core.inference.request import InferenceRequest, RequestedOutput
from pytriton_core.inference.response import ParameterValue
from pytriton_core.inference.tensor import Tensor
from pytriton_core.logging_settings import parse_log_format
from pytriton_core.options import ModelControlMode, ServerOptions
from pytriton_core.server import ServerRuntime
from pytriton_core.service import InferenceService

T = TypeVar("T")


def _as_tensor(name: str, value: Any) -> Tensor:
    array = np.asarray(value)
    datatype = types.from_numpy(array.dtype)
    if datatype is None:
        raise InvalidArgumentError(f"input '{name}' has an unsupported numpy dtype {array.dtype}")
    if datatype.is_bytes and array.dtype != np.object_:
        encoded = np.empty(array.shape, dtype=object)
        encoded.flat[:] = [x.encode() if isinstance(x, str) else bytes(x) for x in array.flat]
        array = encoded
    return Tensor(name, datatype, array)


class Server:
    """A server inside this process, with blocking and ``async`` methods."""

    def __init__(
        self,
        options: ServerOptions | None = None,
        *,
        model_repository: str | Path | Iterable[str | Path] | None = None,
        **overrides: Any,
    ) -> None:
        base = options or ServerOptions(
            allow_http=False,
            allow_grpc=False,
            allow_metrics=False,
            model_control_mode=ModelControlMode.EXPLICIT,
            load_models=("*",),
            # This process has threads of its own: the loop does not poll for the GIL
            # between requests (frontends/busy_poll.py).
            busy_poll_us=0,
            # Nor does it change the garbage collector of the process it is a guest in.
            gc_threshold=0,
        )
        if model_repository is not None:
            paths = (
                [model_repository]
                if isinstance(model_repository, (str, Path))
                else list(model_repository)
            )
            overrides["model_repositories"] = tuple(Path(p) for p in paths)
        self.options = dataclasses.replace(base, **overrides)
        if self.options.workers != 1:
            # Worker processes are whole servers of their own, started from the command line
            # by their parent; a server inside this process is this process.
            raise ValueError(
                f"Server(workers={self.options.workers}): an in-process server is one "
                "process; run `python -m pytriton_core --workers N` for several"
            )
        self._runtime = ServerRuntime(self.options)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------ lifecycle

    def start(self) -> Server:
        """Load the models and start the front ends asked for; returns when ready."""
        if self._thread is not None:
            raise RuntimeError("server already started")
        started: Future[None] = Future()
        self._thread = threading.Thread(
            target=self._run_loop, args=(started,), name="pytriton-server", daemon=True
        )
        self._thread.start()
        started.result()
        return self

    def stop(self) -> None:
        """Finish in-flight requests, finalize every model, stop the loop thread."""
        if self._loop is None or self._thread is None:
            return
        self._call(self._runtime.stop())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        self._thread = None
        self._loop = None

    def __enter__(self) -> Server:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def _run_loop(self, started: Future[None]) -> None:
        loop = uvloop.new_event_loop()
        asyncio.set_event_loop(loop)
        self._loop = loop
        try:
            loop.run_until_complete(self._runtime.start())
        except BaseException as exc:
            started.set_exception(exc)
            loop.close()
            return
        started.set_result(None)
        loop.run_forever()
        loop.close()

    def _call(self, coroutine: Coroutine[Any, Any, T]) -> T:
        if self._loop is None:
            coroutine.close()
            raise RuntimeError("server not started")
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result()

    async def _call_async(self, coroutine: Coroutine[Any, Any, T]) -> T:
        if self._loop is None:
            coroutine.close()
            raise RuntimeError("server not started")
        if asyncio.get_running_loop() is self._loop:
            return await coroutine
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coroutine, self._loop))

    @property
    def _service(self) -> InferenceService:
        return self._runtime.service

    # ---------------------------------------------------------------- infer

    def infer(
        self,
        model: str,
        inputs: Mapping[str, Any],
        *,
        version: int | None = None,
        outputs: Iterable[str] | None = None,
        parameters: Mapping[str, ParameterValue] | None = None,
        request_id: str = "",
    ) -> dict[str, np.ndarray]:
        """Run one request; numpy in, numpy out. Raises a ``ServerError`` on failure."""
        return self._call(self._infer(model, inputs, version, outputs, parameters, request_id))

    async def infer_async(
        self,
        model: str,
        inputs: Mapping[str, Any],
        *,
        version: int | None = None,
        outputs: Iterable[str] | None = None,
        parameters: Mapping[str, ParameterValue] | None = None,
        request_id: str = "",
    ) -> dict[str, np.ndarray]:
        """``infer`` for asyncio code, from any event loop."""
        return await self._call_async(
            self._infer(model, inputs, version, outputs, parameters, request_id)
        )

    async def _infer(
        self,
        model_name: str,
        inputs: Mapping[str, Any],
        version: int | None,
        outputs: Iterable[str] | None,
        parameters: Mapping[str, ParameterValue] | None,
        request_id: str,
    ) -> dict[str, np.ndarray]:
        model = self._service.model(model_name, _version_text(version))
        request = InferenceRequest(
            model_name=model.name,
            model_version=model.version,
            id=request_id,
            inputs={name: _as_tensor(name, value) for name, value in inputs.items()},
            requested_outputs=None
            if outputs is None
            else {name: RequestedOutput(name) for name in outputs},
            parameters=dict(parameters or {}),
        )
        try:
            response = await self._service.infer(model, request)
        finally:
            if request.trace is not None:  # no front end: done once answered
                request.trace.finish()
        if response.error is not None:
            raise response.error
        return {tensor.name: tensor.data for tensor in response.outputs}

    # ---------------------------------------------------- models and health

    def load_model(
        self, name: str, config: str | None = None, files: Mapping[str, bytes] | None = None
    ) -> None:
        """Load or reload a model (``config``: Triton's JSON config; ``files``: overrides)."""
        self._call(self._service.load_model(name, config, files))

    def unload_model(self, name: str, unload_dependents: bool = False) -> None:
        """Unload a model; with ``unload_dependents``, an ensemble's composing models too."""
        self._call(self._service.unload_model(name, unload_dependents))

    def is_ready(self) -> bool:
        return self._on_loop(self._service.is_ready)

    def is_model_ready(self, name: str, version: int | None = None) -> bool:
        return self._on_loop(self._service.is_model_ready, name, _version_text(version))

    def model_metadata(self, name: str, version: int | None = None) -> dict[str, Any]:
        return self._on_loop(self._service.model_metadata, name, _version_text(version))

    def statistics(self, name: str | None = None, version: int | None = None) -> dict[str, Any]:
        """The statistics extension's answer (``/v2/models[/{name}[/versions/{v}]]/stats``)."""
        return self._on_loop(self._service.statistics, name, _version_text(version))

    def metrics(self) -> str:
        """The Prometheus page ``/metrics`` serves ("" when metrics are off)."""
        return self._on_loop(self._runtime.metrics_text)

    def log_settings(self, **changes: Any) -> dict[str, Any]:
        """The logging extension: the settings, after applying ``changes`` (``log_info=False``,
        ``log_verbose_level=1``, ``log_format="ISO8601"``...)."""
        return self._call(_update_log_settings(self._service, changes))

    def trace_settings(
        self, model: str | None = None, **changes: str | list[str] | None
    ) -> dict[str, Any]:
        """The trace extension: the global (or ``model``'s) settings, after applying
        ``changes`` (``trace_level=["TIMESTAMPS"]``, ``trace_rate="1"``; None clears)."""
        parsed = {k: [v] if isinstance(v, str) else v for k, v in changes.items()}
        return self._call(self._service.update_trace_settings(model, parsed))

    def _on_loop(self, function: Callable[..., T], *args: Any) -> T:
        """Run a synchronous core call on the server's loop: the core is single-threaded."""
        if self._loop is None:
            raise RuntimeError("server not started")
        result: Future[T] = Future()

        def run() -> None:
            try:
                result.set_result(function(*args))
            except BaseException as exc:
                result.set_exception(exc)

        self._loop.call_soon_threadsafe(run)
        return result.result()


async def _update_log_settings(
    service: InferenceService, changes: Mapping[str, Any]
) -> dict[str, Any]:
    values = dict(changes)
    if isinstance(values.get("log_format"), str):
        parsed = parse_log_format(values["log_format"])
        if parsed is None:
            raise InvalidArgumentError(
                f"invalid argument for log_format, got: {values['log_format']}"
            )
        values["log_format"] = parsed
    return await service.update_log_settings(values)


def _version_text(version: int | None) -> str | None:
    return None if version is None else str(version)
