"""Busy polling: after the event loop has answered a request itself, it keeps polling its
sockets for a short window (``--busy-poll-us``) instead of going to sleep, so that the next
request is read the moment it lands.

Why: a lone client (one request at a time) finds the loop asleep in ``epoll_wait`` each
time. Waking it is the kernel's work on the request's critical path, and the loop then runs
on caches the client has just used: on the 2-vCPU reference machine a lone `[16]` request
cost the server about 100 µs of CPU against 50 under load, and its p50 latency was 60 µs
above the fixed-answer floor server's (docs/benchmarks.md, "Busy polling"). While the loop
polls, the next request needs no wake-up, and the client runs on the other core.

When: after an answer the loop made itself (an in-process model executed inline, a
health or metadata call), and around a model worker process's work (process mode): when the
loop sends a worker a bundle, so that its answer is read the moment it lands, and when it
delivers a worker's answer, so that the next request is (``pytriton_core.loop_polling``,
through which process mode reaches this, below the front ends). A request that waits for an
instance thread stops the polling (``waiting``), so the loop never takes the GIL from the
thread it waits for; it sleeps as before and is woken by that work's answer. A worker
process needs no GIL, and measured, polling for it pays where the loop waits for it most
(lone requests +32-38 %, c4 +15-28 %; docs/benchmarks.md, "Busy polling while a worker
process answers"). The window counts from the last such moment: a server with no traffic
never polls, and one under load has no idle turns to poll in.

How: each poll is one ``call_soon`` of ``_poll``; a loop with a callback ready polls its
sockets without blocking (``epoll_wait`` with a zero timeout) before running it. The
server makes one ``BusyPoll`` for its event loop and hands it to its front ends.
"""

from __future__ import annotations

import asyncio

from pytriton_core import clock


class BusyPoll:
    """The polling window of one event loop. An extension type (busy_poll.pxd): the front
    ends call ``answered``/``waiting`` once per request."""

    def __init__(self, loop: asyncio.AbstractEventLoop, window_us: int) -> None:
        self._loop = loop
        self._window_ns = window_us * 1000
        self._until_ns = 0  # monotonic ns: poll until then
        self._polling = False  # a ``_poll`` is scheduled

    def answered(self) -> None:
        """The loop answered a request itself: poll for the next one for the window."""
        self._until_ns = clock.now_ns() + self._window_ns
        if not self._polling:
            self._polling = True
            self._loop.call_soon(self._poll)

    def waiting(self) -> None:
        """A request waits for work elsewhere: stop polling, sleep until it is answered."""
        self._until_ns = 0

    @property
    def polling(self) -> bool:
        return self._polling

    def _poll(self) -> None:
        if clock.now_ns() < self._until_ns:
            self._loop.call_soon(self._poll)
        else:
            self._polling = False
