"""Triton's default scheduler: FIFO, one request per execution."""

from __future__ import annotations

import queue
import threading

from pytriton_core.inference.request import InferenceRequest
from pytriton_core.scheduling.base import Scheduler


class DefaultScheduler(Scheduler):
    dispatches_lone_at_once = True
    direct_execution = True

    def __init__(self) -> None:
        # SimpleQueue: a C queue whose put wakes exactly one blocked worker thread.
        self._queue: queue.SimpleQueue[InferenceRequest | None] = queue.SimpleQueue()
        # The requests still waiting, by identity: an instance takes a request only if it
        # is still here, so a cancelled one (removed by ``cancel``) is skipped, never run.
        self._waiting: set[InferenceRequest] = set()
        self._lock = threading.Lock()

    def enqueue(self, request: InferenceRequest) -> None:
        self.refuse_if_stopped()
        with self._lock:
            self._waiting.add(request)
        self._queue.put(request)

    def next_batch(self, instance: int = 0) -> list[InferenceRequest] | None:
        while True:
            request = self._queue.get()
            if request is None:
                return None
            with self._lock:
                if request in self._waiting:
                    self._waiting.remove(request)
                    return [request]
            # A cancelled request, skipped: forget it before waiting again, or this frame
            # keeps it (and its tensors) alive until the next request arrives.
            del request

    def cancel(self, request: InferenceRequest) -> bool:
        with self._lock:
            if request not in self._waiting:
                return False
            self._waiting.remove(request)
            return True

    def stop(self, instance_count: int) -> None:
        for _ in range(instance_count):
            self._queue.put(None)

    def pending_count(self) -> int:
        return len(self._waiting)
