"""Triton's default scheduler: FIFO, one request per execution."""

from __future__ import annotations

import queue

from pytriton_core.inference.request import InferenceRequest
from pytriton_core.scheduling.base import Scheduler


class DefaultScheduler(Scheduler):
    def __init__(self) -> None:
        # SimpleQueue: a C queue whose put wakes exactly one blocked worker thread.
        self._queue: queue.SimpleQueue[InferenceRequest | None] = queue.SimpleQueue()

    def enqueue(self, request: InferenceRequest) -> None:
        self._queue.put(request)

    def next_batch(self, instance: int = 0) -> list[InferenceRequest] | None:
        request = self._queue.get()
        return None if request is None else [request]

    def stop(self, instance_count: int) -> None:
        for _ in range(instance_count):
            self._queue.put(None)

    def pending_count(self) -> int:
        return self._queue.qsize()
