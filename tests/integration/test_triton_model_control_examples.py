"""Triton's own model-control examples (the client repository's
``src/python/examples/simple_http_model_control.py`` and ``simple_grpc_model_control.py``)
run unchanged against this server, and against the real Triton with the same repository.

They are not copied into this project: set ``TRITON_CLIENT_REPO`` to a clone of Triton's
client repository (triton_client_examples.py); the tests skip without it. Each example counts
the models of the repository index (7 for HTTP, 8 for gRPC), loads ``simple``, reloads it
with a malformed and then a valid config override (``{"max_batch_size":"16"}``: its inputs
and outputs come from the model's auto-complete), unloads it, and loads names that do not
exist (the gRPC one also a file override whose name is longer than a file name may be).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from control_models import write_simple
from harness import ServerHandle, run_pytriton_server, run_real_triton
from triton_client_examples import require_client_repo, write_example

SCRIPTS = {"http": "simple_http_model_control.py", "grpc": "simple_grpc_model_control.py"}
MODEL_COUNT = {"http": 7, "grpc": 8}  # what each example expects the index to hold


def _repository(root: Path, protocol: str) -> Path:
    write_simple(root)
    for i in range(MODEL_COUNT[protocol] - 1):
        write_simple(root, f"other_{i}")
    return root


def _run_example(
    protocol: str, server: ServerHandle, folder: Path
) -> subprocess.CompletedProcess[str]:
    script = write_example(SCRIPTS[protocol], folder)
    url = server.http_url if protocol == "http" else server.grpc_url
    return subprocess.run(
        [sys.executable, str(script), "-u", url],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_model_control_example_passes(protocol: str, tmp_path: Path) -> None:
    require_client_repo()
    repository = _repository(tmp_path / "models", protocol)
    with run_pytriton_server(repository, "--model-control-mode=explicit") as server:
        result = _run_example(protocol, server, tmp_path)
        assert server.process.poll() is None, "the server died"
    assert result.returncode == 0, f"{result.stdout}{result.stderr}\n{server.log()}"
    assert "PASS: model control" in result.stdout


@pytest.mark.real_triton
def test_the_http_example_passes_against_triton_too(tmp_path: Path) -> None:
    """The repository and models are what the examples expect (the gRPC example's file
    name check crashes Triton 2.51, a bug its later releases fix)."""
    require_client_repo()
    repository = _repository(tmp_path / "models", "http")
    with run_real_triton(repository, "--model-control-mode=explicit") as server:
        result = _run_example("http", server, tmp_path)
    assert result.returncode == 0, f"{result.stdout}{result.stderr}"
    assert "PASS: model control" in result.stdout
