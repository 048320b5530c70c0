"""Which module serves which backend, and the extra that installs its framework."""

from __future__ import annotations

import importlib
from dataclasses import dataclass

from pytriton_core.backends.base import Backend
from pytriton_core.errors import InvalidArgumentError, UnsupportedError


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
    """Creates each backend once, on first use, so unused frameworks are never imported."""

    def __init__(self) -> None:
        self._created: dict[str, Backend] = {}

    def get(self, name: str) -> Backend:
        existing = self._created.get(name)
        if existing is not None:
            return existing
        entry = BACKENDS.get(name)
        if entry is None:
            # Triton's words when no backend library has the name; the list is ours.
            known = ", ".join(sorted(BACKENDS))
            raise InvalidArgumentError(
                f"unable to find backend library for backend '{name}', try specifying runtime "
                f"on the model configuration. (this server provides: {known})"
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
        self._created[name] = backend
        return backend
