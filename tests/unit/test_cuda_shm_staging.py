"""The CUDA shared-memory, device-batching and pinned-staging logic, against a stand-in for cupy.

No GPU is needed: a fake ``cupy`` module (device memory = host ctypes buffers, IPC handles =
keys into them, memcpy = memmove, pinned memory = bytearrays, a memory pool = counted host
buffers) stands in for the calls the server makes. What it checks is the server's side:
handles opened and closed once (after the last request holding the region), ranges checked,
inputs left on the device until a host consumer reads them (then one staged copy), batches of
device inputs gathered on the instance's device within the pool's limit, device outputs
written to regions without a host copy, the pinned pool's accounting and its pageable
fallback. tests/gpu/ runs the real thing.
"""

from __future__ import annotations

import ctypes
import gc
import importlib.machinery
import sys
import types as pytypes
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from pytriton_core import types
from pytriton_core.backends.batching import BatchRunner
from pytriton_core.config import ModelSpec, config_from_json
from pytriton_core.errors import InternalError, InvalidArgumentError, ServerError
from pytriton_core.inference.request import InferenceRequest, RequestedOutput
from pytriton_core.inference.tensor import DeviceTensor, Tensor
from pytriton_core.memory import SharedMemoryManager, ShmReference, StagingPool, cuda_shm
from pytriton_core.memory.device import DeviceArray, DevicePools

FP32 = types.BY_WIRE_NAME["FP32"]


class FakeCupy(pytypes.ModuleType):
    """The few cupy calls the server makes, over host memory."""

    def __init__(self) -> None:
        super().__init__("cupy")
        self.__spec__ = importlib.machinery.ModuleSpec("cupy", None)
        self.device_memory: dict[bytes, Any] = {}  # handle -> ctypes buffer
        self.opened: list[int] = []
        self.closed: list[int] = []
        self.pinned_allocations = 0
        fake = self

        class Runtime:
            cudaIpcMemLazyEnablePeerAccess = 1

            @staticmethod
            def getDeviceCount() -> int:
                return 1

            @staticmethod
            def ipcOpenMemHandle(handle: bytes, flags: int) -> int:
                pointer = ctypes.addressof(fake.device_memory[handle])
                fake.opened.append(pointer)
                return pointer

            @staticmethod
            def ipcCloseMemHandle(pointer: int) -> None:
                fake.closed.append(pointer)

            @staticmethod
            def memcpy(dst: int, src: int, size: int, kind: int) -> None:
                ctypes.memmove(dst, src, size)

        class Device:
            def __init__(self, device_id: int) -> None:
                self.device_id = device_id

            def __enter__(self) -> Device:
                return self

            def __exit__(self, *exc: object) -> None:
                return None

        class PinnedMemoryPool:
            def malloc(self, nbytes: int) -> bytearray:
                fake.pinned_allocations += 1
                return bytearray(nbytes)

        class OutOfMemoryError(Exception):
            pass

        class Memory:  # a device allocation (cudaMalloc when made directly)
            def __init__(self, nbytes: int, pooled: bool = False) -> None:
                self.buffer = (ctypes.c_char * nbytes)()
                fake.own_allocations += not pooled

        class MemoryPointer:
            def __init__(self, memory: Memory, offset: int) -> None:
                self.mem = memory
                self.ptr = ctypes.addressof(memory.buffer) + offset

        class MemoryPool:
            def __init__(self) -> None:
                self.limit = 0
                self.used = 0

            def set_limit(self, size: int) -> None:
                self.limit = size

            def malloc(self, nbytes: int) -> MemoryPointer:
                if self.used + nbytes > self.limit:
                    raise OutOfMemoryError(f"{nbytes} bytes over the limit")
                self.used += nbytes
                return MemoryPointer(Memory(nbytes, pooled=True), 0)

            def used_bytes(self) -> int:
                return self.used

            def total_bytes(self) -> int:
                return self.used

        self.own_allocations = 0
        self.cuda = pytypes.SimpleNamespace(
            runtime=Runtime,
            Device=Device,
            PinnedMemoryPool=PinnedMemoryPool,
            MemoryPool=MemoryPool,
            Memory=Memory,
            MemoryPointer=MemoryPointer,
            memory=pytypes.SimpleNamespace(OutOfMemoryError=OutOfMemoryError),
        )

    def allocate(self, handle: bytes, data: bytes) -> Any:
        buffer = (ctypes.c_char * len(data)).from_buffer_copy(data)
        self.device_memory[handle] = buffer
        return buffer


@pytest.fixture
def cupy(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeCupy]:
    gc.collect()  # regions of earlier tests close against their own fake
    fake = FakeCupy()
    monkeypatch.setitem(sys.modules, "cupy", fake)
    cuda_shm.gpu_unavailable_reason.cache_clear()
    yield fake
    gc.collect()
    cuda_shm.gpu_unavailable_reason.cache_clear()


def _handle(tag: int) -> bytes:
    return bytes([tag]) * cuda_shm.IPC_HANDLE_SIZE


def test_round_trip_through_a_cuda_region(cupy: FakeCupy) -> None:
    manager = SharedMemoryManager(allow_client=True, pinned_pool_byte_size=1 << 20)
    assert manager.staging.memory_kind == "pinned"
    values = np.arange(8, dtype=np.float32)
    device = cupy.allocate(_handle(1), values.tobytes() + bytes(32))
    manager.register_cuda("c", _handle(1), 0, 64)
    assert manager.status("cuda", None) == [{"name": "c", "device_id": 0, "byte_size": 64}]
    tensor = manager.input_tensor(
        ShmReference("c", 0, 32), FP32, [1, 8], input_name="i", model_name="m", request_id=""
    )
    assert isinstance(tensor, DeviceTensor) and tensor.shape == (1, 8)
    assert tensor.device.pointer == ctypes.addressof(device)  # the region itself: no copy
    assert not tensor.on_host
    assert manager.staging.stats()["pinned_in_use_bytes"] == 0
    array = tensor.data  # a host consumer: one copy, into a pinned staging buffer
    assert array.tolist() == [values.tolist()]
    assert tensor.data is array
    assert manager.staging.stats()["pinned_in_use_bytes"] == 32
    target = manager.output_target("o", ShmReference("c", 32, 32))
    target.write(Tensor("o", FP32, array * 2))
    assert np.frombuffer(bytes(device)[32:], np.float32).tolist() == (values * 2).tolist()
    del array, tensor
    gc.collect()
    assert manager.staging.stats()["pinned_in_use_bytes"] == 0  # the staging buffer went back


def test_cuda_ranges_and_sizes_are_checked(cupy: FakeCupy) -> None:
    manager = SharedMemoryManager(allow_client=True)
    cupy.allocate(_handle(2), bytes(64))
    manager.register_cuda("c", _handle(2), 0, 64)
    for offset, size, part in (
        (65, 0, "offset"),
        (56, 16, "offset + byte size"),
        (-1, 4, "offset"),
    ):
        with pytest.raises(InvalidArgumentError) as info:
            manager.input_tensor(
                ShmReference("c", offset, size),
                FP32,
                [1, 4],
                input_name="i",
                model_name="m",
                request_id="",
            )
        assert info.value.message == f"Invalid {part} for shared memory region: 'c'"
    with pytest.raises(InvalidArgumentError) as mismatch:
        manager.input_tensor(
            ShmReference("c", 0, 12), FP32, [1, 4], input_name="i", model_name="m", request_id=""
        )
    assert mismatch.value.message == (
        "[request id: <id_unknown>] input byte size mismatch for input 'i' for model 'm'. "
        "Expected 16, got 12"
    )
    target = manager.output_target("o", ShmReference("c", 0, 8))
    with pytest.raises(InternalError) as too_large:
        target.write(Tensor("o", FP32, np.zeros(4, np.float32)))
    assert too_large.value.message == (
        "shared memory size specified with the request for output 'o' (8 bytes) should be at "
        "least 16 bytes to hold the results"
    )
    with pytest.raises(ServerError) as exists:
        manager.register_cuda("c", _handle(2), 0, 64)
    assert exists.value.message == "shared memory region 'c' already in manager"
    with pytest.raises(InvalidArgumentError):
        manager.register_cuda("d", b"short", 0, 64)


def test_a_handle_closes_after_the_last_request_holding_it(cupy: FakeCupy) -> None:
    manager = SharedMemoryManager(allow_client=True)
    cupy.allocate(_handle(3), bytes(64))
    manager.register_cuda("c", _handle(3), 0, 64)
    target = manager.output_target("o", ShmReference("c", 0, 64))  # a request in flight
    manager.unregister("cuda", "c")
    gc.collect()
    assert manager.status("cuda", None) == []
    assert cupy.closed == []  # still open: the request holds it
    target.write(Tensor("o", FP32, np.ones(4, np.float32)))
    del target
    gc.collect()
    assert cupy.closed == cupy.opened  # closed exactly once


def test_no_gpu_means_no_cuda_registration(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "cupy", None)  # import cupy fails
    cuda_shm.gpu_unavailable_reason.cache_clear()
    try:
        manager = SharedMemoryManager(allow_client=True)
        with pytest.raises(InvalidArgumentError) as info:
            manager.register_cuda("c", _handle(4), 0, 64)
        assert info.value.message == (
            "failed to register CUDA shared memory region: 'c', GPUs not supported"
        )
    finally:
        cuda_shm.gpu_unavailable_reason.cache_clear()


def test_the_pinned_pool_falls_back_to_pageable_memory(
    cupy: FakeCupy, caplog: pytest.LogCaptureFixture
) -> None:
    pool = StagingPool(4096)
    first = pool.acquire(4096)
    assert pool.stats()["pinned_in_use_bytes"] == 4096
    second = pool.acquire(16)  # over the pinned limit: pageable, for this copy
    assert cupy.pinned_allocations == 1
    assert second.nbytes == 16 and second.flags.writeable
    assert second.ctypes.data % 4096 == 0  # page aligned
    del first, second
    gc.collect()
    assert pool.stats()["pinned_in_use_bytes"] == 0
    with caplog.at_level("INFO"):
        StagingPool(0)
    assert "pinned memory pool not available (--pinned-memory-pool-byte-size is 0)" in caplog.text


def test_without_cupy_the_pool_is_pageable_and_says_so(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr("pytriton_core.memory.pinned.importlib.util.find_spec", lambda name: None)
    with caplog.at_level("INFO"):
        pool = StagingPool(1 << 20)
    assert pool.memory_kind == "pageable"
    assert pool.stats()["memory_kind"] == "pageable"
    assert "pinned memory pool not available (cupy is not installed)" in caplog.text
    staged = pool.acquire(100)
    staged[:] = 7
    assert staged.ctypes.data % 4096 == 0


def _request(tensor: Tensor, *, to_region: bool = False) -> InferenceRequest:
    request = InferenceRequest("m", inputs={"INPUT0": tensor})
    request.requested_outputs = {"OUTPUT0": RequestedOutput("OUTPUT0", 0, to_region)}
    return request


IDENTITY_IO = ModelSpec.from_config(
    config_from_json(
        {
            "max_batch_size": 8,
            "input": [{"name": "INPUT0", "data_type": "TYPE_FP32", "dims": ["4"]}],
            "output": [{"name": "OUTPUT0", "data_type": "TYPE_FP32", "dims": ["4"]}],
        }
    ),
    1,
)


def test_a_gpu_instance_gathers_device_inputs_on_its_device(cupy: FakeCupy) -> None:
    manager = SharedMemoryManager(allow_client=True)
    values = np.arange(12, dtype=np.float32).reshape(3, 4)
    region = cupy.allocate(_handle(5), values.tobytes())
    manager.register_cuda("c", _handle(5), 0, values.nbytes)
    tensors = [
        manager.input_tensor(
            ShmReference("c", row * 16, 16),
            FP32,
            [1, 4],
            input_name="INPUT0",
            model_name="m",
            request_id="",
        )
        for row in range(3)
    ]
    pools = DevicePools({0: 1 << 20})
    runner = BatchRunner(IDENTITY_IO, "m", device_id=0, device_pools=pools)

    single = runner.gather([_request(tensors[0], to_region=True)])
    assert single.inputs == {}
    assert single.device_inputs["INPUT0"].pointer == ctypes.addressof(region)  # in place
    assert single.device_outputs == {"OUTPUT0"}

    batch = runner.gather([_request(t) for t in tensors])
    gathered = batch.device_inputs["INPUT0"]
    assert gathered.shape == (3, 4) and batch.device_outputs == frozenset()
    assert pools.stats()[0]["used_bytes"] == 48  # one pooled buffer, device to device
    assert gathered.to_host().tolist() == values.tolist()
    assert not any(t.on_host for t in tensors)  # nothing went through the host

    # A CPU instance reads the same inputs on the host.
    host_batch = BatchRunner(IDENTITY_IO, "m").gather([_request(t) for t in tensors])
    assert host_batch.device_inputs == {}
    assert host_batch.inputs["INPUT0"].tolist() == values.tolist()


def test_device_outputs_reach_regions_without_the_host(cupy: FakeCupy) -> None:
    manager = SharedMemoryManager(allow_client=True)
    region = cupy.allocate(_handle(6), bytes(48))
    manager.register_cuda("c", _handle(6), 0, 48)
    pools = DevicePools({})
    produced = pools.empty(0, (3, 4), np.dtype(np.float32), manager.staging)
    source = np.arange(12, dtype=np.float32) * 3
    ctypes.memmove(produced.pointer, source.ctypes.data, source.nbytes)
    runner = BatchRunner(IDENTITY_IO, "m", device_id=0, device_pools=pools)
    requests = [_request(Tensor("INPUT0", FP32, np.zeros((n, 4), np.float32))) for n in (1, 2)]
    for request, rows in zip(requests, (1, 2), strict=True):
        request.batch_size = rows
    batch = runner.gather(requests)
    responses = runner.scatter(batch, {"OUTPUT0": produced})
    first, second = (r.outputs[0] for r in responses)
    assert isinstance(first, DeviceTensor) and isinstance(second, DeviceTensor)
    assert second.shape == (2, 4)
    manager.output_target("OUTPUT0", ShmReference("c", 16, 32)).write(second)
    assert not second.on_host  # device to device
    assert np.frombuffer(bytes(region)[16:], np.float32).tolist() == source[4:].tolist()
    assert first.data.tolist() == [source[:4].tolist()]  # a host consumer copies its rows


def test_the_cuda_pool_is_bounded_and_falls_back(cupy: FakeCupy) -> None:
    pools = DevicePools({0: 64})
    inside = pools.allocate(0, 48)
    assert cupy.own_allocations == 0
    outside = pools.allocate(0, 48)  # over the limit: an allocation of its own
    assert cupy.own_allocations == 1
    assert pools.stats() == {0: {"limit_bytes": 64, "used_bytes": 48, "total_bytes": 48}}
    assert pools.limit(1) == 64 << 20  # Triton's default for a GPU not named
    del inside, outside
    disabled = DevicePools({0: 0})
    disabled.allocate(0, 8)
    assert cupy.own_allocations == 2


def test_device_arrays_reshape_and_split_as_views(cupy: FakeCupy) -> None:
    array = DeviceArray(4096, (4, 6), np.dtype(np.float32), 0, None, None)
    assert array.reshape((-1, 2, 3)).shape == (4, 2, 3)
    assert array.reshape((-1, 2, 3)).pointer == 4096
    with pytest.raises(ValueError):
        array.reshape((5, -1))
    views = array.split([1, 3])
    assert [(v.pointer, v.shape) for v in views] == [(4096, (1, 6)), (4096 + 24, (3, 6))]
    assert array.__cuda_array_interface__["typestr"] == "<f4"
    bf16 = DeviceArray(0, (2,), types.BY_WIRE_NAME["BF16"].numpy_dtype, 0, None, None)
    assert bf16.__cuda_array_interface__["typestr"] == "<i2"


class _CudaLabelledArray:
    """A DLPack producer whose capsule says kDLCUDA over host memory: a Python model's GPU
    tensor, as far as the server's bookkeeping can tell without a GPU."""

    def __init__(self, array: np.ndarray) -> None:
        self.array = array

    def __dlpack__(self, *, stream: object = None, **_: object) -> object:
        from pytriton_core.backends.python.pb_utils_tensor import _tensor_struct

        capsule = self.array.__dlpack__()
        _tensor_struct(capsule).device.device_type = 2  # kDLCUDA
        return capsule

    def __dlpack_device__(self) -> tuple[int, int]:
        return (2, 0)


def test_a_python_models_gpu_output_reaches_a_region_device_to_device(cupy: FakeCupy) -> None:
    from pytriton_core.backends.python import pb_utils

    values = np.arange(6, dtype=np.float32) * 1.5
    tensor = pb_utils.Tensor.from_dlpack("OUTPUT0", _CudaLabelledArray(values))
    assert not tensor.is_cpu()
    device = tensor._server_device_array(None)
    assert (device.pointer, device.shape, device.device_id) == (values.ctypes.data, (6,), 0)
    assert device.dtype == np.float32
    manager = SharedMemoryManager(allow_client=True)
    region = cupy.allocate(_handle(7), bytes(24))
    manager.register_cuda("c", _handle(7), 0, 24)
    output = DeviceTensor("OUTPUT0", FP32, device)
    manager.output_target("OUTPUT0", ShmReference("c", 0, 24)).write(output)
    assert not output.on_host
    assert np.frombuffer(bytes(region), np.float32).tolist() == values.tolist()
    assert output.data.tolist() == values.tolist()  # the socket's path: one host copy
