"""The GPUs this server may place model instances on (KIND_GPU, KIND_AUTO), found once."""

from __future__ import annotations

import logging
import os
import shutil
import subprocess

log = logging.getLogger(__name__)


def visible_gpu_ids() -> tuple[int, ...]:
    """CUDA device ids as the frameworks number them (after CUDA_VISIBLE_DEVICES); () if none.

    Asks cupy when it is installed (it counts what CUDA will actually open); otherwise
    counts ``nvidia-smi -L``, capped by CUDA_VISIBLE_DEVICES. Never imports a framework.
    """
    mask = os.environ.get("CUDA_VISIBLE_DEVICES")
    if mask is not None and mask.strip() in ("", "-1"):
        return ()
    try:
        import cupy

        count = int(cupy.cuda.runtime.getDeviceCount())
    except Exception:
        count = _count_with_nvidia_smi()
        if mask is not None:
            count = min(count, len([d for d in mask.split(",") if d.strip()]))
    if count:
        log.info("GPUs available for model instances: %s", list(range(count)))
    return tuple(range(count))


def _count_with_nvidia_smi() -> int:
    binary = shutil.which("nvidia-smi")
    if binary is None:
        return 0
    try:
        listing = subprocess.run(
            [binary, "-L"], capture_output=True, text=True, timeout=10, check=False
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        return 0
    return sum(1 for line in listing.splitlines() if line.startswith("GPU "))
