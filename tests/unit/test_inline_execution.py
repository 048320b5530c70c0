"""``InlineExecution`` (inference/inline.py) on a real event loop: it runs at once, gives
the loop back while it waits, goes on where it left once woken, and a long one lets the
loop's other work run (``take_turn``)."""

from __future__ import annotations

import asyncio
import time

from pytriton_core.inference.inline import SLICE_NS, InlineExecution, current_inline, may_start


def test_it_runs_at_once_and_sees_itself() -> None:
    async def main() -> list[object]:
        seen: list[object] = []

        def work() -> None:
            seen.append(current_inline())
            seen.append(may_start())  # not inside another one

        execution = InlineExecution(work, asyncio.get_running_loop())
        execution.start()
        seen.append(execution.dead)
        assert seen[0] is execution
        return [seen[1], seen[2], current_inline(), may_start()]

    assert asyncio.run(main()) == [False, True, None, True]


def test_a_wait_gives_the_loop_back_until_woken() -> None:
    async def main() -> list[str]:
        loop = asyncio.get_running_loop()
        events: list[str] = []

        def work() -> None:
            inline = current_inline()
            assert inline is not None
            events.append("waits")
            loop.call_later(0.01, inline.wake)
            inline.suspend()
            events.append("goes on")

        execution = InlineExecution(work, loop)
        execution.start()
        events.append("loop")  # start returned while the execution waits
        await asyncio.sleep(0.005)
        events.append("loop again")
        await asyncio.sleep(0.05)
        assert execution.dead
        return events

    assert asyncio.run(main()) == ["waits", "loop", "loop again", "goes on"]


def test_a_long_execution_lets_other_work_run_between_its_calls() -> None:
    calls = 40

    async def main() -> tuple[int, int]:
        loop = asyncio.get_running_loop()
        others: list[int] = []
        turns_taken = 0

        def tick() -> None:
            others.append(len(others))
            loop.call_soon(tick)

        def work() -> None:
            nonlocal turns_taken
            inline = current_inline()
            assert inline is not None
            for _ in range(calls):  # a chain of calls, each after some work (0.3 ms)
                busy_until = time.monotonic_ns() + SLICE_NS * 3 // 10
                while time.monotonic_ns() < busy_until:
                    pass
                before = len(others)
                inline.take_turn()
                turns_taken += int(len(others) > before)

        loop.call_soon(tick)
        execution = InlineExecution(work, loop)
        execution.start()
        while not execution.dead:
            await asyncio.sleep(0)
        return turns_taken, len(others)

    turns_taken, _ = asyncio.run(main())
    # At least 12 ms of work: the loop ran other work in between, at most once per call.
    assert 1 <= turns_taken <= calls
