"""The HTTP front end: an asyncio protocol over httptools and the compiled framing.

One request is handled at a time per connection (HTTP/1.1 pipelining answers in order);
connections run concurrently. Responses are written as a list of buffers; a streamed one
(server-sent events) in chunks, as it comes.

Flow control, both ways: a connection stops being read while it has more than
``--http-max-pipelined-requests`` (or ``_MAX_PENDING_BYTES`` of bodies) waiting, and while its
transport holds more unsent answer bytes than its high-water mark (``pause_writing``): a
client that pipelines and reads nothing gets no further request decoded, run or answered
until it reads, and a streamed answer waits (``drained``) before writing more. ``Upgrade``
offers (h2c, websocket) are ignored and answered in HTTP/1.1; a client that half-closes
after its requests gets their answers, then the connection closes.

The other per-client limits (``LimitOptions``): connections past ``--http-max-connections``
are answered 503 and closed at once; a request whose bytes take longer than
``--http-request-timeout`` to arrive is answered 408 (``reaper.py`` looks once a second, so
no request pays for a timer); head and body sizes are bounded by the compiled framing.
With ``--http-use-ssl`` the listener speaks TLS (``tls.py``).

The client going away cancels what it asked for: each request's handler sees an
``Exchange`` (``frontends/http/exchange.py``) that is marked gone when the connection is
lost. A client that closes its socket is seen as an EOF, which is also what a client that
only half-closes (``shutdown(SHUT_WR)``) and still reads sends; while an exchange waits to
know, the connection writes a harmless probe (an interim ``100 Continue`` before the
answer's head, an event-stream comment inside a stream) and watches the socket's error: a
closed client answers the probe with a reset, a half-closed one reads it and stays.

A connection left idle between requests for ``idle_timeout_s`` is closed.
"""

from __future__ import annotations

import asyncio
import contextvars
import errno
import logging
import socket
from collections import deque
from collections.abc import Awaitable, Coroutine, Sequence
from contextvars import copy_context
from dataclasses import dataclass
from functools import partial
from typing import Any, cast

import httptools

from pytriton_core import clock
from pytriton_core._native.http_framing import (
    HttpRequest,
    RequestAssembler,
    build_response_head,
    frame_response,
    framing_error,
)
from pytriton_core.errors import UnavailableError
from pytriton_core.frontends.busy_poll import BusyPoll
from pytriton_core.frontends.http.exchange import CURRENT_EXCHANGE, Exchange
from pytriton_core.frontends.http.handlers import build_router
from pytriton_core.frontends.http.held_writes import HeldWrites
from pytriton_core.frontends.http.messages import (
    Buffer,
    DeferredResponse,
    HttpResponse,
    failure_response,
    plain_error,
)
from pytriton_core.frontends.http.reaper import expire_slow_requests
from pytriton_core.frontends.http.router import Router
from pytriton_core.frontends.http.streaming import SSE_COMMENT, write_stream
from pytriton_core.frontends.tls import CertificateReloader
from pytriton_core.options import LimitOptions
from pytriton_core.service import InferenceService

log = logging.getLogger(__name__)
_DEBUG = logging.DEBUG  # (module globals are read without an attribute lookup)
_UNHANDLED = "unhandled error on %s %s"  # a handler's failure, logged with the request

_MAX_PENDING_BYTES = 64 << 20  # stop reading from a client that queues more body bytes
_CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"
# A request the server has no memory to hold (its body, say, under a memory limit).
_OUT_OF_MEMORY = "out of memory: the server cannot hold this request now"
_PROBED_COMMENT = b"%x\r\n%s\r\n" % (len(SSE_COMMENT), SSE_COMMENT)
# How often a probed connection's socket is checked: soon, then less often.
_PEER_CHECK_FIRST_S = 0.002
_PEER_CHECK_MAX_S = 0.05

# --log-verbose=1 logs each request as Triton does, its method as libevhtp numbers it.
_METHOD_CODES = {"GET": 0, "HEAD": 1, "POST": 2, "PUT": 3, "DELETE": 4, "OPTIONS": 8, "PATCH": 15}


@dataclass(frozen=True, slots=True)
class _BrokenStream:
    """Queued after the last good request of a connection whose bytes stopped parsing."""

    status: int
    message: str


class HttpFrontend:
    """A listener serving ``router`` (by default KServe v2 with Triton's extensions; the
    OpenAI front end hands its own), with the HTTP settings of the server's options."""

    def __init__(
        self,
        service: InferenceService,
        router: Router | None = None,
        name: str = "HTTPService",
        busy_poll: BusyPoll | None = None,
    ) -> None:
        self._service = service
        self._busy_poll = busy_poll  # the server's, for its loop (frontends/busy_poll.py)
        self._router = router if router is not None else build_router(service)
        self._name = name  # in the log, as tritonserver names its services
        self._server: asyncio.AbstractServer | None = None
        self._connections: set[HttpProtocol] = set()
        self._reaper: asyncio.Task[None] | None = None
        # None without TLS; else reloads the certificate files (SIGHUP).
        self.certificates: CertificateReloader | None = None

    async def start(self, host: str, port: int) -> int:
        loop = asyncio.get_running_loop()
        options = self._service.options
        max_body = options.http_max_input_size
        limits = options.limits
        idle_timeout = options.http_keepalive_timeout_s or None
        held_writes = HeldWrites(loop)  # (held_writes.py)
        if options.http_tls.enabled:
            self.certificates = CertificateReloader(options.http_tls)
        try:
            self._server = await loop.create_server(
                lambda: as_protocol(
                    HttpProtocol(
                        self._router,
                        max_body,
                        self._connections,
                        limits,
                        idle_timeout,
                        self._busy_poll,
                        held_writes,
                    )
                ),
                host,
                port,
                reuse_address=True,
                reuse_port=options.reuse_http_port,
                backlog=1024,
                ssl=self.certificates.context if self.certificates is not None else None,
            )
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:  # tritonserver's words
                raise UnavailableError(f"Socket '{host}:{port}' already in use") from None
            raise UnavailableError(f"failed to start {self._name}: {exc}") from None
        bound_port: int = self._server.sockets[0].getsockname()[1]
        if limits.http_request_timeout_s > 0:
            self._reaper = loop.create_task(
                expire_slow_requests(self._connections, limits.http_request_timeout_s)
            )
        security = " (SSL)" if self.certificates is not None else ""
        log.info("Started %s at %s:%d%s", self._name, host, bound_port, security)
        return bound_port

    async def stop(self, timeout_s: float = 0.0) -> None:
        """Stop listening; connections close once their current request is answered
        (waiting up to ``timeout_s`` for those)."""
        if self._server is None:
            return
        if self._reaper is not None:
            self._reaper.cancel()
        self._server.close()
        for connection in list(self._connections):
            connection.close_when_idle()
        deadline = asyncio.get_running_loop().time() + timeout_s
        while self._connections and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.01)
        await self._server.wait_closed()
        self._server = None


class HttpProtocol:
    """One connection: an asyncio protocol (duck-typed: an extension type, server.pxd,
    cannot derive from ``asyncio.Protocol``; ``as_protocol`` says what it is to the loop's
    API), whose every request's bytes, handler and answer pass through typed fields."""

    def __init__(
        self,
        router: Router,
        max_body_size: int,
        registry: set[HttpProtocol],
        limits: LimitOptions | None = None,
        idle_timeout_s: float | None = None,
        busy_poll: BusyPoll | None = None,
        held_writes: HeldWrites | None = None,
    ) -> None:
        self._router = router
        self._busy_poll = busy_poll  # None: the loop sleeps between requests
        # None: each answer is written when it is made; else answers are held until the
        # end of the loop's turn (``_held``, the buffers framed; held_writes.py).
        self._held_writes = held_writes
        self._held: list[Buffer] | None = None
        self._registry = registry
        self._limits = limits = limits if limits is not None else LimitOptions()
        self._max_pipelined = limits.http_max_pipelined_requests
        self._assembler = RequestAssembler(max_body_size, limits.http_max_header_size)
        self._assembler.attach(httptools.HttpRequestParser(self._assembler))
        self._transport: asyncio.Transport | None = None
        # Each parsed request with when its first bytes and its last bytes arrived (ns).
        self._pending: deque[tuple[HttpRequest | _BrokenStream, int, int]] = deque()
        self._pending_bytes = 0  # body bytes of the requests in _pending
        self._receiving_since = 0
        self._broken = False
        self._busy = False
        # Within ``_start_next``'s first step of a handler, or a deferred answer's delivery
        # (inside the model's code): a next request waiting then starts at the next turn.
        self._driving = False
        self._paused = False  # reading paused
        self._write_paused = False  # the transport's buffer is above its high-water mark
        self._eof = False  # the client half-closed: answer what came, then close
        self._closing = False
        # The request being answered: its exchange, its HTTP version, and whether the
        # answer's head has gone out (a probe must then be a stream comment).
        self._exchange: Exchange | None = None
        self._deferred_request: HttpRequest | None = None  # its answer is to come (``_begin``)
        self._http11 = True
        self._head_sent = False
        self._streaming = False
        self._drain_waiter: asyncio.Future[None] | None = None
        self._idle_timeout_s = idle_timeout_s
        self._idle_timer: asyncio.TimerHandle | None = None
        # When the connection last became idle (clock.now_s), 0.0 while it is not: a
        # request only stores this, the one timer re-arms itself for the time left.
        self._idle_since = 0.0
        self._peer_check: asyncio.TimerHandle | None = None

    # ------------------------------------------------------------ asyncio

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports implement asyncio.Transport without subclassing it.
        self._transport = cast(asyncio.Transport, transport)
        sock = self._transport.get_extra_info("socket")
        if sock is not None:
            # Header and body go out in one writelines; never wait for Nagle.
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if len(self._registry) >= self._limits.http_max_connections:
            self._closing = True
            self._write(
                plain_error(
                    503,
                    f"the server has {self._limits.http_max_connections} HTTP connections "
                    "open, its limit (--http-max-connections): try again later",
                ),
                keep_alive=False,
            )
            return
        self._registry.add(self)
        self._arm_idle_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        self._registry.discard(self)
        self._transport = None
        self._held = None
        self._pending.clear()
        self._pending_bytes = 0
        self._assembler.detach()  # a half-received body goes with the connection
        self._cancel_timers()
        self._wake_writer()
        if self._exchange is not None:
            self._exchange.mark_client_gone()

    def pause_writing(self) -> None:
        self._write_paused = True
        self._update_reading()

    def resume_writing(self) -> None:
        self._write_paused = False
        self._wake_writer()  # a streamed answer goes on
        self._update_reading()
        self._start_next()

    def eof_received(self) -> bool:
        """The client sent all it will: keep the transport open to answer (True) unless
        nothing is left to answer. If someone waits to know whether the client is still
        there (an inference), probe it."""
        self._eof = True
        # Answers held for the turn's end go out now: a False return closes the transport.
        self.write_held()
        if self._exchange is not None and self._exchange.watched:
            self._probe_peer()
        return self._busy or bool(self._pending)

    def data_received(self, data: bytes) -> None:
        self._idle_since = 0.0  # busy now: the idle timer, when it fires, re-arms or stops
        if self._broken:
            return
        now = clock.now_ns()
        if not self._receiving_since:
            self._receiving_since = now
        failure: _BrokenStream | None = None
        try:
            self._assembler.feed(data)
        except MemoryError:
            failure = _BrokenStream(503, _OUT_OF_MEMORY)
        except httptools.HttpParserError as exc:
            # A refusal of the framing layer carries the status to answer with; the size
            # limits (413, 431) say what the limit is, the rest read as malformed HTTP.
            framing = framing_error(exc)
            status = framing.status if framing is not None else 400
            message = str(framing) if status != 400 else f"malformed HTTP request: {exc}"
            if isinstance(exc.__context__, MemoryError):  # raised in a parser callback
                status, message = 503, _OUT_OF_MEMORY
            failure = _BrokenStream(status, message)
        # Requests completed before the bad bytes are answered first, in order.
        completed = self._assembler.drain()
        if completed:
            since = self._receiving_since
            for request in completed:
                self._pending.append((request, since, now))
                self._pending_bytes += len(request.body)
            self._receiving_since = 0
        if failure is not None:
            self._broken = True
            self._pending.append((failure, 0, 0))
        elif self._assembler.take_expect_continue() and self._transport is not None:
            self.write_held()
            self._transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        self._update_reading()
        self._start_next()

    def _update_reading(self) -> None:
        """Read while little waits here and the client drains its answers; else pause."""
        transport = self._transport
        if transport is None:
            return
        if self._paused:
            if (
                not self._write_paused
                and len(self._pending) <= self._max_pipelined // 2
                and self._pending_bytes <= _MAX_PENDING_BYTES // 2
            ):
                transport.resume_reading()
                self._paused = False
        elif (
            self._write_paused
            or len(self._pending) > self._max_pipelined
            or self._pending_bytes > _MAX_PENDING_BYTES
        ):
            transport.pause_reading()
            self._paused = True

    def expire_if_slow(self, started_before_ns: int, timeout_s: float) -> None:
        """Answer 408 and close when the request now arriving began before
        ``started_before_ns`` (monotonic). A connection the server stopped reading (flow
        control) is not the client's fault and is left alone."""
        since = self._receiving_since
        if not since or since >= started_before_ns or self._paused or self._broken:
            return
        self._broken = True
        self._receiving_since = 0
        message = (
            f"the request did not arrive within {timeout_s:g} s of its first byte "
            "(--http-request-timeout)"
        )
        self._pending.append((_BrokenStream(408, message), 0, 0))
        self._start_next()

    def close_when_idle(self) -> None:
        self._closing = True
        if not self._busy and self._transport is not None:
            self._close_transport()

    # ------------------------------------------------------------ requests

    def _start_next(self) -> None:
        if self._busy or self._write_paused:
            return
        if not self._pending:
            if self._eof:
                self._close_transport()  # half-closed, and everything is answered
            elif not self._receiving_since:
                self._arm_idle_timer()
            return
        item, received_start, received_end = self._pending.popleft()
        if isinstance(item, _BrokenStream):
            self._pending.clear()
            self._pending_bytes = 0
            self._write(plain_error(item.status, item.message), keep_alive=False)
            return
        self._pending_bytes -= len(item.body)
        self._busy = True
        self._driving = True
        try:
            self._begin(item, received_start, received_end)
        finally:
            self._driving = False
        if self._busy_poll is not None:
            if self._busy:  # its handler waits for work elsewhere
                self._busy_poll.waiting()
            else:  # answered within this first step, on the loop
                self._busy_poll.answered()

    def _begin(self, request: HttpRequest, received_start: int, received_end: int) -> None:
        """Route ``request``. A handler that answers at once (most inferences: a short
        Python model runs on the loop) is answered here, and one whose answer is to come
        (a ``DeferredResponse``: an inference executing elsewhere) when it is set, with no
        coroutine, context or task made for either; one that returns something to await, or
        a streamed answer, goes on in a coroutine driven as a task would be
        (``_answer_later``), in a context of its own where ``current_exchange()`` finds the
        request's exchange."""
        if log.isEnabledFor(_DEBUG):
            code = _METHOD_CODES.get(request.method, -1)
            log.debug("HTTP request: %d %s", code, request.path)
        exchange = self._exchange = Exchange(received_start, received_end)
        request.exchange = exchange
        self._http11 = request.http_version == "1.1"
        self._head_sent = False
        try:
            routed = self._router.route(request)
        except Exception as exc:
            routed = failure_response(exc, log, _UNHANDLED, request.method, request.path)
        if type(routed) is DeferredResponse:  # to come: written when it is set
            self._deferred_request = request
            routed.on_ready(self._deferred_answered)
            return
        if isinstance(routed, HttpResponse) and routed.stream is None:
            self._write(routed, request.keep_alive and not self._closing)
            self._answered(exchange)
            return
        self._answer_in_coroutine(request, routed, exchange)

    def _deferred_answered(self, response: HttpResponse) -> None:
        """A ``DeferredResponse``'s answer, for the request ``_begin`` left waiting."""
        request, self._deferred_request = self._deferred_request, None
        exchange = self._exchange
        assert request is not None and exchange is not None
        if response.stream is not None:
            self._answer_in_coroutine(request, response, exchange)
            return
        # Called from the model's delivery of its answer: a pipelined request waiting here
        # starts at the next turn, not nested in the model's bookkeeping.
        driving, self._driving = self._driving, True
        try:
            self._write(response, request.keep_alive and not self._closing)
            self._answered(exchange)
        finally:
            self._driving = driving

    def _answer_in_coroutine(
        self,
        request: HttpRequest,
        routed: HttpResponse | Awaitable[HttpResponse],
        exchange: Exchange,
    ) -> None:
        context = copy_context()
        context.run(CURRENT_EXCHANGE.set, exchange)
        _drive(self._answer_later(request, routed, exchange), context)

    async def _answer_later(
        self,
        request: HttpRequest,
        routed: HttpResponse | Awaitable[HttpResponse],
        exchange: Exchange,
    ) -> None:
        try:
            response = routed if isinstance(routed, HttpResponse) else await routed
        except Exception as exc:
            response = failure_response(exc, log, _UNHANDLED, request.method, request.path)
        keep_alive = request.keep_alive and not self._closing
        if response.stream is None:
            self._write(response, keep_alive)
        else:
            await self._write_streamed(response, keep_alive)
        self._answered(exchange)

    def _answered(self, exchange: Exchange) -> None:
        """The request's answer is written (or its connection is gone): the next one."""
        exchange.finish()
        self._exchange = None
        if self._peer_check is not None:
            self._stop_peer_checks()
        self._busy = False
        self._update_reading()
        if self._driving and self._pending:
            # Answered within ``_start_next``'s own call (or a model's delivery): the next
            # request starts at the next turn, not nested in this one (a pipelining client
            # cannot make it recurse).
            asyncio.get_running_loop().call_soon(self._start_next)
        else:
            self._start_next()

    async def _write_streamed(self, response: HttpResponse, keep_alive: bool) -> None:
        stream = response.stream
        assert stream is not None
        if not self.write_buffers((self._streamed_head(response, keep_alive),)):
            stream.abandon()
            return
        self._head_sent = self._streaming = True
        try:
            completed = await write_stream(self, stream)
        finally:
            self._streaming = False
        if not completed or not keep_alive or self._closing:  # the server stops meanwhile
            self._close_transport()

    # The sink write_stream writes to.
    def write_buffers(self, buffers: Sequence[Buffer]) -> bool:
        transport = self._transport
        if transport is None or transport.is_closing():
            return False
        self.write_held()
        transport.writelines(buffers)
        return True

    async def drained(self) -> None:
        while self._write_paused and self._transport is not None:
            self._drain_waiter = asyncio.get_running_loop().create_future()
            await self._drain_waiter

    def _wake_writer(self) -> None:
        waiter, self._drain_waiter = self._drain_waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _streamed_head(self, response: HttpResponse, keep_alive: bool) -> bytes:
        """The head of an answer sent in chunks, as they come."""
        return build_response_head(
            response.status, response.content_type, None, keep_alive, response.headers
        )

    def _close_transport(self) -> None:
        if self._transport is not None:
            self.write_held()
            self._transport.close()

    # ------------------------------------------------------- the client's presence

    def _probe_peer(self) -> None:
        """Write what a client that still reads skips, then watch for its reset."""
        if self._peer_check is not None or self._transport is None:
            return
        if self._streaming:
            probe = _PROBED_COMMENT
        elif not self._head_sent and self._http11:
            probe = _CONTINUE
        else:  # HTTP/1.0 allows no interim answer: its EOF is the client leaving
            assert self._exchange is not None
            self._exchange.mark_client_gone()
            return
        self.write_held()
        self._transport.write(probe)
        self._peer_check = asyncio.get_running_loop().call_later(
            _PEER_CHECK_FIRST_S, self._check_peer, _PEER_CHECK_FIRST_S
        )

    def _check_peer(self, interval: float) -> None:
        self._peer_check = None
        transport = self._transport
        if transport is None or self._exchange is None:
            return
        sock = transport.get_extra_info("socket")
        error = 0 if sock is None else sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
        if error:  # the client reset the connection: it is gone
            self._exchange.mark_client_gone()
            transport.abort()
            return
        interval = min(interval * 2, _PEER_CHECK_MAX_S)
        self._peer_check = asyncio.get_running_loop().call_later(
            interval, self._check_peer, interval
        )

    def _stop_peer_checks(self) -> None:
        if self._peer_check is not None:
            self._peer_check.cancel()
            self._peer_check = None

    # ------------------------------------------------------------ idle connections

    def _arm_idle_timer(self) -> None:
        if self._idle_timeout_s is None or self._transport is None or self._idle_since:
            return
        self._idle_since = clock.now_s()
        if self._idle_timer is None:
            self._idle_timer = asyncio.get_running_loop().call_later(
                self._idle_timeout_s, self._close_idle
            )

    def _disarm_idle_timer(self) -> None:
        self._idle_since = 0.0
        if self._idle_timer is not None:
            self._idle_timer.cancel()
            self._idle_timer = None

    def _close_idle(self) -> None:
        """The idle timer fired: close the connection if it has been idle for the whole
        timeout; if it has been busy since, wait for the time left (or, busy now, stop
        until it is idle again)."""
        self._idle_timer = None
        idle_since, timeout_s = self._idle_since, self._idle_timeout_s
        if not idle_since or timeout_s is None or self._transport is None:
            return
        left = idle_since + timeout_s - clock.now_s()
        if left > 0:
            self._idle_timer = asyncio.get_running_loop().call_later(left, self._close_idle)
            return
        if not self._busy and not self._pending and not self._receiving_since:
            log.debug("closing an HTTP connection idle for %s s", timeout_s)
            self._close_transport()

    def _cancel_timers(self) -> None:
        self._disarm_idle_timer()
        self._stop_peer_checks()

    def _write(self, response: HttpResponse, keep_alive: bool) -> None:
        transport = self._transport
        if transport is None or transport.is_closing():
            return
        framed = frame_response(
            response.status, response.content_type, response.body, keep_alive, response.headers
        )
        on_sent = response.on_sent
        if on_sent is None and keep_alive and self._held_writes is not None:
            # Held until the end of the loop's turn (held_writes.py).
            held = self._held
            if held is None:
                self._held = framed
                self._held_writes.hold(self)
            else:
                held.extend(framed)
            return
        self.write_held()
        if on_sent is None:
            transport.writelines(framed)
        else:
            send_start = clock.now_ns()
            transport.writelines(framed)
            on_sent(send_start, clock.now_ns())
        if not keep_alive:
            transport.close()

    def write_held(self) -> None:
        """Write the answers this connection holds (``HeldWrites``), if any."""
        held = self._held
        if held is None:
            return
        self._held = None
        transport = self._transport
        if transport is not None and not transport.is_closing():
            transport.writelines(held)


def as_protocol(protocol: HttpProtocol) -> asyncio.Protocol:
    """``protocol`` as what ``loop.create_server``'s factory returns: it implements
    ``asyncio.Protocol``'s methods without deriving from it (see ``HttpProtocol``)."""
    return cast(asyncio.Protocol, protocol)


def _drive(coroutine: Coroutine[Any, Any, None], context: contextvars.Context) -> None:
    """Run a request's handler as a task would, one step per call, without making a task.

    Most infer requests are answered without the handler ever waiting (a lone request to a
    short model runs on the loop), so their handler ends within this first step, with no
    task to create and schedule. When it waits for a future, the next step runs once that
    future is done, as a task's would. The handler catches its errors itself.
    """
    try:
        waited = context.run(coroutine.send, None)
    except StopIteration:
        return
    if waited is None:  # a bare yield (``asyncio.sleep(0)``): go on at the next turn
        asyncio.get_running_loop().call_soon(_drive, coroutine, context)
        return
    waited._asyncio_future_blocking = False
    waited.add_done_callback(partial(_resume, coroutine, context))


def _resume(
    coroutine: Coroutine[Any, Any, None], context: contextvars.Context, _: asyncio.Future[Any]
) -> None:
    _drive(coroutine, context)
