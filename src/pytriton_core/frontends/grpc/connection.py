"""One client connection of the gRPC front end: the transport, the compiled HTTP/2 state
machine (``csrc/h2``) and the calls in flight on it.

Received bytes go to the state machine, which hands over each call once its client has
sent what it needs (``unary_call``, ``stream_started``); what the calls answer goes out in
one ``writelines`` per read (``flush`` after ``feed``), or at once for an answer that came
later.

The connection also keeps gRPC core's transport rules, from the ``--grpc-*`` flags
(``GrpcOptions``):

- keepalive: every ``keepalive_time_ms`` a PING (while calls are open, or always with
  ``keepalive_permit_without_calls``; no more than ``http2_max_pings_without_data`` in a
  row without data sent, 0 for no limit); no answer within ``keepalive_timeout_ms`` closes
  the connection;
- the client's pings: one sooner than ``http2_min_recv_ping_interval_without_data_ms``
  after the last (two hours while no call is open, unless calls are not required) is a
  strike; past ``http2_max_ping_strikes`` (0: no limit) the connection ends with GOAWAY
  ENHANCE_YOUR_CALM "too_many_pings". Sending data clears the strikes;
- ``max_connection_age_ms`` (±10 %): then a GOAWAY (no new calls), and the connection
  closes once its calls are done or ``max_connection_age_grace_ms`` has passed.
"""

from __future__ import annotations

import asyncio
import logging
import random
import socket
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, cast

from pytriton_core._native.h2_connection import (
    ENHANCE_YOUR_CALM,
    H2ConnectionError,
    H2ServerConnection,
    H2Stream,
)
from pytriton_core._native.hpack import HpackDecoder
from pytriton_core.frontends.busy_poll import BusyPoll
from pytriton_core.frontends.grpc.calls import Call, Method, StreamCall, decompressed
from pytriton_core.frontends.grpc.compression import NONE, response_encoding
from pytriton_core.frontends.grpc.status import METHOD_NOT_FOUND, CallStatus, StatusCode
from pytriton_core.options import CompressionLevel, GrpcOptions
from pytriton_core.service import InferenceService

log = logging.getLogger(__name__)

# What a client's HEADERS may decode to (HTTP/2's SETTINGS_MAX_HEADER_LIST_SIZE, gRPC
# core's default).
MAX_HEADER_LIST_SIZE = 16 << 10
# The stream and connection windows this side grants (gRPC core's 4 MiB).
INITIAL_WINDOW_SIZE = 4 << 20
_TWO_HOURS_S = 2 * 3600.0


@dataclass
class Endpoint:
    """What the connections of one listener share."""

    service: InferenceService
    methods: Mapping[bytes, Method]  # by path, "/inference.GRPCInferenceService/ModelInfer"
    streaming_paths: frozenset[bytes]
    connections: set[GrpcConnection] = field(default_factory=set)
    busy_poll: BusyPoll | None = None  # the server's, for its loop (frontends/busy_poll.py)

    @property
    def options(self) -> GrpcOptions:
        return self.service.options.grpc


class GrpcConnection(asyncio.Protocol):
    def __init__(self, endpoint: Endpoint) -> None:
        self._endpoint = endpoint
        self.service = endpoint.service
        options = self._options = endpoint.options
        self.max_receive_message_size = options.max_receive_message_size
        self.max_send_message_size = options.max_send_message_size
        self.forwards_headers = options.header_forward_pattern is not None
        self._compression: CompressionLevel = options.response_compression_level
        self.h2 = H2ServerConnection(
            self,
            HpackDecoder(max_header_list_size=MAX_HEADER_LIST_SIZE),
            endpoint.streaming_paths,
            max_concurrent_streams=options.max_concurrent_streams,
            max_receive_message_size=options.max_receive_message_size,
            initial_window_size=INITIAL_WINDOW_SIZE,
            max_header_list_size=MAX_HEADER_LIST_SIZE,
        )
        self._transport: asyncio.Transport | None = None
        self._feeding = False
        self._write_paused = False
        self._drain_waiters: list[asyncio.Future[None]] = []
        self._timers: dict[str, asyncio.TimerHandle] = {}
        # Keepalive and the client's pings.
        self._ping_unanswered = False  # a keepalive ping of ours awaits its ACK
        self._pings_without_data = 0
        self._last_ping_received = float("-inf")
        self._ping_strikes = 0
        self._closing_when_idle = False

    # ------------------------------------------------------------------- asyncio

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)
        connections = self._endpoint.connections
        if len(connections) >= self._options.max_connections:
            log.warning(
                "GRPC connection refused: %d are open, the limit (--grpc-max-connections)",
                len(connections),
            )
            self._transport.abort()
            self._transport = None
            return
        connections.add(self)
        sock = self._transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.flush()  # the server's preface
        if self._options.keepalive_time_ms < 2**31 - 1:
            self._after("keepalive", self._options.keepalive_time_ms / 1000, self._keepalive)
        age_ms = self._options.max_connection_age_ms
        if age_ms is not None:
            jitter = 1.0 + random.uniform(-0.1, 0.1)
            self._after("age", age_ms / 1000 * jitter, self._age_reached)

    def connection_lost(self, exc: Exception | None) -> None:
        self._endpoint.connections.discard(self)
        self._transport = None
        for timer in self._timers.values():
            timer.cancel()
        self._timers.clear()
        for call in self.h2.close_streams():
            call.reset_received(0)
        self._wake_writers()

    def data_received(self, data: bytes) -> None:
        self._feeding = True
        try:
            self.h2.feed(data)
        except H2ConnectionError as exc:
            log.debug("GRPC connection closed: %s", exc)
            self._feeding = False
            self.flush()
            self.close()
            return
        except Exception:
            log.exception("GRPC connection failed")
            self._feeding = False
            self.abort()
            return
        self._feeding = False
        self.flush()

    def eof_received(self) -> bool:
        return False  # HTTP/2 has no half-close of the connection: close it

    def pause_writing(self) -> None:
        self._write_paused = True

    def resume_writing(self) -> None:
        self._write_paused = False
        self._wake_writers()

    # ------------------------------------------------------------------- output

    def flush(self) -> None:
        out = self.h2.take_output()
        if out is not None and self._transport is not None:
            self._transport.writelines(out)

    def sent(self) -> None:
        """A call sent headers or data: the client's ping strikes start over, our
        keepalive pings count from zero; written now unless a read is being handled (it
        writes everything at its end)."""
        self._ping_strikes = 0
        self._last_ping_received = float("-inf")
        self._pings_without_data = 0
        if not self._feeding:
            self.flush()
        if self._closing_when_idle and not self.h2.streams:
            self.flush()
            self.close()

    async def drained(self) -> None:
        """Wait while the socket's buffer is past its high-water mark."""
        while self._write_paused and self._transport is not None:
            waiter = asyncio.get_running_loop().create_future()
            self._drain_waiters.append(waiter)
            await waiter

    def _wake_writers(self) -> None:
        waiters, self._drain_waiters = self._drain_waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    def response_encoding(self, stream: H2Stream) -> int:
        if self._compression is CompressionLevel.NONE:
            return NONE
        return response_encoding(self._compression, stream.accept_encoding)

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()

    def abort(self) -> None:
        if self._transport is not None:
            self._transport.abort()

    # ------------------------------------------------------------- calls (from h2)

    def unary_call(self, stream: H2Stream, message: bytes | None, compressed: bool) -> Call | None:
        method = self._endpoint.methods.get(stream.path)
        if method is None or method.start is None:
            self.h2.send_status(stream, StatusCode.UNIMPLEMENTED, METHOD_NOT_FOUND)
            return None
        try:
            if message is None:
                raise CallStatus(StatusCode.INTERNAL, "the call ended without its request message")
            if compressed or stream.encoding is not None:
                message = decompressed(stream, message, compressed, self.max_receive_message_size)
        except CallStatus as status:
            self.h2.send_status(stream, status.code, status.message)
            return None
        call = method.start(self, stream, method, message)
        poll = self._endpoint.busy_poll
        if poll is not None:
            if call is None:  # answered on the loop, within this step
                poll.answered()
            else:
                poll.waiting()
        return call

    def stream_started(self, stream: H2Stream) -> Call | None:
        method = self._endpoint.methods.get(stream.path)
        assert method is not None and method.stream_body is not None
        return StreamCall.open(self, stream, method)

    def stream_refused(self, stream: H2Stream, status: int, message: str) -> None:
        call = stream.call
        if isinstance(call, Call):
            call.cancel()
            call.end(StatusCode(status), message)
        else:
            self.h2.send_status(stream, status, message)
            self.sent()

    # ------------------------------------------------------------- pings and age

    def ping_received(self) -> None:
        """gRPC core's ping policy: too many pings with nothing sent in between end the
        connection."""
        options = self._options
        now = time.monotonic()
        idle = not self.h2.streams
        interval = options.http2_min_recv_ping_interval_without_data_ms / 1000
        if idle and not options.keepalive_permit_without_calls:
            interval = _TWO_HOURS_S
        too_soon = now < self._last_ping_received + interval
        self._last_ping_received = now
        if not too_soon:
            return
        self._ping_strikes += 1
        if options.http2_max_ping_strikes and self._ping_strikes > options.http2_max_ping_strikes:
            log.debug("GRPC connection closed: the client pings too often")
            self.h2.goaway(ENHANCE_YOUR_CALM, b"too_many_pings")
            self.flush()
            self.close()

    def ping_acked(self, opaque: bytes) -> None:
        self._ping_unanswered = False

    def goaway_received(self, last_stream_id: int, code: int) -> None:
        log.debug("GRPC client sent GOAWAY (error code %d)", code)

    def _keepalive(self) -> None:
        options = self._options
        self._after("keepalive", options.keepalive_time_ms / 1000, self._keepalive)
        if self._transport is None or self._ping_unanswered:
            return
        if not self.h2.streams and not options.keepalive_permit_without_calls:
            return
        limit = options.http2_max_pings_without_data
        if limit and self._pings_without_data >= limit:
            return
        self._pings_without_data += 1
        self._ping_unanswered = True
        self.h2.ping(b"keepaliv")
        self.flush()
        self._after("watchdog", options.keepalive_timeout_ms / 1000, self._keepalive_watchdog)

    def _keepalive_watchdog(self) -> None:
        # The timer belongs to the ping now unanswered (a new ping replaces it), so no
        # clock check: the loop's cached time can fire it a little before the monotonic
        # clock says the timeout is up, and a check would then never close the connection.
        if self._ping_unanswered:
            log.debug("GRPC connection closed: no answer to the keepalive ping")
            self.abort()

    def _age_reached(self) -> None:
        self.goaway()
        grace_ms = self._options.max_connection_age_grace_ms
        if grace_ms is not None:
            self._after("grace", grace_ms / 1000, self.abort)

    def goaway(self) -> None:
        """No new calls: the client is told, and the connection closes once its calls
        are done."""
        if self._transport is None:
            return
        self.h2.goaway()
        self.flush()
        self._closing_when_idle = True
        if not self.h2.streams:
            self.close()

    def cancel_calls(self) -> None:
        """The server stops: what is still running is cancelled, and its call ends
        UNAVAILABLE, "the server is shutting down"."""
        for stream in list(self.h2.streams.values()):
            call = stream.call
            if isinstance(call, Call):
                call.cancel()
                call.end(StatusCode.UNAVAILABLE, "the server is shutting down")
        self.flush()
        self.close()

    @property
    def busy(self) -> bool:
        return bool(self.h2.streams)

    def _after(self, name: str, seconds: float, callback: Callable[[], Any]) -> None:
        """Run ``callback`` in ``seconds``, in place of the timer of that name."""
        timer = self._timers.get(name)
        if timer is not None:
            timer.cancel()
        self._timers[name] = asyncio.get_running_loop().call_later(seconds, callback)
