"""Server-level gauges: CPU from /proc (Linux), GPUs through NVML (``nvidia-ml-py``).

Both are read by a background task every ``--metrics-interval-ms``, never per request and
never per scrape, as Triton does. A missing NVML, or a machine without GPUs, turns the GPU
group off with one log line.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pytriton_core.metrics.families import GpuReading

log = logging.getLogger(__name__)


class CpuCollector:
    """CPU utilization between two refreshes (/proc/stat) and RAM (/proc/meminfo)."""

    def __init__(self, proc: Path = Path("/proc")) -> None:
        self._proc = proc
        self._last: tuple[int, int] | None = None  # (busy, total) jiffies
        self.utilization = 0.0
        self.memory_total_bytes = 0
        self.memory_used_bytes = 0

    def refresh(self) -> None:
        try:
            busy, total = self._read_stat()
            memory = self._read_meminfo()
        except (OSError, ValueError, IndexError) as exc:
            log.debug("reading CPU metrics failed: %s", exc)
            return
        if self._last is not None:
            d_busy, d_total = busy - self._last[0], total - self._last[1]
            self.utilization = d_busy / d_total if d_total > 0 else 0.0
        self._last = (busy, total)
        total_kib = memory.get("MemTotal", 0)
        available_kib = memory.get("MemAvailable", memory.get("MemFree", 0))
        self.memory_total_bytes = total_kib * 1024
        self.memory_used_bytes = max(0, total_kib - available_kib) * 1024

    def _read_stat(self) -> tuple[int, int]:
        with (self._proc / "stat").open() as stat:
            fields = [int(v) for v in stat.readline().split()[1:]]
        # user nice system idle iowait irq softirq steal (guest time is inside user/nice)
        idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
        total = sum(fields[:8])
        return total - idle, total

    def _read_meminfo(self) -> dict[str, int]:
        values: dict[str, int] = {}
        for line in (self._proc / "meminfo").read_text().splitlines():
            key, _, rest = line.partition(":")
            parts = rest.split()
            if parts:
                values[key] = int(parts[0])
        return values


class GpuCollector:
    """NVML readings per GPU; ``open`` returns None (and says why) when there are none."""

    def __init__(self, nvml: Any, handles: list[Any]) -> None:
        self._nvml = nvml
        self._handles = handles
        self._uuids = [_text(nvml.nvmlDeviceGetUUID(h)) for h in handles]
        self._energy_start = [self._energy_mj(h) for h in handles]
        self.readings: tuple[GpuReading, ...] = ()

    @classmethod
    def open(cls) -> GpuCollector | None:
        try:
            import pynvml
        except ImportError:
            log.info("GPU metrics are off: NVML is not available (pip install nvidia-ml-py)")
            return None
        try:
            pynvml.nvmlInit()
            count = pynvml.nvmlDeviceGetCount()
        except Exception as exc:
            log.info("GPU metrics are off: NVML could not start (%s)", exc)
            return None
        if count == 0:
            log.info("GPU metrics are off: no GPU found")
            pynvml.nvmlShutdown()
            return None
        handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
        log.info("collecting GPU metrics for %d GPU(s)", count)
        return cls(pynvml, handles)

    def refresh(self) -> None:
        nvml = self._nvml
        readings = []
        for handle, uuid, energy_start in zip(
            self._handles, self._uuids, self._energy_start, strict=True
        ):
            utilization = _read(nvml.nvmlDeviceGetUtilizationRates, handle)
            memory = _read(nvml.nvmlDeviceGetMemoryInfo, handle)
            power_mw = _read(nvml.nvmlDeviceGetPowerUsage, handle) or 0
            limit_mw = _read(nvml.nvmlDeviceGetPowerManagementLimit, handle) or 0
            readings.append(
                GpuReading(
                    uuid=uuid,
                    utilization=utilization.gpu / 100.0 if utilization is not None else 0.0,
                    memory_total_bytes=int(memory.total) if memory is not None else 0,
                    memory_used_bytes=int(memory.used) if memory is not None else 0,
                    power_usage_w=power_mw / 1000.0,
                    power_limit_w=limit_mw / 1000.0,
                    energy_j=max(0, self._energy_mj(handle) - energy_start) / 1000.0,
                )
            )
        self.readings = tuple(readings)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._nvml.nvmlShutdown()

    def _energy_mj(self, handle: Any) -> int:
        return int(_read(self._nvml.nvmlDeviceGetTotalEnergyConsumption, handle) or 0)


def _read(query: Callable[[Any], Any], handle: Any) -> Any:
    """One NVML query; None where the GPU does not report it (NVML's NOT_SUPPORTED)."""
    try:
        return query(handle)
    except Exception:
        return None


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
