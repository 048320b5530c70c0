"""Reading a ModelConfig: config.pbtxt (protobuf text format) and Triton's JSON form."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from google.protobuf import json_format, text_format
from google.protobuf.message import Message

from pytriton_core import proto
from pytriton_core.errors import ModelConfigError

CONFIG_FILENAME = "config.pbtxt"
CUSTOM_CONFIGS_DIR = "configs"


def config_path(model_dir: Path, config_name: str | None = None) -> Path:
    """The file a model's config is read from: ``configs/<name>.pbtxt`` if given and present."""
    if config_name:
        custom = model_dir / CUSTOM_CONFIGS_DIR / f"{config_name}.pbtxt"
        if custom.is_file():
            return custom
    return model_dir / CONFIG_FILENAME


def read_model_config(model_dir: Path, config_name: str | None = None) -> Message | None:
    """Parse the model's config file; None when it has none (auto-complete may supply one)."""
    path = config_path(model_dir, config_name)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise ModelConfigError(f"failed to read model config {path}: {exc.strerror}") from exc
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ModelConfigError(f"failed to read model config {path}: not UTF-8 ({exc})") from exc
    return parse_config_text(text, str(path))


def parse_config_text(text: str, source: str) -> Message:
    """Parse protobuf text format into a ModelConfig; ``source`` names the text in errors."""
    config = proto.ModelConfig()
    try:
        text_format.Parse(text, config, descriptor_pool=proto.POOL)
    except text_format.ParseError as exc:
        # protobuf's text starts with "<line>:<column> : " and names the field.
        raise ModelConfigError(f"failed to parse model config {source}: {exc}") from exc
    except ValueError as exc:  # an integer out of its field's range (found by fuzzing)
        raise ModelConfigError(f"failed to parse model config {source}: {exc}") from exc
    return config


def config_from_json(value: str | bytes | dict[str, Any]) -> Message:
    """A ModelConfig from Triton's JSON form (snake_case or camelCase names, enum names)."""
    config = proto.ModelConfig()
    try:
        document = json.loads(value) if isinstance(value, (str, bytes)) else value
        if not isinstance(document, dict):
            raise ModelConfigError(
                f"invalid model config JSON: expected an object, got {type(document).__name__}"
            )
        json_format.ParseDict(document, config, descriptor_pool=proto.POOL)
    except (json_format.ParseError, ValueError) as exc:
        # An unknown field's message goes on to list every field in camelCase: keep line one.
        detail = str(exc).split("\n", 1)[0]
        raise ModelConfigError(f"invalid model config JSON: {detail}") from exc
    return config
