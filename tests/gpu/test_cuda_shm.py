"""CUDA shared memory end to end on a GPU machine, over HTTP and gRPC.

The client side is ``tritonclient.utils.cuda_shared_memory`` (it needs ``cuda-python``);
where that is missing, the same device regions are made with cupy
(``cudaIpcGetMemHandle``), which the server needs anyway. The server opens each handle
(``cudaIpcOpenMemHandle`` through cupy) and, its backends being CPU ones, copies inputs
device -> host and outputs host -> device once each through its staging pool (pinned
memory when a GPU is usable, which the server's log says).

Skips, with the reason, without a visible NVIDIA GPU or without cupy; tools/gpu-checks.sh
runs it (it runs all of tests/gpu) on a GPU machine.
"""

from __future__ import annotations

import base64
import importlib.util
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "integration"))

from harness import TEST_MODELS_REPOSITORY, ServerHandle, run_pytriton_server


def _visible_gpus() -> int:
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return 0
    result = subprocess.run([smi, "-L"], capture_output=True, text=True, check=False)
    return sum(1 for line in result.stdout.splitlines() if line.startswith("GPU "))


if _visible_gpus() == 0:
    pytest.skip(
        "no NVIDIA GPU visible (nvidia-smi lists none): the CUDA shared-memory tests run on a "
        "GPU machine through tools/gpu-checks.sh",
        allow_module_level=True,
    )
if importlib.util.find_spec("cupy") is None:
    pytest.skip(
        "cupy is not installed: the server opens CUDA IPC handles through it (pip install "
        "'pytriton-core[gpu]' or tools/gpu-checks.sh)",
        allow_module_level=True,
    )

import cupy  # noqa: E402 - only once a GPU and cupy are known to be there
import tritonclient.grpc as grpcclient  # noqa: E402
import tritonclient.http as httpclient  # noqa: E402
from tritonclient.utils import InferenceServerException, serialize_byte_tensor  # noqa: E402

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


def _regions(mod: Any, connection: Any) -> list[dict[str, Any]]:
    if mod is httpclient:
        return list(connection.get_cuda_shared_memory_status())
    answer = connection.get_cuda_shared_memory_status(as_json=True).get("regions", {})
    return [
        {
            "name": r["name"],
            "device_id": int(r.get("device_id", 0)),
            "byte_size": int(r["byte_size"]),
        }
        for _, r in sorted(answer.items())
    ]


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
    data = bytes(serialize_byte_tensor(array).item()) if datatype == "BYTES" else array.tobytes()
    inp = DeviceRegion("cuda_in", len(data))
    out = DeviceRegion("cuda_out", len(data))
    try:
        inp.write(data)
        connection.register_cuda_shared_memory("cuda_in", inp.raw_handle, 0, len(data))
        connection.register_cuda_shared_memory("cuda_out", out.raw_handle, 0, len(data))
        assert _regions(mod, connection) == [
            {"name": "cuda_in", "device_id": 0, "byte_size": len(data)},
            {"name": "cuda_out", "device_id": 0, "byte_size": len(data)},
        ]
        tensor = mod.InferInput("INPUT0", list(array.shape), datatype)
        tensor.set_shared_memory("cuda_in", len(data))
        output = mod.InferRequestedOutput("OUTPUT0")
        output.set_shared_memory("cuda_out", len(data))
        connection.infer(model, [tensor], outputs=[output])
        assert out.read(len(data)) == data
        connection.unregister_cuda_shared_memory("cuda_in")
        assert [r["name"] for r in _regions(mod, connection)] == ["cuda_out"]
        connection.unregister_cuda_shared_memory()
        assert _regions(mod, connection) == []
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
