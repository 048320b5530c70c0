"""Streamed HTTP bodies: server-sent events over chunked transfer encoding.

A handler that streams answers with an ``HttpResponse`` whose ``stream`` is a
``ResponseStream``: the request's response callback encodes each response as a JSON document
and ``push``es it on the event loop; the connection (``write_stream``) sends each as one
event (``data: <document>``, one chunk, the document itself not copied) as they come, and
no faster than the client reads them: it waits while the transport holds more than its
high-water mark (the write-side flow control of the HTTP protocol).

Back-pressure reaches the model through the request's ``ResponseWindow``
(``inference.flow``): each response holds its bytes of the window until its event has left
for the client, and a decoupled model's sender waits on its own thread while the window is
full. A slow reader therefore holds about the window, the transport's buffer and the
response being encoded, however many responses the model has left to send.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Sequence
from typing import Protocol

from pytriton_core.frontends.http.messages import Buffer
from pytriton_core.inference.flow import ResponseWindow

EVENT_STREAM = b"text/event-stream; charset=utf-8"
# An event-stream comment: every reader skips it; it probes a half-closed connection.
SSE_COMMENT = b":\n\n"
_LAST_CHUNK = b"0\r\n\r\n"


_EVENT_FIELD = b"data: "
_EVENT_END = b"\n\n"


class ResponseStream:
    """Events (their data: JSON documents, one line each) on their way from the model to one
    client, on the event loop."""

    def __init__(self, window: ResponseWindow, content_type: bytes = EVENT_STREAM) -> None:
        self.content_type = content_type
        self.window = window
        self._chunks: deque[tuple[bytes, int]] = deque()  # (data, window bytes it holds)
        self._ended = False
        self._waiter: asyncio.Future[None] | None = None

    def push(self, chunk: bytes, window_bytes: int = 0) -> None:
        """Queue an event's data, holding ``window_bytes`` of the window (dropped once the
        stream has ended)."""
        if self._ended:
            self.window.release(window_bytes)
            return
        self._chunks.append((chunk, window_bytes))
        self._wake()

    def end(self) -> None:
        """No more events: the body ends once the queued ones are sent."""
        self._ended = True
        self._wake()

    def abandon(self) -> None:
        """The client went away: drop what waits and stop pacing the model."""
        self._ended = True
        self._chunks.clear()
        self.window.close()
        self._wake()

    @property
    def ended(self) -> bool:
        return self._ended

    async def take(self) -> tuple[list[bytes], int] | None:
        """Every event queued now (waiting for one) and the window bytes they hold; None
        once the stream has ended and all were taken."""
        while not self._chunks:
            if self._ended:
                return None
            self._waiter = asyncio.get_running_loop().create_future()
            await self._waiter
        chunks = [chunk for chunk, _ in self._chunks]
        held = sum(window_bytes for _, window_bytes in self._chunks)
        self._chunks.clear()
        return chunks, held

    def _wake(self) -> None:
        waiter, self._waiter = self._waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result(None)


class StreamSink(Protocol):
    """What ``write_stream`` needs of a connection."""

    def write_buffers(self, buffers: Sequence[Buffer]) -> bool:
        """Write to the transport; False once the connection is gone."""

    async def drained(self) -> None:
        """Return once the transport is below its high-water mark (at once if it is)."""


async def write_stream(sink: StreamSink, stream: ResponseStream) -> bool:
    """Send ``stream`` as chunks until it ends; True if the body was completed."""
    while (taken := await stream.take()) is not None:
        chunks, held = taken
        buffers: list[Buffer] = []
        for data in chunks:
            size = len(_EVENT_FIELD) + len(data) + len(_EVENT_END)
            buffers += (b"%x\r\n%s" % (size, _EVENT_FIELD), data, _EVENT_END + b"\r\n")
        if not sink.write_buffers(buffers):
            stream.abandon()
            return False
        await sink.drained()  # the bytes are the kernel's now, or the client's
        stream.window.release(held)
    return sink.write_buffers((_LAST_CHUNK,))
