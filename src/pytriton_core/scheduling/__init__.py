"""Schedulers: how queued requests become the batches that model instances execute."""

from __future__ import annotations

from pathlib import Path

from pytriton_core.config.spec import ModelSpec
from pytriton_core.scheduling.base import Requeued, Retained, Scheduler
from pytriton_core.scheduling.default import DefaultScheduler
from pytriton_core.scheduling.dynamic import BatchingSettings, DynamicBatchScheduler, RejectRequest
from pytriton_core.scheduling.sequence import SequenceBatchScheduler

__all__ = [
    "DefaultScheduler",
    "DynamicBatchScheduler",
    "Requeued",
    "Retained",
    "Scheduler",
    "SequenceBatchScheduler",
    "create_scheduler",
]


def create_scheduler(
    spec: ModelSpec, reject: RejectRequest, model_dir: Path | None = None
) -> Scheduler:
    """The scheduler the model's settings ask for, as Triton selects it.

    ``model_dir``: the model's folder, where a sequence model's ``initial_state`` files are.
    """
    if spec.sequence_batching is not None:
        return SequenceBatchScheduler(spec, reject, model_dir)
    if spec.dynamic_batching is not None:
        return DynamicBatchScheduler(BatchingSettings.from_spec(spec), reject)
    return DefaultScheduler()
