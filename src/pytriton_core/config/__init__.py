"""Model configuration: read config.pbtxt, complete it, normalize it, validate it.

The load path runs, in order: ``read_model_config`` (or ``config_from_json`` for a load
override), backend auto-complete (elsewhere), ``fill_server_side_fields``,
``normalize_config``, ``validate_config``; then ``select_versions`` over
``list_version_dirs``; ``ModelSpec.from_config`` builds each loaded version's frozen spec,
which is what everything past the loader reads. ``config_to_json_dict`` renders a config as
Triton does (``/config``, the Python backend's ``model_config``). Configs are
``inference.ModelConfig`` messages from ``pytriton_core.proto``.
"""

from __future__ import annotations

from pytriton_core.config.autofill import fill_server_side_fields
from pytriton_core.config.json_mapping import config_to_json_dict
from pytriton_core.config.normalize import normalize_config
from pytriton_core.config.parse import config_from_json, parse_config_text, read_model_config
from pytriton_core.config.spec import ModelSpec, TensorSpec
from pytriton_core.config.validate import validate_config
from pytriton_core.config.versions import list_version_dirs, select_versions

__all__ = [
    "ModelSpec",
    "TensorSpec",
    "config_from_json",
    "config_to_json_dict",
    "fill_server_side_fields",
    "list_version_dirs",
    "normalize_config",
    "parse_config_text",
    "read_model_config",
    "select_versions",
    "validate_config",
]
