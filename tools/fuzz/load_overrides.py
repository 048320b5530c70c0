"""Fuzz repository load overrides: the ``config`` JSON (parsed, completed, normalized and
validated as a load does) and ``file:`` keys with their contents, written into a fresh
override folder. Oracle: every file written lies inside that folder, and a refused key
leaves no folder behind."""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

import atheris
import instrumentation

# what this target fuzzes (instrumentation.py)
SUBJECT = ("pytriton_core.config", "pytriton_core.repository.overrides")

with instrumentation.imports(SUBJECT):
    from common import fuzz

    from pytriton_core.config import (
        ModelSpec,
        config_from_json,
        fill_server_side_fields,
        normalize_config,
        validate_config,
    )
    from pytriton_core.errors import ServerError
    from pytriton_core.repository.overrides import FILE_PREFIX, TEMP_PREFIX, OverrideDirectory

# A private temporary folder, so that "no folder left behind" is one small listing.
TEMP = Path(tempfile.mkdtemp(prefix="pytriton-fuzz-overrides-"))
tempfile.tempdir = str(TEMP)


def _override_folders() -> set[str]:
    return {name for name in os.listdir(TEMP) if name.startswith(TEMP_PREFIX)}


def test_one_input(data: bytes) -> None:
    provider = atheris.FuzzedDataProvider(data)
    config_text = provider.ConsumeUnicodeNoSurrogates(provider.ConsumeIntInRange(0, 2048))
    files = {
        FILE_PREFIX + provider.ConsumeUnicodeNoSurrogates(40): provider.ConsumeBytes(64)
        for _ in range(provider.ConsumeIntInRange(0, 4))
    }
    try:
        config = config_from_json(config_text)
        config.name = config.name or "fuzzed"
        with tempfile.TemporaryDirectory() as folder:
            fill_server_side_fields(config, config.name, Path(folder))
        normalize_config(config)
        validate_config(config)
        ModelSpec.from_config(config, 1)
    except ServerError:
        pass
    before = _override_folders()
    try:
        directory = OverrideDirectory("fuzzed", files)
    except ServerError:
        assert _override_folders() == before  # a failed load leaves no folder
        return
    try:
        root = directory.model_dir.resolve()
        for folder, _, names in os.walk(root):
            for name in names:
                assert Path(folder, name).resolve().is_relative_to(root), (folder, name)
    finally:
        directory.cleanup()


if __name__ == "__main__":
    fuzz(test_one_input, SUBJECT)
    sys.exit(0)
