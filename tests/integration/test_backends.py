"""The framework backends (onnxruntime, pytorch, openvino) served end to end.

Every model is built here (no downloads): the same MLP as an ONNX graph, a TorchScript
module and an OpenVINO IR (see framework_models.py). Each is served by a real server and
called through the real tritonclient (HTTP, and gRPC where the server has it); its outputs
must equal the framework's own outputs for the same input. Also: auto-complete, dynamic
batching, warm-up, and the error for a backend whose framework is not installed.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import shutil
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import framework_models as fm
import numpy as np
import pytest
import tritonclient.http as httpclient
from harness import ServerHandle, batch_counts, pytriton_cli_flags, run_pytriton_server
from tritonclient.utils import InferenceServerException

ort = pytest.importorskip("onnxruntime", reason="the onnxruntime extra is not installed")
torch = pytest.importorskip("torch", reason="the torch extra is not installed")
ov = pytest.importorskip("openvino", reason="the openvino extra is not installed")
pytest.importorskip("onnx", reason="onnx (to build the test model) is not installed")

# The global backend setting the server gets, so auto-complete must read it.
DEFAULT_MAX_BATCH_SIZE = 8
BATCHING = """
max_batch_size: 8
dynamic_batching { max_queue_delay_microseconds: 500000 }
instance_group [ { count: 1, kind: KIND_CPU } ]
"""
OV_PARAMETERS = """
parameters { key: "INFERENCE_PRECISION_HINT" value: { string_value: "f32" } }
parameters { key: "NUM_STREAMS" value: { string_value: "1" } }
parameters { key: "PERFORMANCE_HINT" value: { string_value: "LATENCY" } }
"""
OV_PROPERTIES = {
    "INFERENCE_PRECISION_HINT": "f32",
    "NUM_STREAMS": "1",
    "PERFORMANCE_HINT": "LATENCY",
}
GOOD_MODELS = (
    "onnx_auto",
    "onnx_mlp",
    "torch_mlp",
    "torch_addsub",
    "openvino_auto",
    "openvino_mlp",
)
PROTOCOLS = ["http", "grpc"] if "--grpc-use-ssl" in pytriton_cli_flags() else ["http"]


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))


def build_repository(root: Path) -> Path:
    onnx_file = fm.write_onnx_mlp(root / "onnx_auto" / "1" / "model.onnx")

    # Partial config: auto-complete fills inputs, outputs and max_batch_size.
    shutil.copytree(root / "onnx_auto" / "1", root / "onnx_mlp" / "1")
    warmup_data = np.arange(2 * fm.IN_FEATURES, dtype=np.float32) / 10
    (root / "onnx_mlp" / "warmup").mkdir()
    (root / "onnx_mlp" / "warmup" / "x.bin").write_bytes(warmup_data.tobytes())
    _write(
        root / "onnx_mlp" / "config.pbtxt",
        """
        dynamic_batching { max_queue_delay_microseconds: 500000 }
        instance_group [ { count: 1, kind: KIND_CPU } ]
        parameters { key: "intra_op_thread_count" value: { string_value: "1" } }
        model_warmup [
          { name: "zeros" batch_size: 4 count: 2
            inputs { key: "X" value: { data_type: TYPE_FP32 dims: [ 16 ] zero_data: true } } },
          { name: "random" batch_size: 1
            inputs { key: "X" value: { data_type: TYPE_FP32 dims: [ 16 ] random_data: true } } },
          { name: "file" batch_size: 2
            inputs { key: "X"
                     value: { data_type: TYPE_FP32 dims: [ 16 ] input_data_file: "x.bin" } } }
        ]
        """,
    )
    # A warm-up sample the model cannot run (17 features): the load must fail.
    shutil.copytree(root / "onnx_auto" / "1", root / "onnx_warmup_broken" / "1")
    _write(
        root / "onnx_warmup_broken" / "config.pbtxt",
        """
        model_warmup [ { name: "wrong_dims" batch_size: 1
          inputs { key: "X" value: { data_type: TYPE_FP32 dims: [ 17 ] zero_data: true } } } ]
        """,
    )

    fm.write_torch_mlp(root / "torch_mlp" / "1" / "model.pt")
    _write(
        root / "torch_mlp" / "config.pbtxt",
        f"""
        backend: "pytorch"
        {BATCHING}
        input [ {{ name: "INPUT__0", data_type: TYPE_FP32, dims: [ 16 ] }} ]
        output [ {{ name: "OUTPUT__0", data_type: TYPE_FP32, dims: [ 8 ] }} ]
        """,
    )
    # forward(lhs, rhs) -> (lhs + rhs, lhs - rhs): inputs by argument name, outputs by index,
    # both listed out of order.
    fm.write_torch_two_io(root / "torch_addsub" / "1" / "model.pt")
    _write(
        root / "torch_addsub" / "config.pbtxt",
        """
        platform: "pytorch_libtorch"
        max_batch_size: 4
        input [ { name: "rhs", data_type: TYPE_INT64, dims: [ 3 ] },
                { name: "lhs", data_type: TYPE_INT64, dims: [ 3 ] } ]
        output [ { name: "DIFF__1", data_type: TYPE_INT64, dims: [ 3 ] },
                 { name: "SUM__0", data_type: TYPE_INT64, dims: [ 3 ] } ]
        """,
    )

    fm.write_openvino_mlp(onnx_file, root / "openvino_auto" / "1" / "model.xml")
    shutil.copytree(root / "openvino_auto" / "1", root / "openvino_mlp" / "1")
    _write(
        root / "openvino_mlp" / "config.pbtxt",
        """
        dynamic_batching { max_queue_delay_microseconds: 500000 }
        instance_group [ { count: 1, kind: KIND_CPU } ]
        """
        + OV_PARAMETERS,
    )
    _write(root / "openvino_auto" / "config.pbtxt", OV_PARAMETERS)

    # A TensorRT plan on a machine without TensorRT (or a GPU): the load must fail clearly.
    (root / "trt_model" / "1").mkdir(parents=True)
    (root / "trt_model" / "1" / "model.plan").write_bytes(b"not an engine")
    return root


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_repository(tmp_path_factory.mktemp("backends"))


@pytest.fixture(scope="module")
def server(repository: Path) -> Iterator[ServerHandle]:
    with run_pytriton_server(
        repository,
        "--model-control-mode=explicit",
        *(f"--load-model={name}" for name in GOOD_MODELS),
        f"--backend-config=default-max-batch-size={DEFAULT_MAX_BATCH_SIZE}",
        timeout=180,
    ) as handle:
        yield handle


@contextlib.contextmanager
def client_for(server: ServerHandle, protocol: str) -> Iterator[Any]:
    if protocol == "grpc":
        import tritonclient.grpc as grpcclient

        client: Any = grpcclient.InferenceServerClient(server.grpc_url)
    else:
        client = httpclient.InferenceServerClient(server.http_url, concurrency=16)
    try:
        yield client
    finally:
        client.close()


def infer(client: Any, protocol: str, model: str, inputs: dict[str, np.ndarray]) -> Any:
    module: Any = httpclient
    if protocol == "grpc":
        import tritonclient.grpc as grpcclient

        module = grpcclient
    infer_inputs = []
    for name, array in inputs.items():
        tensor = module.InferInput(name, list(array.shape), _wire(array.dtype))
        tensor.set_data_from_numpy(array)
        infer_inputs.append(tensor)
    return client.infer(model, infer_inputs)


def _wire(dtype: np.dtype) -> str:
    return {np.dtype(np.float32): "FP32", np.dtype(np.int64): "INT64"}[np.dtype(dtype)]


# ----------------------------------------------------------------- references


def onnx_reference(repository: Path) -> Callable[[np.ndarray], np.ndarray]:
    session = ort.InferenceSession(str(repository / "onnx_auto" / "1" / "model.onnx"))
    return lambda x: session.run(["Y"], {"X": x})[0]


def torch_reference(repository: Path) -> Callable[[np.ndarray], np.ndarray]:
    module = torch.jit.load(str(repository / "torch_mlp" / "1" / "model.pt"))

    def run(x: np.ndarray) -> np.ndarray:
        with torch.inference_mode():
            return module(torch.from_numpy(x.copy())).numpy()

    return run


def openvino_reference(repository: Path) -> Callable[[np.ndarray], np.ndarray]:
    compiled = ov.Core().compile_model(
        str(repository / "openvino_mlp" / "1" / "model.xml"), "CPU", OV_PROPERTIES
    )
    request = compiled.create_infer_request()
    return lambda x: request.infer({"X": x})[compiled.output("Y")].copy()


# model -> (input name, output name, reference builder)
MLP_MODELS: dict[str, tuple[str, str, Callable[[Path], Callable[[np.ndarray], np.ndarray]]]] = {
    "onnx_mlp": ("X", "Y", onnx_reference),
    "onnx_auto": ("X", "Y", onnx_reference),
    "torch_mlp": ("INPUT__0", "OUTPUT__0", torch_reference),
    "openvino_mlp": ("X", "Y", openvino_reference),
    "openvino_auto": ("X", "Y", openvino_reference),
}


def _inputs(rows: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((rows, fm.IN_FEATURES), dtype=np.float32)


# ---------------------------------------------------------------------- tests


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("model", sorted(MLP_MODELS))
def test_outputs_equal_the_frameworks(
    server: ServerHandle, repository: Path, model: str, protocol: str
) -> None:
    input_name, output_name, reference = MLP_MODELS[model]
    x = _inputs(3, seed=1)
    with client_for(server, protocol) as client:
        result = infer(client, protocol, model, {input_name: x})
    served = result.as_numpy(output_name)
    assert served.dtype == np.float32
    assert served.shape == (3, fm.OUT_FEATURES)
    np.testing.assert_allclose(served, reference(repository)(x), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("model", ["onnx_auto", "openvino_auto"])
def test_auto_complete_config(server: ServerHandle, model: str) -> None:
    client = httpclient.InferenceServerClient(server.http_url)
    config = client.get_model_config(model)
    assert config["max_batch_size"] == DEFAULT_MAX_BATCH_SIZE
    assert [(i["name"], i["data_type"], i["dims"]) for i in config["input"]] == [
        ("X", "TYPE_FP32", [fm.IN_FEATURES])
    ]
    assert [(o["name"], o["data_type"], o["dims"]) for o in config["output"]] == [
        ("Y", "TYPE_FP32", [fm.OUT_FEATURES])
    ]
    # A batching model without a scheduler gets the dynamic batcher.
    assert config["dynamic_batching"]["preferred_batch_size"] == [DEFAULT_MAX_BATCH_SIZE]
    expected_backend = "onnxruntime" if model.startswith("onnx") else "openvino"
    assert config["backend"] == expected_backend
    metadata = client.get_model_metadata(model)
    assert metadata["inputs"] == [{"name": "X", "datatype": "FP32", "shape": [-1, 16]}]


def test_partial_config_is_completed(server: ServerHandle) -> None:
    config = httpclient.InferenceServerClient(server.http_url).get_model_config("onnx_mlp")
    assert config["max_batch_size"] == DEFAULT_MAX_BATCH_SIZE
    assert config["dynamic_batching"]["max_queue_delay_microseconds"] == 500000
    assert [i["name"] for i in config["input"]] == ["X"]
    assert config["instance_group"][0]["count"] == 1


@pytest.mark.parametrize("model", ["onnx_mlp", "torch_mlp", "openvino_mlp"])
def test_dynamic_batching(server: ServerHandle, repository: Path, model: str) -> None:
    """Concurrent requests run as batches > 1, and every request still gets its own rows."""
    input_name, output_name, reference_builder = MLP_MODELS[model]
    reference = reference_builder(repository)
    client = httpclient.InferenceServerClient(server.http_url, concurrency=16)
    before = batch_counts(client, model)
    sizes = [1, 2, 1, 3, 1, 1, 2, 1]  # 12 rows: at most 8 per batch
    xs = [_inputs(rows, seed=100 + i) for i, rows in enumerate(sizes)]
    pending = []
    for x in xs:
        tensor = httpclient.InferInput(input_name, list(x.shape), "FP32")
        tensor.set_data_from_numpy(x)
        pending.append(client.async_infer(model, [tensor]))
    for x, request in zip(xs, pending, strict=True):
        served = request.get_result().as_numpy(output_name)
        np.testing.assert_allclose(served, reference(x), rtol=1e-5, atol=1e-5)
    after = batch_counts(client, model)
    formed = {size: after[size] - before.get(size, 0) for size in after}
    assert sum(size * count for size, count in formed.items()) == sum(sizes)
    assert max(size for size, count in formed.items() if count) > 1, formed
    client.close()


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_torch_naming_conventions(server: ServerHandle, protocol: str) -> None:
    lhs = np.array([[10, 20, 30], [1, 2, 3]], dtype=np.int64)
    rhs = np.array([[1, 2, 3], [4, 5, 6]], dtype=np.int64)
    with client_for(server, protocol) as client:
        result = infer(client, protocol, "torch_addsub", {"lhs": lhs, "rhs": rhs})
    np.testing.assert_array_equal(result.as_numpy("SUM__0"), lhs + rhs)
    np.testing.assert_array_equal(result.as_numpy("DIFF__1"), lhs - rhs)


def test_requested_output_subset(server: ServerHandle) -> None:
    client = httpclient.InferenceServerClient(server.http_url)
    lhs = np.ones((1, 3), dtype=np.int64)
    inputs = []
    for name in ("lhs", "rhs"):
        tensor = httpclient.InferInput(name, [1, 3], "INT64")
        tensor.set_data_from_numpy(lhs)
        inputs.append(tensor)
    result = client.infer(
        "torch_addsub", inputs, outputs=[httpclient.InferRequestedOutput("DIFF__1")]
    )
    np.testing.assert_array_equal(result.as_numpy("DIFF__1"), np.zeros((1, 3), np.int64))
    assert result.as_numpy("SUM__0") is None


def test_model_with_warmup_is_ready(server: ServerHandle) -> None:
    """Zero, random and file samples ran (a sample that cannot run fails the load: below)."""
    client = httpclient.InferenceServerClient(server.http_url)
    assert client.is_model_ready("onnx_mlp")
    config = client.get_model_config("onnx_mlp")
    assert [w["name"] for w in config["model_warmup"]] == ["zeros", "random", "file"]


def test_broken_warmup_fails_the_load(server: ServerHandle) -> None:
    client = httpclient.InferenceServerClient(server.http_url)
    with pytest.raises(InferenceServerException, match="warm up") as failure:
        client.load_model("onnx_warmup_broken")
    assert "wrong_dims" in str(failure.value)
    assert not client.is_model_ready("onnx_warmup_broken")
    assert client.is_model_ready("onnx_mlp")  # the rest keeps serving


def test_tensorrt_without_gpu_fails_clearly(server: ServerHandle) -> None:
    client = httpclient.InferenceServerClient(server.http_url)
    with pytest.raises(InferenceServerException) as failure:
        client.load_model("trt_model")
    message = str(failure.value)
    # Without TensorRT installed: the extra to install; with it but no GPU: the reason.
    assert "pip install pytriton-core[gpu]" in message or "GPU" in message, message


def test_concurrent_requests_across_backends(server: ServerHandle, repository: Path) -> None:
    """Every backend serves at once, each request answered with its own rows."""
    references = {m: MLP_MODELS[m][2](repository) for m in ("onnx_mlp", "torch_mlp")}

    def call(index: int) -> None:
        model = ("onnx_mlp", "torch_mlp")[index % 2]
        input_name, output_name, _ = MLP_MODELS[model]
        x = _inputs(1 + index % 3, seed=500 + index)
        client = httpclient.InferenceServerClient(server.http_url)
        tensor = httpclient.InferInput(input_name, list(x.shape), "FP32")
        tensor.set_data_from_numpy(x)
        served = client.infer(model, [tensor]).as_numpy(output_name)
        np.testing.assert_allclose(served, references[model](x), rtol=1e-5, atol=1e-5)

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        list(pool.map(call, range(24)))


def test_memory_usage_where_the_backend_can_tell(server: ServerHandle, repository: Path) -> None:
    """PyTorch reports its module's parameter and buffer bytes per instance device, in the
    statistics' memory_usage; ONNX Runtime cannot tell and reports none (docs/metrics.md)."""
    module = torch.jit.load(str(repository / "torch_mlp" / "1" / "model.pt"))
    weights = sum(t.untyped_storage().nbytes() for t in (*module.parameters(), *module.buffers()))
    client = httpclient.InferenceServerClient(server.http_url)
    (torch_stats,) = client.get_inference_statistics("torch_mlp")["model_stats"]
    # The model has one KIND_CPU instance.
    assert torch_stats["memory_usage"] == [{"type": "CPU", "id": 0, "byte_size": weights}]
    (onnx_stats,) = client.get_inference_statistics("onnx_mlp")["model_stats"]
    assert onnx_stats["memory_usage"] == []
    import tritonclient.grpc as grpcclient

    grpc_client = grpcclient.InferenceServerClient(server.grpc_url)
    answer = grpc_client.get_inference_statistics("torch_mlp", as_json=True)
    # (protobuf's JSON leaves out the zero device id)
    assert answer["model_stats"][0]["memory_usage"] == [{"type": "CPU", "byte_size": str(weights)}]
