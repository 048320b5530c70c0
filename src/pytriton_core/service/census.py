"""A census of what a request leaves behind, for leak checks (``--debug-live-objects``).

In the spirit of uvloop's debug build, which counts live handles: after the clients of a
test are answered, no request, response or view of a client's shared-memory region may
still be alive, and no pooled buffer may still be handed out. The census walks the garbage
collector's objects after a full collection instead of counting at each creation, so the
request path pays nothing for it; one census costs a full collection (tens of
milliseconds), which is why it is served only when the flag asks for it.
"""

from __future__ import annotations

import gc
from pathlib import Path

from pytriton_core._native.shm import PrivateCopy, RegionView
from pytriton_core.backends.batching import BatchRunner
from pytriton_core.inference.request import InferenceRequest
from pytriton_core.inference.response import InferenceResponse
from pytriton_core.memory.pinned import StagingPool

SHM_FOLDER = "/dev/shm/"


def _shm_mappings(maps: Path) -> int:
    """Distinct POSIX shared-memory objects mapped into this process (the kernel's view)."""
    try:
        lines = maps.read_text().splitlines()
    except OSError:  # not Linux: /proc is not there
        return 0
    names = set()
    for line in lines:
        fields = line.split(None, 5)  # address, perms, offset, device, inode, path
        if len(fields) == 6 and fields[5].startswith(SHM_FOLDER):
            names.add(fields[5])
    return len(names)


def live_objects(maps: Path = Path("/proc/self/maps")) -> dict[str, int]:
    """Counts of live ``requests``, ``responses``, ``shm_region_views`` (views of client
    regions and private copies of their ranges, each keeping its region mapped),
    ``pooled_bytes_in_use`` (batching and staging pools) and ``shm_mappings``
    (shared-memory objects mapped, registered regions included)."""
    gc.collect()
    counts = {"requests": 0, "responses": 0, "shm_region_views": 0, "pooled_bytes_in_use": 0}
    for candidate in gc.get_objects():
        if isinstance(candidate, InferenceRequest):
            counts["requests"] += 1
        elif isinstance(candidate, InferenceResponse):
            counts["responses"] += 1
        elif isinstance(candidate, (RegionView, PrivateCopy)):
            counts["shm_region_views"] += 1
        elif isinstance(candidate, BatchRunner):
            counts["pooled_bytes_in_use"] += candidate.pool_in_use_bytes
        elif isinstance(candidate, StagingPool):
            stats = candidate.stats()
            counts["pooled_bytes_in_use"] += (
                stats["pinned_in_use_bytes"] + stats["pageable"]["in_use_bytes"]
            )
    counts["shm_mappings"] = _shm_mappings(maps)
    return counts
