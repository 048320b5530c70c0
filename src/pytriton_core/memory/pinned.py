"""Host staging buffers for device <-> host copies (CUDA shared memory with CPU backends).

Page-locked (pinned) memory lets the GPU copy at full speed without the driver staging
through a bounce buffer of its own. It is only available with a usable GPU (through cupy,
imported here lazily, never at module import); without one the pool serves page-aligned
pageable buffers from the batching extension's ``BufferPool`` and says so in the log and in
``stats()["memory_kind"]``, as Triton does when it cannot allocate its pinned pool.

``--pinned-memory-pool-byte-size`` bounds the pinned bytes handed out at once (default
256 MiB, Triton's); a request beyond it gets pageable memory for that copy (logged at debug
level). With 0 there is no pinned pool at all.
"""

from __future__ import annotations

import importlib.util
import logging
import threading
import weakref
from typing import Any

import numpy as np
import numpy.typing as npt

from pytriton_core._native.batching import BufferPool

log = logging.getLogger(__name__)

DEFAULT_PINNED_POOL_BYTE_SIZE = 256 << 20


def _pinned_allocator() -> tuple[Any, str]:
    """cupy's pinned pool when a GPU is usable, else (None, why not)."""
    if importlib.util.find_spec("cupy") is None:
        return None, "cupy is not installed"
    try:
        import cupy  # GPU-only: imported only when a pool is built

        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:  # no driver, no device, a broken install: all mean pageable
        return None, f"{type(exc).__name__}: {exc}"
    if count < 1:
        return None, "no CUDA device is visible"
    return cupy.cuda.PinnedMemoryPool(), ""


class StagingPool:
    """Reused host buffers for device <-> host copies: pinned when possible (see module)."""

    def __init__(self, pinned_byte_size: int = DEFAULT_PINNED_POOL_BYTE_SIZE) -> None:
        self._limit = max(pinned_byte_size, 0)
        self._pageable = BufferPool(self._limit)
        self._pinned: Any = None
        self._lock = threading.Lock()
        self._pinned_in_use = 0
        if self._limit == 0:
            reason = "--pinned-memory-pool-byte-size is 0"
        else:
            self._pinned, reason = _pinned_allocator()
        if self._pinned is None:
            log.info(
                "pinned memory pool not available (%s): host staging buffers for CUDA shared "
                "memory are page-aligned pageable memory",
                reason,
            )
        else:
            log.info("pinned memory pool: %d bytes", self._limit)

    @property
    def memory_kind(self) -> str:
        """``"pinned"`` or ``"pageable"``: what ``acquire`` hands out normally."""
        return "pageable" if self._pinned is None else "pinned"

    def acquire(self, nbytes: int) -> npt.NDArray[np.uint8]:
        """A writable 1-D uint8 array of ``nbytes`` (``.ctypes.data`` is its address); its
        memory returns to the pool when the array and every view of it are dropped."""
        if self._pinned is not None:
            with self._lock:
                fits = self._pinned_in_use + nbytes <= self._limit
                if fits:
                    self._pinned_in_use += nbytes
            if fits:
                try:
                    staged = np.frombuffer(self._pinned.malloc(nbytes), np.uint8, nbytes)
                except BaseException:
                    self._give_back(nbytes)
                    raise
                weakref.finalize(staged, self._give_back, nbytes)
                return staged
            log.debug("pinned memory pool exhausted: %d bytes staged in pageable memory", nbytes)
        return np.frombuffer(memoryview(self._pageable.acquire(nbytes)), np.uint8, nbytes)

    def _give_back(self, nbytes: int) -> None:
        with self._lock:
            self._pinned_in_use -= nbytes

    def stats(self) -> dict[str, Any]:
        """``memory_kind``, ``pinned_limit_bytes``, ``pinned_in_use_bytes`` and the pageable
        pool's counters (``pageable``)."""
        return {
            "memory_kind": self.memory_kind,
            "pinned_limit_bytes": self._limit if self._pinned is not None else 0,
            "pinned_in_use_bytes": self._pinned_in_use,
            "pageable": self._pageable.stats(),
        }
