"""Schedulers: how queued requests become the batches that model instances execute."""

from __future__ import annotations

from pytriton_core.config.spec import ModelSpec
from pytriton_core.scheduling.base import Scheduler
from pytriton_core.scheduling.default import DefaultScheduler
from pytriton_core.scheduling.dynamic import BatchingSettings, DynamicBatchScheduler, RejectRequest

__all__ = ["DefaultScheduler", "DynamicBatchScheduler", "Scheduler", "create_scheduler"]


def create_scheduler(spec: ModelSpec, reject: RejectRequest) -> Scheduler:
    """The scheduler the model's settings ask for, as Triton selects it."""
    if spec.dynamic_batching is not None:
        return DynamicBatchScheduler(BatchingSettings.from_spec(spec), reject)
    return DefaultScheduler()
