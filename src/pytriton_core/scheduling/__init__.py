"""Schedulers: how queued requests become the batches that model instances execute."""

from pytriton_core.scheduling.base import Scheduler
from pytriton_core.scheduling.default import DefaultScheduler

__all__ = ["DefaultScheduler", "Scheduler"]
