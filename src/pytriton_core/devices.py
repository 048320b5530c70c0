"""The GPUs this server may place model instances on (KIND_GPU, KIND_AUTO), found once."""

from __future__ import annotations

import logging
import os
import shutil
import subprocess

log = logging.getLogger(__name__)


def visible_gpu_ids(min_compute_capability: float = 0.0) -> tuple[int, ...]:
    """CUDA device ids as the frameworks number them (after CUDA_VISIBLE_DEVICES); () if none.

    Asks cupy when it is installed (it counts what CUDA will actually open); otherwise
    counts ``nvidia-smi -L``, capped by CUDA_VISIBLE_DEVICES. Never imports a framework.
    GPUs below ``min_compute_capability`` (``--min-supported-compute-capability``) are left
    out, as Triton leaves them out, with a log line.
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
    usable = []
    for device in range(count):
        capability = compute_capability(device) if min_compute_capability > 0 else None
        if capability is not None and capability < min_compute_capability:
            log.info(
                "GPU %d has compute capability %.1f, below --min-supported-compute-capability "
                "%.1f: not used",
                device,
                capability,
                min_compute_capability,
            )
            continue
        usable.append(device)
    if usable:
        log.info("GPUs available for model instances: %s", usable)
    return tuple(usable)


def _physical_index(device: int) -> int:
    """nvidia-smi numbers every GPU of the machine; CUDA only those it was told to see."""
    mask = [d.strip() for d in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if d.strip()]
    if device < len(mask) and mask[device].isdigit():
        return int(mask[device])
    return device


def _query(device: int, fields: str) -> list[str] | None:
    binary = shutil.which("nvidia-smi")
    if binary is None:
        return None
    try:
        result = subprocess.run(
            [
                binary,
                f"--id={_physical_index(device)}",
                f"--query-gpu={fields}",
                "--format=csv,noheader,nounits",
            ],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if result.returncode != 0 or not result.stdout.strip():
        return None
    return [value.strip() for value in result.stdout.strip().splitlines()[0].split(",")]


def compute_capability(device: int) -> float | None:
    """The GPU's CUDA compute capability (9.0 for an H100), or None when unknown."""
    values = _query(device, "compute_cap")
    try:
        return float(values[0]) if values else None
    except ValueError:
        return None


def device_memory(device: int) -> tuple[int, int] | None:
    """(bytes in use, bytes in total) on the GPU, or None when it cannot be read."""
    values = _query(device, "memory.used,memory.total")
    try:
        used_mib, total_mib = (int(v) for v in values) if values else (0, 0)
    except ValueError:
        return None
    if not total_mib:
        return None
    return used_mib << 20, total_mib << 20


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
