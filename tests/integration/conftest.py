"""Shared fixtures for the integration tests (helpers live in harness.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from certificates import certificates  # noqa: F401  (the TLS tests' fixture)
from harness import EXAMPLES_REPOSITORY, ServerHandle, run_pytriton_server


@pytest.fixture(scope="module")
def examples_server() -> Iterator[ServerHandle]:
    """pytriton-core serving examples/model_repository, as `pytriton-server` does by default."""
    with run_pytriton_server(EXAMPLES_REPOSITORY) as server:
        yield server
