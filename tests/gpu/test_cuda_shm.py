"""CUDA shared memory end to end on a GPU machine, over HTTP and gRPC.

The client side is ``tritonclient.utils.cuda_shared_memory`` (it needs ``cuda-python``);
where that is missing, the same device regions are made with cupy
(``cudaIpcGetMemHandle``), which the server needs anyway. The server opens each handle
(``cudaIpcOpenMemHandle`` through cupy). CPU backends (the Python identity models) get each
input copied device -> host once and each output host -> device once, through the staging
pool (pinned memory when a GPU is usable, which the server's log says); GPU backends
(onnxruntime's CUDA provider, torch on CUDA) read the regions in place, gather batches on the
device and write their outputs device-to-device, which the server's verbose log shows by
never saying "device tensor copied to the host".

Skips, with the reason, without a visible NVIDIA GPU or without cupy; tools/gpu-checks.sh
runs it (it runs all of tests/gpu) on a GPU machine.
"""

from __future__ import annotations

import base64
import importlib.util
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "integration"))

import framework_models as fm
from gpu_support import skip_module_without_gpu
from harness import (
    HOST_COPY_LOG,
    PYTHON_GPU_INPUTS_CONFIG,
    TEST_MODELS_REPOSITORY,
    ServerHandle,
    cuda_shm_round_trip,
    find_perf_analyzer,
    run_pytriton_server,
    wire_bytes,
)

skip_module_without_gpu("the CUDA shared-memory tests")
if importlib.util.find_spec("cupy") is None:
    pytest.skip(
        "cupy is not installed: the server opens CUDA IPC handles through it (pip install "
        "'pytriton-core[gpu]' or tools/gpu-checks.sh)",
        allow_module_level=True,
    )

import concurrent.futures  # noqa: E402

import cupy  # noqa: E402 - only once a GPU and cupy are known to be there
import tritonclient.grpc as grpcclient  # noqa: E402
import tritonclient.http as httpclient  # noqa: E402
from tritonclient.utils import InferenceServerException  # noqa: E402

try:
    import tritonclient.utils.cuda_shared_memory as cudashm
except Exception:  # cuda-python missing: regions come from cupy instead
    cudashm = None

PROTOCOLS = ("http", "grpc")


class DeviceRegion:
    """A client's device buffer and its IPC handle (base64, as tritonclient passes it)."""

    def __init__(self, name: str, byte_size: int, device_id: int = 0) -> None:
        self.name = name
        self.byte_size = byte_size
        self.device_id = device_id
        if cudashm is not None:
            self._handle = cudashm.create_shared_memory_region(name, byte_size, device_id)
            self.raw_handle: bytes = cudashm.get_raw_handle(self._handle)
        else:
            with cupy.cuda.Device(device_id):
                # Its own cudaMalloc (not a pool's chunk): an IPC handle opens at the start
                # of the allocation it names.
                self._memory = cupy.cuda.MemoryPointer(cupy.cuda.Memory(byte_size), 0)
                handle = cupy.cuda.runtime.ipcGetMemHandle(self._memory.ptr)
            self.raw_handle = base64.b64encode(bytes(handle))

    def write(self, data: bytes) -> None:
        host = np.frombuffer(data, np.uint8)
        if cudashm is not None:
            cudashm.set_shared_memory_region(self._handle, [host])
            return
        with cupy.cuda.Device(self.device_id):
            self._memory.copy_from_host(host.ctypes.data, host.nbytes)

    def read(self, nbytes: int) -> bytes:
        if cudashm is not None:
            return bytes(cudashm.get_contents_as_numpy(self._handle, np.uint8, [nbytes]).tobytes())
        host = np.empty(nbytes, np.uint8)
        with cupy.cuda.Device(self.device_id):
            self._memory.copy_to_host(host.ctypes.data, nbytes)
        return host.tobytes()

    def close(self) -> None:
        if cudashm is not None:
            cudashm.destroy_shared_memory_region(self._handle)


@pytest.fixture(scope="module")
def server() -> Iterator[ServerHandle]:
    with run_pytriton_server(TEST_MODELS_REPOSITORY, "--allow-client-shm=true") as handle:
        yield handle


@pytest.fixture(params=PROTOCOLS)
def client(server: ServerHandle, request: pytest.FixtureRequest) -> Iterator[Any]:
    mod = httpclient if request.param == "http" else grpcclient
    url = server.http_url if request.param == "http" else server.grpc_url
    connection = mod.InferenceServerClient(url)
    yield mod, connection
    connection.unregister_cuda_shared_memory()
    connection.close()


def test_the_server_stages_through_pinned_memory(server: ServerHandle) -> None:
    assert "pinned memory pool: " in server.log(), server.log()


@pytest.mark.parametrize(
    ("model", "datatype", "array"),
    [
        (
            "dtype_fp32",
            "FP32",
            np.random.default_rng(3).standard_normal((1, 1 << 18)).astype(np.float32),
        ),
        ("dtype_int64", "INT64", np.array([[-(2**63), 0, 2**63 - 1]], np.int64)),
        ("dtype_bytes", "BYTES", np.array([[b"", b"\x00\xff", "snow \u2603".encode()]], object)),
    ],
)
def test_round_trip_through_cuda_shared_memory(
    client: tuple[Any, Any], model: str, datatype: str, array: np.ndarray
) -> None:
    mod, connection = client
    data = wire_bytes(array)
    inp = DeviceRegion("cuda_in", len(data))
    out = DeviceRegion("cuda_out", len(data))
    try:
        inp.write(data)
        cuda_shm_round_trip(mod, connection, model, datatype, array, inp, out)
    finally:
        inp.close()
        out.close()


def test_ranges_outside_a_cuda_region_are_refused(client: tuple[Any, Any]) -> None:
    mod, connection = client
    region = DeviceRegion("cuda_small", 64)
    try:
        connection.register_cuda_shared_memory("cuda_small", region.raw_handle, 0, 64)
        tensor = mod.InferInput("INPUT0", [1, 4], "FP32")
        tensor.set_shared_memory("cuda_small", 16, offset=56)
        with pytest.raises(InferenceServerException) as info:
            connection.infer("dtype_fp32", [tensor])
        assert info.value.message() == (
            "Invalid offset + byte size for shared memory region: 'cuda_small'"
        )
        with pytest.raises(InferenceServerException) as info:
            connection.register_cuda_shared_memory("cuda_small", region.raw_handle, 0, 64)
        assert info.value.message() == "shared memory region 'cuda_small' already in manager"
    finally:
        connection.unregister_cuda_shared_memory()
        region.close()


# ----------------------------------------------------------------- GPU backends, in place

ROWS = 3  # rows per request
GPU_MODELS = {  # name -> (backend, input, output, model file)
    "onnx_gpu": ("onnxruntime", "X", "Y", "model.onnx"),
    "torch_gpu": ("pytorch", "INPUT__0", "OUTPUT__0", "model.pt"),
}


def _gpu_frameworks() -> list[str]:
    """The GPU models this machine can serve (a framework without CUDA is left out)."""
    available = []
    try:
        import onnxruntime as ort

        if "CUDAExecutionProvider" in ort.get_available_providers():
            available.append("onnx_gpu")
    except ImportError:
        pass
    try:
        import torch

        if torch.cuda.is_available():
            available.append("torch_gpu")
    except ImportError:
        pass
    return available


def _gpu_model_config(name: str) -> str:
    backend, input_name, output_name, _ = GPU_MODELS[name]
    return f"""
name: "{name}"
backend: "{backend}"
max_batch_size: 8
input [ {{ name: "{input_name}", data_type: TYPE_FP32, dims: [ {fm.IN_FEATURES} ] }} ]
output [ {{ name: "{output_name}", data_type: TYPE_FP32, dims: [ {fm.OUT_FEATURES} ] }} ]
instance_group [ {{ kind: KIND_GPU, count: 1 }} ]
dynamic_batching {{ max_queue_delay_microseconds: 50000 }}
"""


# A Python model that takes its input on the GPU and returns a GPU tensor (cupy, DLPack).
PYTHON_GPU_MODEL = """
import cupy
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            tensor = pb_utils.get_input_tensor_by_name(request, "INPUT0")
            if tensor.is_cpu():
                raise pb_utils.TritonModelException("expected the input on the GPU")
            doubled = cupy.from_dlpack(tensor) * 2
            output = pb_utils.Tensor.from_dlpack("OUTPUT0", doubled)
            responses.append(pb_utils.InferenceResponse(output_tensors=[output]))
        return responses
"""


@pytest.fixture(scope="module")
def gpu_models() -> list[str]:
    """The framework models served (each test of one skips when it is not)."""
    return _gpu_frameworks()


@pytest.fixture(scope="module")
def gpu_server(
    gpu_models: list[str], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerHandle]:
    repository = tmp_path_factory.mktemp("gpu_repository")
    for name in gpu_models:
        model_dir = repository / name
        (model_dir / "1").mkdir(parents=True)
        (model_dir / "config.pbtxt").write_text(_gpu_model_config(name))
        if name == "onnx_gpu":
            fm.write_onnx_mlp(model_dir / "1" / "model.onnx")
        else:
            fm.write_torch_mlp(model_dir / "1" / "model.pt")
    # The Python identity model beside them: a CPU backend, which must copy to the host.
    shutil.copytree(TEST_MODELS_REPOSITORY / "dtype_fp32", repository / "dtype_fp32")
    (repository / "python_gpu" / "1").mkdir(parents=True)
    (repository / "python_gpu" / "config.pbtxt").write_text(PYTHON_GPU_INPUTS_CONFIG)
    (repository / "python_gpu" / "1" / "model.py").write_text(PYTHON_GPU_MODEL)
    with run_pytriton_server(
        repository,
        "--allow-client-shm=true",
        "--log-verbose=1",
        "--cuda-memory-pool-byte-size=0:16777216",
        timeout=180,
    ) as handle:
        yield handle


def _reference(name: str, x: np.ndarray) -> np.ndarray:
    if name == "onnx_gpu":
        import onnxruntime as ort

        path = fm.write_onnx_mlp(Path(tempfile.mkdtemp()) / "reference.onnx")
        session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        return np.asarray(session.run(["Y"], {"X": x})[0])
    import torch

    with torch.inference_mode():
        return fm.torch_mlp()(torch.from_numpy(x.copy())).numpy()


def _host_copies(server: ServerHandle) -> int:
    return server.log().count(HOST_COPY_LOG)


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("model", list(GPU_MODELS))
def test_gpu_models_use_cuda_regions_in_place(
    gpu_server: ServerHandle, gpu_models: list[str], model: str, protocol: str
) -> None:
    if model not in gpu_models:
        pytest.skip(f"{model}: its framework has no CUDA here")
    _, input_name, output_name, _ = GPU_MODELS[model]
    mod = httpclient if protocol == "http" else grpcclient
    connection = mod.InferenceServerClient(
        gpu_server.http_url if protocol == "http" else gpu_server.grpc_url
    )
    x = np.random.default_rng(11).standard_normal((ROWS, fm.IN_FEATURES)).astype(np.float32)
    expected = _reference(model, x)
    inp = DeviceRegion("gpu_in", x.nbytes)
    out = DeviceRegion("gpu_out", expected.nbytes)
    copies_before = _host_copies(gpu_server)
    try:
        inp.write(x.tobytes())
        connection.register_cuda_shared_memory("gpu_in", inp.raw_handle, 0, x.nbytes)
        connection.register_cuda_shared_memory("gpu_out", out.raw_handle, 0, expected.nbytes)
        tensor = mod.InferInput(input_name, [ROWS, fm.IN_FEATURES], "FP32")
        tensor.set_shared_memory("gpu_in", x.nbytes)
        requested = mod.InferRequestedOutput(output_name)
        requested.set_shared_memory("gpu_out", expected.nbytes)
        connection.infer(model, [tensor], outputs=[requested])
        served = np.frombuffer(out.read(expected.nbytes), np.float32).reshape(expected.shape)
        np.testing.assert_allclose(served, expected, rtol=1e-4, atol=1e-4)
        assert _host_copies(gpu_server) == copies_before, gpu_server.log()[-4000:]

        # The same output to the socket instead: one device -> host copy, right values.
        answer = connection.infer(model, [tensor], outputs=[mod.InferRequestedOutput(output_name)])
        np.testing.assert_allclose(answer.as_numpy(output_name), expected, rtol=1e-4, atol=1e-4)
    finally:
        connection.unregister_cuda_shared_memory()
        connection.close()
        inp.close()
        out.close()


def test_a_cpu_backend_copies_cuda_inputs_to_the_host_once(gpu_server: ServerHandle) -> None:
    """The check above can fail: a CPU backend's input shows up in the log."""
    connection = httpclient.InferenceServerClient(gpu_server.http_url)
    data = np.arange(16, dtype=np.float32).reshape(1, 16)
    region = DeviceRegion("cpu_in", data.nbytes)
    before = _host_copies(gpu_server)
    try:
        region.write(data.tobytes())
        connection.register_cuda_shared_memory("cpu_in", region.raw_handle, 0, data.nbytes)
        tensor = httpclient.InferInput("INPUT0", [1, 16], "FP32")
        tensor.set_shared_memory("cpu_in", data.nbytes)
        answer = connection.infer("dtype_fp32", [tensor])
        assert answer.as_numpy("OUTPUT0").tolist() == data.tolist()
        assert _host_copies(gpu_server) == before + 1
    finally:
        connection.unregister_cuda_shared_memory()
        connection.close()
        region.close()


@pytest.mark.parametrize("model", list(GPU_MODELS))
def test_batches_of_cuda_inputs_gather_on_the_device(
    gpu_server: ServerHandle, gpu_models: list[str], model: str
) -> None:
    """Concurrent requests, each with its input and output in one shared region, batched
    by the dynamic batcher (50 ms window) and gathered device-to-device."""
    if model not in gpu_models:
        pytest.skip(f"{model}: its framework has no CUDA here")
    _, input_name, output_name, _ = GPU_MODELS[model]
    count = 4
    xs = np.random.default_rng(5).standard_normal((count, ROWS, fm.IN_FEATURES))
    xs = xs.astype(np.float32)
    expected = [_reference(model, x) for x in xs]
    in_bytes, out_bytes = xs[0].nbytes, expected[0].nbytes
    inp = DeviceRegion("batch_in", in_bytes * count)
    out = DeviceRegion("batch_out", out_bytes * count)
    setup = httpclient.InferenceServerClient(gpu_server.http_url)
    before = setup.get_inference_statistics(model)["model_stats"][0]
    copies_before = _host_copies(gpu_server)
    try:
        inp.write(xs.tobytes())
        setup.register_cuda_shared_memory("batch_in", inp.raw_handle, 0, in_bytes * count)
        setup.register_cuda_shared_memory("batch_out", out.raw_handle, 0, out_bytes * count)

        def one(index: int) -> None:
            client = httpclient.InferenceServerClient(gpu_server.http_url)
            tensor = httpclient.InferInput(input_name, [ROWS, fm.IN_FEATURES], "FP32")
            tensor.set_shared_memory("batch_in", in_bytes, offset=index * in_bytes)
            requested = httpclient.InferRequestedOutput(output_name)
            requested.set_shared_memory("batch_out", out_bytes, offset=index * out_bytes)
            client.infer(model, [tensor], outputs=[requested])
            client.close()

        with concurrent.futures.ThreadPoolExecutor(count) as pool:
            list(pool.map(one, range(count)))
        served = np.frombuffer(out.read(out_bytes * count), np.float32)
        for index, want in enumerate(expected):
            got = served[index * want.size : (index + 1) * want.size].reshape(want.shape)
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
        after = setup.get_inference_statistics(model)["model_stats"][0]
        inferences = int(after["inference_count"]) - int(before["inference_count"])
        executions = int(after["execution_count"]) - int(before["execution_count"])
        assert inferences == count * ROWS
        assert executions < count  # some requests shared a batch
        assert _host_copies(gpu_server) == copies_before
    finally:
        setup.unregister_cuda_shared_memory()
        setup.close()
        inp.close()
        out.close()


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_python_model_gets_and_returns_gpu_tensors(
    gpu_server: ServerHandle, protocol: str
) -> None:
    """FORCE_CPU_ONLY_INPUT_TENSORS "no": the input is the client's region, on the GPU; the
    model's cupy output goes device to device into the output region."""
    mod = httpclient if protocol == "http" else grpcclient
    connection = mod.InferenceServerClient(
        gpu_server.http_url if protocol == "http" else gpu_server.grpc_url
    )
    x = np.arange(1024, dtype=np.float32)
    inp, out = DeviceRegion("py_in", x.nbytes), DeviceRegion("py_out", x.nbytes)
    before = _host_copies(gpu_server)
    try:
        inp.write(x.tobytes())
        connection.register_cuda_shared_memory("py_in", inp.raw_handle, 0, x.nbytes)
        connection.register_cuda_shared_memory("py_out", out.raw_handle, 0, x.nbytes)
        tensor = mod.InferInput("INPUT0", [x.size], "FP32")
        tensor.set_shared_memory("py_in", x.nbytes)
        requested = mod.InferRequestedOutput("OUTPUT0")
        requested.set_shared_memory("py_out", x.nbytes)
        connection.infer("python_gpu", [tensor], outputs=[requested])
        assert np.frombuffer(out.read(x.nbytes), np.float32).tolist() == (x * 2).tolist()
        assert _host_copies(gpu_server) == before
        # Over the socket the GPU output is copied to the host once.
        answer = connection.infer("python_gpu", [tensor])
        assert answer.as_numpy("OUTPUT0").tolist() == (x * 2).tolist()
        assert _host_copies(gpu_server) == before + 1
    finally:
        connection.unregister_cuda_shared_memory()
        connection.close()
        inp.close()
        out.close()


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("model", ["dtype_fp32", *GPU_MODELS])
def test_perf_analyzer_with_cuda_shared_memory(
    gpu_server: ServerHandle, gpu_models: list[str], model: str, protocol: str
) -> None:
    """``perf_analyzer --shared-memory cuda`` against a CPU backend and the GPU models."""
    perf_analyzer = find_perf_analyzer()
    if perf_analyzer is None:
        pytest.skip("perf_analyzer not found: run tools/install-perf-analyzer.sh")
    if model != "dtype_fp32" and model not in gpu_models:
        pytest.skip(f"{model}: its framework has no CUDA here")
    input_name = "INPUT0" if model == "dtype_fp32" else GPU_MODELS[model][1]
    shape = "16" if model == "dtype_fp32" else str(fm.IN_FEATURES)
    url = gpu_server.http_url if protocol == "http" else gpu_server.grpc_url
    command = [
        str(perf_analyzer),
        *("-m", model, "-u", url, "-i", protocol, "--shape", f"{input_name}:{shape}"),
        *("--shared-memory", "cuda", "--output-shared-memory-size", "4096"),
        *("--measurement-mode", "count_windows", "--measurement-request-count", "200"),
        *("--concurrency-range", "1:4:3", "-s", "1000", "-r", "10"),
    ]
    result = subprocess.run(command, capture_output=True, text=True, timeout=300, check=False)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert "Concurrency: 4, throughput:" in output, output
