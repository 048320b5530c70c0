"""Triton's own Python client examples (``src/python/examples`` of its client repository),
read from a clone named by ``TRITON_CLIENT_REPO`` (a work tree, or a bare git directory, whose
HEAD is read). This project does not carry them; the tests that run them skip without it.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

CLIENT_REPO = os.environ.get("TRITON_CLIENT_REPO", "")
EXAMPLES_FOLDER = "src/python/examples"


def require_client_repo() -> None:
    """Skips the calling test or fixture when ``TRITON_CLIENT_REPO`` is not set."""
    if not CLIENT_REPO:
        pytest.skip(
            "set TRITON_CLIENT_REPO to a clone of Triton's client repository "
            "(github.com/triton-inference-server/client, a work tree or a bare git directory)"
        )


def example_source(name: str) -> str:
    """The text of the example ``name`` (a file name in ``src/python/examples``)."""
    path = f"{EXAMPLES_FOLDER}/{name}"
    tree = Path(CLIENT_REPO) / path
    if tree.is_file():
        return tree.read_text()
    result = subprocess.run(
        ["git", f"--git-dir={CLIENT_REPO}", "show", f"HEAD:{path}"],
        capture_output=True,
        text=True,
        check=True,
    )
    return result.stdout


def write_example(name: str, folder: Path) -> Path:
    """The example ``name`` copied, unchanged, into ``folder``; its path."""
    script = folder / name
    script.write_text(example_source(name))
    return script
