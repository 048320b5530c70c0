"""Fuzz the gRPC front end's HTTP/2 state machine (``_native.h2_connection``, over the
compiled HPACK decoder): what any client can send before a handler sees a call.

The input follows the connection preface and an empty SETTINGS frame, so the search
starts among frames. A handler answers every unary call (an echo) and every stream (each
message echoed, a status at its end), so the sending side runs too.

Oracles:
- nothing but ``H2ConnectionError`` (the client broke the protocol) leaves ``feed``;
- the bytes fed whole and the same bytes cut anywhere give the same calls, the same
  frames out and the same error: the parser keeps no state that depends on how the
  socket split its reads;
- a closed connection sends nothing more.
"""

from __future__ import annotations

import sys
from typing import Any

import atheris
import instrumentation

# what this target fuzzes (instrumentation.py)
SUBJECT = ("pytriton_core._native.h2_connection", "pytriton_core._native.hpack")

with instrumentation.imports(SUBJECT):
    from common import fuzz

    from pytriton_core._native.h2_connection import (
        CONNECTION_PREFACE,
        H2ConnectionError,
        H2ServerConnection,
    )
    from pytriton_core._native.hpack import HpackDecoder

START = CONNECTION_PREFACE + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"  # preface, SETTINGS
STREAMING = b"/s"


class Echo:
    """Records what the connection hands over and answers it on ``connection``."""

    def __init__(self) -> None:
        self.connection: H2ServerConnection | None = None
        self.seen: list[object] = []

    def unary_call(self, stream: Any, message: bytes | None, compressed: bool) -> None:
        self.seen.append(("unary", stream.stream_id, stream.path, message, compressed))
        assert self.connection is not None
        self.connection.send_unary(stream, message or b"", compressed, 0)

    def stream_started(self, stream: Any) -> EchoStream:
        self.seen.append(("stream", stream.stream_id, tuple(stream.metadata)))
        assert self.connection is not None
        return EchoStream(self.seen, self.connection, stream)

    def stream_refused(self, stream: Any, status: int, message: str) -> None:
        self.seen.append(("refused", stream.stream_id, status, message))
        assert self.connection is not None
        self.connection.send_status(stream, status, message)

    def ping_received(self) -> None:
        self.seen.append(("ping",))

    def ping_acked(self, opaque: bytes) -> None:
        self.seen.append(("ack", opaque))

    def goaway_received(self, last_stream_id: int, code: int) -> None:
        self.seen.append(("goaway", last_stream_id, code))


class EchoStream:
    """A streaming call: each message echoed, the OK status at its end."""

    def __init__(self, seen: list[object], connection: H2ServerConnection, stream: Any) -> None:
        self.seen, self.connection, self.stream = seen, connection, stream

    def message_received(self, message: bytes, compressed: bool) -> None:
        self.seen.append(("message", self.stream.stream_id, message, compressed))
        self.connection.send_message(self.stream, message, compressed, 0)

    def end_received(self) -> None:
        self.seen.append(("end", self.stream.stream_id))
        self.connection.send_status(self.stream, 0, "")

    def reset_received(self, code: int) -> None:
        self.seen.append(("reset", self.stream.stream_id, code))

    def window_opened(self) -> None:
        self.seen.append(("window", self.stream.stream_id))


def run(pieces: list[bytes]) -> tuple[list[object], bytes, object]:
    echo = Echo()
    connection = H2ServerConnection(
        echo,
        HpackDecoder(max_header_list_size=4096),
        {STREAMING},
        max_concurrent_streams=8,
        max_receive_message_size=1 << 16,
    )
    echo.connection = connection
    out = bytearray()
    error: object = None
    for piece in pieces:
        try:
            connection.feed(piece)
        except H2ConnectionError as exc:
            error = (exc.code, str(exc))
        for buffer in connection.take_output() or ():
            out += buffer
        if connection.closed:
            connection.feed(b"\0" * 9)  # read no more
            assert connection.take_output() is None
            break
    return echo.seen, bytes(out), error


def test_one_input(data: bytes) -> None:
    provider = atheris.FuzzedDataProvider(data)
    cuts = sorted(provider.ConsumeIntListInRange(provider.ConsumeIntInRange(0, 6), 0, 512))
    body = START + provider.ConsumeBytes(provider.remaining_bytes())
    whole = run([body])
    pieces, start = [], 0
    for cut in cuts:
        if start < cut < len(body):
            pieces.append(body[start:cut])
            start = cut
    pieces.append(body[start:])
    assert run(pieces) == whole, (cuts, whole)


if __name__ == "__main__":
    fuzz(test_one_input, SUBJECT)
    sys.exit(0)
