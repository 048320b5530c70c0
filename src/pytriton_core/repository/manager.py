"""Model lifecycle: load, look up and unload the models of the repositories.

Ensembles depend on the models their steps use (``dependencies.py``): those load first (an
ensemble's load brings them in explicit mode), an ensemble is checked against them before
it serves, and unloading a model unloads the ensembles that use it first.

A load runs Triton's two steps. The poll (``polling.py``) reads the model folder and its
config; a model unchanged since it was loaded stops there, and its load is a no-op. Then
each version to (re)load starts on the load pool (``version_start.py``, at most
``--model-load-thread-count`` at once, models and versions alike); versions whose folder
did not change keep serving, untouched. A load succeeds only if every version it started
did: otherwise the new versions are stopped and the ones serving before keep serving.
Lookups and state changes happen on the event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from google.protobuf.message import Message

from pytriton_core import config as model_config
from pytriton_core import proto
from pytriton_core.backends.custom_metrics import MetricRegistry
from pytriton_core.backends.registry import BackendRegistry
from pytriton_core.config import ensemble
from pytriton_core.config.spec import ModelSpec
from pytriton_core.devices import visible_gpu_ids
from pytriton_core.errors import (
    InvalidArgumentError,
    ModelConfigError,
    NotFoundError,
    ServerError,
    UnavailableError,
)
from pytriton_core.inference.statistics import StatisticsFactory, default_statistics
from pytriton_core.memory.device import DevicePools
from pytriton_core.memory.pinned import StagingPool
from pytriton_core.options import ModelControlMode, ServerOptions
from pytriton_core.paths import check_model_name
from pytriton_core.repository import dependencies
from pytriton_core.repository.agents import AgentRegistry
from pytriton_core.repository.checksum_agent import ChecksumAgent
from pytriton_core.repository.identity import ModelId, resolve, unknown_model
from pytriton_core.repository.model_calls import InProcessCalls, ModelChanges
from pytriton_core.repository.polling import (
    PolledModel,
    PollError,
    PollSettings,
    poll_failure,
    poll_model,
)
from pytriton_core.repository.scan import scan_repositories
from pytriton_core.repository.version_start import VersionStarter, failure_reason
from pytriton_core.runtime.ensemble import EnsembleModel
from pytriton_core.runtime.model import Model, ModelState
from pytriton_core.runtime.services import ServerServices

log = logging.getLogger(__name__)

T = TypeVar("T")

UNLOADED = "unloaded"  # the reason of a version unloaded on request: readiness ignores it
DUPLICATE_REASON = "model appears in two or more repositories"


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


class LoadFailure(Exception):
    """A load that failed, with the error its client gets."""

    def __init__(self, error: ServerError) -> None:
        super().__init__(error.message)
        self.error = error


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
        statistics: StatisticsFactory = default_statistics,
        changes: ModelChanges | None = None,
    ) -> None:
        self._options = options
        self._services = services
        self._statistics = statistics
        self._loop = loop
        self._namespacing = options.model_namespacing
        gpu_ids = visible_gpu_ids(options.min_supported_compute_capability)
        self._poll_settings = PollSettings(
            options.model_config_name,
            options.disable_auto_complete_config,
            gpu_ids,
            AgentRegistry(options.repoagent_directory, {"checksum": ChecksumAgent}),
        )
        # What model code (BLS) calls: handed to every backend with the model's location.
        # (``changes``: under --workers N, the other workers, for changes from ``execute``.)
        self._calls = InProcessCalls(self, loop, options, changes)
        self._starter = VersionStarter(
            options,
            backends,
            loop,
            gpu_ids,
            host_staging,
            DevicePools(options.memory.cuda_memory_pool_byte_size),
            custom_metrics,
            services=services,
            server=self._calls,
            statistics=statistics,
        )
        # Polls and version starts, for every model at once: --model-load-thread-count.
        self._load_pool = ThreadPoolExecutor(
            max_workers=max(1, options.model_load_thread_count), thread_name_prefix="model-load"
        )
        self._sources: dict[ModelId, Path] = {}  # the last scan: each model's folder
        self._duplicates: dict[str, list[Path]] = {}  # without namespacing: served by none
        self._models: dict[ModelId, dict[int, Model]] = {}  # the versions serving
        # (name, version) -> what ``get`` found, for the next request; emptied whenever
        # the serving versions change (and unused with namespacing, where a name's meaning
        # depends on every repository's models).
        self._found: dict[tuple[str, int], Model] = {}
        # The same for the infer path, by the name and version as a request sends them
        # (``InferenceService.model``, compiled, reads and fills it); emptied with
        # ``_found``, in place. None with namespacing.
        self.request_lookups: dict[tuple[str, str | None], Model] | None = (
            None if self._namespacing else {}
        )
        # Triton's lifecycle map: every version a load started, with its state; a model
        # whose load found no version has an empty map (and keeps the server not ready).
        self._states: dict[ModelId, dict[int, _VersionStatus]] = {}
        self._polled: dict[ModelId, PolledModel] = {}  # what each served model came from
        self._locks: dict[ModelId, asyncio.Lock] = {}
        # Serving ensembles (by name) -> the model names their steps use.
        self._dependencies: dict[str, tuple[str, ...]] = {}
        # Models loaded by name, not only because an ensemble needs them (Triton's
        # "explicitly loaded"): unload_dependents leaves these loaded.
        self._explicit: set[str] = set()

    # ----------------------------------------------------------------- lookups

    def _resolve(self, name: str) -> ModelId:
        return resolve(name, self._states, self._namespacing)

    def _forget_lookups(self) -> None:
        """The serving versions change: what lookups found may no longer be the answer."""
        self._found.clear()
        if self.request_lookups is not None:
            self.request_lookups.clear()

    def get(self, name: str, version: int = -1) -> Model:
        """The model version requests go to, with Triton's messages when there is none."""
        found = self._found.get((name, version))
        if found is not None and found.state is ModelState.READY:
            return found
        found = self._get(name, version)
        if not self._namespacing:
            self._found[(name, version)] = found
        return found

    def _get(self, name: str, version: int) -> Model:
        model_id = self._resolve(name)
        states = self._states.get(model_id)
        if states is None:
            raise unknown_model(model_id)
        serving = self._models.get(model_id, {})
        if version < 0:
            ready = [v for v, m in serving.items() if m.state is ModelState.READY]
            if not ready:
                raise NotFoundError(
                    f"Request for unknown model: '{model_id}' has no available versions"
                )
            return serving[max(ready)]
        model = serving.get(version)
        if model is None and version not in states:
            raise NotFoundError(
                f"Request for unknown model: '{model_id}' version {version} is not found"
            )
        if model is None or model.state is not ModelState.READY:
            raise UnavailableError(
                f"Request for unknown model: '{model_id}' version {version} is not at ready state"
            )
        return model

    def ready_versions(self, name: str) -> list[Model]:
        try:
            model_id = self._resolve(name)
        except ServerError:
            return []
        return sorted(
            (m for m in self._models.get(model_id, {}).values() if m.state is ModelState.READY),
            key=lambda m: m.version,
        )

    def all_ready(self) -> list[Model]:
        return [m for m in self.loaded() if m.state is ModelState.READY]

    def loaded(self) -> list[Model]:
        """Every loaded model version, in name and version order (READY or draining)."""
        return [
            model
            for model_id in sorted(self._models)
            for _, model in sorted(self._models[model_id].items())
        ]

    def in_flight(self) -> int:
        """Requests accepted by some model and not yet answered, and sequences started and
        not yet ended (Triton's in-flight inferences, which the exit waits for)."""
        return sum(
            m.in_flight + m.in_flight_sequences
            for versions in self._models.values()
            for m in versions.values()
        )

    def stop_accepting(self) -> None:
        """The server is exiting: every model refuses new requests (Triton's StopAllModels);
        sequences in flight still take their next requests."""
        for versions in self._models.values():
            for model in versions.values():
                model.stop_accepting()

    def index(self, ready_only: bool = False) -> list[IndexEntry]:
        """Triton's repository index: the models of the repositories (and those loaded from
        a load's own files), each version the lifecycle knows with its state."""
        entries: list[tuple[tuple[str, str], IndexEntry]] = []
        if not ready_only:
            for name in self._duplicates:
                entry = IndexEntry(name, None, ModelState.UNAVAILABLE, DUPLICATE_REASON)
                entries.append((("", name), entry))
        for model_id in set(self._sources) | set(self._states):
            states = self._states.get(model_id)
            key = (model_id.namespace, model_id.name)
            if states is None:
                if not ready_only:
                    entries.append((key, IndexEntry(model_id.name, None, None)))
                continue
            for version, status in sorted(states.items()):
                if ready_only and status.state is not ModelState.READY:
                    continue
                entries.append(
                    (key, IndexEntry(model_id.name, version, status.state, status.reason))
                )
        entries.sort(key=lambda item: item[0])
        return [entry for _, entry in entries]

    def is_ready(self) -> bool:
        """Strict readiness, as Triton's: every version a load started is ready (or was
        unloaded on request), and no model's load found itself without a version."""
        for states in self._states.values():
            if not states:
                return False
            for status in states.values():
                if status.state is not ModelState.READY and status.reason != UNLOADED:
                    return False
        return True

    # -------------------------------------------------------------- lifecycle

    async def load_startup_models(self) -> list[str]:
        """Load what the control mode asks for at start; returns the names that failed."""
        self._rescan()
        ids = sorted(self._sources)
        duplicates = sorted(self._duplicates)
        failed: list[str] = []
        wanted = self._options.load_models
        if self._options.model_control_mode is ModelControlMode.EXPLICIT and "*" not in wanted:
            # Only the models asked for are polled, as in Triton.
            ids = [model_id for model_id in ids if model_id.name in wanted]
            duplicates = [name for name in duplicates if name in wanted]
            found = {model_id.name for model_id in ids}
            for name in (n for n in wanted if n not in found and n not in duplicates):
                log.error(
                    "failed to poll model '%s': model not found in any model repository.", name
                )
                failed.append(name)
        for name in duplicates:
            log.error("failed to poll model '%s': not unique across all model repositories", name)
            failed.append(name)
        self._explicit.update(model_id.name for model_id in ids)
        # An ensemble's composing models load first (in explicit mode too: the ensemble
        # brings them), and the models of one wave load side by side.
        graph = await asyncio.to_thread(self._dependency_graph, [m.name for m in ids])
        composing = [
            model_id
            for name in dict.fromkeys(d for m in ids for d in graph.closure(m.name))
            if (model_id := self._step_id(name)) is not None and model_id not in ids
        ]
        by_name = _by_name([*ids, *composing])  # with namespacing, a name may be several
        for wave in dependencies.load_waves(list(by_name), graph.edges):
            wave_ids = [model_id for name in wave for model_id in by_name[name]]
            outcomes = await asyncio.gather(
                *(self._load_id(model_id) for model_id in wave_ids), return_exceptions=True
            )
            for model_id, outcome in zip(wave_ids, outcomes, strict=True):
                if isinstance(outcome, BaseException):
                    failed.append(str(model_id))
        return failed

    async def load(
        self,
        name: str,
        config_json: str | None = None,
        files: Mapping[str, bytes] | None = None,
    ) -> None:
        """Load or reload a model (the repository extension); raises on failure.

        ``config_json`` replaces the model's config.pbtxt; ``files`` ("file:<path>" →
        bytes) replace the model folder and need ``config_json``.
        """
        try:
            check_model_name(name)  # the one check of a client's model name
        except InvalidArgumentError as exc:
            # Triton 2.51 answers a name that is a path with its poll failure (the reason
            # goes to the log); it must never reach a path.
            log.error("Poll failed for model directory '%s': %s", name, exc.message)
            raise poll_failure(name) from None
        self._rescan()
        ids = [model_id for model_id in self._sources if model_id.name == name]
        if files or not ids:
            ids = [ModelId("", name)]
        if not files and name in self._duplicates:
            log.error("failed to poll model '%s': not unique across all model repositories", name)
            raise poll_failure(name)
        await self._load_composing_models(name, config_json)
        for model_id in ids:
            try:
                await self._load_id(model_id, config_json, files)
            except LoadFailure as failure:
                raise failure.error from None
        self._explicit.add(name)
        await self._recheck_dependents(name)

    async def unload(self, name: str, unload_dependents: bool = False) -> None:
        """Unload every version of a model; unknown names are ignored, as Triton does.

        The ensembles that use the model are unloaded first (they cannot serve without it).
        With ``unload_dependents``, the models an ensemble brought in (loaded for it, not
        by name) go too once no other serving ensemble uses them.
        """
        for user in reversed(dependencies.dependents(name, self._dependencies)):
            await self._unload_name(user)
        composing = dependencies.closure(name, self._dependencies)
        await self._unload_name(name)
        self._explicit.discard(name)
        if unload_dependents:
            for model in composing:
                still_used = any(model in used for used in self._dependencies.values())
                if model not in self._explicit and not still_used:
                    await self._unload_name(model)

    async def _unload_name(self, name: str) -> None:
        model_ids = [model_id for model_id in self._states if model_id.name == name]
        for model_id in model_ids:
            async with self._lock(model_id):
                await self._unload_unlocked(model_id)

    async def unload_all(self, timeout_s: float | None = None) -> None:
        """Unload every model (the server stops), each given ``timeout_s`` (default: the
        exit timeout) for the requests it still holds."""

        async def unload(model_id: ModelId) -> None:
            async with self._lock(model_id):
                await self._unload_unlocked(model_id, timeout_s)

        # Ensembles first, while the models they use still serve their last requests.
        by_name = _by_name(list(self._models))
        for wave in reversed(dependencies.load_waves(list(by_name), self._dependencies)):
            await asyncio.gather(*(unload(m) for name in wave for m in by_name[name]))
        self._load_pool.shutdown(wait=False)

    async def poll_forever(self, interval_s: float) -> None:
        """POLL mode: apply added, changed and removed models every ``interval_s``."""
        while True:
            await asyncio.sleep(interval_s)
            try:
                await self.poll_once()
            except Exception:
                log.exception("polling the model repository failed")

    async def poll_once(self) -> None:
        self._rescan()
        for model_id in sorted(set(self._models) - set(self._sources)):
            log.info("model '%s' removed from the repository: unloading", model_id)
            async with self._lock(model_id):
                await self._unload_unlocked(model_id)
        graph = await asyncio.to_thread(
            self._dependency_graph, [m.name for m in sorted(self._sources)]
        )
        by_name = _by_name(sorted(self._sources))
        for wave in dependencies.load_waves(list(by_name), graph.edges):
            wave_ids = [m for name in wave for m in by_name[name]]
            outcomes = await asyncio.gather(
                *(self._load_id(model_id) for model_id in wave_ids), return_exceptions=True
            )
            for model_id, outcome in zip(wave_ids, outcomes, strict=True):
                if outcome is None:
                    await self._recheck_dependents(model_id.name)

    # ------------------------------------------------------------ loading

    def _rescan(self) -> None:
        scan = scan_repositories(self._options.model_repositories)
        if self._namespacing:
            # Every repository is a namespace: a name in two of them is two models.
            folders = [*scan.models.values(), *(p for ps in scan.conflicts.values() for p in ps)]
            self._sources = {ModelId(str(path.parent), path.name): path for path in folders}
            self._duplicates = {}
        else:
            self._sources = {ModelId("", name): path for name, path in scan.models.items()}
            self._duplicates = dict(scan.conflicts)

    def _lock(self, model_id: ModelId) -> asyncio.Lock:
        return self._locks.setdefault(model_id, asyncio.Lock())

    async def _in_pool(self, function: Callable[..., T], *args: object, **kwargs: object) -> T:
        return await self._loop.run_in_executor(self._load_pool, lambda: function(*args, **kwargs))

    async def _load_id(
        self,
        model_id: ModelId,
        config_json: str | None = None,
        files: Mapping[str, bytes] | None = None,
    ) -> None:
        """Poll and load one model; raises LoadFailure (already logged)."""
        async with self._lock(model_id):
            previous = self._polled.get(model_id) if model_id in self._models else None
            try:
                polled = await self._in_pool(
                    poll_model,
                    model_id,
                    None if files else self._sources.get(model_id),
                    self._poll_settings,
                    config_json=config_json,
                    files=files,
                    loaded=previous.timestamp if previous is not None else None,
                )
            except PollError as exc:
                if "not found in any model repository" in exc.detail:
                    log.error("failed to poll model '%s': %s", model_id, exc.detail)
                else:
                    log.error("Poll failed for model directory '%s': %s", model_id, exc.detail)
                if exc.refusal is not None:
                    raise LoadFailure(
                        type(exc.refusal)(f"failed to load '{model_id.name}': {exc.detail}")
                    ) from None
                raise LoadFailure(poll_failure(model_id.name)) from None
            if polled is None:
                log.debug("model '%s' is unchanged: nothing to load", model_id)
                return
            try:
                await self._load_versions(polled, previous)
            except BaseException:
                if polled.agents is not None:
                    await self._in_pool(polled.agents.load_finished, False)
                polled.release()
                raise
            if polled.agents is not None:
                await self._in_pool(polled.agents.load_finished, True)

    async def _load_versions(self, polled: PolledModel, previous: PolledModel | None) -> None:
        model_id = polled.model_id
        composing: dict[str, ModelSpec] | None = None
        if ensemble.is_ensemble(polled.config):
            # Checked against its composing models before any version starts; a failure
            # fails the model, as Triton's dependency check does.
            try:
                composing = await self._check_ensemble(polled)
            except ServerError as exc:
                log.error("failed to load model '%s': %s", model_id, exc.message)
                raise LoadFailure(
                    InvalidArgumentError(f"load failed for model '{model_id}': {exc.message}\n")
                ) from None
        states = self._states.setdefault(model_id, {})
        try:
            available = model_config.list_version_dirs(polled.model_dir)
            versions = model_config.select_versions(polled.config, available)
        except ModelConfigError:
            message = (
                "at least one version must be available under the version policy of model "
                f"'{model_id}'"
            )
            log.error("failed to load model '%s': %s", model_id, message)
            raise LoadFailure(
                InvalidArgumentError(f"load failed for model '{model_id}': {message}\n")
            ) from None
        serving = self._models.get(model_id, {})
        # Versions may keep serving only from the same folder: agents made a new one.
        same_config = (
            previous is not None
            and previous.config == polled.config
            and polled.agents is None
            and previous.agents is None
        )
        keep = {
            version
            for version in versions
            if version in serving
            and same_config
            and previous is not None
            and not previous.timestamp.version_modified(polled.timestamp, version)
        }
        to_start = [version for version in versions if version not in keep]
        for version in to_start:
            log.info("loading: %s:%d", model_id, version)
            if version not in serving:  # a serving version reloads in the background
                states[version] = _VersionStatus(ModelState.LOADING)
        if composing is not None:
            outcomes: list[Model | BaseException] = []
            for version in to_start:
                try:
                    outcomes.append(self._start_ensemble(polled, version, composing))
                except ServerError as exc:
                    outcomes.append(exc)
        else:
            outcomes = await asyncio.gather(
                *(self._in_pool(self._starter.start, polled, v) for v in to_start),
                return_exceptions=True,
            )
        started = {
            v: outcome
            for v, outcome in zip(to_start, outcomes, strict=True)
            if isinstance(outcome, Model)
        }
        failures = {
            v: failure_reason(outcome)
            for v, outcome in zip(to_start, outcomes, strict=True)
            if isinstance(outcome, BaseException)
        }
        if failures:
            await self._abandon(model_id, started, failures, serving)
            reasons = "".join(
                f"version {v} is at {ModelState.UNAVAILABLE.value} state: {text};"
                for v, text in sorted(failures.items())
            )
            log.info("failed to load '%s'", model_id)
            raise LoadFailure(
                InvalidArgumentError(f"load failed for model '{model_id}': {reasons}\n")
            )
        replaced = [serving[v] for v in started if v in serving]
        dropped = [serving[v] for v in serving if v not in versions]
        self._forget_lookups()
        self._models[model_id] = {
            **{v: m for v, m in serving.items() if v in keep},
            **started,
        }
        for version in started:
            states[version] = _VersionStatus(ModelState.READY)
        self._polled[model_id] = polled
        if composing is not None:
            self._dependencies[model_id.name] = dependencies.step_models(polled.config)
        for model in dropped:
            states[model.version] = _VersionStatus(ModelState.UNLOADING)
        previous_agents = previous.agents if previous is not None else None
        if previous_agents is not None:
            await self._in_pool(previous_agents.unload)
        await self._stop_models([*replaced, *dropped], model_id)
        if previous_agents is not None:
            await self._in_pool(previous_agents.unload_finished)
        for model in dropped:
            states[model.version] = _VersionStatus(ModelState.UNAVAILABLE, UNLOADED)
        if previous is not None and previous is not polled:
            previous.release()
        log.info("successfully loaded '%s'", model_id)

    # ------------------------------------------------------------ ensembles

    def _dependency_graph(
        self, names: list[str], config: Message | None = None
    ) -> dependencies.DependencyGraph:
        """The ensembles among ``names`` and the models they use (blocking: file reads).

        ``config``: the config ``names[0]`` loads with, when it is not its config.pbtxt.
        """
        overrides = {names[0]: config} if config is not None else None
        model_dirs = {model_id.name: path for model_id, path in self._sources.items()}
        return dependencies.build_graph(
            names, model_dirs, self._options.model_config_name, overrides
        )

    def _step_id(self, name: str) -> ModelId | None:
        """The model a step's name means (one of the repositories' models), else None."""
        matches = [model_id for model_id in self._sources if model_id.name == name]
        return matches[0] if len(matches) == 1 else None

    async def _load_composing_models(self, name: str, config_json: str | None) -> None:
        """Load what an ensemble needs first (a model unchanged since it loaded is a no-op
        load); a model that fails here is reported by the ensemble's own load."""
        config = None
        if config_json:
            with contextlib.suppress(ServerError):  # the load itself reports a bad config
                config = model_config.config_from_json(config_json)
        graph = await asyncio.to_thread(self._dependency_graph, [name], config)
        for wave in dependencies.load_waves(graph.closure(name), graph.edges):
            ids = [m for n in wave if (m := self._step_id(n)) is not None]
            await asyncio.gather(*(self._load_id(m) for m in ids), return_exceptions=True)

    async def _check_ensemble(self, polled: PolledModel) -> dict[str, ModelSpec]:
        """The specs an ensemble's steps run on, checked against its steps."""
        name = polled.model_id.name
        graph = await asyncio.to_thread(self._dependency_graph, [name], polled.config)
        cycle = dependencies.circular_dependency(name, graph.edges)
        if cycle is not None:
            raise InvalidArgumentError(cycle)
        composing = self._composing_specs(polled.config)
        config = self._normalized(polled)
        ensemble.check_ensemble_steps(ModelSpec.from_config(config, 1), composing)
        return composing

    def _normalized(self, polled: PolledModel) -> Message:
        config = proto.ModelConfig()
        config.CopyFrom(polled.config)
        model_config.normalize_config(config)
        return config

    def _composing_specs(self, config: Message) -> dict[str, ModelSpec]:
        """The specs the steps run on (the latest ready version of each step's model),
        with Triton's messages when one is missing."""
        cfg: Any = config
        name = cfg.name
        steps = ensemble.composing_models(config)
        missing = [
            model
            for model in dict.fromkeys(m for m, _ in steps)
            if self._step_id(model) is None and not self.ready_versions(model)
        ]
        if missing:
            raise InvalidArgumentError(
                f"ensemble {name} contains models that are not available or ambiguous: "
                + ", ".join(missing)
            )
        specs: dict[str, ModelSpec] = {}
        for model, version in steps:
            ready = self.ready_versions(model)
            if not ready:
                message = f"ensemble '{name}' depends on '{model}' which has no loaded version."
                reason = self._failure_of(model)
                if reason:
                    message += f" Model '{model}' loading failed with error: {reason}"
                raise InvalidArgumentError(message)
            if version >= 0 and version not in {m.version for m in ready}:
                raise InvalidArgumentError(
                    f"ensemble '{name}' depends on '{model}' whose required version "
                    f"{version} is not loaded."
                )
            specs[model] = ready[-1].spec
        return specs

    def _failure_of(self, name: str) -> str:
        model_id = self._step_id(name)
        states = self._states.get(model_id) if model_id is not None else None
        reasons = [s.reason for s in (states or {}).values() if s.reason and s.reason != UNLOADED]
        return reasons[0] if reasons else ""

    def _start_ensemble(
        self, polled: PolledModel, version: int, composing: dict[str, ModelSpec]
    ) -> Model:
        """An ensemble version (on the loop: it has no instances to start)."""
        config = self._normalized(polled)
        cfg: Any = config
        declared = ModelSpec.from_config(config, version)
        # As Triton does, the config tells whether a decoupled model makes it decoupled.
        decoupled = ensemble.check_ensemble_steps(declared, composing)
        ensemble.check_ensemble_cache(declared, composing, decoupled)
        cfg.model_transaction_policy.decoupled = decoupled
        spec = ModelSpec.from_config(config, version)
        metrics = self._options.metrics if self._options.allow_metrics else None
        stats = self._statistics(str(polled.model_id), version, metrics, spec.histogram_buckets)
        model = EnsembleModel(
            spec, config, polled.model_dir, self._loop, self.get, stats, self._services
        )
        model.start()
        return model

    async def _recheck_dependents(self, name: str) -> None:
        """After ``name`` (re)loaded: an ensemble using it that no longer fits it becomes
        unavailable, and one whose decoupled-ness changed reloads."""
        for user in dependencies.dependents(name, self._dependencies):
            current = self.ready_versions(user)
            if not current:
                continue
            try:
                composing = self._composing_specs(current[-1].config)
                decoupled = ensemble.check_ensemble_steps(current[-1].spec, composing)
                ensemble.check_ensemble_cache(current[-1].spec, composing, decoupled)
            except ServerError as exc:
                log.error("failed to load model '%s': %s", user, exc.message)
                await self._unload_name(user)
                continue
            model_id = self._step_id(user)
            previous = self._polled.get(model_id) if model_id is not None else None
            if decoupled != current[-1].spec.decoupled and model_id is not None:
                if previous is not None and previous.override is not None:
                    log.warning("ensemble '%s' changed decoupled-ness: load it again", user)
                    continue
                self._polled.pop(model_id, None)  # not a no-op load: reload it
                with contextlib.suppress(LoadFailure):
                    await self._load_id(model_id)
                if previous is not None and self._polled.get(model_id) is not previous:
                    previous.release()

    async def _abandon(
        self,
        model_id: ModelId,
        started: dict[int, Model],
        failures: dict[int, str],
        serving: dict[int, Model],
    ) -> None:
        """A load with a failed version: its new versions stop; those serving stay."""
        states = self._states[model_id]
        for version, reason in failures.items():
            log.error("failed to load '%s' version %d: %s", model_id, version, reason)
            if version not in serving:
                states[version] = _VersionStatus(ModelState.UNAVAILABLE, reason)
        await self._stop_models(list(started.values()), model_id)
        for version in started:
            if version not in serving:
                states[version] = _VersionStatus(ModelState.UNAVAILABLE, UNLOADED)

    async def _stop_models(self, models: list[Model], model_id: ModelId) -> None:
        for model in models:
            await model.stop(self._options.exit_timeout_secs)
            log.info("successfully unloaded '%s' version %d", model_id, model.version)

    async def _unload_unlocked(self, model_id: ModelId, timeout_s: float | None = None) -> None:
        if timeout_s is None:
            timeout_s = self._options.exit_timeout_secs
        versions = self._models.pop(model_id, {})
        self._forget_lookups()
        self._dependencies.pop(model_id.name, None)
        states = self._states.get(model_id)
        if states is None:
            return
        for model in versions.values():
            states[model.version] = _VersionStatus(ModelState.UNLOADING)
        polled = self._polled.pop(model_id, None)
        agents = polled.agents if polled is not None else None
        if agents is not None:
            await self._in_pool(agents.unload)
        for model in versions.values():
            await model.stop(timeout_s)
            states[model.version] = _VersionStatus(ModelState.UNAVAILABLE, UNLOADED)
            log.info("successfully unloaded '%s' version %d", model_id, model.version)
        if agents is not None:
            await self._in_pool(agents.unload_finished)
        if polled is not None:
            polled.release()


def _by_name(model_ids: list[ModelId]) -> dict[str, list[ModelId]]:
    """The models of each name, in order (with namespacing a name may be several)."""
    grouped: dict[str, list[ModelId]] = {}
    for model_id in model_ids:
        grouped.setdefault(model_id.name, []).append(model_id)
    return grouped
