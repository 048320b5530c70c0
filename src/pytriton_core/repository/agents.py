"""Repository agents (``model_repository_agents``): plug-ins run on a model's files when it
loads and unloads, as Triton's repository agents are.

A config lists agents in order; on load each one is handed the model's folder (the one
the previous agent left, the repository's for the first) with its parameters, and may
refuse the model (raise a ``ServerError``: the load fails with its message), or copy the
files somewhere, rewrite them there (decrypt, unpack, patch the config's files...) and hand
that folder on (``AgentModel.new_location``): the model then loads from the last agent's
folder. After the load each agent hears whether it succeeded; on unload, before and after.

Agents are found by name (docs/repository-agents.md), first in ``--repoagent-directory``
(``<directory>/<name>/__init__.py`` defining ``create_agent()``), then among the bundled
ones (``checksum``), then in the installed entry points of the group
``pytriton_core.repoagents``.
"""

from __future__ import annotations

import importlib.metadata
import logging
import shutil
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType, ModuleType
from typing import Any

from google.protobuf.message import Message

from pytriton_core.backends.plugins import load_plugin_package
from pytriton_core.errors import InvalidArgumentError, ServerError

log = logging.getLogger(__name__)

ENTRY_POINT_GROUP = "pytriton_core.repoagents"


@dataclass
class AgentModel:
    """One model as an agent sees it (Triton's ``TRITONREPOAGENT_AgentModel``)."""

    name: str
    location: Path  # the folder the agent works on
    parameters: Mapping[str, str]  # the agent's parameters in the model's config
    config: Message  # the model's config as read (before any server-side completion)
    _temporary: list[Path] = field(default_factory=list)
    _moved_to: Path | None = None

    def new_location(self) -> Path:
        """An empty folder of the agent's own to write the model's files into; the model
        loads from it (the last one asked for), and it is removed when the model unloads
        (Triton's ``ModelRepositoryLocationAcquire`` and ``...Update``)."""
        folder = Path(tempfile.mkdtemp(prefix=f"pytriton-agent-{self.name}-"))
        self._temporary.append(folder)
        self._moved_to = folder
        return folder


class RepositoryAgent:
    """The plug-in contract: override what the agent acts on (Triton's actions)."""

    name = ""

    def on_load(self, model: AgentModel) -> None:
        """``TRITONREPOAGENT_ACTION_LOAD``: check or rewrite the files; raise to refuse."""

    def on_load_complete(self, model: AgentModel) -> None:
        """``ACTION_LOAD_COMPLETE``: the model loaded."""

    def on_load_fail(self, model: AgentModel) -> None:
        """``ACTION_LOAD_FAIL``: the model did not load."""

    def on_unload(self, model: AgentModel) -> None:
        """``ACTION_UNLOAD``: the model is about to unload."""

    def on_unload_complete(self, model: AgentModel) -> None:
        """``ACTION_UNLOAD_COMPLETE``: the model has unloaded."""


@dataclass
class AgentChain:
    """The agents of one load of a model, in config order, and where they left it."""

    steps: list[tuple[RepositoryAgent, AgentModel]]
    location: Path

    def load_finished(self, success: bool) -> None:
        for agent, model in self.steps:
            _quietly(agent.on_load_complete if success else agent.on_load_fail, agent, model)
        if not success:
            self._remove_folders()

    def unload(self) -> None:
        for agent, model in self.steps:
            _quietly(agent.on_unload, agent, model)

    def unload_finished(self) -> None:
        for agent, model in self.steps:
            _quietly(agent.on_unload_complete, agent, model)
        self._remove_folders()

    def _remove_folders(self) -> None:
        for _, model in self.steps:
            for folder in model._temporary:
                shutil.rmtree(folder, ignore_errors=True)
            model._temporary.clear()


def _quietly(
    action: Callable[[AgentModel], None], agent: RepositoryAgent, model: AgentModel
) -> None:
    """Actions after the load decision cannot change it: a failure is logged."""
    try:
        action(model)
    except Exception:
        log.exception("repository agent '%s' failed on model '%s'", agent.name, model.name)


class AgentRegistry:
    """Creates each agent once per server, on first use."""

    def __init__(
        self,
        directory: Path | None = None,
        bundled: Mapping[str, Callable[[], RepositoryAgent]] | None = None,
    ) -> None:
        self._directory = directory
        self._bundled = dict(bundled or {})
        self._agents: dict[str, RepositoryAgent] = {}

    def get(self, name: str) -> RepositoryAgent:
        agent = self._agents.get(name)
        if agent is None:
            agent = self._agents[name] = self._create(name)
        return agent

    def _create(self, name: str) -> RepositoryAgent:
        folder = self._directory / name if self._directory is not None else None
        if folder is not None and (folder / "__init__.py").is_file():
            return _agent_from(name, load_plugin_package("repository agent", name, folder))
        if name in self._bundled:
            return self._bundled[name]()
        for entry in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
            if entry.name == name:
                return _agent_from(name, entry.load())
        known = ", ".join(sorted(self._bundled)) or "none"
        raise InvalidArgumentError(
            f"unable to find repository agent '{name}' (bundled: {known}; plug-ins come from "
            f"--repoagent-directory or the '{ENTRY_POINT_GROUP}' entry points)"
        )

    def run_load(self, name: str, model_dir: Path, config: Message) -> AgentChain | None:
        """Run the config's agents' load actions; None when it lists none. Raises the
        refusing agent's error (the agents before it hear that the load failed)."""
        cfg: Any = config
        agents = cfg.model_repository_agents.agents
        if not agents:
            return None
        chain = AgentChain([], model_dir)
        for entry in agents:
            try:
                agent = self.get(entry.name)
                model = AgentModel(
                    name, chain.location, MappingProxyType(dict(entry.parameters)), config
                )
                chain.steps.append((agent, model))
                agent.on_load(model)
            except ServerError:
                chain.load_finished(False)
                raise
            except Exception as exc:
                chain.load_finished(False)
                raise InvalidArgumentError(
                    f"repository agent '{entry.name}' failed on model '{name}': "
                    f"{type(exc).__name__}: {exc}"
                ) from exc
            if model._moved_to is not None:
                chain.location = model._moved_to
        return chain


def _agent_from(name: str, loaded: Any) -> RepositoryAgent:
    factory = loaded.create_agent if isinstance(loaded, ModuleType) else loaded
    agent = factory() if callable(factory) else None
    if not isinstance(agent, RepositoryAgent):
        raise InvalidArgumentError(
            f"repository agent plug-in '{name}' must provide create_agent() returning a "
            "pytriton_core.repository.agents.RepositoryAgent"
        )
    if not agent.name:
        agent.name = name
    return agent
