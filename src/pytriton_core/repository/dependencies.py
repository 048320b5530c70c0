"""Which models an ensemble depends on, and in what order models load (after Triton's
dependency graph in ``model_repository_manager.cc``).

An ensemble depends on the models its steps name (its *composing* models); it loads after
them, becomes unavailable when one of them is unloaded, and an ensemble that depends on
itself through other ensembles never loads.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from google.protobuf.message import Message

from pytriton_core import config as model_config
from pytriton_core.config import ensemble
from pytriton_core.errors import ServerError

# model name -> the names its steps use (ensembles only)
Dependencies = Mapping[str, tuple[str, ...]]


def step_models(config: Message) -> tuple[str, ...]:
    """The distinct model names an ensemble config's steps use, in step order."""
    return tuple(dict.fromkeys(name for name, _ in ensemble.composing_models(config)))


@dataclass(frozen=True)
class DependencyGraph:
    edges: Dependencies  # every ensemble reachable from the names the graph was built for

    def closure(self, name: str) -> list[str]:
        return closure(name, self.edges)


def build_graph(
    names: Iterable[str],
    model_dirs: Mapping[str, Path],
    config_name: str | None,
    configs: Mapping[str, Message] | None = None,
) -> DependencyGraph:
    """The ensembles among ``names`` and among the models they use, transitively.

    Configs are read from ``model_dirs`` unless ``configs`` gives one (a load override). A
    config that cannot be read counts as no ensemble: its own load reports why.
    """
    edges: dict[str, tuple[str, ...]] = {}
    stack, seen = list(names), set[str]()
    while stack:
        name = stack.pop()
        if name in seen:
            continue
        seen.add(name)
        config = (configs or {}).get(name)
        if config is None and name in model_dirs:
            try:
                config = model_config.read_model_config(model_dirs[name], config_name)
            except (ServerError, OSError):
                config = None
        if config is not None and ensemble.is_ensemble(config):
            edges[name] = step_models(config)
            stack.extend(edges[name])
    return DependencyGraph(edges)


def circular_dependency(name: str, dependencies: Dependencies) -> str | None:
    """Triton's message when ``name`` reaches itself through its composing models."""

    def search(current: str, seen: set[str]) -> str | None:
        for upstream in dependencies.get(current, ()):
            if upstream == name:
                return (
                    f"circular dependency between ensembles: {name} -> ... -> {current} -> {name}"
                )
            if upstream not in seen:
                seen.add(upstream)
                found = search(upstream, seen)
                if found is not None:
                    return found
        return None

    return search(name, {name})


def load_waves(names: Iterable[str], dependencies: Dependencies) -> list[list[str]]:
    """``names`` in groups that can load side by side, each after the ones before it.

    A model comes after every model it depends on that is among ``names``; those caught in
    a cycle come last (their load fails with the circular-dependency message).
    """
    pending = list(dict.fromkeys(names))
    wanted = set(pending)
    placed: set[str] = set()
    waves: list[list[str]] = []
    while pending:
        wave = [
            name
            for name in pending
            if all(d in placed or d not in wanted for d in dependencies.get(name, ()))
        ]
        if not wave:  # a cycle: nothing left can go first
            waves.append(pending)
            break
        waves.append(wave)
        placed.update(wave)
        pending = [name for name in pending if name not in placed]
    return waves


def closure(name: str, dependencies: Dependencies) -> list[str]:
    """``name``'s composing models, theirs and so on (each once, without ``name``)."""
    found: dict[str, None] = {}
    stack = list(dependencies.get(name, ()))
    while stack:
        current = stack.pop()
        if current == name or current in found:
            continue
        found[current] = None
        stack.extend(dependencies.get(current, ()))
    return list(found)


def dependents(name: str, dependencies: Dependencies) -> list[str]:
    """The ensembles that use ``name``, directly or through other ensembles."""
    found: dict[str, None] = {}
    frontier = [name]
    while frontier:
        current = frontier.pop()
        for user, used in dependencies.items():
            if current in used and user not in found and user != name:
                found[user] = None
                frontier.append(user)
    return list(found)
