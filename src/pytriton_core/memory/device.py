"""GPU memory the server handles without copying it to the host.

``DeviceArray`` describes a tensor in device memory: a CUDA shared-memory input (a range of
a client's region) or a GPU backend's output that a client wants in a region. GPU backends
consume it directly (ONNX Runtime binds the pointer, torch wraps it through
``__cuda_array_interface__``, TensorRT takes the address); everything else asks for
``to_host()``, one device -> host copy into a staging buffer.

``DevicePools`` is ``--cuda-memory-pool-byte-size``: per GPU, a bounded pool for the device
buffers the server allocates itself (batches gathered on the device, TensorRT's inputs and
outputs). A request beyond a pool's limit gets its own allocation, as Triton falls back to
``cudaMalloc`` when its pool is exhausted.

cupy is imported lazily, on first use: nothing here runs on a machine without a usable GPU,
because nothing there makes a ``DeviceArray``.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from pytriton_core.memory.pinned import StagingPool

log = logging.getLogger(__name__)

DEFAULT_CUDA_POOL_BYTE_SIZE = 64 << 20  # Triton's default, per GPU
MEMCPY_DEFAULT = 4  # cudaMemcpyDefault: unified addressing tells the direction (and peers)
_DL_CUDA = 2  # DLDeviceType kDLCUDA


def cupy_module() -> Any:
    import cupy  # GPU-only

    return cupy


def memcpy(destination: int, source: int, nbytes: int, device_id: int) -> None:
    """A synchronous copy between any two addresses (host or any device), issued on
    ``device_id`` (the device of the memory the copy reads or writes)."""
    if nbytes:
        cupy = cupy_module()
        with cupy.cuda.Device(device_id):
            cupy.cuda.runtime.memcpy(destination, source, nbytes, MEMCPY_DEFAULT)


def _typestr(dtype: np.dtype[Any]) -> str:
    # bfloat16 has no array-interface code: described as its 16 bits; consumers view it back.
    return "<i2" if dtype.kind == "V" and dtype.itemsize == 2 else dtype.str


class DeviceArray:
    """A C-contiguous tensor of ``shape`` and ``dtype`` at ``pointer`` on ``device_id``.

    ``owner`` keeps the memory alive (a shared-memory region, an ``OrtValue``, a torch or
    cupy array); ``staging`` provides the host buffer of ``to_host``.
    """

    __slots__ = ("device_id", "dtype", "owner", "pointer", "shape", "staging")

    def __init__(
        self,
        pointer: int,
        shape: tuple[int, ...],
        dtype: np.dtype[Any],
        device_id: int,
        owner: object,
        staging: StagingPool | None,
    ) -> None:
        self.pointer = pointer
        self.shape = shape
        self.dtype = dtype
        self.device_id = device_id
        self.owner = owner
        self.staging = staging

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize

    @property
    def __cuda_array_interface__(self) -> dict[str, Any]:
        return {
            "shape": self.shape,
            "typestr": _typestr(self.dtype),
            "data": (self.pointer, False),
            "version": 3,
            "strides": None,
        }

    def __dlpack__(self, *, stream: Any = None, **_: object) -> Any:
        """A DLPack capsule over the same memory (through a cupy view of it)."""
        cupy = cupy_module()
        with cupy.cuda.Device(self.device_id):
            return cupy.asarray(self).__dlpack__(stream=stream)

    def __dlpack_device__(self) -> tuple[int, int]:
        return (_DL_CUDA, self.device_id)

    def _like(self, pointer: int, shape: tuple[int, ...]) -> DeviceArray:
        return DeviceArray(pointer, shape, self.dtype, self.device_id, self.owner, self.staging)

    def reshape(self, shape: Sequence[int]) -> DeviceArray:
        """The same memory seen as ``shape`` (one -1 inferred); ValueError if sizes differ."""
        return self._like(self.pointer, _resolve_shape(self.shape, shape))

    def split(self, sizes: Sequence[int]) -> list[DeviceArray]:
        """Consecutive views of ``sizes[i]`` rows each along the first dimension."""
        row = self.nbytes // self.shape[0] if self.shape and self.shape[0] else 0
        views, pointer = [], self.pointer
        for size in sizes:
            views.append(self._like(pointer, (size, *self.shape[1:])))
            pointer += size * row
        return views

    def to_host(self) -> np.ndarray:
        """A host copy (one device -> host copy into a staging buffer)."""
        nbytes = self.nbytes
        # Said at verbose level 1: the GPU tests check that GPU backends never get here.
        log.debug("device tensor copied to the host: %d bytes from GPU %d", nbytes, self.device_id)
        if self.staging is not None:
            host = self.staging.acquire(nbytes)
        else:
            host = np.empty(nbytes, np.uint8)
        memcpy(host.ctypes.data, self.pointer, nbytes, self.device_id)
        return host.view(self.dtype).reshape(self.shape)

    def copy_to(self, address: int) -> None:
        """Copy the whole array to ``address`` (host memory or any device's)."""
        memcpy(address, self.pointer, self.nbytes, self.device_id)


def _resolve_shape(current: tuple[int, ...], wanted: Sequence[int]) -> tuple[int, ...]:
    count = int(np.prod(current, dtype=np.int64))
    shape = [int(d) for d in wanted]
    if shape.count(-1) == 1:
        known = int(np.prod([d for d in shape if d != -1], dtype=np.int64))
        if known and count % known == 0:
            shape[shape.index(-1)] = count // known
    if int(np.prod(shape, dtype=np.int64)) != count or any(d < 0 for d in shape):
        raise ValueError(f"cannot reshape an array of shape {list(current)} into {list(wanted)}")
    return tuple(shape)


class DevicePools:
    """``--cuda-memory-pool-byte-size``: one bounded cupy pool per GPU, made on first use."""

    def __init__(self, byte_sizes: Mapping[int, int]) -> None:
        self._byte_sizes = dict(byte_sizes)
        self._pools: dict[int, Any] = {}
        self._lock = threading.Lock()

    def limit(self, device_id: int) -> int:
        return self._byte_sizes.get(device_id, DEFAULT_CUDA_POOL_BYTE_SIZE)

    def _pool(self, device_id: int) -> Any:
        with self._lock:
            pool = self._pools.get(device_id)
            if pool is None:
                cupy = cupy_module()
                pool = cupy.cuda.MemoryPool()
                with cupy.cuda.Device(device_id):
                    pool.set_limit(size=self.limit(device_id))
                self._pools[device_id] = pool
            return pool

    def allocate(self, device_id: int, nbytes: int) -> Any:
        """A cupy ``MemoryPointer`` of ``nbytes`` on ``device_id``: from the pool while it
        has room, else an allocation of its own. Freed when the pointer is dropped."""
        cupy = cupy_module()
        with cupy.cuda.Device(device_id):
            if self.limit(device_id) > 0:
                try:
                    return self._pool(device_id).malloc(nbytes)
                except cupy.cuda.memory.OutOfMemoryError:
                    log.debug(
                        "CUDA memory pool of GPU %d exhausted: %d bytes allocated outside it",
                        device_id,
                        nbytes,
                    )
            return cupy.cuda.MemoryPointer(cupy.cuda.Memory(nbytes), 0)

    def empty(
        self,
        device_id: int,
        shape: tuple[int, ...],
        dtype: np.dtype[Any],
        staging: StagingPool | None = None,
    ) -> DeviceArray:
        """An uninitialized device array from ``allocate`` (it owns its memory)."""
        nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        memory = self.allocate(device_id, max(nbytes, 1))
        return DeviceArray(int(memory.ptr), shape, dtype, device_id, memory, staging)

    def gather(self, parts: Sequence[DeviceArray], device_id: int) -> DeviceArray:
        """The parts concatenated along the first dimension, on ``device_id`` (one
        device-to-device copy each)."""
        head = parts[0]
        shape = (sum(p.shape[0] for p in parts), *head.shape[1:])
        out = self.empty(device_id, shape, head.dtype, head.staging)
        address = out.pointer
        for part in parts:
            part.copy_to(address)
            address += part.nbytes
        return out

    def stats(self) -> dict[int, dict[str, int]]:
        """Per GPU in use: ``limit_bytes``, ``used_bytes`` and ``total_bytes`` (held)."""
        with self._lock:
            pools = dict(self._pools)
        result = {}
        for device_id, pool in pools.items():
            result[device_id] = {
                "limit_bytes": self.limit(device_id),
                "used_bytes": int(pool.used_bytes()),
                "total_bytes": int(pool.total_bytes()),
            }
        return result
