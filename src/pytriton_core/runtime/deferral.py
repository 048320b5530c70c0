"""Loop work left by executions that ran off the loop, handed over in the wake-up the loop
gets anyway.

A BLS call that executes on its caller's thread (``Model.execute_direct``) has statistics
to count on the loop. Scheduling each at once would wake the loop (and contend for the
GIL) in the middle of the caller's execution, as the hand-offs it saves did. Instead, while
a model instance's worker thread runs a batch (``start`` to ``stop``), such work is kept for that
thread and runs on the loop just before the batch's own outcome (``ModelInstance``), so
it is counted before the caller's responses are delivered. On any other thread (one a
model started itself) it is scheduled at once.

One per server (``ServerServices``), shared by its models: the work is kept by thread.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable


class LoopDeferral:
    def __init__(self) -> None:
        self._local = threading.local()

    def start(self) -> list[Callable[[], object]]:
        """Keep what this thread defers from now until ``stop`` in the returned list (for
        the caller to run on the loop afterwards). (Two calls, not a context manager: an
        instance's thread makes them around every batch.)"""
        pending: list[Callable[[], object]] = []
        self._local.pending = pending
        return pending

    def stop(self) -> None:
        """Defer at once again (``start``'s list keeps what was deferred)."""
        self._local.pending = None

    def defer(
        self, schedule: Callable[..., object], work: Callable[..., object], *args: object
    ) -> None:
        """Run ``work(*args)`` on the loop: after this thread's batch when one is being
        collected, else at once through ``schedule`` (``loop.call_soon_threadsafe``)."""
        pending: list[Callable[[], object]] | None = getattr(self._local, "pending", None)
        if pending is None:
            schedule(work, *args)
        else:
            pending.append(functools.partial(work, *args))


def run_all(pending: list[Callable[[], object]]) -> None:
    """Run what a batch deferred (on the loop)."""
    for work in pending:
        work()
