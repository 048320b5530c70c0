"""A text model's responses as a completion or a chat completion: one JSON object, or
server-sent events in OpenAI's chunk format ending with ``data: [DONE]``.

The events travel on the HTTP front end's event stream (``frontends/http/streaming.py``):
paced by the client's reading, each model response's bytes of the request's window held
until its chunk has left, so a slow client slows the model down instead of filling the
server. The head is written once the first response is in: a request the model fails at
once gets a plain error with its status; an error after that is one event
(``data: {"error": {...}}``), then ``[DONE]``. After an error the request is cancelled, as
it is when the client goes away.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from typing import Any, Protocol

import orjson

from pytriton_core.errors import ServerError
from pytriton_core.frontends.http.exchange import current_exchange
from pytriton_core.frontends.http.messages import JSON, HttpResponse
from pytriton_core.frontends.http.streaming import ResponseStream
from pytriton_core.frontends.openai.contract import TextPiece, TextReader
from pytriton_core.frontends.openai.errors import error_document, error_response
from pytriton_core.inference.flow import ResponseWindow
from pytriton_core.inference.request import InferenceRequest
from pytriton_core.inference.response import InferenceResponse
from pytriton_core.runtime.model import Model
from pytriton_core.service import InferenceService

DONE = b"[DONE]"


class Shape(Protocol):
    """How one endpoint writes its objects: a completion's or a chat completion's."""

    id_prefix: str
    whole_object: str  # the "object" of the one JSON answer
    chunk_object: str  # ... and of each streamed chunk

    def opening(self) -> dict[str, Any] | None:
        """The first chunk's choice, before any text (None: no such chunk)."""

    def text(self, text: str) -> dict[str, Any]:
        """A chunk's choice carrying ``text``."""

    def closing(self, finish_reason: str) -> dict[str, Any]:
        """The last chunk's choice."""

    def whole(self, text: str, finish_reason: str) -> dict[str, Any]:
        """The one choice of a whole answer."""


class CompletionShape:
    id_prefix = "cmpl-"
    whole_object = "text_completion"
    chunk_object = "text_completion"

    def __init__(self, echoed: str) -> None:
        self._echoed = echoed  # the prompt, when the request asks for it back (echo)

    def opening(self) -> dict[str, Any] | None:
        return self.text(self._echoed) if self._echoed else None

    def text(self, text: str) -> dict[str, Any]:
        return {"index": 0, "text": text, "logprobs": None, "finish_reason": None}

    def closing(self, finish_reason: str) -> dict[str, Any]:
        return {"index": 0, "text": "", "logprobs": None, "finish_reason": finish_reason}

    def whole(self, text: str, finish_reason: str) -> dict[str, Any]:
        return {
            "index": 0,
            "text": self._echoed + text,
            "logprobs": None,
            "finish_reason": finish_reason,
        }


class ChatShape:
    id_prefix = "chatcmpl-"
    whole_object = "chat.completion"
    chunk_object = "chat.completion.chunk"

    def opening(self) -> dict[str, Any] | None:
        return self._choice({"role": "assistant", "content": ""}, None)

    def text(self, text: str) -> dict[str, Any]:
        return self._choice({"content": text}, None)

    def closing(self, finish_reason: str) -> dict[str, Any]:
        return self._choice({}, finish_reason)

    def whole(self, text: str, finish_reason: str) -> dict[str, Any]:
        message = {"role": "assistant", "content": text, "refusal": None}
        return {"index": 0, "message": message, "logprobs": None, "finish_reason": finish_reason}

    @staticmethod
    def _choice(delta: dict[str, str], finish_reason: str | None) -> dict[str, Any]:
        return {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}


class _Usage:
    """The token counts a model reports (contract.py): the prompt's once, the output's summed."""

    def __init__(self) -> None:
        self.prompt: int | None = None
        self.completion: int | None = None

    def add(self, piece: TextPiece) -> None:
        if self.prompt is None and piece.input_tokens is not None:
            self.prompt = piece.input_tokens
        if piece.output_tokens is not None:
            self.completion = (self.completion or 0) + piece.output_tokens

    def document(self) -> dict[str, int] | None:
        if self.prompt is None or self.completion is None:
            return None
        return {
            "prompt_tokens": self.prompt,
            "completion_tokens": self.completion,
            "total_tokens": self.prompt + self.completion,
        }


class Generation:
    """One request's responses, received on the event loop (its ``on_response``)."""

    def __init__(
        self,
        shape: Shape,
        model_name: str,
        *,
        stream: bool,
        include_usage: bool,
    ) -> None:
        self._shape = shape
        self._model_name = model_name  # as the client named it
        self._include_usage = include_usage
        self._reader = TextReader(model_name)
        self._usage = _Usage()
        self._id = shape.id_prefix + secrets.token_hex(12)
        self._created = int(time.time())
        self._stream = ResponseStream(ResponseWindow()) if stream else None
        self._texts: list[str] = []  # the whole answer's
        self._finish_reason = "stop"
        self._started = False  # the stream's head may go: a response came
        self._closed = False  # the answer is complete; what the model sends now is dropped
        self._error: ServerError | None = None  # the answer, when the model failed at once
        self._request: InferenceRequest | None = None
        self._settled: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    async def answer(
        self, service: InferenceService, model: Model, request: InferenceRequest
    ) -> HttpResponse:
        """Submit ``request``; answer once the first response (streams) or the last is in."""
        self._request = request
        request.on_response = self.on_response
        if self._stream is not None:
            request.response_window = self._stream.window
        service.submit(model, request)  # a refusal raises: a plain error, status and all
        exchange = current_exchange()
        exchange.on_client_gone(request.cancel)
        exchange.on_client_gone(self._client_gone)
        await self._settled
        if self._error is not None:
            return error_response(self._error)
        if self._stream is not None:
            return HttpResponse(200, stream=self._stream, content_type=self._stream.content_type)
        body = self._object(self._shape.whole_object, [self._whole()])
        body["usage"] = self._usage.document()
        return HttpResponse(200, (orjson.dumps(body),), JSON)

    def on_response(self, response: InferenceResponse | None, final: bool) -> None:
        if final and self._request is not None and self._request.trace is not None:
            self._request.trace.finish()
        if self._closed:
            self._release(response)
            return
        if response is not None:
            error = response.error
            if error is None:
                try:
                    piece = self._reader.read(response)
                except ServerError as exc:
                    error = exc
            if error is not None:
                self._release(response)
                self._fail(error, final)
                return
            self._usage.add(piece)
            if piece.finish_reason is not None:
                self._finish_reason = piece.finish_reason
            self._add(piece.text, response.window_bytes)
        if final:
            self._add(self._reader.rest(), 0)
            self._finish()

    def _add(self, text: str, window_bytes: int) -> None:
        if self._stream is None:
            self._texts.append(text)
            return
        self._start()
        if text:
            self._push(self._shape.text(text), window_bytes)
        else:
            self._stream.window.release(window_bytes)

    def _start(self) -> None:
        if self._started:
            return
        self._started = True
        opening = self._shape.opening()
        if opening is not None:
            self._push(opening)
        self._settle()

    def _finish(self) -> None:
        self._closed = True
        if self._stream is None:
            self._settle()
            return
        self._start()
        self._push(self._shape.closing(self._finish_reason))
        if self._include_usage:
            usage = self._object(self._shape.chunk_object, [])
            usage["usage"] = self._usage.document()
            self._stream.push(orjson.dumps(usage))
        self._stream.push(DONE)
        self._stream.end()

    def _fail(self, error: ServerError, final: bool) -> None:
        self._closed = True
        if not final and self._request is not None:
            self._request.cancel()  # the answer ends here: the model need not go on
        if self._stream is None or not self._started:
            self._error = error
            self._settle()
            return
        self._stream.push(orjson.dumps(error_document(error)))
        self._stream.push(DONE)
        self._stream.end()

    def _push(self, choice: dict[str, Any], window_bytes: int = 0) -> None:
        assert self._stream is not None
        chunk = self._object(self._shape.chunk_object, [choice])
        if self._include_usage:
            chunk["usage"] = None  # OpenAI's chunks say so until the last
        self._stream.push(orjson.dumps(chunk), window_bytes)

    def _object(self, kind: str, choices: list[dict[str, Any]]) -> dict[str, Any]:
        return {
            "id": self._id,
            "object": kind,
            "created": self._created,
            "model": self._model_name,
            "choices": choices,
        }

    def _whole(self) -> dict[str, Any]:
        return self._shape.whole("".join(self._texts), self._finish_reason)

    def _release(self, response: InferenceResponse | None) -> None:
        if self._stream is not None and response is not None:
            self._stream.window.release(response.window_bytes)

    def _settle(self) -> None:
        if not self._settled.done():
            self._settled.set_result(None)

    def _client_gone(self) -> None:
        self._closed = True
        if self._stream is not None:
            self._stream.abandon()
        self._settle()
