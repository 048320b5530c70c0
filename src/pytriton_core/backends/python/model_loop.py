"""A Python model instance's own event loop, for ``async def`` hooks (as Triton's stub runs
one per instance), on a thread of its own: never the server's loop.

A default-mode model's ``async def execute`` holds its instance until it returns, as in
Triton, but the ``async_exec`` calls it awaits overlap; a decoupled model's runs in the
background, so the instance takes its next batch at once and many run concurrently.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Callable, Coroutine
from typing import Any

Done = Callable[["concurrent.futures.Future[Any]"], None]


class ModelLoop:
    def __init__(self, name: str) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name=f"model-loop-{name}", daemon=True
        )
        self._thread.start()

    def run(self, coroutine: Coroutine[Any, Any, Any]) -> Any:
        """Run to completion, blocking the calling thread (it keeps its context vars)."""
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result()

    def start(self, coroutine: Coroutine[Any, Any, Any], done: Done) -> None:
        """Run in the background; ``done`` gets the finished future, on the loop's thread."""
        asyncio.run_coroutine_threadsafe(coroutine, self._loop).add_done_callback(done)

    def close(self, timeout_s: float = 5.0) -> None:
        """Stop the loop (coroutines still running are dropped, as Triton's stub does)."""
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout_s)
        if not self._thread.is_alive():
            self._loop.close()
