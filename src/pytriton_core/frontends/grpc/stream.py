"""ModelStreamInfer: one bidirectional stream carrying many independent requests.

A reader task decodes each request as it arrives and submits it to its model at once, so
many are in flight on one stream. Every response the core delivers (``on_response``, on the
event loop) is encoded there and queued; the handler writes the queue to the stream, in
order of completion. A request that fails, before or inside a model, is answered with an
``error_message`` on the stream, which stays open, unless the client asked for gRPC errors
(``triton_grpc_error: true`` metadata): then the first error ends the stream with its status.

Flow control: the reader takes no further request while the answers waiting to be written
exceed ``MAX_QUEUED_BYTES``, or while the requests in flight would exceed that much again
if each answered as much as the largest answer so far (``MIN_IN_FLIGHT`` until the first
answer, then between that and ``MAX_IN_FLIGHT``), so a client that sends and never reads
holds the server to about twice ``MAX_QUEUED_BYTES`` and what its requests in flight hold.
When the stream ends (the client went away, or cancelled), the unsent answers are dropped
and every request lets go of the stream (no reference cycle keeps it, or its answers, until
a garbage collection).
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

from pytriton_core.errors import InternalError, ServerError
from pytriton_core.frontends.grpc.infer_codec import (
    DecodedInfer,
    decode_infer_request,
    encode_stream_completion,
    encode_stream_error,
    encode_stream_response,
    forward_metadata,
    request_id_of,
)
from pytriton_core.inference.request import InferenceRequest
from pytriton_core.inference.response import InferenceResponse
from pytriton_core.service import InferenceService

if TYPE_CHECKING:
    from pytriton_core.frontends.grpc.calls import StreamCall

log = logging.getLogger(__name__)

GRPC_ERROR_HEADER = "triton_grpc_error"
MAX_QUEUED_BYTES = 64 << 20
MIN_IN_FLIGHT = 16  # until answers are seen, and however large they are
MAX_IN_FLIGHT = 1024


class InferStream:
    def __init__(self, service: InferenceService, call: StreamCall) -> None:
        self._service = service
        self._call = call
        metadata = call.metadata
        self._grpc_errors = any(
            key == GRPC_ERROR_HEADER and str(value).lower() == "true" for key, value in metadata
        )
        # Serialized ModelStreamInferResponses in completion order; None ends the stream.
        self._outbox: asyncio.Queue[bytes | None] = asyncio.Queue()
        self._queued_bytes = 0
        self._largest_answer = 0
        self._room = asyncio.Event()  # set while the reader may take another request
        self._room.set()
        self._in_flight: set[InferenceRequest] = set()
        self._reading = True
        self._closed = False
        self._failure: ServerError | None = None

    async def run(self, requests: AsyncIterator[bytes]) -> None:
        reader = asyncio.get_running_loop().create_task(self._read(requests))
        try:
            while (message := await self._outbox.get()) is not None:
                try:
                    await self._call.write(message)
                except Exception as exc:  # the call is over (the client went away)
                    log.debug("ModelStreamInfer: write failed, the stream ends: %r", exc)
                    return
                self._queued_bytes -= len(message)
                self._update_room()
        finally:
            reader.cancel()
            self._close()
        if self._failure is not None:
            raise self._failure  # the call ends with its status

    async def _read(self, requests: AsyncIterator[bytes]) -> None:
        try:
            async for data in requests:
                self._submit(data)
                if self._failure is not None:
                    return
                if not self._room.is_set():
                    await self._room.wait()  # the client reads slower than it sends
        finally:
            self._reading = False
            self._close_if_done()

    def _submit(self, data: bytes) -> None:
        decoded: DecodedInfer | None = None
        try:
            decoded = decode_infer_request(self._service, data, unary=False)
            forward_metadata(decoded.request, self._call.metadata, self._service.options.grpc)
            request = decoded.request
            request.trace = self._service.start_trace(decoded.model)
            if request.trace is not None:
                request.trace.stamp("GRPC_WAITREAD_START")
                request.trace.stamp("GRPC_WAITREAD_END")
            request.on_response = functools.partial(self._on_response, decoded)
            self._in_flight.add(request)
            self._update_room()
            try:
                self._service.submit(decoded.model, request)
            except BaseException:
                self._in_flight.discard(request)
                request.on_response = None
                raise
        except ServerError as exc:
            self._fail(exc, encode_stream_error(exc.message, _request_id(decoded, data)))
        except Exception as exc:
            log.exception("ModelStreamInfer: unexpected error while submitting a request")
            error = InternalError(f"{type(exc).__name__}: {exc}")
            self._fail(error, encode_stream_error(error.message, _request_id(decoded, data)))

    def _on_response(
        self, decoded: DecodedInfer, response: InferenceResponse | None, final: bool
    ) -> None:
        if self._closed:  # nobody reads any more: let go of the request and its data
            if final:
                self._in_flight.discard(decoded.request)
                decoded.request.on_response = None
            return
        if response is None:
            if final and decoded.enable_empty_final_response:
                self._queue(encode_stream_completion(decoded, final))
        elif response.error is not None:
            error = response.error
            self._fail(error, encode_stream_completion(decoded, final, error.message))
        else:
            try:
                self._queue(encode_stream_response(decoded, response, final))
            except ServerError as exc:
                self._fail(exc, encode_stream_completion(decoded, final, exc.message))
        if final:
            trace = decoded.request.trace
            if trace is not None:  # queued for the stream: stamped as sent
                trace.stamp("GRPC_SEND_START")
                trace.stamp("GRPC_SEND_END")
                trace.finish()
            self._in_flight.discard(decoded.request)
            # The request, its callback and its decoded form refer to each other: cut that.
            decoded.request.on_response = None
            self._update_room()
            self._close_if_done()

    def _queue(self, message: bytes) -> None:
        self._queued_bytes += len(message)
        self._largest_answer = max(self._largest_answer, len(message))
        self._outbox.put_nowait(message)
        self._update_room()

    def _update_room(self) -> None:
        in_flight_limit = MIN_IN_FLIGHT  # until the first answer shows what one costs
        if self._largest_answer:
            in_flight_limit = MAX_QUEUED_BYTES // self._largest_answer
            in_flight_limit = min(max(in_flight_limit, MIN_IN_FLIGHT), MAX_IN_FLIGHT)
        if self._queued_bytes <= MAX_QUEUED_BYTES and len(self._in_flight) < in_flight_limit:
            self._room.set()
        else:
            self._room.clear()

    def _close(self) -> None:
        """The stream is over: drop the unsent answers, cancel what is still running."""
        self._closed = True
        # The client went away, or the stream failed: nobody reads what is left.
        for request in list(self._in_flight):
            request.cancel()
        while not self._outbox.empty():
            self._outbox.get_nowait()
        self._queued_bytes = 0

    def _fail(self, error: ServerError, message: bytes) -> None:
        if not self._grpc_errors:
            self._queue(message)
        elif self._failure is None:
            self._failure = error
            self._outbox.put_nowait(None)

    def _close_if_done(self) -> None:
        if not self._reading and not self._in_flight and self._failure is None:
            self._outbox.put_nowait(None)


def _request_id(decoded: DecodedInfer | None, data: bytes) -> str:
    """The id a failed request's error carries: its own, or what its message names."""
    return decoded.request.id if decoded is not None else request_id_of(data)
