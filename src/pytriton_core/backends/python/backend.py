"""Runs Triton Python-backend models (``model.py``) in-process.

Each instance is a ``TritonPythonModel`` object driven by its own worker thread; requests
and responses cross into ``pb_utils`` objects without copying tensor data. Unlike Triton,
there is no stub process and no /dev/shm pool: tensors stay numpy arrays end to end.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import sys
import traceback
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

from google.protobuf.message import Message

from pytriton_core import types
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
from pytriton_core.backends.python.model_imports import ModelImporter
from pytriton_core.config import ModelSpec, config_from_json, config_to_json_dict
from pytriton_core.errors import (
    ErrorCode,
    InternalError,
    ModelConfigError,
    ServerError,
)
from pytriton_core.inference.request import InferenceRequest
from pytriton_core.inference.response import InferenceResponse
from pytriton_core.inference.statistics import ComputeTiming
from pytriton_core.inference.tensor import DeviceTensor, Tensor
from pytriton_core.paths import confined_path

MODULE_NAME = "triton_python_backend_utils"
# Model parameters (docs/python-models.md): "no" keeps every execution in the instance's
# thread; "yes" hands execute() one request holding the whole batch, stacked.
EXECUTE_ON_LOOP = "EXECUTE_ON_EVENT_LOOP"
BATCHED_EXECUTE = "BATCHED_EXECUTE"


def _install_pb_utils() -> None:
    # model.py files import pb_utils by Triton's module name.
    sys.modules.setdefault(MODULE_NAME, pb_utils)


def _model_file(location: ModelLocation, default_model_filename: str) -> Path:
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

    def auto_complete_config(self, config: Message, location: ModelLocation) -> None:
        cfg: Any = config
        path = _model_file(location, cfg.default_model_filename)
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
        module, importer = _import_model_module(path, location)
        try:
            return PythonModel(
                module, importer, spec, json.dumps(config_to_json_dict(config)), location, path
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
    ) -> None:
        """``model_config``: Triton's JSON of the config, what ``initialize`` receives."""
        self._module = module
        self._importer = importer
        self._model_config = model_config
        self._location = location
        self.decoupled = spec.decoupled
        self._output_names = list(spec.outputs)
        self.output_set = frozenset(spec.outputs)
        self.input_types = {name: t.datatype.wire_name for name, t in spec.inputs.items()}
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
        self.loop_execution = (
            flag(spec.parameters.get(EXECUTE_ON_LOOP), default=True)
            and not self.decoupled
            and not inspect.iscoroutinefunction(module.TritonPythonModel.execute)
        )

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
        self._staging = model._location.host_staging  # GPU outputs' host copies
        self._batch_runner = model.batch_runner()
        self._async_loop: asyncio.AbstractEventLoop | None = None
        # Entered around every call into the model; one per instance (one worker thread).
        self._running = _running_model(model._location)
        with self._running:
            self._python_model = model._module.TritonPythonModel()
            if inspect.iscoroutinefunction(self._python_model.execute):
                self._async_loop = asyncio.new_event_loop()
            initialize = getattr(self._python_model, "initialize", None)
            if initialize is not None:
                try:
                    self._run(initialize(args))
                except Exception as exc:
                    raise model_code_error(exc) from exc

    def _run(self, result: Any) -> Any:
        """Run a hook's result to completion when the hook was ``async def``."""
        if inspect.iscoroutine(result):
            loop = self._async_loop or asyncio.new_event_loop()
            self._async_loop = loop
            return loop.run_until_complete(result)
        return result

    def execute(
        self, requests: Sequence[InferenceRequest], timing: ComputeTiming
    ) -> Sequence[InferenceResponse | None]:
        if self._batch_runner is not None:
            return self._batch_runner.execute(requests, timing, self._execute_stacked)
        pb_requests = [self._to_pb_request(r) for r in requests]
        timing.mark_input_done()
        result = self._call_execute(pb_requests)
        timing.mark_infer_done()
        if self._model.decoupled:
            if result is not None:
                raise InternalError(
                    f"Python model '{self._spec.name}' is using the decoupled mode and the "
                    "execute function must return None."
                )
            return [None] * len(requests)
        if result is None:
            # Since Triton 24.06 a default-mode model may answer through its senders.
            return [None] * len(requests)
        if not isinstance(result, list):
            raise InternalError(
                f"Expected a list in the execute return, found type '{type(result).__name__}'."
            )
        if len(result) != len(requests):
            raise InternalError(
                "Number of InferenceResponse objects do not match the number of "
                f"InferenceRequest objects. InferenceRequest(s) size is:{len(requests)}, and "
                f"InferenceResponse(s) size is:{len(result)}\n"
            )
        return [
            self._from_pb_response(response, request)
            for response, request in zip(result, requests, strict=True)
        ]

    def _call_execute(self, pb_requests: list[pb_utils.InferenceRequest]) -> Any:
        with self._running:
            try:
                return self._run(self._python_model.execute(pb_requests))
            except Exception as exc:
                raise InternalError(
                    f"Failed to process the request(s) for model '{self._spec.name}', "
                    f"message: {type(exc).__name__}: {exc}{_model_frames(exc)}"
                ) from exc

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
            is_cancelled=lambda: all(r.cancelled for r in requests),
            decoupled=False,
        )
        result = self._call_execute([stacked])
        if not isinstance(result, list) or len(result) != 1:
            raise InternalError(
                f"model '{self._spec.name}' ({BATCHED_EXECUTE}): execute must return a list "
                f"of one InferenceResponse for its one (stacked) request, got {result!r:.200}"
            )
        response = result[0]
        if not isinstance(response, pb_utils.InferenceResponse):
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

    def finalize(self) -> None:
        finalize = getattr(self._python_model, "finalize", None)
        if finalize is not None:
            with self._running:
                self._run(finalize())
        if self._async_loop is not None:
            self._async_loop.close()

    def _to_pb_request(self, request: InferenceRequest) -> pb_utils.InferenceRequest:
        inputs = [self._to_pb_tensor(t) for t in request.inputs.values()]

        def send(response: pb_utils.InferenceResponse | None, final: bool) -> None:
            core = None if response is None else self._from_pb_response(response, request)
            request.send_threadsafe(core, final)

        return pb_utils.InferenceRequest._from_server(
            request_id=request.id,
            correlation_id=request.correlation_id,
            inputs=inputs,
            requested_output_names=request.output_names(self._model._output_names),
            parameters=dict(request.parameters),
            flags=request.flags,
            timeout=request.timeout_us,
            send_hook=send,
            is_cancelled=lambda: request.cancelled,
            decoupled=self._model.decoupled,
        )

    def _to_pb_tensor(self, tensor: Tensor) -> pb_utils.Tensor:
        if (
            self._model.gpu_inputs
            and isinstance(tensor, DeviceTensor)
            and not tensor.on_host
            and tensor.datatype.wire_name != "BF16"  # DLPack through cupy has no bfloat16
        ):
            return pb_utils.Tensor.from_dlpack(tensor.name, tensor.device)
        return pb_utils.Tensor._from_server(tensor.name, tensor.data, tensor.datatype.wire_name)

    def _from_pb_response(self, response: Any, request: InferenceRequest) -> InferenceResponse:
        if not isinstance(response, pb_utils.InferenceResponse):
            return InferenceResponse.failed(
                InternalError(
                    f"Expected an InferenceResponse, found type '{type(response).__name__}'."
                )
            )
        error = response.error()
        # The dict behind ``parameters()`` (validated when the model built the response).
        parameters = dict(response._parameters)
        if error is not None:
            return InferenceResponse(
                parameters=parameters, error=_server_error(error.code(), error.message())
            )
        requested = request.requested_outputs
        outputs = []
        for tensor in response.output_tensors():
            name = tensor.name()
            if requested is None:
                if name not in self._model.output_set:
                    continue
            elif name not in requested:
                continue
            datatype = types.BY_WIRE_NAME[tensor._datatype_wire_name()]
            if tensor.is_cpu():
                outputs.append(Tensor(name, datatype, tensor._server_array()))
            else:  # a GPU tensor (from_dlpack): copied to the host, or to a region, later
                device = tensor._server_device_array(self._staging)
                outputs.append(DeviceTensor(name, datatype, device))
        return InferenceResponse(outputs=outputs, parameters=parameters)


def model_code_error(exc: BaseException) -> InternalError:
    """An exception raised by model code (import, auto-complete, initialize), as Triton's
    stub reports it: ``<type>: <message>`` and the model's frames."""
    return InternalError(f"{type(exc).__name__}: {exc}{_model_frames(exc)}")


def _model_frames(exc: BaseException) -> str:
    """The model's stack at the error, innermost first, as Triton's stub reports it."""
    frames = traceback.extract_tb(exc.__traceback__)[1:]  # [0] is this backend's call
    if not frames:
        return ""
    lines = "".join(f"  {f.filename}({f.lineno}): {f.name}\n" for f in reversed(frames))
    return "\n\nAt:\n" + lines


_CODE_BY_PB: dict[int, ErrorCode] = {}


def _server_error(code: int, message: str) -> ServerError:
    if not _CODE_BY_PB:
        for error_code in ErrorCode:
            _CODE_BY_PB[getattr(pb_utils.TritonError, error_code.value)] = error_code
    return ServerError.from_code(_CODE_BY_PB.get(code, ErrorCode.INTERNAL), message)


def create_backend() -> Backend:
    return PythonBackend()
