"""pytriton_core.loop_polling: process mode reaches its own loop's busy poll, and no other."""

from __future__ import annotations

import asyncio

from pytriton_core import loop_polling


def test_a_loop_polls_through_what_it_registered_and_no_other_loop_does() -> None:
    first, second, unregistered = (asyncio.new_event_loop() for _ in range(3))
    calls: list[str] = []
    try:
        loop_polling.register(first, lambda: calls.append("first"))
        loop_polling.register(second, lambda: calls.append("second"))
        loop_polling.poll_for_worker(first)
        loop_polling.poll_for_worker(unregistered)  # no busy poll there: nothing happens
        loop_polling.poll_for_worker(second)
        assert calls == ["first", "second"]
        loop_polling.unregister(first)
        loop_polling.unregister(first)  # twice: nothing
        loop_polling.poll_for_worker(first)
        assert calls == ["first", "second"]
    finally:
        loop_polling.unregister(second)
        for loop in (first, second, unregistered):
            loop.close()
