"""``--http-request-timeout``: requests whose bytes arrive too slowly (slowloris) are ended.

One task per front end looks at every connection once a second, instead of a timer per
request: the common request, which arrives whole in one read, pays nothing for the limit.
A request is therefore ended between ``timeout_s`` and ``timeout_s`` + 1 s after its first
byte.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Collection
from typing import Protocol

_SWEEP_INTERVAL_S = 1.0


class SlowRequestTarget(Protocol):
    def expire_if_slow(self, started_before_ns: int, timeout_s: float) -> None: ...


async def expire_slow_requests(
    connections: Collection[SlowRequestTarget], timeout_s: float
) -> None:
    """Until cancelled: each second, end the requests that began arriving over
    ``timeout_s`` ago and are still incomplete."""
    interval = min(_SWEEP_INTERVAL_S, timeout_s)
    timeout_ns = int(timeout_s * 1e9)
    while True:
        await asyncio.sleep(interval)
        started_before = time.monotonic_ns() - timeout_ns
        for connection in list(connections):
            connection.expire_if_slow(started_before, timeout_s)
