"""Model lifecycle: load, look up and unload the models of the repositories.

Loading runs in worker threads (model code may take long to initialize); lookups and
state changes happen on the event loop.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from google.protobuf.message import Message

from pytriton_core import config as model_config
from pytriton_core import proto
from pytriton_core.backends.base import InstanceSpec, ModelLocation
from pytriton_core.backends.registry import BackendRegistry
from pytriton_core.core.model import Model, ModelState
from pytriton_core.errors import (
    InvalidArgumentError,
    NotFoundError,
    ServerError,
    UnavailableError,
)
from pytriton_core.options import ModelControlMode, ServerOptions
from pytriton_core.repository.scan import scan_repositories

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


class ModelManager:
    def __init__(
        self,
        options: ServerOptions,
        backends: BackendRegistry,
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        self._options = options
        self._backends = backends
        self._loop = loop
        self._models: dict[str, dict[int, Model]] = {}
        # What the index reports, failures included; None as version: the whole model.
        self._status: dict[str, dict[int | None, _VersionStatus]] = {}
        self._known: dict[str, Path] = {}

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
                if status.state is not ModelState.READY:
                    return False
        return True

    # -------------------------------------------------------------- lifecycle

    async def load_startup_models(self) -> list[str]:
        """Load what the control mode asks for at start; returns the names that failed."""
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
        names = sorted(scan.models)
        if self._options.model_control_mode is ModelControlMode.EXPLICIT:
            wanted = self._options.load_models
            names = names if "*" in wanted else [n for n in wanted if n in scan.models]
            missing = [n for n in wanted if n != "*" and n not in scan.models]
            for name in missing:
                self._status[name] = {
                    None: _VersionStatus(
                        ModelState.UNAVAILABLE, f"model '{name}' not found in any repository"
                    )
                }
        results = await asyncio.gather(*(self.load(name) for name in names))
        failed = [name for name, ok in zip(names, results, strict=True) if not ok]
        return failed + list(scan.conflicts)

    async def load(self, name: str) -> bool:
        """Load (or reload) every selected version of a model; False if it failed."""
        model_dir = self._known.get(name)
        if model_dir is None:
            raise InvalidArgumentError(
                f"failed to load '{name}', failed to poll from model repository"
            )
        self._status[name] = {None: _VersionStatus(ModelState.LOADING)}
        try:
            config, config_json, versions = await asyncio.to_thread(self._prepare, name, model_dir)
        except ServerError as exc:
            log.error("failed to load '%s': %s", name, exc.message)
            self._status[name] = {None: _VersionStatus(ModelState.UNAVAILABLE, exc.message)}
            return False
        self._status[name] = {v: _VersionStatus(ModelState.LOADING) for v in versions}
        loaded: dict[int, Model] = {}
        ok = True
        for version in versions:
            try:
                loaded[version] = await asyncio.to_thread(
                    self._start_version, name, version, model_dir, config, config_json
                )
                self._status[name][version] = _VersionStatus(ModelState.READY)
                log.info("successfully loaded '%s' version %d", name, version)
            except Exception as exc:
                message = (
                    exc.message if isinstance(exc, ServerError) else f"{type(exc).__name__}: {exc}"
                )
                log.error("failed to load '%s' version %d: %s", name, version, message)
                self._status[name][version] = _VersionStatus(ModelState.UNAVAILABLE, message)
                ok = False
        previous = self._models.get(name, {})
        self._models[name] = loaded
        for model in previous.values():
            await model.stop(self._options.exit_timeout_secs)
        return ok

    async def unload(self, name: str) -> None:
        versions = self._models.pop(name, {})
        for model in versions.values():
            self._status[name][model.version] = _VersionStatus(ModelState.UNLOADING)
        for model in versions.values():
            await model.stop(self._options.exit_timeout_secs)
            self._status[name][model.version] = _VersionStatus(ModelState.UNAVAILABLE, "unloaded")

    async def unload_all(self) -> None:
        await asyncio.gather(*(self.unload(name) for name in list(self._models)))

    # ------------------------------------------------------------ internals

    def _prepare(self, name: str, model_dir: Path) -> tuple[Message, dict[str, Any], list[int]]:
        config = model_config.read_model_config(model_dir, self._options.model_config_name)
        if config is None:
            config = proto.ModelConfig()
        model_config.fill_server_side_fields(config, name, model_dir)
        available = model_config.list_version_dirs(model_dir)
        backend = self._backends.get(config.backend) if config.backend else None
        if backend is not None and not self._options.disable_auto_complete_config and available:
            backend.auto_complete_config(
                config, self._location(name, model_dir, max(available), config)
            )
        model_config.normalize_config(config)
        model_config.validate_config(config)
        versions = model_config.select_versions(config, available)
        return config, model_config.config_to_json_dict(config), versions

    def _location(self, name: str, model_dir: Path, version: int, config: Message) -> ModelLocation:
        backend_name = str(config.backend)
        return ModelLocation(
            name=name,
            version=version,
            model_dir=model_dir,
            version_dir=model_dir / str(version),
            backend_config=self._options.backend_settings(backend_name),
        )

    def _start_version(
        self, name: str, version: int, model_dir: Path, config: Message, config_json: dict[str, Any]
    ) -> Model:
        backend = self._backends.get(str(config.backend))
        location = self._location(name, model_dir, version, config)
        backend_model = backend.load_model(config, config_json, location)
        model = Model(name, version, config, config_json, model_dir)
        model.start(backend_model, instance_specs(config_json), self._loop)
        return model


def instance_specs(config_json: Mapping[str, Any]) -> list[InstanceSpec]:
    """One spec per instance, named ``<group>_<index>`` as Triton names them."""
    specs: list[InstanceSpec] = []
    groups: Sequence[Mapping[str, Any]] = config_json.get("instance_group", ())
    for group in groups:
        kind = _INSTANCE_KINDS.get(group.get("kind", "KIND_CPU"), "CPU")
        count = int(group.get("count", 1))
        devices: list[int] = [int(g) for g in group.get("gpus", ())] if kind == "GPU" else [0]
        index = 0
        for device in devices:
            for _ in range(count):
                specs.append(InstanceSpec(f"{group['name']}_{index}", kind, device))
                index += 1
    return specs
