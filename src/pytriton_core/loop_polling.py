"""The event loops' busy polls (frontends/busy_poll.py), as the layers under the front ends
reach them: process mode asks its loop to poll while a worker process has its work.

The busy poll stops while a request waits for an instance thread, which needs the GIL a
polling loop would keep taking. A worker process needs neither the GIL nor, with a core
free, the loop's core: when the loop sends it a bundle, polling reads the answer the
moment it lands instead of after a wake-up from ``epoll_wait``, and once an answer is
written, the next request too (docs/architecture.md, "Between requests";
docs/benchmarks.md, "Busy polling while a worker process answers").

The server registers its loop's poll; process mode calls ``poll_for_worker`` on that loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

# A server's event loop -> its busy poll's ``answered`` (poll for its window from now).
_POLLS: dict[asyncio.AbstractEventLoop, Callable[[], None]] = {}


def register(loop: asyncio.AbstractEventLoop, poll: Callable[[], None]) -> None:
    """``poll`` starts ``loop``'s busy-polling window; call it on that loop only."""
    _POLLS[loop] = poll


def unregister(loop: asyncio.AbstractEventLoop) -> None:
    _POLLS.pop(loop, None)


def poll_for_worker(loop: asyncio.AbstractEventLoop | None) -> None:
    """On ``loop``: a bundle went to a worker process, or a worker's answer was delivered;
    poll rather than sleep (nothing where the loop has no busy poll, or is None)."""
    poll = _POLLS.get(loop) if loop is not None else None
    if poll is not None:
        poll()
