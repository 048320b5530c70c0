"""Streamed bodies without sockets: the chunked framing of server-sent events, the pacing by
the connection's drain, and the response window that holds a model back for a slow reader."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Sequence

import numpy as np
import pytest

from pytriton_core import types
from pytriton_core.frontends.http.generate_codec import fill_shape
from pytriton_core.frontends.http.messages import Buffer
from pytriton_core.frontends.http.streaming import ResponseStream, write_stream
from pytriton_core.inference.flow import ResponseWindow, response_bytes
from pytriton_core.inference.response import InferenceResponse
from pytriton_core.inference.tensor import Tensor


class Sink:
    """A connection whose transport is paused until ``resume``."""

    def __init__(self) -> None:
        self.written = bytearray()
        self.paused = False
        self.gone = False
        self._resumed = asyncio.Event()

    def write_buffers(self, buffers: Sequence[Buffer]) -> bool:
        if self.gone:
            return False
        for buffer in buffers:
            self.written += buffer
        return True

    async def drained(self) -> None:
        while self.paused:
            self._resumed.clear()
            await self._resumed.wait()

    def resume(self) -> None:
        self.paused = False
        self._resumed.set()


def run(coroutine: object) -> object:
    return asyncio.run(coroutine)  # type: ignore[arg-type]


def test_events_go_out_as_chunks_then_the_last_chunk() -> None:
    async def scenario() -> bytes:
        sink = Sink()
        stream = ResponseStream(ResponseWindow())
        writer = asyncio.create_task(write_stream(sink, stream))
        stream.push(b'{"a":1}')
        await asyncio.sleep(0)
        stream.push(b'{"b":2}')
        stream.end()
        assert await writer is True
        return bytes(sink.written)

    assert run(scenario()) == (
        b'f\r\ndata: {"a":1}\n\n\r\n' + b'f\r\ndata: {"b":2}\n\n\r\n' + b"0\r\n\r\n"
    )


def test_the_window_is_released_only_once_the_transport_drained() -> None:
    async def scenario() -> list[int]:
        sink = Sink()
        sink.paused = True
        window = ResponseWindow(limit_bytes=100)
        window.acquire(60)
        stream = ResponseStream(window)
        writer = asyncio.create_task(write_stream(sink, stream))
        stream.push(b"x" * 10, 60)
        await asyncio.sleep(0.01)
        seen = [window.in_flight, len(sink.written)]
        sink.resume()
        await asyncio.sleep(0.01)
        seen.append(window.in_flight)
        stream.end()
        await writer
        return seen

    held, written, after = run(scenario())  # type: ignore[misc]
    assert (held, after) == (60, 0)
    assert written > 0  # written to the transport, which holds it


def test_a_gone_connection_abandons_the_stream() -> None:
    async def scenario() -> tuple[bool, bool]:
        sink = Sink()
        sink.gone = True
        stream = ResponseStream(ResponseWindow())
        writer = asyncio.create_task(write_stream(sink, stream))
        stream.push(b"event")
        completed = await writer
        return completed, stream.ended

    assert run(scenario()) == (False, True)


def test_a_full_window_holds_the_producer_until_released() -> None:
    window = ResponseWindow(limit_bytes=100)
    window.acquire(80)
    entered = threading.Event()
    done = threading.Event()

    def produce() -> None:
        entered.set()
        window.acquire(40)  # 80 + 40 > 100: waits
        done.set()

    thread = threading.Thread(target=produce)
    thread.start()
    entered.wait()
    assert not done.wait(0.1)
    window.release(80)
    assert done.wait(5)
    thread.join()
    assert window.in_flight == 40


def test_one_response_larger_than_the_window_still_goes_alone() -> None:
    window = ResponseWindow(limit_bytes=10)
    started = time.monotonic()
    window.acquire(1000)
    assert time.monotonic() - started < 1
    assert window.in_flight == 1000


def test_closing_the_window_lets_waiting_producers_go() -> None:
    window = ResponseWindow(limit_bytes=10)
    window.acquire(10)
    thread = threading.Thread(target=window.acquire, args=(10,))
    thread.start()
    window.close()
    thread.join(5)
    assert not thread.is_alive()


def test_response_bytes_counts_bytes_contents() -> None:
    text = np.array([b"abc", b"de"], np.object_)
    numbers = np.zeros(8, np.float32)
    response = InferenceResponse(
        [Tensor("t", types.BYTES, text), Tensor("n", types.BY_WIRE_NAME["FP32"], numbers)]
    )
    assert response_bytes(response) == (4 + 3) + (4 + 2) + 32


@pytest.mark.parametrize(
    ("dims", "count", "shape"),
    [
        ([1], 1, [1]),
        ([-1], 5, [5]),
        ([2, -1], 4, [2, 2]),
        ([-1, 3], 6, [2, 3]),
        ([-1, -1], 4, [1, 4]),  # the innermost variable dim takes the count
        ([-1, 2, -1], 6, [1, 2, 3]),
        ([-1], 0, [0]),
    ],
)
def test_generate_fills_the_variable_dims(dims: list[int], count: int, shape: list[int]) -> None:
    assert fill_shape("x", dims, count) == shape


@pytest.mark.parametrize(("dims", "count"), [([1], 2), ([2, -1], 3), ([4], 2)])
def test_generate_refuses_counts_the_shape_cannot_take(dims: list[int], count: int) -> None:
    with pytest.raises(Exception, match="can not convert input 'x' to tensor with proper shape"):
        fill_shape("x", dims, count)
