"""The event loop's polling window (``frontends/busy_poll.py``) on a real uvloop loop: it
opens with an answer made on the loop, lasts its window from the last such answer, and
closes at once when a request waits for work elsewhere."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
import uvloop

from pytriton_core.frontends.busy_poll import BusyPoll


@pytest.fixture
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    loop = uvloop.new_event_loop()
    yield loop
    loop.close()


def turns(loop: asyncio.AbstractEventLoop, count: int) -> None:
    """Let the loop run ``count`` turns."""

    async def go() -> None:
        for _ in range(count):
            await asyncio.sleep(0)

    loop.run_until_complete(go())


def test_an_answer_opens_the_window_and_it_stays_open_while_it_lasts(
    loop: asyncio.AbstractEventLoop,
) -> None:
    poll = BusyPoll(loop, 60_000_000)  # a minute: open throughout this test
    assert not poll.polling
    poll.answered()
    assert poll.polling
    turns(loop, 50)
    assert poll.polling


def test_the_window_closes_once_it_has_passed(loop: asyncio.AbstractEventLoop) -> None:
    poll = BusyPoll(loop, 1_000)  # 1 ms
    poll.answered()
    loop.run_until_complete(asyncio.sleep(0.05))
    assert not poll.polling
    poll.answered()  # and opens again with the next answer
    assert poll.polling


def test_a_request_that_waits_closes_the_window_at_the_next_turn(
    loop: asyncio.AbstractEventLoop,
) -> None:
    poll = BusyPoll(loop, 60_000_000)
    poll.answered()
    turns(loop, 3)
    poll.waiting()
    turns(loop, 3)
    assert not poll.polling


def test_a_later_answer_extends_the_window(loop: asyncio.AbstractEventLoop) -> None:
    poll = BusyPoll(loop, 200_000)  # 200 ms
    poll.answered()
    open_before_each_answer = []

    async def answer_every_10_ms() -> None:
        for _ in range(30):  # 300 ms in all: past the first answer's window
            await asyncio.sleep(0.01)
            open_before_each_answer.append(poll.polling)
            poll.answered()

    loop.run_until_complete(answer_every_10_ms())
    assert all(open_before_each_answer)
