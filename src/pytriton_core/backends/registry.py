"""Which module serves which backend, and the extra that installs its framework; backend
plug-ins (``backends/plugins.py``) for the names this package does not serve."""

from __future__ import annotations

import importlib
import logging
from dataclasses import dataclass
from pathlib import Path

from pytriton_core.backends.base import Backend
from pytriton_core.backends.plugins import Plugin, find_entry_point, find_in_directory
from pytriton_core.errors import InvalidArgumentError, UnsupportedError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class BackendEntry:
    module: str  # imports a module exposing ``create_backend() -> Backend``
    extra: str | None  # the pyproject extra that installs the framework


BACKENDS: dict[str, BackendEntry] = {
    "python": BackendEntry("pytriton_core.backends.python", None),
    "onnxruntime": BackendEntry("pytriton_core.backends.onnxruntime", "onnxruntime"),
    "pytorch": BackendEntry("pytriton_core.backends.pytorch", "torch"),
    "openvino": BackendEntry("pytriton_core.backends.openvino", "openvino"),
    "tensorrt": BackendEntry("pytriton_core.backends.tensorrt", "gpu"),
    "fil": BackendEntry("pytriton_core.backends.fil", "fil"),
}


class BackendRegistry:
    """Creates each backend once, on first use, so unused frameworks are never imported.

    ``backend_directory`` (``--backend-directory``) is searched first, then the built-in
    backends, then the installed entry points (``backends/plugins.py``).
    """

    def __init__(self, backend_directory: Path | None = None) -> None:
        self._directory = backend_directory
        self._created: dict[str, Backend] = {}
        self._plugins: dict[str, Plugin | None] = {}

    def get(self, name: str) -> Backend:
        existing = self._created.get(name)
        if existing is not None:
            return existing
        plugin = self._plugin(name)
        if plugin is not None and plugin.python_based_dir is not None:
            backend = self.get("python")  # a Python-based backend: its model.py, run as such
        elif plugin is not None:
            assert plugin.create is not None
            backend = plugin.create()
            log.info("backend '%s' is a plug-in (%s)", name, plugin.origin)
        else:
            backend = self._builtin(name)
        self._created[name] = backend
        return backend

    def python_based_dir(self, name: str) -> Path | None:
        """The folder whose ``model.py`` serves the models of a Python-based backend; None
        for every other backend."""
        plugin = self._plugin(name)
        return plugin.python_based_dir if plugin is not None else None

    def _plugin(self, name: str) -> Plugin | None:
        if name not in self._plugins:
            found = find_in_directory(self._directory, name) if self._directory else None
            if found is None and name != "python":
                found = find_entry_point(name, builtin=name in BACKENDS)
            self._plugins[name] = found
        return self._plugins[name]

    def _builtin(self, name: str) -> Backend:
        entry = BACKENDS.get(name)
        if entry is None:
            # Triton's words when no backend library has the name; the list is ours.
            known = ", ".join(sorted(BACKENDS))
            raise InvalidArgumentError(
                f"unable to find backend library for backend '{name}', try specifying runtime "
                f"on the model configuration. (this server provides: {known}; plug-ins come "
                "from --backend-directory or the 'pytriton_core.backends' entry points)"
            )
        try:
            module = importlib.import_module(entry.module)
        except ImportError as exc:
            hint = (
                f"; install it with: pip install pytriton-core[{entry.extra}]"
                if entry.extra
                else ""
            )
            raise UnsupportedError(
                f"backend '{name}' is not available ({exc.name or exc} is not installed){hint}"
            ) from exc
        backend: Backend = module.create_backend()
        return backend
