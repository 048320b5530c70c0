"""Model code in a worker process calling the server: BLS and model management.

In process mode the model's ``pb_utils`` calls go through the same ``BlsBridge`` as in
process; only the ``ServerCalls`` under it differ. ``WorkerCalls`` (in the worker) sends
each call over the worker's channel; ``ServedCalls`` (in the server, one per worker)
makes it on the server's real ``ServerCalls`` and sends the answers back:

* a BLS request's input tensors travel in the worker's arena, like its responses do; the
  answers' tensors travel in an arena of their own that the server writes
  (``ResponseWriter`` with ``wait_for_reader=False``, so the server's event loop never
  waits on a worker);
* a cancellation (``ResponseIterator.cancel``) follows the request (``bls_cancel``);
* model specs, readiness and model management are request/answer messages
  (``rpc``/``rpc_result``); loads and unloads run on a thread of their own, so the
  worker's reader goes on while they take their time.

The server also counts the worker's instance as waiting on the model it calls
(``InstanceWaits``), so a cycle of calls through process-mode and in-process models is
refused, as it is in process.
"""

from __future__ import annotations

import concurrent.futures
import itertools
import os
import threading
from collections.abc import Callable, Mapping
from typing import Any

from pytriton_core.backends.base import ServerCalls
from pytriton_core.backends.python.bls import Caller, InstanceWaits, ModelKey, deadlock_detail
from pytriton_core.backends.python.process_transport import (
    Arena,
    Channel,
    ChannelClosed,
    RequestHeader,
    ResponseWriter,
    build_response,
    request_arguments,
    request_header,
    response_header,
    take_tensors,
)
from pytriton_core.config import ModelSpec
from pytriton_core.errors import InternalError, ServerError, UnavailableError
from pytriton_core.inference.request import InferenceRequest
from pytriton_core.inference.response import InferenceResponse
from pytriton_core.inference.tensor import Tensor

_RefusedCallback = Callable[[ServerError], None]


def _error_of(exc: ServerError) -> tuple[Any, str]:
    return exc.code, exc.message


class WorkerCalls(ServerCalls):
    """``ServerCalls`` in a worker process (see the module docstring); thread-safe."""

    def __init__(self, channel: Channel, writer: ResponseWriter, answers: Arena) -> None:
        self._channel = channel
        self._writer = writer
        self._answers = answers  # the server's arena of BLS answers
        self._lock = threading.Lock()
        self._calls = itertools.count(1)
        self._requests: dict[int, tuple[InferenceRequest, _RefusedCallback]] = {}
        self._results: dict[int, concurrent.futures.Future[Any]] = {}

    # ------------------------------------------------------------- ServerCalls

    def model_spec(self, name: str, version: int) -> ModelSpec:
        """A spec with what BLS reads (name, version, transaction policy) filled in."""
        found_name, found_version, decoupled = self._rpc("model_spec", name, version)
        return ModelSpec(
            name=found_name,
            version=found_version,
            platform="",
            backend="",
            max_batch_size=0,
            inputs={},
            outputs={},
            required_inputs=(),
            decoupled=decoupled,
        )

    def is_model_ready(self, name: str, version: int) -> bool:
        return bool(self._rpc("is_model_ready", name, version))

    def load_model(
        self, name: str, config_json: str, files: Mapping[str, bytes], caller: str = ""
    ) -> None:
        self._rpc("load_model", name, config_json, dict(files), caller)

    def unload_model(self, name: str, unload_dependents: bool, caller: str = "") -> None:
        self._rpc("unload_model", name, unload_dependents, caller)

    def execute_direct(self, request: InferenceRequest, inline: bool) -> bool:
        """Never here: the called model runs in the server's process, which schedules the
        call as it comes."""
        return False

    def submit(self, request: InferenceRequest, refused: _RefusedCallback) -> None:
        call = next(self._calls)
        with self._lock:
            self._requests[call] = (request, refused)
        message = {"kind": "bls_submit", "call": call, "request": request_header(request)}
        try:
            self._writer.send(message, list(request.inputs.values()))
        except ChannelClosed:
            with self._lock:
                self._requests.pop(call, None)
            raise InternalError("the server closed the model's worker channel") from None

    def cancel(self, request: InferenceRequest) -> None:
        request.cancel_threadsafe()  # is_cancelled() in this process turns true at once
        with self._lock:
            calls = [call for call, (r, _) in self._requests.items() if r is request]
        for call in calls:
            try:
                self._channel.send({"kind": "bls_cancel", "call": call})
            except ChannelClosed:
                pass  # the server is gone; the reader ends this process

    def _rpc(self, method: str, *args: Any) -> Any:
        call = next(self._calls)
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        with self._lock:
            self._results[call] = future
        try:
            self._channel.send({"kind": "rpc", "call": call, "method": method, "args": args})
        except ChannelClosed:
            with self._lock:
                self._results.pop(call, None)
            raise InternalError("the server closed the model's worker channel") from None
        return future.result()

    # ------------------------------------------------- the worker's reader thread

    def dispatch(self, message: dict[str, Any], fds: list[int]) -> bool:
        """Take a message meant for these calls; False when it is not one."""
        kind = message["kind"]
        if kind == "rpc_result":
            with self._lock:
                future = self._results.pop(message["call"])
            if message["error"] is None:
                future.set_result(message["value"])
            else:
                future.set_exception(ServerError.from_code(*message["error"]))
        elif kind == "bls_response":
            if fds:  # the server's arena of answers grew
                self._answers.close()
                self._answers = Arena(fds[0], os.fstat(fds[0]).st_size)
            tensors = take_tensors(self._answers, message)
            final = message["final"]
            with self._lock:
                request, _ = (
                    self._requests.pop(message["call"])
                    if final
                    else self._requests[message["call"]]
                )
            header = message["response"]
            response = None if header is None else build_response(header, tensors)
            assert request.on_response is not None
            request.on_response(response, final)
        elif kind == "bls_refused":
            with self._lock:
                _, refused = self._requests.pop(message["call"])
            refused(ServerError.from_code(*message["error"]))
        else:
            return False
        return True


class ServedCalls:
    """The server's side of one worker's calls (see the module docstring)."""

    def __init__(
        self,
        channel: Channel,
        server: ServerCalls | None,
        waits: InstanceWaits,
        caller: Caller,
    ) -> None:
        self._channel = channel
        self._server = server
        self._waits = waits
        self._caller = caller
        self.writer = ResponseWriter(channel, wait_for_reader=False)
        self._lock = threading.Lock()
        self._in_flight: dict[int, InferenceRequest] = {}

    def handle(self, message: dict[str, Any], tensors: list[Tensor]) -> None:
        """A call from the worker (on the instance's reader thread)."""
        if message["kind"] == "bls_submit":
            self._submit(message["call"], message["request"], tensors)
        elif message["kind"] == "bls_cancel":
            with self._lock:
                request = self._in_flight.get(message["call"])
            if request is not None and self._server is not None:
                self._server.cancel(request)
        elif message["method"] in ("load_model", "unload_model"):
            threading.Thread(
                target=self._answer, args=(message,), name="worker-model-management", daemon=True
            ).start()
        else:
            self._answer(message)

    def close(self) -> None:
        """The worker is gone: what it asked for is of no more use."""
        with self._lock:
            stranded = list(self._in_flight.values())
            self._in_flight.clear()
        for request in stranded:
            request.cancel_threadsafe()
        self.writer.arena.close()

    # ---------------------------------------------------------------- requests

    def _submit(self, call: int, header: RequestHeader, tensors: list[Tensor]) -> None:
        target: ModelKey | None = None

        def respond(response: InferenceResponse | None, final: bool) -> None:
            # On the server's event loop.
            message = {"kind": "bls_response", "call": call, "final": final}
            message["response"] = None if response is None else response_header(response)
            if final:
                self._finished(call, target)
            try:
                self.writer.send(message, [] if response is None else response.outputs)
            except ChannelClosed:
                pass  # the worker died; its reader reports it

        def refused(error: ServerError) -> None:
            self._finished(call, target)
            self._send({"kind": "bls_refused", "call": call, "error": _error_of(error)})

        request = InferenceRequest(*request_arguments(header, tensors), on_response=respond)
        if self._server is None:
            refused(UnavailableError("this server takes no calls from models"))
            return
        try:
            spec = self._server.model_spec(request.model_name, request.model_version)
        except ServerError as exc:
            refused(exc)
            return
        key = (spec.name, spec.version)
        if not self._waits.begin(self._caller.model, self._caller.instance, key):
            # The worker's bridge puts Triton's prefix for a failed BLS request before it.
            refused(UnavailableError(deadlock_detail(self._caller, key)))
            return
        target = key
        with self._lock:
            self._in_flight[call] = request
        try:
            self._server.submit(request, refused)
        except ServerError as exc:
            refused(exc)

    def _finished(self, call: int, target: ModelKey | None) -> None:
        with self._lock:
            request = self._in_flight.pop(call, None)
        if request is not None and target is not None:
            self._waits.end(self._caller.model, self._caller.instance, target)

    # ------------------------------------------------------ specs and management

    def _answer(self, message: dict[str, Any]) -> None:
        answer: dict[str, Any] = {"kind": "rpc_result", "call": message["call"], "error": None}
        try:
            answer["value"] = self._call(message["method"], message["args"])
        except ServerError as exc:
            answer["error"] = _error_of(exc)
        except Exception as exc:  # the worker's caller gets it, the server goes on
            answer["error"] = _error_of(InternalError(f"{type(exc).__name__}: {exc}"))
        self._send(answer)

    def _call(self, method: str, args: tuple[Any, ...]) -> Any:
        server = self._server
        if server is None:
            raise UnavailableError("this server takes no calls from models")
        if method == "model_spec":
            spec = server.model_spec(*args)
            return spec.name, spec.version, spec.decoupled
        if method == "is_model_ready":
            return server.is_model_ready(*args)
        if method == "load_model":
            return server.load_model(*args)
        if method == "unload_model":
            return server.unload_model(*args)
        raise InternalError(f"unknown call '{method}' from a model's worker process")

    def _send(self, message: dict[str, Any]) -> None:
        try:
            self._channel.send(message)
        except ChannelClosed:
            pass  # the worker died; its reader reports it
