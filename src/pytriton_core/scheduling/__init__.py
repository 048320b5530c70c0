"""Schedulers: how queued requests become the batches that model instances execute."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pytriton_core.scheduling.base import Scheduler
from pytriton_core.scheduling.default import DefaultScheduler
from pytriton_core.scheduling.dynamic import BatchingSettings, DynamicBatchScheduler, RejectRequest

__all__ = ["DefaultScheduler", "DynamicBatchScheduler", "Scheduler", "create_scheduler"]


def create_scheduler(config: Mapping[str, Any], reject: RejectRequest) -> Scheduler:
    """The scheduler the config asks for, as Triton selects it."""
    if "dynamic_batching" in config:
        return DynamicBatchScheduler(BatchingSettings.from_config_json(config), reject)
    return DefaultScheduler()
