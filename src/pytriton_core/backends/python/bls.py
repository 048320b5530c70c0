"""BLS: Python models calling models (``pb_utils.InferenceRequest.exec`` and friends).

A ``BlsBridge`` serves one Python model instance: a BLS request becomes a server request
(its tensors shared, not copied) submitted through ``ServerCalls`` to the target model's
own scheduler, and its responses come back as ``pb_utils`` responses over the same arrays.
``exec`` blocks the calling thread until the answer; ``async_exec`` awaits it on the
model's event loop without a thread per call, so many calls overlap.

A call that could never be served fails at once instead of hanging: ``InstanceWaits``
knows which Python-model instances are blocked waiting for BLS answers, and refuses a call
to a model none of whose instances can get free (say, a model calling itself from its only
instance).

A model that calls the server executes on the server's event loop only inside an
``InlineExecution`` (inference/inline.py; ``PythonModel.loop_calls``): there a call whose
target can answer at once executes it on the loop, and waiting for any other answer
suspends the execution (``_Answers.next``) instead of blocking the loop, which has to
deliver it. Such a model never executes plainly on the loop nor on a BLS caller's thread
(``execute_direct`` in runtime/model.py): while an execution runs there, its instance's
bridge refuses every call (``executing_elsewhere``), telling the model it moves to its
thread.
"""

from __future__ import annotations

import asyncio
import copy
import queue
import threading
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass

from pytriton_core.backends.base import ServerCalls
from pytriton_core.backends.python import pb_utils
from pytriton_core.backends.python.convert import from_pb_tensor, to_pb_tensor
from pytriton_core.errors import InternalError, ServerError, UnavailableError
from pytriton_core.inference.inline import InlineExecution, current_inline
from pytriton_core.inference.request import InferenceRequest, RequestedOutput
from pytriton_core.inference.response import InferenceResponse
from pytriton_core.memory.pinned import StagingPool

ModelKey = tuple[str, int]  # a model version: (name, version)


class InstanceWaits:
    """Which Python-model instances wait on BLS answers, and from which models.

    One per server. A model none of whose instances is tracked here (any other backend)
    always gets free: its instances never wait on BLS. ``tracking=False`` (a process-mode
    model's worker, which knows only its own instance) tracks nothing: the server does.
    """

    def __init__(self, tracking: bool = True) -> None:
        self._lock = threading.Lock()
        self._tracking = tracking
        self._instances: dict[ModelKey, dict[str, Counter[ModelKey]]] = {}

    def register(self, model: ModelKey, instance: str) -> None:
        if not self._tracking:
            return
        with self._lock:
            self._instances.setdefault(model, {})[instance] = Counter()

    def unregister(self, model: ModelKey, instance: str) -> None:
        with self._lock:
            instances = self._instances.get(model, {})
            instances.pop(instance, None)
            if not instances:
                self._instances.pop(model, None)

    def begin(self, model: ModelKey, instance: str, target: ModelKey) -> bool:
        """Record that ``instance`` of ``model`` waits on ``target``; False (and nothing
        recorded) when no instance of ``target`` could ever get free to answer."""
        with self._lock:
            waits = self._instances.get(model, {}).get(instance)
            if waits is None:
                return True
            waits[target] += 1
            if not self._can_get_free(target, set()):
                self._release(waits, target)
                return False
            return True

    def end(self, model: ModelKey, instance: str, target: ModelKey) -> None:
        with self._lock:
            waits = self._instances.get(model, {}).get(instance)
            if waits is not None:
                self._release(waits, target)

    @staticmethod
    def _release(waits: Counter[ModelKey], target: ModelKey) -> None:
        waits[target] -= 1
        if waits[target] <= 0:
            del waits[target]

    def _can_get_free(self, model: ModelKey, path: set[ModelKey]) -> bool:
        """Whether some instance of ``model`` is free or waits only on models that can
        answer (``path``: the models whose answer this depends on already)."""
        instances = self._instances.get(model)
        if instances is None:
            return True
        if model in path:
            return False
        path.add(model)
        try:
            return any(
                all(self._can_get_free(target, path) for target in waits)
                for waits in instances.values()
            )
        finally:
            path.discard(model)


@dataclass(frozen=True)
class Caller:
    """The model instance a bridge serves."""

    model: ModelKey
    instance: str  # its name, e.g. "bls_0_0"


class _Answers:
    """The responses of one BLS request, from the server's loop to whoever waits.

    A blocking caller takes them from a queue, or, in an ``InlineExecution``, suspends it
    until one arrives (the responses come on the loop, where it runs: no race); an awaiting
    caller (``awaiting``) is woken on its own loop once it can go on: at the final
    response, or at the first one of a stream.
    """

    def __init__(self, awaiting: asyncio.Future[None] | None = None, stream: bool = False):
        self._queue: queue.SimpleQueue[InferenceResponse | None] = queue.SimpleQueue()
        self._awaiting = awaiting
        self._stream = stream
        self._suspended: InlineExecution | None = None
        self.request: InferenceRequest | None = None

    def refused(self, error: ServerError) -> None:
        """The server could not take ``request``: its one answer is the error."""
        request = self.request
        assert request is not None
        if request.trace is not None:
            request.trace.finish()  # refused: what it has is written
        failure = ServerError.from_code(error.code, _failed(request.model_name, error.message))
        self.respond(InferenceResponse.failed(failure), True)

    def respond(self, response: InferenceResponse | None, final: bool) -> None:
        if response is not None:
            self._queue.put(response)
        if final:
            self._queue.put(None)
        suspended = self._suspended
        if suspended is not None:
            self._suspended = None
            suspended.wake()
        awaiting = self._awaiting
        if awaiting is not None and (final or self._stream):
            self._awaiting = None
            awaiting.get_loop().call_soon_threadsafe(_resolve, awaiting)

    def arrived(self) -> bool:
        """Whether ``next`` would return at once."""
        return not self._queue.empty()

    def next(self) -> InferenceResponse | None:
        """The next response, waiting for it; None once the final one has been taken."""
        if self._queue.empty():
            inline = current_inline()
            if inline is not None:  # on the loop: let it run until ``respond``
                self._suspended = inline
                inline.suspend()
        response = self._queue.get()
        if response is None:
            self._queue.put(None)  # stays at the end for a later call
        return response


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


class BlsBridge:
    """``pb_utils.ServerBridge`` for one instance (see the module docstring).

    ``holds_instance``: whether the caller keeps its instance busy while it waits (false
    for a decoupled model's ``async def execute``, which runs in the background).
    ``direct_calls``: a blocking ``exec`` may run its target on the calling thread (the
    caller is a default-mode model, whose responses leave after its batch: see
    runtime/deferral.py).
    ``on_call``: told of every call, before it is made; ``executing_elsewhere``: asked
    before every call whether the instance's execution runs on the server's event loop or
    a BLS caller's thread (not inside an ``InlineExecution``), where every call is
    refused; ``refuses_thread``: asked before a
    call that needs the loop whether to refuse it, coming from this thread (a thread of
    the model's own while its execution holds the loop: see ``PythonInstance``).
    """

    def __init__(
        self,
        calls: ServerCalls,
        waits: InstanceWaits,
        caller: Caller,
        staging: StagingPool | None,
        holds_instance: bool = True,
        on_call: Callable[[], None] | None = None,
        direct_calls: bool = False,
        refuses_thread: Callable[[], bool] | None = None,
        executing_elsewhere: Callable[[], bool] | None = None,
    ) -> None:
        self._calls = calls
        self._refuses_thread = refuses_thread
        self._direct_calls = direct_calls
        self._waits = waits
        self._caller = caller
        self._staging = staging
        self._holds_instance = holds_instance
        self._on_call = on_call
        self._executing_elsewhere = executing_elsewhere
        # Model changes from ``initialize`` are this process's own (see ``initializing``).
        self._initializing = False

    def background(self) -> BlsBridge:
        """The bridge for work that does not keep the instance busy."""
        return BlsBridge(
            self._calls, self._waits, self._caller, self._staging, False, self._on_call
        )

    def initializing(self) -> BlsBridge:
        """The bridge for ``initialize``: a model it loads or unloads is loaded or
        unloaded by this worker alone, since under ``--workers N`` every worker runs the
        same ``initialize`` (from ``execute``, the change is made on every worker)."""
        bridge = copy.copy(self)
        bridge._initializing = True
        return bridge

    def _calling(self, needs_loop: bool = True) -> None:
        if self._on_call is not None:
            self._on_call()
        if needs_loop and self._refuses_thread is not None and self._refuses_thread():
            raise InternalError(
                f"model '{self._caller.model[0]}' called the server from a thread of its "
                "own while its execution ran on the server's event loop, which the call "
                "needs (the execution may be waiting for this thread); its executions run "
                "in its instance's thread from now on (the model parameter "
                'EXECUTE_ON_EVENT_LOOP: "no" keeps them there from the start)'
            )
        if self._executing_elsewhere is not None and self._executing_elsewhere():
            raise InternalError(
                f"model '{self._caller.model[0]}' called the server from an execution "
                "outside its instance's thread (on the server's event loop, or on the "
                "thread of a model calling it), which cannot wait for the answer; its executions "
                "run in its instance's thread from now on (the model parameter "
                'EXECUTE_ON_EVENT_LOOP: "no" keeps them there from the start)'
            )

    # ---------------------------------------------------------------- inference

    def infer(self, request: pb_utils.InferenceRequest) -> pb_utils.InferenceResponse:
        answers = _Answers()
        target = self._prepare(request, answers)
        inline = current_inline()
        if inline is not None:
            inline.take_turn()  # a long chain of calls on the loop lets other work run
        if self._direct_calls and self._ran_direct(answers, inline is not None):
            # It ran on this thread and has answered (or will, through the loop, if it
            # answered through its response sender): this instance never waited on an
            # instance of the target, so there is no wait to record.
            return self._single(request, answers.next())
        self._submit(answers, target)
        try:
            response = answers.next()
        finally:
            self.end_wait(target)
        return self._single(request, response)

    def infer_decoupled(
        self, request: pb_utils.InferenceRequest
    ) -> Iterator[pb_utils.InferenceResponse]:
        answers, target = self._send(request, _Answers(stream=True), decoupled=True)
        self.end_wait(target)  # the stream counts as waiting while it is read
        return _ResponseStream(self, answers, target, request)

    async def infer_async(self, request: pb_utils.InferenceRequest) -> pb_utils.InferenceResponse:
        answered = asyncio.get_running_loop().create_future()
        answers, target = self._send(request, _Answers(answered))
        try:
            await answered
        finally:
            self.end_wait(target)
        return self._single(request, answers.next())

    async def infer_decoupled_async(
        self, request: pb_utils.InferenceRequest
    ) -> Iterator[pb_utils.InferenceResponse]:
        first = asyncio.get_running_loop().create_future()
        answers, target = self._send(request, _Answers(first, stream=True), decoupled=True)
        try:
            await first
        finally:
            self.end_wait(target)
        return _ResponseStream(self, answers, target, request)

    def cancel(self, request: InferenceRequest) -> None:
        self._calls.cancel(request)

    # ---------------------------------------------------------- model management

    def load_model(self, name: str, config: str, files: Mapping[str, bytes]) -> None:
        self._calling()
        self._calls.load_model(name, config, files, self._changer())

    def unload_model(self, name: str, unload_dependents: bool) -> None:
        self._calling()
        self._calls.unload_model(name, unload_dependents, self._changer())

    def _changer(self) -> str:
        """``ServerCalls``' ``caller`` of a model change: "" from ``initialize``."""
        return "" if self._initializing else self._caller.model[0]

    def is_model_ready(self, name: str, version: int) -> bool:
        self._calling(needs_loop=False)  # a read of the server's tables
        return self._calls.is_model_ready(name, version)

    # ----------------------------------------------------------------- internals

    def _send(
        self, request: pb_utils.InferenceRequest, answers: _Answers, decoupled: bool = False
    ) -> tuple[_Answers, ModelKey]:
        """Submit the request through the target's scheduler, counting the caller as
        waiting on the target until ``end_wait``; raises what makes ``exec`` answer with
        an error."""
        target = self._prepare(request, answers, decoupled)
        self._submit(answers, target)
        return answers, target

    def _prepare(
        self, request: pb_utils.InferenceRequest, answers: _Answers, decoupled: bool = False
    ) -> ModelKey:
        """The server request for ``request`` (in ``answers.request``, answering into
        ``answers``) and the model version it goes to; raises what makes ``exec`` answer
        with an error. The pb request's fields are read as stored: its constructor
        checked them."""
        self._calling()
        name = request._model_name
        try:
            spec = self._calls.model_spec(name, request._model_version)
        except ServerError:
            raise InternalError(
                _failed(
                    name,
                    f"Failed for execute the inference request. Model '{name}' is not ready.",
                )
            ) from None
        if spec.decoupled and not decoupled:
            raise InternalError(
                f"Model {name} is using the decoupled. The current BLS request call doesn't "
                "support models using the decoupled transaction policy. Please use "
                "'decoupled=True' argument to the 'exec' or 'async_exec' calls for decoupled "
                "models.'"
            )
        requested = request._requested_output_names
        staging = self._staging
        core = InferenceRequest(
            model_name=name,
            model_version=request._model_version,
            id=request._request_id,
            inputs={t._name: from_pb_tensor(t, staging) for t in request._inputs},
            requested_outputs={n: RequestedOutput(n) for n in requested} if requested else None,
            parameters=dict(request._parameters) if request._parameters else {},
            timeout_us=request._timeout,
            correlation_id=request._correlation_id,
            flags=request._flags,
            on_response=answers.respond,
        )
        parent = request._trace._server
        if parent is not None:  # the model passed a traced request's trace: a child trace
            core.trace = parent.child(name)
        answers.request = core
        return (spec.name, spec.version)

    def _ran_direct(self, answers: _Answers, inline: bool) -> bool:
        """Whether the target executed the request on this thread (``ServerCalls.
        execute_direct``; ``inline``: inside an ``InlineExecution``); a refusal there is
        its answer, as on the loop."""
        request = answers.request
        assert request is not None
        try:
            return self._calls.execute_direct(request, inline)
        except ServerError as error:
            answers.refused(error)
            return True

    def _submit(self, answers: _Answers, target: ModelKey) -> None:
        """Send the prepared request to the target's scheduler on the server's loop."""
        request = answers.request
        assert request is not None
        self.begin_wait(target, request.model_name)  # refuses a call never answered
        try:
            self._calls.submit(request, answers.refused)
        except BaseException:
            self.end_wait(target)
            raise

    def _single(
        self, request: pb_utils.InferenceRequest, response: InferenceResponse | None
    ) -> pb_utils.InferenceResponse:
        if response is None:
            response = InferenceResponse.failed(
                InternalError(_failed(request._model_name, "no response was received"))
            )
        return self.to_pb(request, response)

    def to_pb(
        self, request: pb_utils.InferenceRequest, response: InferenceResponse
    ) -> pb_utils.InferenceResponse:
        if response.error is not None:
            error = pb_utils.TritonError._from_exception(response.error)
            return pb_utils.InferenceResponse._from_server([], error, dict(response.parameters))
        # A GPU output stays on its device unless the caller asked for host memory.
        memory = request._preferred_memory._memory_type
        gpu = memory is not pb_utils.TRITONSERVER_MEMORY_CPU
        outputs = [to_pb_tensor(t, gpu) for t in response.outputs]
        parameters = dict(response.parameters) if response.parameters else {}
        return pb_utils.InferenceResponse._from_server(outputs, None, parameters)

    def begin_wait(self, target: ModelKey, name: str) -> None:
        if not self._holds_instance:
            return
        caller = self._caller
        if not self._waits.begin(caller.model, caller.instance, target):
            raise deadlock_error(caller, target, name)

    def end_wait(self, target: ModelKey) -> None:
        if self._holds_instance:
            self._waits.end(self._caller.model, self._caller.instance, target)


class _ResponseStream:
    """The responses of a decoupled BLS call, for ``pb_utils.ResponseIterator``."""

    def __init__(
        self,
        bridge: BlsBridge,
        answers: _Answers,
        target: ModelKey,
        request: pb_utils.InferenceRequest,
    ) -> None:
        self._bridge = bridge
        self._answers = answers
        self._target = target
        self._request = request

    def __iter__(self) -> _ResponseStream:
        return self

    def __next__(self) -> pb_utils.InferenceResponse:
        if self._answers.arrived():
            response = self._answers.next()
        else:
            # Blocking on the stream keeps the instance waiting: a deadlock is refused.
            self._bridge.begin_wait(self._target, self._request._model_name)
            try:
                response = self._answers.next()
            finally:
                self._bridge.end_wait(self._target)
        if response is None:
            raise StopIteration
        return self._bridge.to_pb(self._request, response)

    def cancel(self) -> None:
        """Ask the called model to stop (``request.is_cancelled()`` turns true there)."""
        request = self._answers.request
        if request is not None:
            self._bridge.cancel(request)


def deadlock_error(caller: Caller, target: ModelKey, name: str) -> UnavailableError:
    """The refusal of a call ``InstanceWaits.begin`` found could never be answered."""
    return UnavailableError(_failed(name, deadlock_detail(caller, target)))


def deadlock_detail(caller: Caller, target: ModelKey) -> str:
    return (
        f"deadlock: instance '{caller.instance}' of model '{caller.model[0]}' "
        f"would wait forever, since no instance of model '{target[0]}' can get "
        "free to run this request (each one is waiting on BLS responses that "
        "depend on it). Give the model more instances or break the cycle of "
        "calls."
    )


def _failed(model: str, detail: str) -> str:
    """Triton's prefix for a BLS request that could not run."""
    return f"Model {model} - Error when running inference: {detail}"
