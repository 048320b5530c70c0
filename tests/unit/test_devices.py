"""GPU discovery, with a stand-in nvidia-smi on PATH (this machine has no GPU and no cupy)."""

from __future__ import annotations

import importlib.util
import stat
from pathlib import Path

import pytest

from pytriton_core.devices import compute_capability, device_memory, visible_gpu_ids

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


def _fake_gpus(folder: Path, capabilities: list[str], used_mib: int, total_mib: int) -> None:
    """nvidia-smi answering -L, and --id=N --query-gpu=compute_cap or memory.used,total."""
    listing = "".join(f"echo 'GPU {i}: NVIDIA Test (UUID: GPU-{i})'\n" for i in range(3))
    cases = "".join(
        f'  *--id={i}*compute_cap*) echo "{cap}" ;;\n' for i, cap in enumerate(capabilities)
    )
    script = folder / "nvidia-smi"
    script.write_text(
        "#!/bin/sh\n"
        'case "$*" in\n'
        f"{cases}"
        f'  *memory.used*) echo "{used_mib}, {total_mib}" ;;\n'
        f"  *) {listing.strip().replace(chr(10), '; ')} ;;\n"
        "esac\n"
    )
    script.chmod(script.stat().st_mode | stat.S_IEXEC)


def test_gpus_below_the_minimum_compute_capability_are_left_out(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _fake_gpus(tmp_path, ["9.0", "5.2", "8.6"], used_mib=0, total_mib=1)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert compute_capability(1) == 5.2
    assert visible_gpu_ids(6.0) == (0, 2)
    assert visible_gpu_ids(8.7) == (0,)
    assert visible_gpu_ids() == (0, 1, 2)


def test_device_memory_is_read_in_bytes(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    _fake_gpus(tmp_path, ["9.0"], used_mib=600, total_mib=1000)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert device_memory(0) == (600 << 20, 1000 << 20)
    monkeypatch.setenv("PATH", str(tmp_path / "nowhere"))
    assert device_memory(0) is None


@pytest.mark.parametrize(("limit", "rejected"), [(0.5, True), (0.7, False)])
def test_model_load_gpu_limit(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, limit: float, rejected: bool
) -> None:
    """--model-load-gpu-limit: once a GPU instance exists, a device used past its fraction
    rejects the load, in Triton's words (60% of the fake GPU is in use)."""
    import asyncio

    from pytriton_core.backends.base import InstanceSpec
    from pytriton_core.backends.registry import BackendRegistry
    from pytriton_core.errors import UnavailableError
    from pytriton_core.memory.device import DevicePools
    from pytriton_core.options import ServerOptions
    from pytriton_core.repository.version_start import VersionStarter

    _fake_gpus(tmp_path, ["9.0"], used_mib=600, total_mib=1000)
    monkeypatch.setenv("PATH", str(tmp_path))
    options = ServerOptions(model_load_gpu_limit={0: limit})
    loop = asyncio.new_event_loop()
    starter = VersionStarter(options, BackendRegistry(), loop, (0,), None, DevicePools({}))
    instances = [InstanceSpec("m_0", "GPU", 0), InstanceSpec("m_1", "CPU", 0)]
    try:
        if rejected:
            with pytest.raises(UnavailableError) as failure:
                starter.check_gpu_limits(instances)
            assert failure.value.message == (
                "can not create model 'm_0': memory limit set for KIND_GPU 0 has exceeded, "
                "model loading is rejected."
            )
        else:
            starter.check_gpu_limits(instances)
    finally:
        loop.close()
