"""Executions on the server's event loop that can wait for the server: BLS callers inline.

A lone request to a short Python model runs on the loop itself (docs/architecture.md,
"Where executions run"). A model that calls the server (BLS ``exec``) waits for answers the
loop delivers, so blocking there would deadlock. Such an execution runs on the loop inside
an ``InlineExecution`` instead: a greenlet on the loop's thread. A call its target answers
at once (the target executes right there, as a lone inline request would) returns without
leaving it; a call that has to wait (the target queues it, runs in its thread or another
process, streams its answer; a model load) ``suspend``s it: the greenlet switches back to
the loop, which goes on serving, and the answer ``wake``s it in a later loop callback,
where the execution goes on from the line it left. No wait blocks the loop, and no
execution moves to another thread half-way.

Only the loop's own (main) greenlet starts one (``may_start``): one started inside another
would switch back into that one, not to the loop, when it waits. And one execution keeps
the loop for at most ``SLICE_NS`` between two of its calls (``take_turn``): a long chain
of calls lets the loop's other work run in between.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Callable
from threading import get_ident
from typing import Any

import greenlet
from greenlet import getcurrent

from pytriton_core import clock

# How long an inline execution may keep the loop before it lets other work run (once a
# call it makes comes after so long). The same budget as a short inline execution's.
SLICE_NS = 1_000_000


class InlineExecution(greenlet.greenlet):  # type: ignore[misc]  # greenlet is untyped here
    """One execution on the loop that may wait (see the module docstring)."""

    def __init__(self, run: Callable[..., Any], loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(run)
        # The caller's context variables (a front end's, say) stay visible inside.
        self.gr_context = contextvars.copy_context()
        self._loop = loop
        self._thread = get_ident()
        self._slice_start_ns = 0
        self._suspended = False

    def start(self, *args: Any) -> None:
        """Run the execution until it ends or first waits; call on the loop."""
        self._slice_start_ns = clock.now_ns()
        self.switch(*args)

    def suspend(self) -> None:
        """From inside the execution: give the loop back until ``wake`` is called."""
        self._suspended = True
        try:
            self.parent.switch()
        finally:
            self._suspended = False
        self._slice_start_ns = clock.now_ns()

    @property
    def holds_loop(self) -> bool:
        """Whether the execution runs now (the loop waits for it), as seen from any
        thread: started, not suspended, not ended."""
        return bool(self) and not self._suspended

    def on_loop_thread(self) -> bool:
        """Whether the calling thread is the loop's (where the execution runs)."""
        return get_ident() == self._thread

    def wake(self) -> None:
        """Let a suspended execution go on, in a loop callback of its own (never inside the
        caller's, which may be the middle of another model's bookkeeping)."""
        if get_ident() == self._thread:
            self._loop.call_soon(self.switch)
        else:
            self._loop.call_soon_threadsafe(self.switch)

    def take_turn(self) -> None:
        """From inside the execution, before a call: once it has kept the loop for
        ``SLICE_NS``, let the loop's other ready work run first."""
        if clock.now_ns() - self._slice_start_ns >= SLICE_NS:
            self._loop.call_soon(self.switch)
            self.suspend()


def current_inline() -> InlineExecution | None:
    """The inline execution this code runs in, if any."""
    current = getcurrent()
    return current if isinstance(current, InlineExecution) else None


def may_start() -> bool:
    """Whether an inline execution may start here: on a thread's main greenlet (the loop's),
    not inside another execution."""
    return getcurrent().parent is None
