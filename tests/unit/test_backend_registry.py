"""The backend registry: lazy creation, and the error naming the extra a missing framework needs."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import pytest

from pytriton_core.backends import registry
from pytriton_core.backends.registry import BACKENDS, BackendEntry, BackendRegistry
from pytriton_core.errors import InvalidArgumentError, UnsupportedError

ROOT = Path(__file__).resolve().parents[2]


def test_missing_framework_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(
        registry.BACKENDS,
        "fakeframework",
        BackendEntry("pytriton_core.backends._no_such_framework_module", "fakeextra"),
    )
    with pytest.raises(UnsupportedError) as failure:
        BackendRegistry().get("fakeframework")
    message = failure.value.message
    assert "backend 'fakeframework' is not available" in message
    assert "pip install pytriton-core[fakeextra]" in message


def test_missing_dependency_inside_the_backend_module(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The usual case: the backend module exists, its framework does not import."""
    (tmp_path / "fake_backend_mod.py").write_text("import no_such_framework_xyz\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(registry.BACKENDS, "fake", BackendEntry("fake_backend_mod", "fake"))
    with pytest.raises(UnsupportedError, match=r"no_such_framework_xyz is not installed"):
        BackendRegistry().get("fake")
    sys.modules.pop("fake_backend_mod", None)


def test_unknown_backend_answers_as_triton_and_lists_the_known_ones() -> None:
    # Triton's INVALID_ARG and words (a load error a client reads), then our list.
    with pytest.raises(
        InvalidArgumentError,
        match=r"unable to find backend library for backend 'no-such-backend', try specifying "
        r"runtime on the model configuration\. \(this server provides: fil, onnxruntime, openvino",
    ):
        BackendRegistry().get("no-such-backend")


def test_every_backend_module_exists_and_its_extra_is_declared() -> None:
    pyproject = (ROOT / "pyproject.toml").read_text()
    extras = pyproject[pyproject.index("[project.optional-dependencies]") :]
    for name, entry in BACKENDS.items():
        assert importlib.util.find_spec(entry.module) is not None, name
        if entry.extra is not None:
            declared = re.search(rf"^{re.escape(entry.extra)} = \[", extras, re.MULTILINE)
            assert declared, f"{name}: extra '{entry.extra}' not in pyproject.toml"


def test_framework_backends_are_registered() -> None:
    assert {"onnxruntime", "pytorch", "openvino", "tensorrt"} <= set(BACKENDS)
    assert BACKENDS["onnxruntime"].extra == "onnxruntime"
    assert BACKENDS["pytorch"].extra == "torch"
    assert BACKENDS["openvino"].extra == "openvino"
    assert BACKENDS["tensorrt"].extra == "gpu"


def test_backends_are_created_once() -> None:
    backends = BackendRegistry()
    assert backends.get("python") is backends.get("python")
