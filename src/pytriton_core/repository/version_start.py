"""The second step of a load: bring up one version of a polled model (blocking).

Runs on a thread of the load pool (``--model-load-thread-count``): the backend completes
its own copy of the config, the copy is normalized and checked, the model's instances
start (``initialize`` runs), and on a GPU the memory limit of ``--model-load-gpu-limit``
is checked, as Triton checks it, once the instances exist. A failure is retried
``--model-load-retry-count`` times, then reported as the version's reason, in Triton's
form (``Internal: ValueError: ...``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

from google.protobuf.message import Message

from pytriton_core import config as model_config
from pytriton_core import proto
from pytriton_core.backends.base import InstanceSpec, ModelLocation, ServerCalls
from pytriton_core.backends.custom_metrics import MetricRegistry
from pytriton_core.backends.registry import BackendRegistry
from pytriton_core.config.spec import ModelSpec
from pytriton_core.devices import device_memory
from pytriton_core.errors import InternalError, ServerError, UnavailableError
from pytriton_core.inference.statistics import StatisticsFactory, default_statistics
from pytriton_core.memory.device import DevicePools
from pytriton_core.memory.pinned import StagingPool
from pytriton_core.options import ServerOptions
from pytriton_core.repository.polling import PolledModel
from pytriton_core.runtime.model import Model
from pytriton_core.runtime.services import ServerServices

log = logging.getLogger(__name__)

_INSTANCE_KINDS = {"KIND_CPU": "CPU", "KIND_GPU": "GPU", "KIND_MODEL": "MODEL"}


def failure_reason(exc: BaseException) -> str:
    """A failed version's reason as Triton words it: ``<code words>: <message>``."""
    if isinstance(exc, ServerError):
        return exc.status_text
    # Not one of ours: a bug here or in the model's code. The reason keeps Triton's one-line
    # form; the verbose log keeps where it came from.
    log.debug("unexpected failure while loading a model", exc_info=exc)
    return InternalError(f"{type(exc).__name__}: {exc}").status_text


@dataclass(frozen=True)
class VersionStarter:
    """What starting a version needs from the server."""

    options: ServerOptions
    backends: BackendRegistry
    loop: asyncio.AbstractEventLoop
    gpu_ids: Sequence[int]
    host_staging: StagingPool | None
    device_pools: DevicePools
    custom_metrics: MetricRegistry | None = None
    services: ServerServices | None = None  # the response cache and the rate limiter
    server: ServerCalls | None = None  # what model code calls (BLS)
    statistics: StatisticsFactory = default_statistics  # --workers N: shared counters

    def start(self, polled: PolledModel, version: int) -> Model:
        """Start ``version``, retrying as told; raises the last failure."""
        attempts = 1 + max(0, self.options.model_load_retry_count)
        for attempt in range(1, attempts + 1):
            try:
                return self._start_once(polled, version)
            except Exception as exc:
                if attempt == attempts:
                    raise
                log.warning(
                    "failed to load '%s' version %d (attempt %d of %d), retrying: %s",
                    polled.model_id,
                    version,
                    attempt,
                    attempts,
                    failure_reason(exc),
                )
        raise AssertionError("unreachable")

    def _start_once(self, polled: PolledModel, version: int) -> Model:
        config = proto.ModelConfig()
        config.CopyFrom(polled.config)
        backend = self.backends.get(_backend_of(config))
        location = self.location(polled, version, config)
        if not self.options.disable_auto_complete_config:
            backend.auto_complete_config(config, location)
        model_config.normalize_config(config, gpu_ids=self.gpu_ids)
        model_config.validate_config(config)
        spec = ModelSpec.from_config(config, version)
        backend_model = backend.load_model(spec, location, config)
        metrics = self.options.metrics if self.options.allow_metrics else None
        try:  # the board may be full (--workers N): the loaded backend model is let go
            stats = self.statistics(str(polled.model_id), version, metrics, spec.histogram_buckets)
        except BaseException:
            backend_model.finalize()
            raise
        model = Model(
            spec, config, polled.model_dir, backend_model, self.loop, stats, services=self.services
        )
        specs = instance_specs(spec)
        model.start(specs)
        try:
            self.check_gpu_limits(specs)
        except BaseException:
            model.stop_blocking()
            raise
        return model

    def location(self, polled: PolledModel, version: int, config: Message) -> ModelLocation:
        backend_name = _backend_of(config)
        return ModelLocation(
            name=polled.model_id.name,
            version=version,
            model_dir=polled.model_dir,
            version_dir=polled.model_dir / str(version),
            backend_config=self.options.backend_settings(backend_name),
            global_backend_config=self.options.backend_settings(""),
            host_staging=self.host_staging,
            device_pools=self.device_pools,
            custom_metrics=self.custom_metrics,
            python_based_dir=self.backends.python_based_dir(backend_name),
            server=self.server,
        )

    def check_gpu_limits(self, specs: Sequence[InstanceSpec]) -> None:
        """``--model-load-gpu-limit``: a device used past its fraction rejects the load."""
        limits = self.options.model_load_gpu_limit
        for spec in specs:
            limit = limits.get(spec.device_id) if spec.kind == "GPU" else None
            if limit is None:
                continue
            memory = device_memory(spec.device_id)
            if memory is None:
                raise UnavailableError(
                    f"can not create model '{spec.name}': --model-load-gpu-limit is set for "
                    f"GPU {spec.device_id} but its memory use cannot be read"
                )
            used, total = memory
            if used > total * limit:
                raise UnavailableError(
                    f"can not create model '{spec.name}': memory limit set for KIND_GPU "
                    f"{spec.device_id} has exceeded, model loading is rejected."
                )


def instance_specs(spec: ModelSpec) -> list[InstanceSpec]:
    """One spec per instance, named ``<group>_<index>`` as Triton names them."""
    specs: list[InstanceSpec] = []
    for group in spec.instance_groups:
        kind = _INSTANCE_KINDS.get(group.kind, "CPU")
        devices = list(group.gpus) if kind == "GPU" else [0]
        index = 0
        for device in devices:
            for _ in range(group.count):
                specs.append(InstanceSpec(f"{group.name}_{index}", kind, device, group))
                index += 1
    return specs


def _backend_of(config: Message) -> str:
    # ModelConfig's fields are dynamic to the type checker (the pool is built at run time).
    return str(cast(Any, config).backend)
