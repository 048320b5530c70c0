"""CUDA shared memory regions: a client's device allocation, opened from its IPC handle.

A client registers a ``cudaIpcMemHandle_t`` (64 bytes), the device it lives on and its byte
size; the server opens the handle through cupy (imported lazily: GPU-only code never runs
on a machine without a usable GPU) and closes it when the region's last reference goes, so
a region unregistered while a request uses it stays open until that request is done.

An input range is handed on as a ``DeviceArray`` over the region (no copy): GPU backends
read it in place, anything else copies it device -> host once, into a staging buffer of the
(pinned when possible) ``StagingPool``. An output is written from a GPU backend's device
memory with one device-to-device copy, from host memory with one host -> device copy through
a staging buffer. Range checks are the compiled ``_native.shm.check_range``.
"""

from __future__ import annotations

import functools
import importlib.util
import threading
import weakref
from typing import Any

import numpy as np

from pytriton_core._native.shm import OutputTooLargeError, RegionRangeError, check_range
from pytriton_core.errors import InvalidArgumentError
from pytriton_core.inference.tensor_data import Buffer
from pytriton_core.memory.device import DeviceArray, cupy_module, memcpy
from pytriton_core.memory.pinned import StagingPool
from pytriton_core.memory.system_shm import range_error

IPC_HANDLE_SIZE = 64  # sizeof(cudaIpcMemHandle_t)

_lock = threading.Lock()


@functools.cache
def gpu_unavailable_reason() -> str | None:
    """None when CUDA shared memory can work here (cupy and a visible device), else why not.

    Decided once per process, on first use.
    """
    if importlib.util.find_spec("cupy") is None:
        return "cupy is not installed"
    try:
        import cupy  # GPU-only

        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    return None if count > 0 else "no CUDA device is visible"


def _close_handle(pointer: int, device_id: int) -> None:
    cupy = cupy_module()
    with cupy.cuda.Device(device_id):
        cupy.cuda.runtime.ipcCloseMemHandle(pointer)


class CudaSharedMemoryRegion:
    """A registered CUDA region: ``byte_size`` bytes at ``pointer`` on ``device_id``."""

    kind = "cuda"

    def __init__(
        self, name: str, pointer: int, device_id: int, byte_size: int, staging: StagingPool
    ) -> None:
        self.name = name
        self.pointer = pointer
        self.device_id = device_id
        self.byte_size = byte_size
        self._staging = staging
        # Closes the IPC handle once nothing (registry, request) refers to the region.
        weakref.finalize(self, _close_handle, pointer, device_id)

    def status(self) -> dict[str, Any]:
        return {"name": self.name, "device_id": self.device_id, "byte_size": self.byte_size}

    def check(self, offset: int, byte_size: int) -> None:
        try:
            check_range(self.byte_size, offset, byte_size)
        except RegionRangeError as exc:
            raise range_error(exc, self.name) from None

    def device_array(
        self, offset: int, byte_size: int, dtype: np.dtype[Any], shape: tuple[int, ...]
    ) -> DeviceArray:
        """The checked range seen as a device tensor of ``shape`` (no copy; the caller
        compares ``byte_size`` with what ``shape`` needs); it keeps the region open."""
        self.check(offset, byte_size)
        return DeviceArray(self.pointer + offset, shape, dtype, self.device_id, self, self._staging)

    def read(self, offset: int, byte_size: int) -> Buffer:
        """The range copied device -> host once, into a staging buffer (BYTES inputs)."""
        self.check(offset, byte_size)
        staged = self._staging.acquire(byte_size)
        memcpy(staged.ctypes.data, self.pointer + offset, byte_size, self.device_id)
        staged.flags.writeable = False
        return staged.data

    def write(self, offset: int, byte_size: int, data: Buffer) -> None:
        """Copy host ``data`` into the range, through a staging buffer."""
        self.check(offset, byte_size)
        source = np.frombuffer(data, np.uint8)
        if source.nbytes > byte_size:
            raise OutputTooLargeError(source.nbytes, byte_size)
        if not source.nbytes:
            return
        staged = self._staging.acquire(source.nbytes)
        staged[:] = source
        memcpy(self.pointer + offset, staged.ctypes.data, source.nbytes, self.device_id)

    def write_device(self, offset: int, byte_size: int, array: DeviceArray) -> None:
        """Copy a device array into the range: one device-to-device (or peer) copy."""
        self.check(offset, byte_size)
        if array.nbytes > byte_size:
            raise OutputTooLargeError(array.nbytes, byte_size)
        array.copy_to(self.pointer + offset)


def open_cuda_region(
    name: str, raw_handle: bytes, device_id: int, byte_size: int, staging: StagingPool
) -> CudaSharedMemoryRegion:
    """Open a client's IPC handle; the caller has checked that GPUs are supported."""
    if len(raw_handle) != IPC_HANDLE_SIZE:
        raise InvalidArgumentError(
            f"'raw_handle' must be a {IPC_HANDLE_SIZE}-byte cudaIpcMemHandle_t, got "
            f"{len(raw_handle)} bytes"
        )
    if device_id < 0:
        raise InvalidArgumentError(f"invalid 'device_id' {device_id} for region '{name}'")
    cupy = cupy_module()
    try:
        with _lock, cupy.cuda.Device(device_id):
            pointer = cupy.cuda.runtime.ipcOpenMemHandle(
                raw_handle, cupy.cuda.runtime.cudaIpcMemLazyEnablePeerAccess
            )
    except Exception as exc:
        raise InvalidArgumentError(
            f"failed to register shared memory region '{name}': cannot open the CUDA IPC "
            f"handle on device {device_id}: {exc}"
        ) from None
    return CudaSharedMemoryRegion(name, int(pointer), device_id, byte_size, staging)
