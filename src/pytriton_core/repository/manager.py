"""Model lifecycle: load, look up and unload the models of the repositories.

Loading runs in worker threads (model code may take long to initialize); lookups and
state changes happen on the event loop.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from google.protobuf.message import Message

from pytriton_core import config as model_config
from pytriton_core import proto
from pytriton_core.backends.base import InstanceSpec, ModelLocation
from pytriton_core.backends.custom_metrics import MetricRegistry
from pytriton_core.backends.registry import BackendRegistry
from pytriton_core.config.spec import ModelSpec
from pytriton_core.devices import visible_gpu_ids
from pytriton_core.errors import (
    InvalidArgumentError,
    NotFoundError,
    ServerError,
    UnavailableError,
)
from pytriton_core.inference.statistics import ModelStatistics
from pytriton_core.memory.device import DevicePools
from pytriton_core.memory.pinned import StagingPool
from pytriton_core.options import ModelControlMode, ServerOptions
from pytriton_core.repository.agents import AgentChain, AgentRegistry
from pytriton_core.repository.checksum_agent import ChecksumAgent
from pytriton_core.repository.overrides import OverrideDirectory
from pytriton_core.repository.scan import ScanResult, scan_repositories
from pytriton_core.runtime.model import Model, ModelState
from pytriton_core.runtime.services import ServerServices

log = logging.getLogger(__name__)

_INSTANCE_KINDS = {"KIND_CPU": "CPU", "KIND_GPU": "GPU", "KIND_MODEL": "MODEL"}


@dataclass(frozen=True)
class IndexEntry:
    name: str
    version: int | None
    state: ModelState | None  # None: never loaded
    reason: str = ""


@dataclass
class _VersionStatus:
    state: ModelState
    reason: str = ""
    unloaded: bool = False  # unloaded on request: strict readiness ignores it


class ModelManager:
    def __init__(
        self,
        options: ServerOptions,
        backends: BackendRegistry,
        loop: asyncio.AbstractEventLoop,
        *,
        host_staging: StagingPool | None = None,
        custom_metrics: MetricRegistry | None = None,
        services: ServerServices | None = None,
    ) -> None:
        self._options = options
        self._services = services
        self._host_staging = host_staging
        self._custom_metrics = custom_metrics
        self._device_pools = DevicePools(options.memory.cuda_memory_pool_byte_size)
        self._backends = backends
        self._loop = loop
        self._models: dict[str, dict[int, Model]] = {}
        # What the index reports, failures included; None as version: the whole model.
        self._status: dict[str, dict[int | None, _VersionStatus]] = {}
        self._known: dict[str, Path] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self._gpu_ids = visible_gpu_ids()
        self._fingerprints: dict[str, tuple[tuple[str, int, int], ...]] = {}
        self._override_dirs: dict[str, OverrideDirectory] = {}
        # model_repository_agents: the agents each loaded model went through.
        self._agents = AgentRegistry(options.repoagent_directory, {"checksum": ChecksumAgent})
        self._agent_chains: dict[str, AgentChain] = {}

    # ----------------------------------------------------------------- lookups

    def get(self, name: str, version: int = -1) -> Model:
        """The model version requests go to, with Triton's messages when there is none."""
        versions = self._models.get(name)
        if versions is None:
            if name in self._status:
                raise UnavailableError(
                    f"Request for unknown model: '{name}' has no available versions"
                )
            raise InvalidArgumentError(f"Request for unknown model: '{name}' is not found")
        if version < 0:
            ready = [v for v, m in versions.items() if m.state is ModelState.READY]
            if not ready:
                raise NotFoundError(
                    f"Request for unknown model: '{name}' has no available versions"
                )
            return versions[max(ready)]
        model = versions.get(version)
        if model is None:
            raise NotFoundError(
                f"Request for unknown model: '{name}' version {version} is not found"
            )
        if model.state is not ModelState.READY:
            raise UnavailableError(
                f"Request for unknown model: '{name}' version {version} is not at ready state"
            )
        return model

    def ready_versions(self, name: str) -> list[Model]:
        return sorted(
            (m for m in self._models.get(name, {}).values() if m.state is ModelState.READY),
            key=lambda m: m.version,
        )

    def all_ready(self) -> list[Model]:
        return [m for name in sorted(self._models) for m in self.ready_versions(name)]

    def loaded(self) -> list[Model]:
        """Every loaded model version, in name and version order (READY or draining)."""
        return [
            model
            for name in sorted(self._models)
            for _, model in sorted(self._models[name].items())
        ]

    def in_flight(self) -> int:
        """Requests accepted by some model and not yet answered."""
        return sum(m.in_flight for versions in self._models.values() for m in versions.values())

    def index(self, ready_only: bool = False) -> list[IndexEntry]:
        entries: list[IndexEntry] = []
        for name in sorted(set(self._known) | set(self._status)):
            statuses = self._status.get(name)
            if not statuses:
                if not ready_only:
                    entries.append(IndexEntry(name, None, None))
                continue
            for version, status in sorted(statuses.items(), key=lambda kv: kv[0] or -1):
                if ready_only and status.state is not ModelState.READY:
                    continue
                entries.append(IndexEntry(name, version, status.state, status.reason))
        return entries

    def is_ready(self) -> bool:
        """Strict readiness: every model loaded and every one of its versions ready."""
        for statuses in self._status.values():
            for status in statuses.values():
                if status.state is not ModelState.READY and not status.unloaded:
                    return False
        return True

    # -------------------------------------------------------------- lifecycle

    async def load_startup_models(self) -> list[str]:
        """Load what the control mode asks for at start; returns the names that failed."""
        scan = self._rescan()
        names = sorted(scan.models)
        if self._options.model_control_mode is ModelControlMode.EXPLICIT:
            wanted = self._options.load_models
            names = names if "*" in wanted else [n for n in wanted if n in scan.models]
            for name in (n for n in wanted if n != "*" and n not in scan.models):
                self._status[name] = {
                    None: _VersionStatus(
                        ModelState.UNAVAILABLE, f"model '{name}' not found in any repository"
                    )
                }
        errors = await asyncio.gather(*(self._load_locked(name) for name in names))
        failed = [name for name, error in zip(names, errors, strict=True) if error]
        for name in failed + list(scan.conflicts):
            log.error("failed to load '%s'", name)
        return (
            failed
            + list(scan.conflicts)
            + [n for n in self._options.load_models if n in self._status and n not in scan.models]
        )

    async def load(
        self,
        name: str,
        config_override: Message | None = None,
        files: Mapping[str, bytes] | None = None,
    ) -> None:
        """Load or reload a model (the repository extension); raises on failure."""
        if files and config_override is None:
            raise InvalidArgumentError(
                f"failed to load '{name}': file overrides require the 'config' parameter"
            )
        if not files:
            self._rescan()
            if name not in self._known:
                raise InvalidArgumentError(
                    f"failed to load '{name}', failed to poll from model repository"
                )
        error = await self._load_locked(name, config_override, files)
        if error:
            raise InvalidArgumentError(f"failed to load '{name}': {error}")

    async def unload(self, name: str) -> None:
        """Unload every version of a model; unknown names are ignored, as Triton does."""
        async with self._lock(name):
            await self._unload_unlocked(name)

    async def unload_all(self) -> None:
        await asyncio.gather(*(self.unload(name) for name in list(self._models)))

    async def poll_forever(self, interval_s: float) -> None:
        """POLL mode: apply added, changed and removed models every ``interval_s``."""
        while True:
            await asyncio.sleep(interval_s)
            try:
                await self.poll_once()
            except Exception:
                log.exception("polling the model repository failed")

    async def poll_once(self) -> None:
        scan = self._rescan()
        for name in sorted(set(self._models) - set(scan.models)):
            log.info("model '%s' removed from the repository: unloading", name)
            await self.unload(name)
        for name, model_dir in sorted(scan.models.items()):
            fingerprint = await asyncio.to_thread(_fingerprint, model_dir)
            if self._fingerprints.get(name) != fingerprint:
                log.info("model '%s' added or changed: loading", name)
                await self._load_locked(name)

    # ------------------------------------------------------------ loading

    def _rescan(self) -> ScanResult:
        scan = scan_repositories(self._options.model_repositories)
        self._known = dict(scan.models)
        for name, dirs in scan.conflicts.items():
            where = ", ".join(str(d) for d in dirs)
            self._status[name] = {
                None: _VersionStatus(
                    ModelState.UNAVAILABLE,
                    f"model '{name}' appears in several repositories: {where}",
                )
            }
        return scan

    def _lock(self, name: str) -> asyncio.Lock:
        return self._locks.setdefault(name, asyncio.Lock())

    async def _load_locked(
        self,
        name: str,
        config_override: Message | None = None,
        files: Mapping[str, bytes] | None = None,
    ) -> str | None:
        async with self._lock(name):
            override = OverrideDirectory(name, files) if files else None
            model_dir = override.model_dir if override else self._known[name]
            error = await self._load_unlocked(name, model_dir, config_override)
            previous = self._override_dirs.pop(name, None)
            if error and override is not None:
                override.cleanup()
                if previous is not None:
                    self._override_dirs[name] = previous
            else:
                if previous is not None:
                    previous.cleanup()
                if override is not None:
                    self._override_dirs[name] = override
            return error

    async def _load_unlocked(
        self, name: str, model_dir: Path, config_override: Message | None
    ) -> str | None:
        """Load the versions, then swap them in; the old ones keep serving until then."""
        if name not in self._models:
            self._status[name] = {None: _VersionStatus(ModelState.LOADING)}
        self._fingerprints[name] = await asyncio.to_thread(_fingerprint, model_dir)
        try:
            config, versions, chain = await asyncio.to_thread(
                self._prepare, name, model_dir, config_override
            )
        except ServerError as exc:
            log.error("failed to load '%s': %s", name, exc.message)
            if name not in self._models:
                self._status[name] = {None: _VersionStatus(ModelState.UNAVAILABLE, exc.message)}
            return exc.message
        if chain is not None:
            model_dir = chain.location  # the last agent's folder
        loaded: dict[int, Model] = {}
        statuses: dict[int | None, _VersionStatus] = {}
        errors: list[str] = []
        for version in versions:
            try:
                loaded[version] = await asyncio.to_thread(
                    self._start_version, version, model_dir, config
                )
                statuses[version] = _VersionStatus(ModelState.READY)
                log.info("successfully loaded '%s' version %d", name, version)
            except Exception as exc:
                message = (
                    exc.message if isinstance(exc, ServerError) else f"{type(exc).__name__}: {exc}"
                )
                log.error("failed to load '%s' version %d: %s", name, version, message)
                statuses[version] = _VersionStatus(ModelState.UNAVAILABLE, message)
                errors.append(f"version {version}: {message}")
        if chain is not None:
            await asyncio.to_thread(chain.load_finished, bool(loaded))
        if not loaded and name in self._models:
            return "; ".join(errors)  # a failed reload leaves the old versions serving
        previous = self._models.get(name, {})
        previous_chain = self._agent_chains.pop(name, None)
        if chain is not None and loaded:
            self._agent_chains[name] = chain
        self._models[name] = loaded
        self._status[name] = statuses
        await self._stop_versions(previous.values(), previous_chain)
        return "; ".join(errors) or None

    async def _stop_versions(self, models: Any, chain: AgentChain | None) -> None:
        """Stop model versions, with their agents' unload actions around it."""
        if chain is not None:
            await asyncio.to_thread(chain.unload)
        for model in list(models):
            await model.stop(self._options.exit_timeout_secs)
        if chain is not None:
            await asyncio.to_thread(chain.unload_finished)

    async def _unload_unlocked(self, name: str) -> None:
        versions = self._models.pop(name, {})
        statuses = self._status.setdefault(name, {})
        for model in versions.values():
            statuses[model.version] = _VersionStatus(ModelState.UNLOADING)
        await self._stop_versions(versions.values(), self._agent_chains.pop(name, None))
        for model in versions.values():
            statuses[model.version] = _VersionStatus(
                ModelState.UNAVAILABLE, "unloaded", unloaded=True
            )
        statuses.pop(None, None)
        self._fingerprints.pop(name, None)
        override = self._override_dirs.pop(name, None)
        if override is not None:
            override.cleanup()

    # ------------------------------------------------------------ internals

    def _prepare(
        self, name: str, model_dir: Path, config_override: Message | None
    ) -> tuple[Message, list[int], AgentChain | None]:
        """The completed, normalized, validated config, the versions to serve, and the
        repository agents the model went through (they may have moved its files)."""
        config: Message | None
        if config_override is not None:
            config = proto.ModelConfig()
            config.CopyFrom(config_override)
        else:
            config = model_config.read_model_config(model_dir, self._options.model_config_name)
        if config is None:
            config = proto.ModelConfig()
        # As Triton: the agents see the config as read, before anything is filled in.
        chain = self._agents.run_load(name, model_dir, config)
        if chain is not None:
            model_dir = chain.location
        try:
            return (*self._complete(name, model_dir, config), chain)
        except BaseException:
            if chain is not None:
                chain.load_finished(False)
            raise

    def _complete(self, name: str, model_dir: Path, config: Message) -> tuple[Message, list[int]]:
        model_config.fill_server_side_fields(config, name, model_dir)
        available = model_config.list_version_dirs(model_dir)
        backend_name = _backend_of(config)
        backend = self._backends.get(backend_name) if backend_name else None
        if backend is not None and not self._options.disable_auto_complete_config and available:
            backend.auto_complete_config(
                config, self._location(name, model_dir, max(available), config)
            )
        model_config.normalize_config(config, gpu_ids=self._gpu_ids)
        model_config.validate_config(config)
        versions = model_config.select_versions(config, available)
        return config, versions

    def _location(self, name: str, model_dir: Path, version: int, config: Message) -> ModelLocation:
        backend_name = _backend_of(config)
        return ModelLocation(
            name=name,
            version=version,
            model_dir=model_dir,
            version_dir=model_dir / str(version),
            backend_config=self._options.backend_settings(backend_name),
            global_backend_config=self._options.backend_settings(""),
            host_staging=self._host_staging,
            device_pools=self._device_pools,
            custom_metrics=self._custom_metrics,
            python_based_dir=self._backends.python_based_dir(backend_name),
        )

    def _start_version(self, version: int, model_dir: Path, config: Message) -> Model:
        spec = ModelSpec.from_config(config, version)
        backend = self._backends.get(spec.backend)
        location = self._location(spec.name, model_dir, version, config)
        backend_model = backend.load_model(spec, location, config)
        metrics = self._options.metrics if self._options.allow_metrics else None
        stats = ModelStatistics.create(metrics, spec.histogram_buckets)
        model = Model(
            spec, config, model_dir, backend_model, self._loop, stats, services=self._services
        )
        model.start(instance_specs(spec))
        return model


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


def _fingerprint(model_dir: Path) -> tuple[tuple[str, int, int], ...]:
    """What changes when any file of the model changes (POLL mode)."""
    entries = []
    for path in sorted(model_dir.rglob("*")):
        if "__pycache__" in path.parts:
            continue
        stat = path.stat()
        entries.append((str(path.relative_to(model_dir)), stat.st_mtime_ns, stat.st_size))
    return tuple(entries)
