"""The CUDA shared-memory and pinned-staging logic, against a stand-in for cupy.

No GPU is needed: a fake ``cupy`` module (device memory = host ctypes buffers, IPC handles =
keys into them, memcpy = memmove, pinned memory = bytearrays) stands in for the calls the
server makes. What it checks is the server's side: handles opened and closed once (after the
last request holding the region), ranges checked, one staged copy each way, the pinned pool's
accounting and its pageable fallback. tests/gpu/test_cuda_shm.py runs the real thing.
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
from pytriton_core.core.tensor import Tensor
from pytriton_core.errors import InternalError, InvalidArgumentError, ServerError
from pytriton_core.memory import SharedMemoryManager, ShmReference, StagingPool, cuda_shm

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

        self.cuda = pytypes.SimpleNamespace(
            runtime=Runtime, Device=Device, PinnedMemoryPool=PinnedMemoryPool
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
    array = manager.input_array(
        ShmReference("c", 0, 32), FP32, [1, 8], input_name="i", model_name="m", request_id=""
    )
    assert array.tolist() == [values.tolist()]
    assert not array.flags.writeable
    assert manager.staging.stats()["pinned_in_use_bytes"] == 32
    target = manager.output_target("o", ShmReference("c", 32, 32))
    target.write(Tensor("o", FP32, array * 2))
    assert np.frombuffer(bytes(device)[32:], np.float32).tolist() == (values * 2).tolist()
    del array
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
            manager.input_array(
                ShmReference("c", offset, size),
                FP32,
                [1, 4],
                input_name="i",
                model_name="m",
                request_id="",
            )
        assert info.value.message == f"Invalid {part} for shared memory region: 'c'"
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
