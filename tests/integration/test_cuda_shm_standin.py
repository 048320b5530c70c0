"""CUDA shared memory through the real clients, on a CPU, with a stand-in for the GPU.

The server runs with tests/integration/cuda_standin on its PYTHONPATH: a ``cupy`` that plays
one CUDA device whose memory is POSIX shared memory (an "IPC handle" names the object). The
clients are the real tritonclient HTTP and gRPC clients; the client's "device buffer" is a
tritonclient.utils.shared_memory region, its raw handle the object's name. So what runs here
is everything of the server's CUDA shared-memory path except the driver calls: registration
(base64 handle over HTTP, bytes over gRPC), status with device ids, unregistration, every
datatype in and out of CUDA regions, input ranges left on the "device" until the (CPU)
backend reads them, one logged host copy per input, outputs written into the region, a
Python model given GPU inputs (``FORCE_CPU_ONLY_INPUT_TENSORS: "no"``) returning GPU outputs,
and the errors. tests/gpu/test_cuda_shm.py runs the same against real CUDA on a GPU machine.
"""

from __future__ import annotations

import base64
import os
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
import tritonclient.utils.shared_memory as shm
from harness import (
    DTYPE_CASES,
    HOST_COPY_LOG,
    PYTHON_GPU_INPUTS_CONFIG,
    TEST_MODELS_REPOSITORY,
    ServerHandle,
    cuda_shm_round_trip,
    run_pytriton_server,
    wire_bytes,
)
from tritonclient.utils import InferenceServerException

STANDIN = Path(__file__).resolve().parent / "cuda_standin"
PROTOCOLS = ("http", "grpc")


# GPU inputs (FORCE_CPU_ONLY_INPUT_TENSORS "no") returned as they are: GPU outputs.
PYTHON_GPU_MODEL = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            tensor = pb_utils.get_input_tensor_by_name(request, "INPUT0")
            if tensor.is_cpu() or tensor.__dlpack_device__() != (2, 0):
                raise pb_utils.TritonModelException(f"expected a GPU input, got {tensor!r}")
            output = pb_utils.Tensor.from_dlpack("OUTPUT0", tensor)
            responses.append(pb_utils.InferenceResponse(output_tensors=[output]))
        return responses
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerHandle]:
    repository = tmp_path_factory.mktemp("cuda-standin-models")
    for datatype in DTYPE_CASES:
        name = f"dtype_{datatype.lower()}"
        shutil.copytree(
            TEST_MODELS_REPOSITORY / name,
            repository / name,
            ignore=shutil.ignore_patterns("__pycache__"),
        )
    (repository / "python_gpu" / "1").mkdir(parents=True)
    (repository / "python_gpu" / "config.pbtxt").write_text(PYTHON_GPU_INPUTS_CONFIG)
    (repository / "python_gpu" / "1" / "model.py").write_text(PYTHON_GPU_MODEL)
    path = os.pathsep.join(p for p in (str(STANDIN), os.environ.get("PYTHONPATH", "")) if p)
    with run_pytriton_server(
        repository, "--allow-client-shm=true", "--log-verbose=1", env={"PYTHONPATH": path}
    ) as handle:
        yield handle


class StandinDeviceBuffer:
    """The client's "device buffer": a POSIX shared-memory object named by its handle."""

    def __init__(self, byte_size: int) -> None:
        self.key = f"/cuda_standin_{uuid.uuid4().hex[:12]}"
        self.byte_size = byte_size
        self._handle = shm.create_shared_memory_region(self.key, self.key, byte_size)
        # As tritonclient.utils.cuda_shared_memory.get_raw_handle gives it: base64.
        self.raw_handle = base64.b64encode(self.key.encode().ljust(64, b"\0"))

    def write(self, data: bytes) -> None:
        shm.set_shared_memory_region(self._handle, [np.frombuffer(data, np.uint8)])

    def read(self, nbytes: int, offset: int = 0) -> bytes:
        array = shm.get_contents_as_numpy(self._handle, np.uint8, [nbytes], offset=offset)
        return bytes(array.tobytes())

    def close(self) -> None:
        shm.destroy_shared_memory_region(self._handle)


@pytest.fixture(params=PROTOCOLS)
def client(server: ServerHandle, request: pytest.FixtureRequest) -> Iterator[tuple[Any, Any]]:
    mod = httpclient if request.param == "http" else grpcclient
    url = server.http_url if request.param == "http" else server.grpc_url
    connection = mod.InferenceServerClient(url)
    yield mod, connection
    connection.unregister_cuda_shared_memory()
    connection.close()


def test_the_server_sees_the_standin_gpu(server: ServerHandle) -> None:
    assert "pinned memory pool: " in server.log(), server.log()


@pytest.mark.parametrize("datatype", list(DTYPE_CASES))
def test_every_datatype_in_and_out_of_cuda_regions(
    server: ServerHandle, client: tuple[Any, Any], datatype: str
) -> None:
    mod, connection = client
    array = DTYPE_CASES[datatype]
    data = wire_bytes(array)
    inp, out = StandinDeviceBuffer(len(data)), StandinDeviceBuffer(len(data))
    copies = server.log().count(HOST_COPY_LOG)
    try:
        inp.write(data)
        cuda_shm_round_trip(mod, connection, f"dtype_{datatype.lower()}", datatype, array, inp, out)
        # A Python model reads its input on the host: one device -> host copy, logged
        # (BYTES inputs are read on the host from the start).
        expected_copies = copies + (0 if datatype == "BYTES" else 1)
        assert server.log().count(HOST_COPY_LOG) == expected_copies
    finally:
        inp.close()
        out.close()


def test_outputs_over_the_socket_and_offsets(client: tuple[Any, Any]) -> None:
    mod, connection = client
    values = np.arange(8, dtype=np.float32).reshape(2, 4)
    buffer = StandinDeviceBuffer(64 + values.nbytes)
    try:
        buffer.write(bytes(64) + values.tobytes())
        connection.register_cuda_shared_memory("cuda_big", buffer.raw_handle, 0, buffer.byte_size)
        tensor = mod.InferInput("INPUT0", [2, 4], "FP32")
        tensor.set_shared_memory("cuda_big", values.nbytes, offset=64)
        answer = connection.infer("dtype_fp32", [tensor])
        assert answer.as_numpy("OUTPUT0").tolist() == values.tolist()
        # The output into the same region, at the start.
        output = mod.InferRequestedOutput("OUTPUT0")
        output.set_shared_memory("cuda_big", values.nbytes, offset=0)
        connection.infer("dtype_fp32", [tensor], outputs=[output])
        assert buffer.read(values.nbytes) == values.tobytes()
    finally:
        buffer.close()


def test_bad_cuda_input_is_refused_and_the_server_keeps_serving(
    client: tuple[Any, Any],
) -> None:
    mod, connection = client
    buffer = StandinDeviceBuffer(64)
    try:
        connection.register_cuda_shared_memory("cuda_small", buffer.raw_handle, 0, 64)
        tensor = mod.InferInput("INPUT0", [1, 4], "FP32")
        tensor.set_shared_memory("cuda_small", 16, offset=56)
        with pytest.raises(InferenceServerException) as info:
            connection.infer("dtype_fp32", [tensor])
        assert info.value.message() == (
            "Invalid offset + byte size for shared memory region: 'cuda_small'"
        )
        # (a fresh input: tritonclient keeps an earlier non-zero offset)
        tensor = mod.InferInput("INPUT0", [1, 4], "FP32")
        tensor.set_shared_memory("cuda_small", 12)  # 3 floats' worth for a [1, 4] input
        with pytest.raises(InferenceServerException) as info:
            connection.infer("dtype_fp32", [tensor])
        assert "input byte size mismatch for input 'INPUT0' for model 'dtype_fp32'" in str(
            info.value.message()
        )
        output = mod.InferRequestedOutput("OUTPUT0")
        output.set_shared_memory("cuda_small", 8)  # too small for the 16-byte output
        tensor.set_shared_memory("cuda_small", 16)
        with pytest.raises(InferenceServerException) as info:
            connection.infer("dtype_fp32", [tensor], outputs=[output])
        assert "should be at least 16 bytes to hold the results" in str(info.value.message())
        with pytest.raises(InferenceServerException) as info:
            connection.register_cuda_shared_memory("cuda_small", buffer.raw_handle, 0, 64)
        assert info.value.message() == "shared memory region 'cuda_small' already in manager"
        missing = base64.b64encode(b"/cuda_standin_missing".ljust(64, b"\0"))
        with pytest.raises(InferenceServerException) as info:
            connection.register_cuda_shared_memory("cuda_gone", missing, 0, 64)
        assert "cannot open the CUDA IPC handle on device 0" in str(info.value.message())
        # Still serving.
        tensor.set_shared_memory("cuda_small", 16)
        answer = connection.infer("dtype_fp32", [tensor])
        assert answer.as_numpy("OUTPUT0").shape == (1, 4)
    finally:
        connection.unregister_cuda_shared_memory()
        buffer.close()


def test_a_python_model_gets_gpu_inputs_and_returns_gpu_outputs(
    server: ServerHandle, client: tuple[Any, Any]
) -> None:
    """FORCE_CPU_ONLY_INPUT_TENSORS "no": the model sees a GPU tensor over the client's
    region and returns it; into a CUDA region it goes device to device (no logged host copy),
    over the socket it is copied to the host once."""
    mod, connection = client
    values = np.arange(32, dtype=np.float32) - 7.5
    inp, out = StandinDeviceBuffer(values.nbytes), StandinDeviceBuffer(values.nbytes)
    try:
        inp.write(values.tobytes())
        connection.register_cuda_shared_memory("gpu_in", inp.raw_handle, 0, values.nbytes)
        connection.register_cuda_shared_memory("gpu_out", out.raw_handle, 0, values.nbytes)
        tensor = mod.InferInput("INPUT0", [values.size], "FP32")
        tensor.set_shared_memory("gpu_in", values.nbytes)
        output = mod.InferRequestedOutput("OUTPUT0")
        output.set_shared_memory("gpu_out", values.nbytes)
        copies = server.log().count(HOST_COPY_LOG)
        connection.infer("python_gpu", [tensor], outputs=[output])
        assert out.read(values.nbytes) == values.tobytes()
        assert server.log().count(HOST_COPY_LOG) == copies
        answer = connection.infer("python_gpu", [tensor])
        assert answer.as_numpy("OUTPUT0").tolist() == values.tolist()
        assert server.log().count(HOST_COPY_LOG) == copies + 1
    finally:
        inp.close()
        out.close()
