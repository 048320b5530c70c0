"""The request-path modules named in csrc/compiled_modules.txt are imported compiled."""

from __future__ import annotations

import importlib
import importlib.machinery
from pathlib import Path

import pytest

LIST = Path(__file__).resolve().parents[2] / "csrc" / "compiled_modules.txt"
NAMES = [
    line.strip()
    for line in LIST.read_text().splitlines()
    if line.strip() and not line.startswith("#")
]


def test_the_list_names_modules_of_the_package() -> None:
    source = Path(__file__).resolve().parents[2] / "src"
    assert NAMES
    for name in NAMES:
        assert (source / Path(*name.split("."))).with_suffix(".py").is_file(), name


@pytest.mark.parametrize("name", NAMES)
def test_module_is_imported_from_its_extension(name: str) -> None:
    module = importlib.import_module(name)
    assert module.__file__ is not None
    assert module.__file__.endswith(tuple(importlib.machinery.EXTENSION_SUFFIXES)), (
        f"{name} was imported from {module.__file__}: build and install the package "
        "(pip install .) so that setup.py compiles it"
    )
