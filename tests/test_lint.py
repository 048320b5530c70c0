"""Lint and type checks run as tests, so CI enforces them like any other behaviour."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# Third-party packages that only one part of the server may import: a framework only in its
# backend, a wire library only in its front end (the rest of the server stays importable
# without them, and each part keeps its own concern).
IMPORTED_ONLY_BY = {
    "torch": ("pytriton_core.backends.pytorch",),
    "onnx": ("pytriton_core.backends.onnxruntime",),
    "onnxruntime": ("pytriton_core.backends.onnxruntime",),
    "openvino": ("pytriton_core.backends.openvino",),
    "tensorrt": ("pytriton_core.backends.tensorrt",),
    "treelite": ("pytriton_core.backends.fil",),
    "tl2cgen": ("pytriton_core.backends.fil",),
    "lightgbm": ("pytriton_core.backends.fil",),
    "xgboost": ("pytriton_core.backends.fil",),
    # The gRPC front end speaks HTTP/2 itself (csrc/h2): grpcio is for clients only.
    "grpc": (),
    "httptools": ("pytriton_core.frontends.http",),
}


def _run(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        args,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, **env} if env else None,
    )


def test_ruff_check() -> None:
    result = _run(sys.executable, "-m", "ruff", "check", "src", "tests", "bench", "tools")
    assert result.returncode == 0, result.stdout + result.stderr


def test_ruff_format() -> None:
    result = _run(
        sys.executable, "-m", "ruff", "format", "--check", "src", "tests", "bench", "tools"
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_mypy() -> None:
    result = _run(sys.executable, "-m", "mypy")
    assert result.returncode == 0, result.stdout + result.stderr


def test_import_contracts() -> None:
    """The floors of pyproject.toml's [tool.importlinter], checked on the source tree."""
    result = _run(
        sys.executable,
        "-c",
        "import sys; from importlinter.cli import lint_imports; "
        "sys.exit(lint_imports(no_cache=True, no_logo=True))",
        PYTHONPATH="src",
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_frameworks_and_wire_libraries_stay_in_their_part() -> None:
    script = (
        "import json, sys, grimp; "
        "graph = grimp.build_graph('pytriton_core', include_external_packages=True, "
        "cache_dir=None); "
        "names = json.loads(sys.argv[1]); "
        "print(json.dumps({n: sorted(graph.find_modules_that_directly_import(n)) "
        "if n in graph.modules else [] for n in names}))"
    )
    result = _run(
        sys.executable, "-c", script, json.dumps(list(IMPORTED_ONLY_BY)), PYTHONPATH="src"
    )
    assert result.returncode == 0, result.stderr
    importers: dict[str, list[str]] = json.loads(result.stdout)
    strays = {
        package: [m for m in found if not m.startswith(IMPORTED_ONLY_BY[package])]
        for package, found in importers.items()
    }
    assert not any(strays.values()), strays
