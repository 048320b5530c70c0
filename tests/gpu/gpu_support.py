"""What the GPU test modules share: whether a GPU is visible, and loading a model as the
server loads it (config, auto-complete, normalize, validate) to drive it in-process."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from pytriton_core import config as model_config
from pytriton_core.backends.base import InstanceSpec, ModelLocation
from pytriton_core.backends.registry import BackendRegistry

GPU_SPEC = InstanceSpec("m_0", "GPU", 0)


def visible_gpus() -> int:
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return 0
    result = subprocess.run([smi, "-L"], capture_output=True, text=True, check=False)
    return sum(1 for line in result.stdout.splitlines() if line.startswith("GPU "))


def skip_module_without_gpu(what: str) -> None:
    """Skip the calling module, with the reason, where no NVIDIA GPU is visible."""
    if visible_gpus() == 0:
        pytest.skip(
            f"no NVIDIA GPU visible (nvidia-smi lists none): {what} run on a GPU machine "
            "through tools/gpu-checks.sh",
            allow_module_level=True,
        )


def load_model(
    backend_name: str, model_dir: Path, config_text: str, **global_settings: str
) -> tuple[Any, model_config.ModelSpec, dict[str, Any]]:
    """The backend model, its spec and its config as JSON."""
    backend = BackendRegistry().get(backend_name)
    config: Any = model_config.parse_config_text(config_text, str(model_dir / "config.pbtxt"))
    model_config.fill_server_side_fields(config, model_dir.name, model_dir)
    location = ModelLocation(
        model_dir.name, 1, model_dir, model_dir / "1", {}, dict(global_settings)
    )
    backend.auto_complete_config(config, location)
    model_config.normalize_config(config, gpu_ids=[0])
    model_config.validate_config(config)
    spec = model_config.ModelSpec.from_config(config, 1)
    model = backend.load_model(spec, location, config)
    return model, spec, model_config.config_to_json_dict(config)


def onnxruntime_provider_or_skip(provider: str, onnx_path: Path) -> None:
    """Skip unless onnxruntime has ``provider`` and it starts here (a provider compiled in
    may still fail to load its CUDA/cuDNN/TensorRT libraries; onnxruntime then runs on the
    CPU, which is the machine's problem, not the backend's)."""
    ort = pytest.importorskip("onnxruntime")
    if provider not in ort.get_available_providers():
        pytest.skip(f"this onnxruntime has no {provider} (install pytriton-core[gpu])")
    plain = ort.InferenceSession(str(onnx_path), providers=[provider, "CPUExecutionProvider"])
    if plain.get_providers()[0] != provider:
        pytest.skip(f"onnxruntime's {provider} does not start here (its libraries are missing)")
