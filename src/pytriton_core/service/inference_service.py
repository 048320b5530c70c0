"""The face the front ends call: lookups, readiness, metadata, infer, statistics, the model
repository, and the trace, log and shared-memory settings.

HTTP, gRPC and the in-process API call the same methods, so all answer the same way; each
renders the returned values in its own wire format. The repository manager, the tracer, the
log control and the shared-memory registry stay behind these methods.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from google.protobuf import json_format
from google.protobuf.message import Message

from pytriton_core import types
from pytriton_core._version import __version__
from pytriton_core.config import TensorSpec
from pytriton_core.errors import (
    InternalError,
    InvalidArgumentError,
    ServerError,
    UnavailableError,
)
from pytriton_core.inference.request import InferenceRequest
from pytriton_core.inference.response import InferenceResponse
from pytriton_core.inference.statistics import ModelStatistics
from pytriton_core.inference.tensor import Tensor
from pytriton_core.inference.tensor_data import RequestLimits, check_tensor_limits
from pytriton_core.logging_settings import LogControl
from pytriton_core.memory import SharedMemoryManager, ShmOutput, ShmReference
from pytriton_core.options import ModelControlMode, ServerOptions
from pytriton_core.repository.manager import IndexEntry, ModelManager
from pytriton_core.runtime.model import Model
from pytriton_core.service import census
from pytriton_core.service.statistics_report import statistics_document
from pytriton_core.tracing import RequestTrace, SettingChange, TraceManager

# Triton's order (core/src/server.cc); listed only once their feature exists here.
EXTENSIONS = (
    "classification",
    "sequence",
    "model_repository",
    "model_repository(unload_dependents)",
    "schedule_policy",  # the "priority" and "timeout" request parameters
    "model_configuration",
    "system_shared_memory",
    "cuda_shared_memory",
    "binary_tensor_data",
    "parameters",
    "statistics",
    "trace",
    "logging",
)


# The most (name, version) pairs ``InferenceService.model`` remembers before starting over.
_LOOKUPS_KEPT = 1024


def parse_version(text: str | None) -> int:
    """``""``/None → -1 (latest); otherwise a non-negative integer, as Triton requires."""
    if not text:
        return -1
    if not text.isdigit():
        raise InvalidArgumentError(
            f"failed to get model version from specified version string '{text}' (details: stoll)"
        )
    return int(text)


class PeerReplication(Protocol):
    """The workers of ``--workers N``: a change made through this one is applied by every
    worker (this one included) in one order before the call returns."""

    async def load(
        self, name: str, config: str | None, files: Mapping[str, bytes] | None
    ) -> None: ...

    async def unload(self, name: str, unload_dependents: bool) -> None: ...

    async def call(self, method: str, args: Sequence[Any]) -> Any:
        """``method(*args, replicate=False)`` of every worker's service; returns this
        worker's result."""


class InferenceService:
    """The service (an extension type, inference_service.pxd: ``model``, ``submit`` and
    ``infer`` run for every request)."""

    def __init__(
        self,
        options: ServerOptions,
        manager: ModelManager,
        shared_memory: SharedMemoryManager | None = None,
        *,
        tracer: TraceManager | None = None,
        log_control: LogControl | None = None,
        peers_ready: Callable[[], bool] | None = None,
        peers: PeerReplication | None = None,
    ) -> None:
        self.options = options
        self.request_limits = RequestLimits(options.limits)  # (read for every request)
        # --workers N: whether every other worker is serving too (None: one process).
        self._peers_ready = peers_ready
        self._peers = peers
        self._manager = manager
        self._lookups = manager.request_lookups
        self._tracer = tracer if tracer is not None else TraceManager(options.trace)
        self._log_control = log_control if log_control is not None else LogControl(options.log)
        # Client regions (system and CUDA shared memory), one registry for both front ends.
        self._shared_memory = shared_memory or SharedMemoryManager(
            allow_client=options.memory.allow_client_shm,
            pinned_pool_byte_size=options.memory.pinned_memory_pool_byte_size,
        )
        self.live = False
        self.exiting = False

    def check_serving(self) -> None:
        """Triton's refusal of model-level calls (model readiness, the repository) once
        the server is exiting. Inference goes on: each model's scheduler refuses new
        requests then but lets sequences in flight finish (``ModelManager.stop_accepting``)."""
        if self.exiting:
            raise UnavailableError("Server not ready")

    # ------------------------------------------------------------- health

    def is_live(self) -> bool:
        if self.exiting:
            raise UnavailableError("Server exiting")
        return self.live

    def is_ready(self) -> bool:
        if self.exiting:
            raise UnavailableError("Server exiting")
        if not self.live:
            return False
        if self._peers_ready is not None and not self._peers_ready():
            return False
        return self._manager.is_ready() if self.options.strict_readiness else True

    def is_model_ready(self, name: str, version: str | None) -> bool:
        """False for a model or version that is unknown or not ready, as Triton answers."""
        self.check_serving()
        requested = parse_version(version)  # a malformed version string is an error
        try:
            self._manager.get(name, requested)
        except ServerError:
            return False
        return True

    # ----------------------------------------------------------- metadata

    def server_metadata(self) -> dict[str, Any]:
        return {
            "name": self.options.server_id,
            "version": __version__,
            "extensions": list(EXTENSIONS),
        }

    def model(self, name: str, version: str | None) -> Model:
        """The model version a request names (``version`` as sent: None or "" for the
        latest), with Triton's messages when there is none."""
        lookups = self._lookups
        if lookups is None:  # (model namespacing: the manager resolves every name)
            return self._manager.get(name, parse_version(version))
        found = lookups.get((name, version))
        if found is not None and found.serving():
            return found
        model = self._manager.get(name, parse_version(version))
        if len(lookups) >= _LOOKUPS_KEPT:  # version strings are the client's to vary
            lookups.clear()
        lookups[(name, version)] = model
        return model

    def model_metadata(self, name: str, version: str | None) -> dict[str, Any]:
        model = self.model(name, version)
        versions = (
            [str(model.version)]
            if version
            else [str(m.version) for m in self._manager.ready_versions(name)]
        )
        spec = model.spec

        def tensors(declared: Mapping[str, TensorSpec]) -> list[dict[str, Any]]:
            return [
                {"name": t.name, "datatype": t.datatype.wire_name, "shape": spec.full_shape(t)}
                for t in declared.values()
            ]

        return {
            "name": model.name,
            "versions": versions,
            "platform": spec.reported_platform,
            "inputs": tensors(spec.inputs),
            "outputs": tensors(spec.outputs),
        }

    def model_config(self, name: str, version: str | None) -> Message:
        """The validated config of a ready model version (the model configuration
        extension): gRPC sends it as it is, HTTP as ``config_to_json_dict`` renders it."""
        return self.model(name, version).config

    # -------------------------------------------------------------- infer

    def start_trace(self, model: Model) -> RequestTrace | None:
        """A trace for a request to ``model`` when tracing samples it, else None."""
        return self._tracer.sample(model.name)

    def submit(self, model: Model, request: InferenceRequest) -> None:
        """Queue a request; its responses go to ``request.on_response`` (gRPC streams).

        When tracing samples the request (and the caller has not traced it already),
        ``request.trace`` is set: the caller stamps its own stages on it and calls ``finish``
        once the final response has left.
        """
        check_tensor_limits(request, self.request_limits)
        if request.trace is None and not self._tracer.idle:
            request.trace = self._tracer.sample(model.name)
        model.submit(request)

    def submit_for_answer(
        self,
        model: Model,
        request: InferenceRequest,
        on_answer: Callable[[InferenceResponse], None],
    ) -> None:
        """Submit a request expecting exactly one response; ``on_answer`` gets it (or the
        error that stands for it) once the request is done: before this returns when the
        request runs inline. The gRPC front end answers ModelInfer from it, with no task."""
        request.on_response = SingleAnswer(on_answer)
        self.submit(model, request)

    async def infer(self, model: Model, request: InferenceRequest) -> InferenceResponse:
        """Submit a request expecting exactly one response, and wait for it (the in-process
        API and the OpenAI front end; HTTP /infer calls ``begin_infer``, gRPC
        ``submit_for_answer``)."""
        answer = self.begin_infer(model, request)
        if answer.value is not None:
            return answer.value
        return await answer.wait(request)

    def begin_infer(self, model: Model, request: InferenceRequest) -> SingleAnswer:
        """``infer`` without its coroutine: submit, and return the answer to come, whose
        ``value`` is set already when the request ran within ``submit`` (inline), as most
        do; else await its ``wait(request)``."""
        answer = SingleAnswer()
        request.on_response = answer
        self.submit(model, request)
        return answer

    # ---------------------------------------------------- model repository

    def _require_explicit_mode(self) -> None:
        self.check_serving()
        if self.options.model_control_mode is not ModelControlMode.EXPLICIT:
            raise UnavailableError(
                "explicit model load / unload is not allowed if polling is enabled"
            )

    def repository_index(self, ready_only: bool = False) -> list[IndexEntry]:
        """Every model the repositories hold, with each version's state (or only the
        ready ones)."""
        self.check_serving()
        return self._manager.index(ready_only)

    async def load_model(
        self,
        name: str,
        config: str | None = None,
        files: Mapping[str, bytes] | None = None,
        *,
        replicate: bool = True,
    ) -> None:
        """Load or reload a model; ``files`` ("file:<version>/<path>" → bytes) need a config.
        With ``--workers N`` every other worker loads it too before this returns (unless
        ``replicate`` is False: the parent sends it, which in POLL mode a joining worker
        uses to serve what the others polled)."""
        if replicate:
            self._require_explicit_mode()
        else:
            self.check_serving()
        if replicate and self._peers is not None:
            await self._peers.load(name, config, files)
        else:
            await self._manager.load(name, config, files)

    async def unload_model(
        self, name: str, unload_dependents: bool = False, *, replicate: bool = True
    ) -> None:
        if replicate:
            self._require_explicit_mode()
        else:
            self.check_serving()
        if replicate and self._peers is not None:
            await self._peers.unload(name, unload_dependents)
        else:
            await self._manager.unload(name, unload_dependents)

    async def poll_repository(self) -> None:
        """POLL mode under ``--workers N``: one poll of the repositories, when the parent
        says (it keeps the clock, so that every worker polls as one change). A worker
        that is stopping polls no more, as the poller of one process is stopped then."""
        if not self.exiting:
            await self._manager.poll_once()

    def ready_model_configs(self) -> dict[str, str]:
        """Each ready model's config as JSON (its newest ready version's): what a worker
        started in a dead one's place loads to serve what the others serve."""
        configs = {}
        for model in self._manager.all_ready():
            configs[model.name] = json_format.MessageToJson(model.config)
        return configs

    def ready_model_statistics(self) -> dict[str, ModelStatistics]:
        """Each ready model's counters (its newest ready version's)."""
        return {model.name: model.stats for model in self._manager.all_ready()}

    # --------------------------------------------------------- statistics

    def statistics(self, name: str | None, version: str | None) -> dict[str, Any]:
        if not name:
            models = self._manager.all_ready()
        else:
            try:
                parsed = parse_version(version)
                models = (
                    [self._manager.get(name, parsed)]
                    if parsed >= 0
                    else self._manager.ready_versions(name)
                )
            except InvalidArgumentError:
                raise
            except Exception:
                if version:
                    raise InvalidArgumentError(
                        f"requested model version is not available for model '{name}'"
                    ) from None
                raise InvalidArgumentError(f"requested model '{name}' is not available") from None
            if not models:
                raise InvalidArgumentError(f"requested model '{name}' is not available")
        return statistics_document(models)

    # -------------------------------------------------------- trace settings

    def trace_settings(self, model: str | None = None) -> dict[str, list[str] | str]:
        """The global trace settings, or ``model``'s (which must be loaded)."""
        self.check_trace_model(model)
        return self._tracer.settings(model)

    async def update_trace_settings(
        self,
        model: str | None,
        changes: Mapping[str, SettingChange],
        *,
        replicate: bool = True,
    ) -> dict[str, list[str] | str]:
        """Apply ``changes`` (None clears a model's own value) and return the settings."""
        self.check_trace_model(model)
        if replicate and self._peers is not None:
            settings: dict[str, list[str] | str] = await self._peers.call(
                "update_trace_settings", (model, dict(changes))
            )
            return settings
        return self._tracer.update(model, changes)

    def trace_overrides(self) -> dict[str, dict[str, list[str] | str]]:
        """The trace settings each model has of its own (not following the global ones)."""
        return self._tracer.model_overrides()

    def check_trace_model(self, name: str | None) -> None:
        """Model-scoped trace settings need the model loaded (Triton's error otherwise)."""
        if name is not None:
            try:
                self._manager.get(name)
            except ServerError:
                raise InvalidArgumentError(f"Request for unknown model : {name}") from None

    # ---------------------------------------------------------- leak checks

    def live_objects(self) -> dict[str, int]:
        """What requests left alive (``census.live_objects``); only with
        ``--debug-live-objects``."""
        if not self.options.debug_live_objects:
            raise UnavailableError("live object counts need --debug-live-objects=true")
        return census.live_objects()

    # ---------------------------------------------------------- log settings

    def log_settings(self) -> dict[str, Any]:
        return self._log_control.settings.to_json()

    async def update_log_settings(
        self, changes: dict[str, Any], *, replicate: bool = True
    ) -> dict[str, Any]:
        """Apply already-validated values (``logging_settings.SETTABLE`` keys)."""
        if replicate and self._peers is not None:
            settings: dict[str, Any] = await self._peers.call("update_log_settings", (changes,))
            return settings
        return self._log_control.update(changes).to_json()

    # ------------------------------------------------- shared-memory settings

    def require_client_shm(self) -> None:
        """UNSUPPORTED unless clients may register regions (``--allow-client-shm``)."""
        self._shared_memory.require_client_shm()

    def require_cuda_shm(self, region: str) -> None:
        """UNSUPPORTED on a server without GPU support for CUDA regions."""
        self._shared_memory.require_gpu(region)

    def shm_status(self, kind: str, region: str | None) -> list[dict[str, Any]]:
        """The ``kind`` ("system" or "cuda") regions, or just ``region``."""
        return self._shared_memory.status(kind, region)

    # A region registered through one worker of --workers N is registered in every worker
    # (each maps it), so requests through any of them can use it, and each lists it once.
    async def register_system_shm(
        self, region: str, key: str, offset: int, byte_size: int, *, replicate: bool = True
    ) -> None:
        if replicate and self._peers is not None:
            await self._peers.call("register_system_shm", (region, key, offset, byte_size))
        else:
            self._shared_memory.register_system(region, key, offset, byte_size)

    async def register_cuda_shm(
        self,
        region: str,
        raw_handle: bytes,
        device_id: int,
        byte_size: int,
        *,
        replicate: bool = True,
    ) -> None:
        if replicate and self._peers is not None:
            args = (region, raw_handle, device_id, byte_size)
            await self._peers.call("register_cuda_shm", args)
        else:
            self._shared_memory.register_cuda(region, raw_handle, device_id, byte_size)

    async def unregister_shm(
        self, kind: str, region: str | None, *, replicate: bool = True
    ) -> None:
        """Forget one region of ``kind`` or, with no name, all of them."""
        if replicate and self._peers is not None:
            await self._peers.call("unregister_shm", (kind, region))
        else:
            self._shared_memory.unregister(kind, region)

    # ------------------------------------------ shared memory of one request

    def shm_input(
        self,
        ref: ShmReference,
        datatype: types.DataType,
        shape: list[int],
        *,
        input_name: str,
        model_name: str,
        request_id: str,
    ) -> Tensor:
        """An input tensor over a client's region (a view; no copy of host data)."""
        return self._shared_memory.input_tensor(
            ref,
            datatype,
            shape,
            input_name=input_name,
            model_name=model_name,
            request_id=request_id,
            max_bytes_elements=self.options.limits.max_bytes_elements,
        )

    def shm_output(self, output_name: str, ref: ShmReference) -> ShmOutput:
        """Where an output goes, its range checked now, before the model runs."""
        return self._shared_memory.output_target(output_name, ref)


class SingleAnswer:
    """Collects a request's responses until its final one (``InferenceService.infer``).

    A request that runs inline is answered before ``submit`` returns: then no future is
    made and the handler never waits. With ``on_answer``, the answer is handed to it
    instead of waited for. (An extension type, inference_service.pxd.)"""

    def __init__(self, on_answer: Callable[[InferenceResponse], None] | None = None) -> None:
        self.first: InferenceResponse | None = None  # the first response
        self.count = 0  # responses received
        self.value: InferenceResponse | None = None
        self.future: asyncio.Future[None] | None = None
        self.on_answer = on_answer

    def __call__(self, response: InferenceResponse | None, final: bool) -> None:
        if response is not None:
            self.count += 1
            if self.first is None:
                self.first = response
        if not final or self.value is not None:
            return
        value = self.first
        if self.count != 1 or value is None:
            value = InferenceResponse.failed(
                InternalError(f"expected a single response, got {self.count}")
            )
        self.value = value
        on_answer = self.on_answer
        if on_answer is not None:
            # Let go of it first: it may hold what holds the request (which holds this).
            self.on_answer = None
            on_answer(value)
        elif self.future is not None and not self.future.done():
            self.future.set_result(None)

    async def wait(self, request: InferenceRequest) -> InferenceResponse:
        """The final response to ``request``, once it comes; a caller that goes away (its
        task cancelled) cancels the request. (The answer keeps
        no reference to its request: the request holds the answer, and a cycle between the
        two would leave every request to the garbage collector.)"""
        if self.value is None:
            # The model's loop, which runs this (``get_running_loop`` would cost a getpid
            # system call per request).
            loop = request.loop or asyncio.get_running_loop()
            self.future = loop.create_future()
            try:
                await self.future
            except asyncio.CancelledError:
                request.cancel()
                raise
        assert self.value is not None
        return self.value
