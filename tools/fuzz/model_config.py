"""Fuzz ``config.pbtxt`` parsing and everything a load does with the result before any
backend sees it: server-side fields, Triton's defaults, validation, the frozen spec."""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import instrumentation

# what this target fuzzes (instrumentation.py)
SUBJECT = ("pytriton_core.config",)

with instrumentation.imports(SUBJECT):
    from common import fuzz

    from pytriton_core.config import (
        ModelSpec,
        fill_server_side_fields,
        normalize_config,
        parse_config_text,
        validate_config,
    )
    from pytriton_core.errors import ServerError

FOLDER = Path(tempfile.mkdtemp(prefix="pytriton-fuzz-config-")) / "fuzzed"
FOLDER.mkdir()


def test_one_input(data: bytes) -> None:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return  # read_model_config refuses it before parsing
    try:
        config = parse_config_text(text, "config.pbtxt")
        fill_server_side_fields(config, "fuzzed", FOLDER)
        normalize_config(config)
        validate_config(config)
        ModelSpec.from_config(config, 1)
    except ServerError:
        pass


if __name__ == "__main__":
    fuzz(test_one_input, SUBJECT)
    sys.exit(0)
