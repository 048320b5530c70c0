"""Backend plug-ins: backends that are not part of this package, found by name.

A model's ``backend: "<name>"`` is resolved in this order (docs/backend-plugins.md):

1. ``--backend-directory``: the folder ``<directory>/<name>/``, as tritonserver searches its
   backend directory. A folder with ``__init__.py`` is a plug-in package (it defines
   ``create_backend() -> Backend``); a folder with ``model.py`` and no ``__init__.py`` is a
   *Python-based backend* (Triton's term): that ``model.py`` serves every model naming the
   backend, run by the Python backend, as vLLM's backend is. A folder with neither (the
   shared libraries of a tritonserver backend folder) is passed over.
2. The backends built into this package.
3. Installed packages that declare the entry point ``<name>`` in the group
   ``pytriton_core.backends``: a callable returning a ``Backend``, or a module with
   ``create_backend``. An entry point cannot replace a built-in backend (that would change
   a server by installing a package); one that tries is named in a warning.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import logging
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from pytriton_core.backends.base import Backend
from pytriton_core.errors import InvalidArgumentError

log = logging.getLogger(__name__)

ENTRY_POINT_GROUP = "pytriton_core.backends"
PYTHON_BASED_FILE = "model.py"  # Triton's kPythonFilename


@dataclass(frozen=True)
class Plugin:
    """Where a backend name resolved to: a factory, or a Python-based backend's folder."""

    name: str
    origin: str  # what the log and errors name: a folder, or an entry point
    create: Callable[[], Backend] | None = None
    python_based_dir: Path | None = None  # <backend-directory>/<name>, holding model.py


def find_in_directory(directory: Path, name: str) -> Plugin | None:
    """``<directory>/<name>/`` as a plug-in package or a Python-based backend; None if it is
    neither."""
    folder = directory / name
    package = folder / "__init__.py"
    if package.is_file():
        return Plugin(name, str(folder), create=lambda: _load_package(name, folder))
    if (folder / PYTHON_BASED_FILE).is_file():
        return Plugin(name, str(folder), python_based_dir=folder)
    return None


def find_entry_point(name: str, builtin: bool) -> Plugin | None:
    """The installed entry point ``name`` of the group; None if there is none (or it would
    replace a built-in backend)."""
    found = [
        ep for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP) if ep.name == name
    ]
    if not found:
        return None
    entry = found[0]
    if builtin:
        log.warning(
            "entry point '%s = %s' (group %s) is not used: '%s' is a built-in backend",
            entry.name,
            entry.value,
            ENTRY_POINT_GROUP,
            name,
        )
        return None
    return Plugin(
        name, f"entry point {entry.value}", create=lambda: _from_object(name, entry.load())
    )


def _load_package(name: str, folder: Path) -> Backend:
    return _from_object(name, load_plugin_package("backend plug-in", name, folder))


def load_plugin_package(kind: str, name: str, folder: Path) -> ModuleType:
    """Import ``<folder>/__init__.py`` as a package of its own (its relative imports work);
    ``kind`` names what it is in the errors ("backend plug-in", "repository agent")."""
    module_name = f"_pytriton_plugin_{kind.split()[0]}_{name}"
    spec = importlib.util.spec_from_file_location(
        module_name, folder / "__init__.py", submodule_search_locations=[str(folder)]
    )
    if spec is None or spec.loader is None:
        raise InvalidArgumentError(f"unable to load {kind} '{name}' from {folder}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module  # so the package's own relative imports resolve
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        del sys.modules[module_name]
        raise InvalidArgumentError(
            f"unable to load {kind} '{name}' from {folder}: {type(exc).__name__}: {exc}"
        ) from exc
    return module


def _from_object(name: str, loaded: Any) -> Backend:
    """A ``Backend`` from what a plug-in exposes: a module with ``create_backend``, or a
    factory (a class or a function)."""
    factory = loaded.create_backend if isinstance(loaded, ModuleType) else loaded
    if not callable(factory):
        raise InvalidArgumentError(
            f"backend plug-in '{name}' exposes no create_backend() (got {loaded!r})"
        )
    backend = factory()
    if not isinstance(backend, Backend):
        raise InvalidArgumentError(
            f"backend plug-in '{name}': create_backend() returned {type(backend).__name__}, "
            "not a pytriton_core.backends.base.Backend"
        )
    return backend
