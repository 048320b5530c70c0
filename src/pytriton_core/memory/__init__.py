"""Client shared memory (system and CUDA regions) and host staging buffers."""

from pytriton_core.memory.manager import (
    CLIENT_SHM_DISABLED,
    SharedMemoryManager,
    ShmOutput,
    ShmReference,
)
from pytriton_core.memory.pinned import DEFAULT_PINNED_POOL_BYTE_SIZE, StagingPool

__all__ = [
    "CLIENT_SHM_DISABLED",
    "DEFAULT_PINNED_POOL_BYTE_SIZE",
    "SharedMemoryManager",
    "ShmOutput",
    "ShmReference",
    "StagingPool",
]
