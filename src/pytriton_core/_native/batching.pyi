"""The batching data path (csrc/batching): gather a batch's inputs, scatter outputs as views."""

from collections.abc import Sequence
from typing import Any, final

import numpy.typing as npt

DEFAULT_MAX_CACHED_BYTES: int  # 256 MiB
PAGE_SIZE: int  # 4096: every pooled buffer starts on a page boundary

@final
class PooledBuffer:
    """Writable page-aligned host memory from BufferPool.acquire (buffer protocol: nbytes
    bytes). Goes back to its pool exactly once: release(), or when the last reference,
    including every array over it, is dropped."""

    def release(self) -> None:
        """Return the memory now (no-op if already returned); BufferError while an array
        or memoryview over it is alive, and always for the buffer under an array from
        gather_batch (that one returns when the array and its views are dropped)."""

    @property
    def released(self) -> bool: ...
    @property
    def nbytes(self) -> int: ...
    @property
    def capacity(self) -> int: ...
    @property
    def address(self) -> int: ...
    def __buffer__(self, flags: int, /) -> memoryview: ...
    def __release_buffer__(self, buffer: memoryview, /) -> None: ...

@final
class BufferPool:
    """Thread-safe pool of page-aligned host buffers in power-of-two size classes
    (>= 4 KiB); released buffers are cached up to max_cached_bytes, freed beyond."""

    def __init__(self, max_cached_bytes: int = ...) -> None: ...
    def acquire(self, nbytes: int) -> PooledBuffer: ...
    def trim(self) -> int:
        """Free every cached buffer; returns the bytes freed."""

    def stats(self) -> dict[str, Any]:
        """allocations, reuses, frees, cached_bytes, in_use_bytes, max_cached_bytes (ints)
        and memory_kind ("pageable")."""

def gather_batch(
    parts: Sequence[npt.NDArray[Any]],
    out: npt.NDArray[Any] | None = None,
    pool: BufferPool | None = None,
) -> npt.NDArray[Any]:
    """Concatenate parts along axis 0 (same dtype and trailing dims, else ValueError).

    One part and no out: that part itself. Otherwise one copy into out, a pooled buffer
    (kept by the returned array) or new memory; object (BYTES) arrays are never pooled.
    """

def scatter_batch(batched: npt.NDArray[Any], batch_sizes: Sequence[int]) -> list[npt.NDArray[Any]]:
    """Consecutive zero-copy views of batched along axis 0; the sizes must add up to
    batched.shape[0] (ValueError otherwise)."""
