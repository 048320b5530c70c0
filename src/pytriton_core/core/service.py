"""The core's face to the front ends: lookups, readiness, metadata, infer, statistics.

HTTP and gRPC call the same methods, so both answer the same way; each renders the
returned values in its own wire format.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from pytriton_core import __version__
from pytriton_core.config import config_from_json
from pytriton_core.core.model import Model
from pytriton_core.core.request import InferenceRequest
from pytriton_core.core.response import InferenceResponse
from pytriton_core.core.statistics import Duration, ModelStatistics
from pytriton_core.errors import (
    InternalError,
    InvalidArgumentError,
    ServerError,
    UnavailableError,
)
from pytriton_core.logging_settings import LogControl
from pytriton_core.memory import SharedMemoryManager
from pytriton_core.options import ModelControlMode, ServerOptions
from pytriton_core.paths import check_model_name
from pytriton_core.repository.manager import ModelManager
from pytriton_core.tracing import TraceManager

# Triton's order (core/src/server.cc); listed only once their feature exists here.
EXTENSIONS = (
    "classification",
    "model_repository",
    "model_repository(unload_dependents)",
    "model_configuration",
    "system_shared_memory",
    "cuda_shared_memory",
    "binary_tensor_data",
    "parameters",
    "statistics",
    "trace",
    "logging",
)


def parse_version(text: str | None) -> int:
    """``""``/None → -1 (latest); otherwise a non-negative integer, as Triton requires."""
    if not text:
        return -1
    if not text.isdigit():
        raise InvalidArgumentError(
            f"failed to get model version from specified version string '{text}' (details: stoll)"
        )
    return int(text)


class InferenceService:
    def __init__(
        self,
        options: ServerOptions,
        manager: ModelManager,
        shared_memory: SharedMemoryManager | None = None,
        *,
        tracer: TraceManager | None = None,
        log_control: LogControl | None = None,
    ) -> None:
        self.options = options
        self.manager = manager
        self.tracer = tracer if tracer is not None else TraceManager(options.trace)
        self.log_control = log_control if log_control is not None else LogControl(options.log)
        # Client regions (system and CUDA shared memory), one registry for both front ends.
        self.shared_memory = shared_memory or SharedMemoryManager(
            allow_client=options.memory.allow_client_shm,
            pinned_pool_byte_size=options.memory.pinned_memory_pool_byte_size,
        )
        self.live = False
        self.exiting = False

    def check_accepting(self) -> None:
        """New inference requests are refused once the server is exiting."""
        if self.exiting:
            raise UnavailableError("Server exiting")

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
        return self.manager.is_ready() if self.options.strict_readiness else True

    def is_model_ready(self, name: str, version: str | None) -> bool:
        """False for a model or version that is unknown or not ready, as Triton answers."""
        if self.exiting:
            raise UnavailableError("Server exiting")
        requested = parse_version(version)  # a malformed version string is an error
        try:
            self.manager.get(name, requested)
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
        return self.manager.get(name, parse_version(version))

    def model_metadata(self, name: str, version: str | None) -> dict[str, Any]:
        model = self.model(name, version)
        versions = (
            [str(model.version)]
            if version
            else [str(m.version) for m in self.manager.ready_versions(name)]
        )
        specs = model.specs

        def tensors(group: str) -> list[dict[str, Any]]:
            return [
                {"name": s.name, "datatype": s.datatype.wire_name, "shape": specs.full_shape(s)}
                for s in getattr(specs, group).values()
            ]

        return {
            "name": model.name,
            "versions": versions,
            "platform": model.platform,
            "inputs": tensors("inputs"),
            "outputs": tensors("outputs"),
        }

    # -------------------------------------------------------------- infer

    async def infer(self, model: Model, request: InferenceRequest) -> InferenceResponse:
        """Submit a request expecting exactly one response (HTTP /infer, gRPC ModelInfer).

        When tracing samples the request, ``request.trace`` is set: the caller stamps its own
        stages on it and calls ``finish`` once the response has left.
        """
        self.check_accepting()
        if request.trace is None:
            request.trace = self.tracer.sample(model.name)
        loop = asyncio.get_running_loop()
        done: asyncio.Future[InferenceResponse] = loop.create_future()
        responses: list[InferenceResponse] = []

        def collect(response: InferenceResponse | None, final: bool) -> None:
            if response is not None:
                responses.append(response)
            if final and not done.done():
                if len(responses) == 1:
                    done.set_result(responses[0])
                else:
                    done.set_result(
                        InferenceResponse.failed(
                            InternalError(f"expected a single response, got {len(responses)}")
                        )
                    )

        request.on_response = collect
        model.submit(request)
        return await done

    # ---------------------------------------------------- model repository

    def _require_explicit_mode(self) -> None:
        if self.options.model_control_mode is not ModelControlMode.EXPLICIT:
            raise UnavailableError(
                "explicit model load / unload is not allowed if polling is enabled"
            )

    async def load_model(
        self, name: str, config_json: str | None = None, files: Mapping[str, bytes] | None = None
    ) -> None:
        """Load or reload a model; ``files`` ("file:<version>/<path>" → bytes) need a config."""
        self._require_explicit_mode()
        check_model_name(name)
        override = config_from_json(config_json) if config_json else None
        await self.manager.load(name, override, files)

    async def unload_model(self, name: str, unload_dependents: bool = False) -> None:
        self._require_explicit_mode()
        await self.manager.unload(name)

    # --------------------------------------------------------- statistics

    def statistics(self, name: str | None, version: str | None) -> dict[str, Any]:
        if not name:
            models = self.manager.all_ready()
        else:
            try:
                parsed = parse_version(version)
                models = (
                    [self.manager.get(name, parsed)]
                    if parsed >= 0
                    else self.manager.ready_versions(name)
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
        return {"model_stats": [_model_stats(m) for m in models]}


def _duration(d: Duration) -> dict[str, int]:
    return {"count": d.count, "ns": d.ns}


def _model_stats(model: Model) -> dict[str, Any]:
    s: ModelStatistics = model.stats
    return {
        "name": model.name,
        "version": str(model.version),
        "last_inference": s.last_inference_ms,
        "inference_count": s.inference_count,
        "execution_count": s.execution_count,
        "inference_stats": {
            "success": _duration(s.success),
            "fail": _duration(s.fail),
            "queue": _duration(s.queue),
            "compute_input": _duration(s.compute_input),
            "compute_infer": _duration(s.compute_infer),
            "compute_output": _duration(s.compute_output),
            "cache_hit": _duration(s.cache_hit),
            "cache_miss": _duration(s.cache_miss),
        },
        "response_stats": {},
        "batch_stats": [
            {
                "batch_size": size,
                "compute_input": _duration(b.compute_input),
                "compute_infer": _duration(b.compute_infer),
                "compute_output": _duration(b.compute_output),
            }
            for size, b in sorted(s.batch_stats.items())
        ],
        "memory_usage": [],
    }
