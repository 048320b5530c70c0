"""The shared-memory RPCs of inference.GRPCInferenceService (System/CudaSharedMemory*).

The registry sits behind the service's shared-memory methods, shared with HTTP; these read
the request messages and render the status maps. ``GrpcInferenceService`` inherits them.
"""

from __future__ import annotations

from typing import Any

from pytriton_core import proto
from pytriton_core.service import InferenceService


def _message(name: str) -> Any:
    return proto.inference(name)


def _fill(region: Any, status: dict[str, Any]) -> None:
    for key, value in status.items():
        setattr(region, key, value)


class SharedMemoryRpcs:
    """System and CUDA shared-memory status, register and unregister."""

    _service: InferenceService

    async def system_shared_memory_status(self, request: Any) -> Any:
        response = _message("SystemSharedMemoryStatusResponse")()
        for status in self._service.shm_status("system", request.name):
            _fill(response.regions[status["name"]], status)  # name, key, offset, byte_size
        return response

    async def system_shared_memory_register(self, request: Any) -> Any:
        await self._service.register_system_shm(
            request.name, request.key, request.offset, request.byte_size
        )
        return _message("SystemSharedMemoryRegisterResponse")()

    async def system_shared_memory_unregister(self, request: Any) -> Any:
        await self._service.unregister_shm("system", request.name)
        return _message("SystemSharedMemoryUnregisterResponse")()

    async def cuda_shared_memory_status(self, request: Any) -> Any:
        response = _message("CudaSharedMemoryStatusResponse")()
        for status in self._service.shm_status("cuda", request.name):
            _fill(response.regions[status["name"]], status)  # name, device_id, byte_size
        return response

    async def cuda_shared_memory_register(self, request: Any) -> Any:
        await self._service.register_cuda_shm(
            request.name, request.raw_handle, request.device_id, request.byte_size
        )
        return _message("CudaSharedMemoryRegisterResponse")()

    async def cuda_shared_memory_unregister(self, request: Any) -> Any:
        await self._service.unregister_shm("cuda", request.name)
        return _message("CudaSharedMemoryUnregisterResponse")()
