"""The C allocator's settings for a server that moves large tensors.

glibc returns freed memory to the kernel eagerly: a block over ``M_MMAP_THRESHOLD`` gets a
mapping of its own, unmapped when freed, and the free top of a heap is trimmed once it is
over ``M_TRIM_THRESHOLD``. Their defaults adapt only to the main arena's traffic; gRPC core
allocates a large message's buffers on its own threads, whose arenas are trimmed after each
request, so each 1 MiB gRPC request faulted in about 800 fresh pages (``tools/copy_count``,
docs/benchmarks.md, "Copies of a large tensor"). Fixed thresholds keep freed blocks of up to
``_MMAP_THRESHOLD`` for the next request; the memory kept is what the busiest moment used.

A ``GLIBC_TUNABLES`` that sets any ``glibc.malloc`` tunable is the operator's choice: then
nothing here changes.
"""

from __future__ import annotations

import ctypes
import os
import sys

_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
# glibc's own ceiling for the mmap threshold (half its 64 MiB heap size): tensors up to
# 32 MiB come from the heaps and are reused.
_MMAP_THRESHOLD = 32 << 20
# Free memory at the top of a heap is given back beyond this.
_TRIM_THRESHOLD = 256 << 20


def keep_freed_tensor_memory() -> bool:
    """Set the thresholds (glibc only); returns whether they were set."""
    if not sys.platform.startswith("linux") or "glibc.malloc." in os.environ.get(
        "GLIBC_TUNABLES", ""
    ):
        return False
    try:
        libc = ctypes.CDLL(None)
        mallopt = libc.mallopt
        libc.gnu_get_libc_version  # noqa: B018 (glibc, not musl, whose mallopt does nothing)
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    # mallopt answers 0 for a value it refuses; glibc's default then stays.
    return bool(mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD)) & bool(
        mallopt(_M_TRIM_THRESHOLD, _TRIM_THRESHOLD)
    )
