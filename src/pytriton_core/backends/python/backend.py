"""Runs Triton Python-backend models (``model.py``) in-process.

Each instance is a ``TritonPythonModel`` object driven by its own worker thread; requests
and responses cross into ``pb_utils`` objects without copying tensor data. Unlike Triton,
there is no stub process and no /dev/shm pool: tensors stay numpy arrays end to end.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import inspect
import json
import logging
import os
import re
import sys
import sysconfig
import time
import traceback
from collections.abc import Collection, Coroutine, Iterator, Sequence
from pathlib import Path
from threading import get_ident
from types import CoroutineType, ModuleType
from typing import Any

from google.protobuf.message import Message

from pytriton_core import clock
from pytriton_core.backends.base import (
    Backend,
    BackendInstance,
    BackendModel,
    InstanceSpec,
    ModelLocation,
)
from pytriton_core.backends.batching import Batch, BatchRunner
from pytriton_core.backends.framework import flag
from pytriton_core.backends.python import pb_utils
from pytriton_core.backends.python.bls import BlsBridge, Caller, InstanceWaits
from pytriton_core.backends.python.convert import from_pb_tensor, to_pb_tensor
from pytriton_core.backends.python.model_imports import ModelImporter
from pytriton_core.backends.python.model_loop import ModelLoop
from pytriton_core.backends.python.pb_utils import request_from_server
from pytriton_core.backends.python.pb_utils_tensor import tensor_from_server
from pytriton_core.backends.python.process_env import ENV_PARAMETER, interpreter_for
from pytriton_core.backends.python.process_instance import (
    MODE_PARAMETER,
    ProcessModel,
    auto_complete_in_worker,
    process_mode,
)
from pytriton_core.config import ModelSpec, config_from_json, config_to_json_dict
from pytriton_core.errors import (
    ErrorCode,
    InternalError,
    ModelConfigError,
    ServerError,
)
from pytriton_core.inference.inline import InlineExecution, current_inline
from pytriton_core.inference.request import InferenceRequest
from pytriton_core.inference.response import InferenceResponse
from pytriton_core.inference.statistics import ComputeTiming, ResponseTiming
from pytriton_core.paths import confined_path

log = logging.getLogger(__name__)
_PbResponse = pb_utils.InferenceResponse  # (a module global: no attribute lookup per response)

MODULE_NAME = "triton_python_backend_utils"
# Model parameters (docs/python-models.md): "no" keeps every execution in the instance's
# thread; "yes" hands execute() one request holding the whole batch, stacked.
EXECUTE_ON_LOOP = "EXECUTE_ON_EVENT_LOOP"
BATCHED_EXECUTE = "BATCHED_EXECUTE"
# A call of the server in model code (BLS, model management): such a model's executions
# run in its instance's thread, where they can wait for the loop to answer, or on the loop
# inside an ``InlineExecution``, which a wait suspends.
_SERVER_CALL = re.compile(r"\b(?:exec|async_exec|load_model|unload_model|is_model_ready)\s*\(")
# In a model that calls the server, waits the loop cannot suspend: threads of the model's
# own that may call the server for an execution that waits for them (docs/pipelines.md: a
# thread sees the server in a copy of the caller's context), or an event loop of its own
# (``asyncio.run`` of ``async_exec`` calls, which cannot run on the server's loop). On
# the loop such an execution would block the loop their calls need, so it stays in its
# instance's thread.
_WAITS_ELSEWHERE = re.compile(
    r"\b(?:Thread|ThreadPoolExecutor|copy_context|to_thread|run_in_executor|asyncio"
    r"|async_exec)\b"
)


def _asks_process_mode(cfg: Any) -> bool:
    parameters = cfg.parameters
    if ENV_PARAMETER in parameters:
        return True
    return MODE_PARAMETER in parameters and parameters[MODE_PARAMETER].string_value == "process"


def _install_pb_utils() -> None:
    # model.py files import pb_utils by Triton's module name.
    sys.modules.setdefault(MODULE_NAME, pb_utils)


def _model_file(location: ModelLocation, default_model_filename: str) -> Path:
    if location.python_based_dir is not None:  # a Python-based backend's own model.py
        return location.python_based_dir / "model.py"
    filename = default_model_filename or "model.py"
    return confined_path(
        location.model_dir,
        str(location.version),
        filename,
        what=f"default_model_filename '{filename}'",
    )


def _running_model(location: ModelLocation) -> pb_utils.ModelContext:
    """What model code sees while it runs: its folder (``get_model_dir``) and its server's
    custom metrics."""
    return pb_utils.ModelContext(str(location.model_dir), location.custom_metrics)


def _import_model_module(path: Path, location: ModelLocation) -> tuple[ModuleType, ModelImporter]:
    """The model file as a module of its own import namespace (model_imports.py): its
    helper modules are found in its version folder, then its model folder, and in no
    other model's."""
    if not path.is_file():
        # The words of Triton's stub (Triton 2.51 itself then waits forever for the stub).
        raise InternalError(f"Python model file not found in '{path}'")
    _install_pb_utils()
    importer = ModelImporter([location.version_dir, location.model_dir])
    try:
        with _running_model(location):
            module = importer.import_file(path)
    except Exception as exc:
        importer.release()
        raise model_code_error(exc) from exc
    if not hasattr(module, "TritonPythonModel"):
        importer.release()
        raise InternalError(
            f"failed to load model '{location.name}': {path} defines no class TritonPythonModel"
        )
    return module, importer


class PythonBackend(Backend):
    name = "python"

    def __init__(self, worker_process: bool = False) -> None:
        """``worker_process``: this is a model's worker process (process mode), which runs
        the model in-process whatever its config asks."""
        self._worker_process = worker_process
        # Which instances of this server's Python models wait on BLS answers (deadlocks).
        # A worker process knows only its own instance: the server tracks them all.
        self._waits = InstanceWaits(tracking=not worker_process)

    def auto_complete_config(self, config: Message, location: ModelLocation) -> None:
        cfg: Any = config
        path = _model_file(location, cfg.default_model_filename)
        if _asks_process_mode(cfg) and not self._worker_process:
            # Importing the model here would defeat the isolation (and its environment's
            # packages are not the server's): a process of the model's own runs the hook,
            # as Triton's stub does; only when model.py names it (no process start else).
            if path.is_file() and "auto_complete_config" in path.read_text(errors="replace"):
                parameters = cfg.parameters
                env = parameters[ENV_PARAMETER].string_value if ENV_PARAMETER in parameters else ""
                interpreter = interpreter_for(env, location)
                completed_json = auto_complete_in_worker(
                    interpreter, json.dumps(config_to_json_dict(config)), location
                )
                config.CopyFrom(config_from_json(completed_json))
            return
        module, importer = _import_model_module(path, location)
        try:
            hook = getattr(module.TritonPythonModel, "auto_complete_config", None)
            if hook is None:
                return
            with _running_model(location):
                try:
                    completed = hook(pb_utils.ModelConfig(json.dumps(config_to_json_dict(config))))
                except Exception as exc:
                    raise model_code_error(exc) from exc
        finally:
            importer.release()  # load_model imports the model afresh
        if not isinstance(completed, pb_utils.ModelConfig):
            raise ModelConfigError(
                f"auto_complete_config function in model '{location.name}' must return a "
                "valid pb.ModelConfig object."
            )
        config.CopyFrom(config_from_json(completed.as_dict()))

    def load_model(self, spec: ModelSpec, location: ModelLocation, config: Message) -> BackendModel:
        path = _model_file(location, spec.default_model_filename)
        if process_mode(spec) and not self._worker_process:
            if not path.is_file():
                raise InternalError(f"Python model file not found in '{path}'")
            interpreter = interpreter_for(spec.parameters.get(ENV_PARAMETER, ""), location)
            model_config = json.dumps(config_to_json_dict(config))
            calls_server = _SERVER_CALL.search(path.read_text(errors="replace")) is not None
            return ProcessModel(
                spec, model_config, location, interpreter, self._waits, calls_server=calls_server
            )
        module, importer = _import_model_module(path, location)
        try:
            return PythonModel(
                module,
                importer,
                spec,
                json.dumps(config_to_json_dict(config)),
                location,
                path,
                self._waits,
            )
        except BaseException:
            importer.release()
            raise


class PythonModel(BackendModel):
    def __init__(
        self,
        module: ModuleType,
        importer: ModelImporter,
        spec: ModelSpec,
        model_config: str,
        location: ModelLocation,
        path: Path,
        waits: InstanceWaits,
    ) -> None:
        """``model_config``: Triton's JSON of the config, what ``initialize`` receives."""
        self._module = module
        self._importer = importer
        self.waits = waits
        self._model_config = model_config
        self._location = location
        self.decoupled = spec.decoupled
        self._output_names = list(spec.outputs)
        self.input_types = {name: t.datatype for name, t in spec.inputs.items()}
        # A sequence model's implicit-state outputs: kept for the sequence batcher.
        self.state_outputs = spec.state_outputs
        # What a response keeps when its request named no outputs (the common case).
        self.all_outputs_kept = frozenset(self._output_names) | frozenset(self.state_outputs)
        # "no": inputs in CUDA shared memory reach the model as GPU tensors (DLPack).
        force_cpu = spec.parameters.get("FORCE_CPU_ONLY_INPUT_TENSORS")
        self.gpu_inputs = not flag(force_cpu, default=True)
        if not hasattr(module.TritonPythonModel, "execute"):
            raise InternalError(f"Python model {path} does not implement `execute` method.")
        # A lone request's short execution may run on the event loop (the model holds the
        # GIL anyway): not for decoupled models, which answer from threads of their own
        # over time, nor async ones, which need a loop of their own, nor where the model's
        # parameters say no (a model that waits on the server: a cancellation it polls).
        # One stacked request per batch instead of one request each (beyond Triton).
        self.batched = flag(spec.parameters.get(BATCHED_EXECUTE), default=False)
        if self.batched and (not spec.batching or spec.decoupled):
            raise ModelConfigError(
                f"model '{spec.name}': parameter {BATCHED_EXECUTE} needs a batching model "
                "(max_batch_size > 0) in the default (not decoupled) transaction policy"
            )
        self._spec = spec
        # A model whose code calls the server (BLS waits for the loop to answer) runs on
        # the loop only inside an ``InlineExecution``, which such a wait suspends
        # (``loop_calls``): its file names such a call, or a call was made
        # (``server_called``).
        # Not where it waits for the server in ways the loop cannot suspend
        # (``_WAITS_ELSEWHERE``), or a thread of its own called the server
        # (``thread_called``).
        source = path.read_text(errors="replace")
        may_loop = (
            flag(spec.parameters.get(EXECUTE_ON_LOOP), default=True)
            and not self.decoupled
            and not inspect.iscoroutinefunction(module.TritonPythonModel.execute)
        )
        calls_server = _SERVER_CALL.search(source) is not None
        self.loop_execution = may_loop and not calls_server
        self.loop_calls = may_loop and not (calls_server and _WAITS_ELSEWHERE.search(source))

    def server_called(self) -> None:
        """Model code called the server: no execution of this model runs on the loop but
        inside an ``InlineExecution``."""
        self.loop_execution = False

    def thread_called(self) -> None:
        """A thread of the model's own called the server: its executions stay in their
        instance's thread from now on."""
        self.loop_execution = False
        self.loop_calls = False

    def finalize(self) -> None:
        self._importer.release()

    def create_instance(self, spec: InstanceSpec) -> BackendInstance:
        args = {
            "model_config": self._model_config,
            "model_instance_kind": spec.kind,
            "model_instance_name": spec.name,
            "model_instance_device_id": str(spec.device_id),
            "model_repository": str(self._location.model_dir),
            "model_version": str(self._location.version),
            "model_name": self._location.name,
        }
        return PythonInstance(self, spec, args)

    def batch_runner(self) -> BatchRunner | None:
        """The gather/scatter of a model with BATCHED_EXECUTE, else None."""
        return BatchRunner.for_instance(self._spec, self._location) if self.batched else None


class PythonInstance(BackendInstance):
    def __init__(self, model: PythonModel, spec: InstanceSpec, args: dict[str, str]) -> None:
        self._model = model
        self._spec = spec
        location = model._location
        self._staging = location.host_staging  # GPU outputs' host copies
        self._key = (location.name, location.version)
        self._bridge: BlsBridge | None = None
        if location.server is not None:
            caller = Caller(self._key, spec.name)
            self._bridge = BlsBridge(
                location.server,
                model.waits,
                caller,
                self._staging,
                on_call=model.server_called,
                direct_calls=not model.decoupled,
                refuses_thread=self._refuses_thread,
                executing_elsewhere=self._executing_elsewhere,
            )
        model.waits.register(self._key, spec.name)
        self._loop: ModelLoop | None = None
        # Entered around every call into the model; one per instance (one worker thread).
        self._running = _running_model(location)
        # How this instance's requests cross into pb_utils and its responses back, and
        # what an execution reads of the instance, as C fields. Made in the instance's
        # thread; an execution anywhere else runs on the loop.
        self._conversions = _Conversions(model, self, get_ident())
        # ``_running`` and the server's bridge around ``execute``, in one block made once:
        # one context the model's executions all run in, wherever they run.
        self._conversions.scope = self._running.executing(self._bridge)
        try:
            initializing = None if self._bridge is None else self._bridge.initializing()
            with self._scope("initialize", initializing):
                self._python_model = model._module.TritonPythonModel()
                self._conversions.python_model = self._python_model
                initialize = getattr(self._python_model, "initialize", None)
                if initialize is not None:
                    try:
                        self._run(initialize(args))
                    except Exception as exc:
                        raise model_code_error(exc) from exc
        except BaseException:
            self._close()
            raise

    @contextlib.contextmanager
    def _scope(self, phase: str, bridge: BlsBridge | None = None) -> Iterator[None]:
        """What model code sees while a hook runs: its folder, its server's custom metrics
        and, for BLS, the server."""
        with self._running, pb_utils.server_context(bridge or self._bridge, phase):
            yield

    def _model_loop(self) -> ModelLoop:
        if self._loop is None:
            self._loop = ModelLoop(self._spec.name)
        return self._loop

    def _run(self, result: Any) -> Any:
        """Run a hook's result to completion when the hook was ``async def``."""
        if type(result) is CoroutineType:  # inspect.iscoroutine's test, without its call
            return self._model_loop().run(result)
        return result

    def execute(
        self, requests: Sequence[InferenceRequest], timing: ComputeTiming
    ) -> Sequence[InferenceResponse | None]:
        return _execute(self._conversions, requests, timing)

    def _executing_elsewhere(self) -> bool:
        """Whether the execution running now runs plainly on the loop or on a BLS caller's
        thread (not in an ``InlineExecution``): its calls are refused (``BlsBridge``)."""
        return self._conversions.elsewhere

    def _refuses_thread(self) -> bool:
        """Whether to refuse a call (one that needs the loop) made now from this thread:
        a thread of the model's own while its execution holds the loop, which may wait
        for that thread, so the call's answer could never come. The model's executions
        then stay in its thread."""
        inline = self._conversions.inline
        if inline is None or not inline.holds_loop or inline.on_loop_thread():
            return False
        self._model.thread_called()
        return True

    def _execute_stacked(self, batch: Batch) -> dict[str, Any]:
        """BATCHED_EXECUTE: the model gets one request holding the gathered batch and
        answers it with the whole batch's outputs, which the runner scatters back."""
        requests = batch.requests
        inputs = [
            pb_utils.Tensor._from_server(name, array, self._model.input_types[name])
            for name, array in batch.inputs.items()
        ]
        stacked = pb_utils.InferenceRequest._from_server(
            request_id=requests[0].id if len(requests) == 1 else "",
            correlation_id=0,
            inputs=inputs,
            requested_output_names=list(batch.output_names),
            parameters=dict(requests[0].parameters) if len(requests) == 1 else {},
            flags=0,
            timeout=0,
            origin=_AllCancelled(requests),
            decoupled=False,
        )
        result = _call_execute(self._conversions, [stacked], requests)
        if not isinstance(result, list) or len(result) != 1:
            raise InternalError(
                f"model '{self._spec.name}' ({BATCHED_EXECUTE}): execute must return a list "
                f"of one InferenceResponse for its one (stacked) request, got {result!r:.200}"
            )
        response = result[0]
        if not isinstance(response, _PbResponse):
            raise InternalError(
                f"Expected an InferenceResponse, found type '{type(response).__name__}'."
            )
        error = response.error()
        if error is not None:  # the batch's one answer: every request of it fails
            raise _server_error(error.code(), error.message())
        outputs: dict[str, Any] = {}
        for tensor in response.output_tensors():
            if not tensor.is_cpu():
                raise InternalError(
                    f"model '{self._spec.name}' ({BATCHED_EXECUTE}): output "
                    f"'{tensor.name()}' is in GPU memory; return CPU tensors"
                )
            outputs[tensor.name()] = tensor._server_array()
        return outputs

    def _run_in_background(
        self, coroutine: Coroutine[Any, Any, Any], requests: Sequence[InferenceRequest]
    ) -> None:
        """A decoupled ``async def execute``: the instance goes on while it runs. Its BLS
        calls do not count as the instance waiting."""
        bridge = self._bridge.background() if self._bridge is not None else None

        def done(future: concurrent.futures.Future[Any]) -> None:
            exc = None if future.cancelled() else future.exception()
            if exc is None:
                return
            message = self._failure(exc)
            log.error("%s", message)
            # Triton only logs this; ending the requests spares their clients a hang.
            for request in requests:
                request.send_threadsafe(InferenceResponse.failed(InternalError(message)), True)

        with self._scope("execute", bridge):
            self._model_loop().start(coroutine, done)

    def _failure(self, exc: BaseException) -> str:
        return (
            f"Failed to process the request(s) for model '{self._spec.name}', "
            f"message: {type(exc).__name__}: {exc}{_model_frames(exc)}"
        )

    def finalize(self) -> None:
        try:
            finalize = getattr(self._python_model, "finalize", None)
            if finalize is not None:
                with self._scope("finalize"):
                    self._run(finalize())
        finally:
            self._close()

    def _close(self) -> None:
        if self._loop is not None:
            self._loop.close()
        self._model.waits.unregister(self._key, self._spec.name)

    def send_hook(self, request: InferenceRequest) -> pb_utils.SendHook:
        """What a model's ``get_response_sender()`` sends ``request``'s responses through
        (``pb_utils.Responder``)."""
        last_sent_ns = clock.now_ns()  # a response's work starts after the previous one
        sent = False
        conversions = self._conversions

        def send(response: pb_utils.InferenceResponse | None, final: bool) -> None:
            nonlocal last_sent_ns, sent
            output_start_ns = clock.now_ns() if response is not None else 0
            core = None if response is None else _from_pb_response(conversions, response, request)
            sent_ns = clock.now_ns()
            timing = ResponseTiming(last_sent_ns, output_start_ns, sent_ns)
            first = not sent
            last_sent_ns = sent_ns
            sent = True
            request.send_threadsafe(core, final, timing)
            if first:
                # The model holds the GIL while it computes its next responses; letting it go
                # once lets the event loop send the first one now rather than at the
                # interpreter's next switch (5 ms), or after the whole stream.
                time.sleep(0)

        return send


class _Conversions:
    """How an instance's requests cross into ``pb_utils`` and the model's responses back,
    with what the crossing needs of the model read once, and what an execution reads of
    its instance (an extension type, backend.pxd: every request goes through ``_execute``,
    ``_to_pb_request`` and ``_from_pb_response``, which read these as C fields)."""

    def __init__(self, model: PythonModel, responder: PythonInstance, worker: int) -> None:
        self.decoupled = model.decoupled
        # "no" to FORCE_CPU_ONLY_INPUT_TENSORS: inputs in CUDA shared memory reach the
        # model as GPU tensors (DLPack).
        self.gpu_inputs = model.gpu_inputs
        # What a request asks for when it names no outputs (the model's, in its order).
        self.output_names = model._output_names
        # What a response keeps when its request named no outputs (the common case).
        self.all_outputs_kept = model.all_outputs_kept
        # A sequence model's implicit-state outputs: kept for the sequence batcher.
        self.state_outputs = model.state_outputs
        self.staging = model._location.host_staging  # GPU outputs' host copies
        # Makes a request's send hook (``pb_utils.Responder``), runs coroutines and
        # reports failures: the instance.
        self.responder = responder
        self.model_name = responder._spec.name
        self.batch_runner = model.batch_runner()
        # The instance's thread (its ident); an execution on another runs on the loop.
        self.worker = worker
        # The model's ``TritonPythonModel`` (once made) and the execute scope.
        self.python_model: Any = None
        self.scope: Any = None
        # The inline execution (on the loop) the instance executes in, if any; whether the
        # one running now runs elsewhere (plainly on the loop, on a BLS caller's thread).
        self.inline: InlineExecution | None = None
        self.elsewhere = False


def _execute(
    conversions: _Conversions, requests: Sequence[InferenceRequest], timing: ComputeTiming
) -> Sequence[InferenceResponse | None]:
    """``PythonInstance.execute``: a function, typed in backend.pxd (every batch)."""
    batch_runner = conversions.batch_runner
    if batch_runner is not None:
        return batch_runner.execute(requests, timing, conversions.responder._execute_stacked)
    batch = requests if type(requests) is list else list(requests)
    # A lone request (the common case) without the comprehension.
    if len(batch) == 1:
        pb_requests = [_to_pb_request(conversions, batch[0])]
    else:
        pb_requests = [_to_pb_request(conversions, r) for r in batch]
    timing.mark_input_done()
    result = _call_execute(conversions, pb_requests, batch)
    timing.mark_infer_done()
    return _responses(conversions, conversions.model_name, batch, pb_requests, result)


def _call_execute(
    conversions: _Conversions,
    pb_requests: list[pb_utils.InferenceRequest],
    requests: Sequence[InferenceRequest],
) -> Any:
    # Off the instance's thread, calls are refused unless they can wait by suspending
    # the execution (on the loop, inside an ``InlineExecution``).
    inline: InlineExecution | None = None
    elsewhere = False
    if get_ident() != conversions.worker:
        inline = current_inline()
        if inline is not None:
            conversions.inline = inline
        else:
            elsewhere = True
    conversions.elsewhere = elsewhere
    # ``_scope``'s blocks, as one made once: this runs per execution.
    try:
        return conversions.scope.run(_execute_in_scope, conversions, pb_requests, requests)
    except Exception as exc:
        raise InternalError(conversions.responder._failure(exc)) from exc
    finally:
        if inline is not None:
            conversions.inline = None


def _execute_in_scope(
    conversions: _Conversions,
    pb_requests: list[pb_utils.InferenceRequest],
    requests: Sequence[InferenceRequest],
) -> Any:
    result = conversions.python_model.execute(pb_requests)
    if type(result) is not CoroutineType:  # inspect.iscoroutine's test, without its call
        return result
    instance = conversions.responder
    if conversions.decoupled:
        instance._run_in_background(result, requests)
        return None
    return instance._run(result)


def _to_pb_request(
    conversions: _Conversions, request: InferenceRequest
) -> pb_utils.InferenceRequest:
    """A server request as the model sees it; its tensors are shared, not copied."""
    if conversions.gpu_inputs:
        inputs = [to_pb_tensor(t, True) for t in request.inputs.values()]
    else:  # (``to_pb_tensor`` without a GPU: every input wrapped as it is, on the host)
        inputs = []
        for t in request.inputs.values():
            untyped = t  # ``data`` through the attribute protocol (a DeviceTensor's is computed)
            inputs.append(tensor_from_server(t.name, untyped.data, t.datatype))
    requested = request.requested_outputs  # (``request.output_names``, spelled out)
    parameters = request.parameters
    # A decoupled model's sender is made now, when its first response's work starts; a
    # default-mode model's only if it asks for it (few do: no closure per request).
    decoupled = conversions.decoupled
    responder = conversions.responder
    return request_from_server(
        request.id,
        request.correlation_id,
        inputs,
        conversions.output_names if requested is None else list(requested),
        dict(parameters) if parameters else {},
        request.flags,
        request.timeout_us,
        responder.send_hook(request) if decoupled else None,
        None if decoupled else responder,
        request,
        decoupled,
        request.trace,
    )


def _from_pb_response(
    conversions: _Conversions, response: Any, request: InferenceRequest
) -> InferenceResponse:
    """A model's response as the server's: the outputs its request asked for (and a
    sequence model's state), shared, not copied."""
    if not isinstance(response, _PbResponse):
        return InferenceResponse.failed(
            InternalError(f"Expected an InferenceResponse, found type '{type(response).__name__}'.")
        )
    answer: pb_utils.InferenceResponse = response
    error = answer._error
    parameters = dict(answer._parameters) if answer._parameters else {}
    if error is not None:
        return InferenceResponse(
            parameters=parameters, error=_server_error(error.code(), error.message())
        )
    requested = request.requested_outputs
    kept: Collection[str]
    if requested is None:
        kept = conversions.all_outputs_kept
    elif conversions.state_outputs:
        kept = {*requested, *conversions.state_outputs}
    else:
        kept = requested  # (its keys: no set made per request)
    staging = conversions.staging
    outputs = []
    for tensor in answer._output_tensors:
        if tensor._name in kept:
            outputs.append(from_pb_tensor(tensor, staging))
    return InferenceResponse(outputs, parameters)


def _responses(
    conversions: _Conversions,
    model_name: str,
    requests: list[InferenceRequest],
    pb_requests: list[pb_utils.InferenceRequest],
    result: Any,
) -> list[InferenceResponse | None]:
    """What ``execute`` returned, as one response (or None) per request; the requests the
    model released with RELEASE_RESCHEDULE are marked for the scheduler."""
    count = len(requests)
    rescheduled = _rescheduled(pb_requests)
    if rescheduled is None:  # none was (the common case): the short way
        if result is not None and not conversions.decoupled:
            for request in requests:  # none is to be rescheduled now
                if request.reschedule:
                    request.reschedule = False
            if type(result) is list and len(result) == count:
                if count == 1:
                    return [_from_pb_response(conversions, result[0], requests[0])]
                return [
                    _from_pb_response(conversions, response, request)
                    for response, request in zip(result, requests)  # noqa: B905
                ]
        rescheduled = [False] * count
    if conversions.decoupled:
        if result is not None:
            raise InternalError(
                f"Python model '{model_name}' is using the decoupled mode and the "
                "execute function must return None."
            )
        _mark_rescheduled(requests, rescheduled)
        return [None] * count
    if result is None:
        # Since Triton 24.06 a default-mode model may answer through its senders.
        _mark_rescheduled(requests, rescheduled)
        return [None] * count
    if not isinstance(result, list):
        raise InternalError(
            f"Expected a list in the execute return, found type '{type(result).__name__}'."
        )
    if len(result) != count:
        raise InternalError(
            "Number of InferenceResponse objects do not match the number of "
            f"InferenceRequest objects. InferenceRequest(s) size is:{count}, and "
            f"InferenceResponse(s) size is:{len(result)}\n"
        )
    for response, again in zip(result, rescheduled, strict=True):
        if again and response is not None:
            # Triton's wording, misspelling included.
            raise InternalError(
                "Expected a None object in the execute function return list for "
                f"reschduled request, found type '{type(response).__name__}'."
            )
    _mark_rescheduled(requests, rescheduled)
    return [
        None if again else _from_pb_response(conversions, response, request)
        for response, request, again in zip(result, requests, rescheduled, strict=True)
    ]


class _AllCancelled:
    """A stacked request (BATCHED_EXECUTE) is cancelled once all of its requests are."""

    __slots__ = ("_requests",)

    def __init__(self, requests: Sequence[InferenceRequest]) -> None:
        self._requests = requests

    @property
    def cancelled(self) -> bool:
        return all(r.cancelled for r in self._requests)


_RESCHEDULE = pb_utils.TRITONSERVER_REQUEST_RELEASE_RESCHEDULE


def _rescheduled(pb_requests: list[pb_utils.InferenceRequest]) -> list[bool] | None:
    """Which requests the model released with RELEASE_RESCHEDULE; None when none was."""
    for request in pb_requests:
        if request._release_flags == _RESCHEDULE:
            return [r._release_flags == _RESCHEDULE for r in pb_requests]
    return None


def _mark_rescheduled(requests: Sequence[InferenceRequest], rescheduled: list[bool]) -> None:
    """Tell the scheduler which requests the model released with RELEASE_RESCHEDULE."""
    for request, again in zip(requests, rescheduled, strict=True):
        request.reschedule = again


def model_code_error(exc: BaseException) -> InternalError:
    """An exception raised by model code (import, auto-complete, initialize), as Triton's
    stub reports it: ``<type>: <message>`` and the model's frames."""
    return InternalError(f"{type(exc).__name__}: {exc}{_model_frames(exc)}")


def _model_frames(exc: BaseException) -> str:
    """The model's stack at the error, innermost first, as Triton's stub reports it (the
    server's frames and the standard library's, e.g. asyncio's, left out)."""
    frames = [
        frame
        for frame in traceback.extract_tb(exc.__traceback__)
        if not frame.filename.startswith(_NOT_MODEL_CODE)
        and not (_COMPILED_HERE in frame.filename and not os.path.isabs(frame.filename))
    ]
    if not frames:
        return ""
    lines = "".join(f"  {f.filename}({f.lineno}): {f.name}\n" for f in reversed(frames))
    return "\n\nAt:\n" + lines


# A module of this folder compiled from its .py (csrc/compiled_modules.txt) names its
# frames by its source as the build gave it: a relative path, src/pytriton_core/...
_COMPILED_HERE = "pytriton_core/backends/python/"
_NOT_MODEL_CODE = (
    str(Path(__file__).parent) + "/",
    sysconfig.get_paths()["stdlib"] + "/",
    "<frozen ",  # importlib's bootstrap, around a model file's import
)


_CODE_BY_PB: dict[int, ErrorCode] = {}


def _server_error(code: int, message: str) -> ServerError:
    if not _CODE_BY_PB:
        for error_code in ErrorCode:
            _CODE_BY_PB[getattr(pb_utils.TritonError, error_code.value)] = error_code
    return ServerError.from_code(_CODE_BY_PB.get(code, ErrorCode.INTERNAL), message)


def create_backend() -> Backend:
    return PythonBackend()
