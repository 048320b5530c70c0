"""GPU paths of the framework backends: onnxruntime's CUDA (and TensorRT) execution
providers with IOBinding, torch on CUDA, and TensorRT engines built here from the ONNX MLP.

They skip, with the reason, on a machine without an NVIDIA GPU or without the GPU builds
of the frameworks; tools/gpu-checks.sh installs those and runs this file on a GPU machine.
The backends are driven in-process through the backend contract (the server's own GPU
discovery is not needed for that), and the TensorRT model also through a served server.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "integration"))

import framework_models as fm
from gpu_support import GPU_SPEC, load_model, onnxruntime_provider_or_skip, skip_module_without_gpu

from pytriton_core import proto, types
from pytriton_core.backends.base import BackendInstance
from pytriton_core.inference.request import InferenceRequest
from pytriton_core.inference.statistics import ComputeTiming
from pytriton_core.inference.tensor import Tensor

FP32 = types.BY_WIRE_NAME["FP32"]


skip_module_without_gpu("the GPU backend tests")


def _load(
    backend_name: str, model_dir: Path, config_text: str, **global_settings: str
) -> tuple[Any, dict[str, Any]]:
    """A model loaded as the server loads it, with its config as JSON."""
    model, _, config_json = load_model(backend_name, model_dir, config_text, **global_settings)
    return model, config_json


def _execute(instance: BackendInstance, name: str, xs: Sequence[np.ndarray]) -> list[Any]:
    requests = [
        InferenceRequest("m", inputs={name: Tensor(name, FP32, x)}, batch_size=x.shape[0])
        for x in xs
    ]
    responses = instance.execute(requests, ComputeTiming())
    for response in responses:
        assert response is not None and response.error is None, response
    return [r.outputs[0].data for r in responses if r is not None]


def _inputs() -> list[np.ndarray]:
    rng = np.random.default_rng(7)
    return [rng.standard_normal((rows, fm.IN_FEATURES), dtype=np.float32) for rows in (1, 3, 2)]


def _onnx_reference(path: Path, xs: Sequence[np.ndarray]) -> list[np.ndarray]:
    import onnxruntime as ort

    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return [session.run(["Y"], {"X": x})[0] for x in xs]


@pytest.fixture
def onnx_model(tmp_path: Path) -> Path:
    fm.write_onnx_mlp(tmp_path / "onnx_gpu" / "1" / "model.onnx")
    return tmp_path / "onnx_gpu"


@pytest.mark.parametrize("accelerator", ["", "tensorrt"])
def test_onnxruntime_on_gpu(onnx_model: Path, accelerator: str) -> None:
    provider = "TensorrtExecutionProvider" if accelerator else "CUDAExecutionProvider"
    onnxruntime_provider_or_skip(provider, onnx_model / "1" / "model.onnx")
    config = "instance_group [ { kind: KIND_GPU, count: 1 } ]\n"
    if accelerator:
        config += (
            "optimization { execution_accelerators { gpu_execution_accelerator : "
            f'[ {{ name : "{accelerator}" }} ] }} }}\n'
        )
    model, config_json = _load("onnxruntime", onnx_model, config)
    assert config_json["max_batch_size"] == 4
    instance = model.create_instance(GPU_SPEC)
    assert instance._session.get_providers()[0] == provider
    xs = _inputs()
    outputs = _execute(instance, "X", xs)
    tolerance = 1e-3 if accelerator else 1e-5  # TensorRT may pick TF32 kernels
    for served, expected in zip(
        outputs, _onnx_reference(onnx_model / "1" / "model.onnx", xs), strict=True
    ):
        np.testing.assert_allclose(served, expected, rtol=tolerance, atol=tolerance)
    instance.finalize()


def test_torch_on_cuda(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip(f"torch {torch.__version__} has no CUDA (a CPU build?)")
    model_dir = tmp_path / "torch_gpu"
    fm.write_torch_mlp(model_dir / "1" / "model.pt")
    model, _ = _load(
        "pytorch",
        model_dir,
        """
        backend: "pytorch"
        max_batch_size: 8
        input [ { name: "INPUT__0", data_type: TYPE_FP32, dims: [ 16 ] } ]
        output [ { name: "OUTPUT__0", data_type: TYPE_FP32, dims: [ 8 ] } ]
        instance_group [ { kind: KIND_GPU, count: 1 } ]
        """,
    )
    instance = model.create_instance(GPU_SPEC)
    assert instance._device.type == "cuda"
    reference = fm.torch_mlp()
    xs = _inputs()
    outputs = _execute(instance, "INPUT__0", xs)
    torch.backends.cuda.matmul.allow_tf32 = False
    for served, x in zip(outputs, xs, strict=True):
        with torch.inference_mode():
            expected = reference(torch.from_numpy(x.copy())).numpy()
        np.testing.assert_allclose(served, expected, rtol=1e-4, atol=1e-4)


def build_tensorrt_plan(onnx_path: Path, plan_path: Path, max_batch: int = 8) -> Path:
    """A TensorRT engine of the ONNX MLP with one profile for batches 1..max_batch."""
    trt = pytest.importorskip("tensorrt")
    logger = trt.Logger(trt.Logger.WARNING)
    builder = trt.Builder(logger)
    network = builder.create_network(0)
    parser = trt.OnnxParser(network, logger)
    if not parser.parse(onnx_path.read_bytes()):
        errors = [str(parser.get_error(i)) for i in range(parser.num_errors)]
        raise AssertionError(f"TensorRT cannot parse the ONNX model: {errors}")
    build_config = builder.create_builder_config()
    build_config.clear_flag(trt.BuilderFlag.TF32)
    profile = builder.create_optimization_profile()
    profile.set_shape(
        "X", (1, fm.IN_FEATURES), (max_batch // 2, fm.IN_FEATURES), (max_batch, fm.IN_FEATURES)
    )
    build_config.add_optimization_profile(profile)
    plan = builder.build_serialized_network(network, build_config)
    assert plan is not None, "TensorRT failed to build the engine"
    plan_path.parent.mkdir(parents=True, exist_ok=True)
    plan_path.write_bytes(bytes(plan))
    return plan_path


def test_tensorrt_engine(tmp_path: Path) -> None:
    pytest.importorskip("tensorrt")
    pytest.importorskip("cupy")
    onnx_path = fm.write_onnx_mlp(tmp_path / "source.onnx")
    model_dir = tmp_path / "trt_mlp"
    build_tensorrt_plan(onnx_path, model_dir / "1" / "model.plan", max_batch=8)
    # Auto-complete: batch limit from the engine's profile, default-max-batch-size above it.
    model, config_json = _load(
        "tensorrt",
        model_dir,
        "instance_group [ { kind: KIND_GPU, count: 1 } ]",
        **{"default-max-batch-size": "16"},
    )
    assert config_json["max_batch_size"] == 8
    assert [(i["name"], i["dims"]) for i in config_json["input"]] == [("X", [16])]
    instance = model.create_instance(GPU_SPEC)
    xs = _inputs()
    outputs = _execute(instance, "X", xs)
    for served, expected in zip(outputs, _onnx_reference(onnx_path, xs), strict=True):
        np.testing.assert_allclose(served, expected, rtol=1e-4, atol=1e-4)


def test_tensorrt_served(tmp_path: Path) -> None:
    """A plan with no config.pbtxt, served: auto-complete and inference over HTTP."""
    pytest.importorskip("tensorrt")
    pytest.importorskip("cupy")
    import tritonclient.http as httpclient
    from harness import run_pytriton_server

    onnx_path = fm.write_onnx_mlp(tmp_path / "source.onnx")
    repository = tmp_path / "repository"
    build_tensorrt_plan(onnx_path, repository / "trt_mlp" / "1" / "model.plan")
    x = _inputs()[1]
    with run_pytriton_server(repository, timeout=180) as server:
        client = httpclient.InferenceServerClient(server.http_url)
        config = client.get_model_config("trt_mlp")
        assert config["platform"] == "tensorrt_plan" and config["max_batch_size"] == 4
        tensor = httpclient.InferInput("X", list(x.shape), "FP32")
        tensor.set_data_from_numpy(x)
        served = client.infer("trt_mlp", [tensor]).as_numpy("Y")
    np.testing.assert_allclose(served, _onnx_reference(onnx_path, [x])[0], rtol=1e-4, atol=1e-4)


def test_proto_is_importable() -> None:
    """Keeps the module honest on GPU machines: the package and its config types load."""
    assert proto.ModelConfig(name="x").name == "x"
