"""One gRPC call in flight: what its handler reads of it, and how it is answered.

A call is made when its client has sent what the handler needs (a unary call's one
message; a stream's headers) and lives until its status has gone out or the client reset
it. Three kinds, by how they run:

- ``InferCall`` (``ModelInfer``): no task. The request is submitted with a callback that
  answers the call; a request the loop runs inline is answered before ``start`` returns.
- ``TaskCall`` (every other unary RPC): the handler coroutine in a task.
- ``StreamCall`` (``ModelStreamInfer``): a task reading the call's messages as they come
  and writing its answers, with flow control both ways.

Errors end the call with a status in one place, ``Call.fail``: a core ``ServerError`` with
its code's status, a ``CallStatus`` with its own, anything else as INTERNAL (logged).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import itertools
import logging
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pytriton_core._native.h2_connection import H2Stream
from pytriton_core.errors import InvalidArgumentError, ServerError
from pytriton_core.frontends.grpc.compression import compress, decompress, request_encoding
from pytriton_core.frontends.grpc.infer_codec import (
    DecodedInfer,
    decode_infer_request,
    encode_infer_response,
    forward_metadata,
)
from pytriton_core.frontends.grpc.restricted import refuse_unless_allowed
from pytriton_core.frontends.grpc.status import (
    DEADLINE_EXCEEDED,
    CallStatus,
    StatusCode,
    status_of,
)
from pytriton_core.inference.response import InferenceResponse
from pytriton_core.options import Restriction

if TYPE_CHECKING:
    from pytriton_core.frontends.grpc.connection import GrpcConnection

log = logging.getLogger("pytriton_core.frontends.grpc.service")

Metadata = list[tuple[str, "str | bytes"]]
# The handler of a unary RPC: its parsed request (and the call, for those that read it)
# -> its response message.
UnaryHandler = Callable[..., Awaitable[Any]]


# How a unary call starts: the call in flight, or None when it was answered at once.
UnaryStart = Callable[["GrpcConnection", H2Stream, "Method", bytes], "Call | None"]
# The body of a streaming RPC (``InferStream``'s), run by its ``StreamCall``.
StreamBody = Callable[["StreamCall"], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class Method:
    """An RPC as this front end serves it: a unary one (``start``: ``InferCall.start`` or
    ``TaskCall.start``, the latter with its ``handler`` and request ``parse``) or a
    streaming one (``stream_body``)."""

    rpc: str  # "ServerLive", ...
    start: UnaryStart | None = None
    handler: UnaryHandler | None = None
    parse: Callable[[bytes], Any] | None = None  # the request message class's FromString
    stream_body: StreamBody | None = None
    restriction: Restriction | None = None
    # The name --log-verbose gives its steps (Triton's handler names).
    verbose_name: str = ""
    steps: itertools.count[int] = field(default_factory=itertools.count)


# gRPC's grpc-timeout units, in seconds.
_TIMEOUT_UNITS = {b"H": 3600.0, b"M": 60.0, b"S": 1.0, b"m": 1e-3, b"u": 1e-6, b"n": 1e-9}


def parse_timeout(value: bytes) -> float:
    """``grpc-timeout`` (up to 8 digits and a unit) in seconds."""
    digits, unit = value[:-1], value[-1:]
    if not 0 < len(digits) <= 8 or not digits.isdigit() or unit not in _TIMEOUT_UNITS:
        raise CallStatus(StatusCode.INTERNAL, "Error parsing 'grpc-timeout' metadata")
    return int(digits) * _TIMEOUT_UNITS[unit]


class Call:
    """What every kind of call shares: its stream, metadata, deadline and answers."""

    __slots__ = ("_connection", "_deadline", "_metadata", "done", "method", "stream")

    def __init__(self, connection: GrpcConnection, stream: H2Stream, method: Method) -> None:
        self._connection = connection
        self.stream = stream
        self.method = method
        self.done = False
        self._deadline: asyncio.TimerHandle | None = None
        self._metadata: Metadata | None = None

    @property
    def metadata(self) -> Metadata:
        """The client's custom metadata, as gRPC servers hand it over: names in lower case,
        ``-bin`` values decoded from base64 to bytes, the rest as text."""
        if self._metadata is None:
            self._metadata = [_metadatum(name, value) for name, value in self.stream.metadata]
        return self._metadata

    def refuse_unless_allowed(self) -> None:
        """The method's restriction (``--grpc-restricted-protocol``), checked against the
        call's metadata; an unrestricted call does not decode its metadata."""
        if self.method.restriction is not None:
            refuse_unless_allowed(self.method.restriction, self.metadata)

    def start_deadline(self) -> None:
        """Time the call out at its ``grpc-timeout``, if it has one."""
        timeout = self.stream.timeout
        if timeout is None or self.done:
            return
        try:
            seconds = parse_timeout(timeout)
        except CallStatus as status:
            self.cancel()
            self.fail(status)
            return
        self._deadline = asyncio.get_running_loop().call_later(seconds, self._deadline_passed)

    def _deadline_passed(self) -> None:
        self._deadline = None
        if not self.done:
            self.cancel()
            self.end(StatusCode.DEADLINE_EXCEEDED, DEADLINE_EXCEEDED)

    def answer(self, message: bytes | memoryview) -> None:
        """The call's one response message and the OK status."""
        if self.done:
            return
        connection = self._connection
        encoding = connection.response_encoding(self.stream)
        compressed = False
        if encoding:
            message, compressed = compress(message, encoding)
        if len(message) > connection.max_send_message_size:
            self.end(
                StatusCode.RESOURCE_EXHAUSTED,
                f"Sent message larger than max ({len(message)} vs. "
                f"{connection.max_send_message_size})",
            )
            return
        self._finish()
        connection.h2.send_unary(self.stream, message, compressed, encoding)
        connection.sent()

    def fail(self, error: BaseException) -> None:
        """End the call with the status ``error`` stands for."""
        if isinstance(error, ServerError):
            code, message = status_of(error)
        elif isinstance(error, CallStatus):
            code, message = error.code, error.message
        else:
            log.error("%s failed", self.method.rpc, exc_info=error)
            code, message = StatusCode.INTERNAL, f"{type(error).__name__}: {error}"
        self.end(code, message)

    def end(self, code: StatusCode, message: str = "") -> None:
        if self.done:
            return
        self._finish()
        self._connection.h2.send_status(self.stream, code, message)
        self._connection.sent()

    def _finish(self) -> None:
        self.done = True
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    # The compiled connection's calls -------------------------------------------------

    def reset_received(self, code: int) -> None:
        """The client reset the call (or the connection went): stop what runs for it."""
        if not self.done:
            self._finish()
            self.cancel()

    def cancel(self) -> None:
        """Stop the work running for the call (its status is written by the caller)."""

    def window_opened(self) -> None:
        """The peer's window let out what was held back (``StreamCall`` waits for it)."""


def decompressed(stream: H2Stream, message: bytes, compressed: bool, limit: int) -> bytes:
    """A received message as the handler reads it (``CallStatus`` if it cannot be)."""
    if not compressed:
        if stream.encoding is not None:
            request_encoding(stream.encoding)  # an unknown name fails the call
        return message
    return decompress(message, request_encoding(stream.encoding), limit)


def _metadatum(name: bytes, value: bytes) -> tuple[str, str | bytes]:
    key = name.decode("latin-1")
    if not key.endswith("-bin"):
        return key, value.decode("latin-1")
    try:  # gRPC sends binary values in base64, padded or not
        return key, base64.b64decode(value + b"=" * (-len(value) % 4))
    except binascii.Error:
        return key, value


def _verbose_start(method: Method) -> int:
    number = next(method.steps)
    log.debug("Process for %s, rpc_ok=1, %d step START", method.verbose_name, number)
    return number


def _verbose_end(method: Method, number: int) -> None:
    log.debug("Process for %s, rpc_ok=1, %d step COMPLETE", method.verbose_name, number)
    log.debug("Done for %s, %d", method.verbose_name, number)


class InferCall(Call):
    """``ModelInfer``: decode, submit, answer from the response callback."""

    __slots__ = ("_decoded", "_responses")

    def __init__(self, connection: GrpcConnection, stream: H2Stream, method: Method) -> None:
        super().__init__(connection, stream, method)
        self._decoded: DecodedInfer | None = None
        self._responses: list[InferenceResponse] = []

    @classmethod
    def start(
        cls, connection: GrpcConnection, stream: H2Stream, method: Method, message: bytes
    ) -> InferCall | None:
        received_ns = time.monotonic_ns()
        call = cls(connection, stream, method)
        verbose = log.isEnabledFor(logging.DEBUG)
        number = _verbose_start(method) if verbose else 0
        try:
            call.refuse_unless_allowed()
            service = connection.service
            decoded = decode_infer_request(service, message, unary=True)
            decoded.received_ns = received_ns
            if connection.forwards_headers:
                forward_metadata(decoded.request, call.metadata, service.options.grpc)
            call._decoded = decoded
            service.submit_for_answer(decoded.model, decoded.request, call._answered)
        except Exception as exc:
            call.fail(exc)
        if verbose:
            _verbose_end(method, number)
        if call.done:
            return None
        call.start_deadline()
        return call

    def _answered(self, response: InferenceResponse) -> None:
        decoded = self._decoded
        assert decoded is not None
        # The request, its answer callback and this call refer to each other: cut that, so
        # that the request (and a shared-memory region it reads) goes when the call does.
        self._decoded = None
        decoded.request.on_response = None
        trace = decoded.request.trace
        if self.done:  # reset, or timed out: nobody reads the answer
            if trace is not None:
                trace.finish()
            return
        if trace is not None:
            # The message came whole: its read is a moment; the send spans the encoding.
            trace.stamp("GRPC_WAITREAD_START", decoded.received_ns)
            trace.stamp("GRPC_WAITREAD_END", decoded.received_ns)
            trace.stamp("GRPC_SEND_START")
        try:
            if response.error is not None:
                self.fail(response.error)
            else:
                self.answer(encode_infer_response(decoded, response))
        except Exception as exc:
            self.fail(exc)
        finally:
            if trace is not None:
                trace.stamp("GRPC_SEND_END")
                trace.finish()

    def cancel(self) -> None:
        if self._decoded is not None:
            self._decoded.request.cancel()


class TaskCall(Call):
    """Any other unary RPC: its handler coroutine, in a task of its own."""

    __slots__ = ("_task",)

    def __init__(self, connection: GrpcConnection, stream: H2Stream, method: Method) -> None:
        super().__init__(connection, stream, method)
        self._task: asyncio.Task[None] | None = None

    @classmethod
    def start(
        cls, connection: GrpcConnection, stream: H2Stream, method: Method, message: bytes
    ) -> TaskCall | None:
        call = cls(connection, stream, method)
        call._task = asyncio.get_running_loop().create_task(call._run(message))
        call.start_deadline()
        return call

    async def _run(self, message: bytes) -> None:
        method = self.method
        verbose = log.isEnabledFor(logging.DEBUG)
        number = _verbose_start(method) if verbose else 0
        try:
            self.refuse_unless_allowed()
            assert method.parse is not None and method.handler is not None
            try:
                request = method.parse(message)
            except Exception as exc:  # protobuf's DecodeError
                raise InvalidArgumentError(
                    f"failed to parse the {method.rpc} request message: {exc}"
                ) from None
            response = await method.handler(request)
            self.answer(response.SerializeToString())
        except asyncio.CancelledError:
            pass  # reset by the client, or timed out: the status (if any) is written
        except Exception as exc:
            self.fail(exc)
        finally:
            if verbose:
                _verbose_end(method, number)

    def cancel(self) -> None:
        if self._task is not None:
            self._task.cancel()


# A stream's reader holds no more than this many received messages (or bytes) before the
# client's window stops being granted back: a client that sends faster than requests are
# taken waits in HTTP/2's flow control.
_MAX_QUEUED_MESSAGES = 64
_MAX_QUEUED_BYTES = 64 << 20
# A writer waits while more than this is held back by the client's window.
_MAX_HELD_BACK = 1 << 20


class StreamCall(Call):
    """A bidirectional stream: the messages as they come, the answers as they are written.

    ``run`` is the RPC's body (``ModelStreamInfer``'s ``InferStream.run``): it reads
    ``messages()``, writes with ``write`` and returns (OK) or raises (the status)."""

    __slots__ = (
        "_ended",
        "_queue",
        "_queued_bytes",
        "_reader",
        "_task",
        "_window_waiter",
        "_windows_held",
    )

    def __init__(self, connection: GrpcConnection, stream: H2Stream, method: Method) -> None:
        super().__init__(connection, stream, method)
        self._queue: deque[bytes] = deque()
        self._queued_bytes = 0
        self._ended = False
        self._reader: asyncio.Future[None] | None = None
        self._window_waiter: asyncio.Future[None] | None = None
        self._windows_held = False
        self._task: asyncio.Task[None] | None = None

    @classmethod
    def open(cls, connection: GrpcConnection, stream: H2Stream, method: Method) -> StreamCall:
        assert method.stream_body is not None
        call = cls(connection, stream, method)
        call._task = asyncio.get_running_loop().create_task(call._run(method.stream_body))
        call.start_deadline()
        return call

    async def _run(self, body: StreamBody) -> None:
        try:
            self.refuse_unless_allowed()
            await body(self)
        except asyncio.CancelledError:
            return  # reset by the client, or timed out
        except Exception as exc:
            self.fail(exc)
            return
        self.end(StatusCode.OK)

    # Reading ------------------------------------------------------------------------

    def message_received(self, message: bytes, compressed: bool) -> None:
        if self.done:
            return
        try:
            message = decompressed(
                self.stream, message, compressed, self._connection.max_receive_message_size
            )
        except CallStatus as status:
            self.cancel()
            self.fail(status)
            return
        self._queue.append(message)
        self._queued_bytes += len(message)
        if not self._windows_held and (
            len(self._queue) >= _MAX_QUEUED_MESSAGES or self._queued_bytes >= _MAX_QUEUED_BYTES
        ):
            self._windows_held = True
            self._connection.h2.hold_window(self.stream)
        self._wake_reader()

    def end_received(self) -> None:
        self._ended = True
        self._wake_reader()

    def _wake_reader(self) -> None:
        reader, self._reader = self._reader, None
        if reader is not None and not reader.done():
            reader.set_result(None)

    async def messages(self) -> AsyncIterator[bytes]:
        """The call's messages, in order, until the client ends its side."""
        while True:
            while self._queue:
                message = self._queue.popleft()
                self._queued_bytes -= len(message)
                if self._windows_held and len(self._queue) < _MAX_QUEUED_MESSAGES // 2:
                    self._windows_held = False
                    self._connection.h2.release_window(self.stream)
                    self._connection.flush()
                yield message
            if self._ended or self.done:
                return
            self._reader = asyncio.get_running_loop().create_future()
            await self._reader

    # Writing ------------------------------------------------------------------------

    async def write(self, message: bytes) -> None:
        """Send one message; waits while the client's window or the socket holds back
        more than a little of what was written."""
        if self.done:
            raise CallStatus(StatusCode.CANCELLED, "the call is over")
        connection = self._connection
        encoding = connection.response_encoding(self.stream)
        compressed = False
        if encoding:
            message, compressed = compress(message, encoding)  # type: ignore[assignment]
        if len(message) > connection.max_send_message_size:
            raise CallStatus(
                StatusCode.RESOURCE_EXHAUSTED,
                f"Sent message larger than max ({len(message)} vs. "
                f"{connection.max_send_message_size})",
            )
        held_back = connection.h2.send_message(self.stream, message, compressed, encoding)
        connection.sent()
        while held_back > _MAX_HELD_BACK and not self.done:
            self.stream.wants_window = True
            self._window_waiter = asyncio.get_running_loop().create_future()
            await self._window_waiter
            held_back = self.stream.held_back
        await connection.drained()

    def window_opened(self) -> None:
        waiter, self._window_waiter = self._window_waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def cancel(self) -> None:
        self.window_opened()
        self._wake_reader()
        if self._task is not None and self._task is not asyncio.current_task():
            self._task.cancel()
