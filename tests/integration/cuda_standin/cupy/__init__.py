"""A stand-in for the few cupy calls the server makes, for CUDA shared-memory tests on a CPU.

Put on the *server's* PYTHONPATH only (tests/integration/test_cuda_shm_standin.py): it
plays one CUDA device whose memory is POSIX shared memory. An "IPC handle" is the name of a
shared-memory object, NUL-padded to 64 bytes, which the client creates with
tritonclient.utils.shared_memory; "opening" it maps the object, ``memcpy`` is ``memmove``,
pinned memory is ordinary memory, and ``asarray`` of device memory exports it through DLPack
labelled as CUDA memory. Everything the server does around those calls (the
HTTP and gRPC registration, status, device tensors, staging, writes into the region) runs
as it would on a GPU. tests/gpu runs the same paths against real CUDA.
"""

from __future__ import annotations

import ctypes
import mmap
import os
from types import SimpleNamespace
from typing import Any

__version__ = "0.0-standin"

_mapped: dict[int, tuple[mmap.mmap, Any]] = {}


class _Runtime:
    cudaIpcMemLazyEnablePeerAccess = 1

    @staticmethod
    def getDeviceCount() -> int:
        return 1

    @staticmethod
    def ipcOpenMemHandle(handle: bytes, flags: int = 1) -> int:
        key = bytes(handle).rstrip(b"\0").decode()
        fd = os.open(f"/dev/shm/{key.lstrip('/')}", os.O_RDWR)
        try:
            mapping = mmap.mmap(fd, 0)
        finally:
            os.close(fd)
        anchor = ctypes.c_char.from_buffer(mapping)
        pointer = ctypes.addressof(anchor)
        _mapped[pointer] = (mapping, anchor)
        return pointer

    @staticmethod
    def ipcCloseMemHandle(pointer: int) -> None:
        mapping, anchor = _mapped.pop(pointer)
        del anchor
        mapping.close()

    @staticmethod
    def memcpy(dst: int, src: int, size: int, kind: int) -> None:
        ctypes.memmove(dst, src, size)


class _Device:
    def __init__(self, device_id: int = 0) -> None:
        if device_id != 0:
            raise RuntimeError(f"cudaErrorInvalidDevice: device {device_id}")

    def __enter__(self) -> _Device:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


class _PinnedMemoryPool:
    def malloc(self, nbytes: int) -> bytearray:
        return bytearray(nbytes)


class OutOfMemoryError(MemoryError):
    pass


class _Memory:
    def __init__(self, nbytes: int) -> None:
        self.buffer = (ctypes.c_char * max(nbytes, 1))()


class _MemoryPointer:
    def __init__(self, memory: _Memory, offset: int) -> None:
        self.mem = memory
        self.ptr = ctypes.addressof(memory.buffer) + offset


class _MemoryPool:
    def __init__(self) -> None:
        self._limit = 0
        self._used = 0

    def set_limit(self, size: int = 0, fraction: float | None = None) -> None:
        self._limit = size

    def malloc(self, nbytes: int) -> _MemoryPointer:
        if self._used + nbytes > self._limit:
            raise OutOfMemoryError(nbytes)
        self._used += nbytes
        return _MemoryPointer(_Memory(nbytes), 0)

    def used_bytes(self) -> int:
        return self._used

    def total_bytes(self) -> int:
        return self._used


_capsule_pointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)(
    ("PyCapsule_GetPointer", ctypes.pythonapi)
)
_KDL_CUDA = 2
_DEVICE_TYPE_OFFSET = ctypes.sizeof(ctypes.c_void_p)  # DLTensor: void* data, then DLDevice


class _DeviceView:
    """What ``asarray`` gives for an object with ``__cuda_array_interface__``: it exports
    the same memory through DLPack, labelled as CUDA memory (a legacy capsule)."""

    def __init__(self, source: Any) -> None:
        import numpy as np

        interface = source.__cuda_array_interface__
        dtype = np.dtype(interface["typestr"])
        count = 1
        for dim in interface["shape"]:
            count *= int(dim)
        raw = (ctypes.c_char * (count * dtype.itemsize)).from_address(interface["data"][0])
        self._array = np.frombuffer(raw, dtype).reshape(interface["shape"])
        self._source = source

    def __dlpack__(self, *, stream: Any = None, **_: object) -> Any:
        capsule = self._array.__dlpack__()
        managed = _capsule_pointer(capsule, b"dltensor")
        ctypes.c_int32.from_address(managed + _DEVICE_TYPE_OFFSET).value = _KDL_CUDA
        return capsule

    def __dlpack_device__(self) -> tuple[int, int]:
        return (_KDL_CUDA, 0)


def asarray(source: Any) -> _DeviceView:
    return _DeviceView(source)


def _alloc(nbytes: int) -> _MemoryPointer:
    """``cupy.cuda.alloc``: device memory of the current device (here, host memory)."""
    return _MemoryPointer(_Memory(nbytes), 0)


cuda = SimpleNamespace(
    runtime=_Runtime,
    Device=_Device,
    PinnedMemoryPool=_PinnedMemoryPool,
    MemoryPool=_MemoryPool,
    Memory=_Memory,
    MemoryPointer=_MemoryPointer,
    alloc=_alloc,
    memory=SimpleNamespace(OutOfMemoryError=OutOfMemoryError),
)
