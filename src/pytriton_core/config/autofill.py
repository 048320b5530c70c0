"""The fields the server fills in itself, even with backend auto-complete disabled.

Triton's AutoCompleteBackendFields: ``name`` from the model folder, and ``backend``,
``platform`` and ``default_model_filename`` from whichever of them the config gives, or
else from the model file found in the first version folder.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any

from google.protobuf.message import Message

from pytriton_core.config.versions import version_dir_names
from pytriton_core.errors import ModelConfigError


class _Entry(Enum):
    FILE = "file"
    DIR = "dir"
    EITHER = "either"


@dataclass(frozen=True)
class ModelFormat:
    """One row of Triton's table of model file names, platforms and backends."""

    backend: str
    filename: str
    platform: str  # "" for backends without a platform string
    entry: _Entry  # what the version folder must hold under ``filename``
    platform_aliases: tuple[str, ...] = ()

    @property
    def platforms(self) -> tuple[str, ...]:
        return (self.platform, *self.platform_aliases) if self.platform else ()

    def found_in(self, version_dir: Path) -> bool:
        path = version_dir / self.filename
        if self.entry is _Entry.FILE:
            return path.is_file()
        if self.entry is _Entry.DIR:
            return path.is_dir()
        return path.exists()


# In Triton's order of detection: the first row whose file is present wins.
MODEL_FORMATS: tuple[ModelFormat, ...] = (
    ModelFormat("tensorflow", "model.savedmodel", "tensorflow_savedmodel", _Entry.DIR),
    ModelFormat("tensorflow", "model.graphdef", "tensorflow_graphdef", _Entry.FILE),
    ModelFormat("tensorrt", "model.plan", "tensorrt_plan", _Entry.FILE),
    # A large ONNX model is a folder holding model.onnx beside its external data.
    ModelFormat("onnxruntime", "model.onnx", "onnxruntime_onnx", _Entry.EITHER),
    ModelFormat("openvino", "model.xml", "", _Entry.EITHER),
    ModelFormat("pytorch", "model.pt", "pytorch_libtorch", _Entry.FILE, ("libtorch",)),
    ModelFormat("pytorch", "model.pt2", "torch_aoti", _Entry.FILE),
    ModelFormat("python", "model.py", "", _Entry.EITHER),
)


def fill_server_side_fields(config: Message, model_name: str, model_dir: Path) -> None:
    """Set ``name`` from the folder and derive backend, platform and default file name.

    Raises ModelConfigError when the config names another model, or when nothing tells
    which backend serves the model.
    """
    cfg: Any = config
    if not cfg.name:
        cfg.name = model_name
    elif cfg.name != model_name:
        raise ModelConfigError(
            f"model '{cfg.name}': unexpected directory name '{model_name}', "
            "directory name must equal model name"
        )

    found = _model_format(cfg, model_dir)
    if found is not None:
        cfg.backend = cfg.backend or found.backend
        cfg.platform = cfg.platform or found.platform
        cfg.default_model_filename = cfg.default_model_filename or found.filename
    elif not (cfg.backend or cfg.platform or cfg.default_model_filename):
        # Custom backends load lazily by name, so the model folder must carry it:
        # a model named "model.identity" runs on the "identity" backend.
        _, dot, backend = model_name.partition(".")
        if not dot:
            raise ModelConfigError(
                "Invalid model name: Could not determine backend for model "
                f"'{model_name}' with no backend in model configuration. Expected model "
                "name of the form 'model.<backend_name>'."
            )
        cfg.backend = backend
        cfg.default_model_filename = f"model.{backend}"


def _model_format(cfg: Any, model_dir: Path) -> ModelFormat | None:
    """The table row the config points at, or (config silent) the model file present."""
    backend, platform, filename = cfg.backend, cfg.platform, cfg.default_model_filename
    version_dir = _first_version_dir(model_dir)
    if not (backend or platform or filename):
        if version_dir is None:
            return None
        return next((row for row in MODEL_FORMATS if row.found_in(version_dir)), None)
    rows = [
        row
        for row in MODEL_FORMATS
        if (not backend or row.backend == backend)
        and (not platform or platform in row.platforms)
        and (backend or platform or row.filename == filename)
    ]
    # Several rows share a backend (tensorflow, pytorch): the configured file name or the
    # file present picks among them, else the first row does.
    for row in rows:
        if row.filename == filename or (version_dir is not None and row.found_in(version_dir)):
            return row
    return rows[0] if rows else None


def _first_version_dir(model_dir: Path) -> Path | None:
    """The version folder Triton inspects: the first in lexicographic order ("10" < "2")."""
    if not model_dir.is_dir():
        return None
    names = version_dir_names(model_dir)
    return model_dir / names[0] if names else None
