"""GPU discovery, with a stand-in nvidia-smi on PATH (this machine has no GPU and no cupy)."""

from __future__ import annotations

import importlib.util
import stat
from pathlib import Path

import pytest

from pytriton_core.devices import visible_gpu_ids

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("cupy") is not None, reason="cupy answers before nvidia-smi"
)


def _fake_nvidia_smi(folder: Path, gpus: int) -> None:
    script = folder / "nvidia-smi"
    lines = "".join(f"echo 'GPU {i}: NVIDIA Test (UUID: GPU-{i})'\n" for i in range(gpus))
    script.write_text("#!/bin/sh\n" + lines)
    script.chmod(script.stat().st_mode | stat.S_IEXEC)


def test_no_gpu_tool_means_no_gpus(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert visible_gpu_ids() == ()


def test_counts_the_listed_gpus(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    _fake_nvidia_smi(tmp_path, 3)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert visible_gpu_ids() == (0, 1, 2)


def test_cuda_visible_devices_caps_and_hides(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _fake_nvidia_smi(tmp_path, 3)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2")
    assert visible_gpu_ids() == (0,)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert visible_gpu_ids() == ()
