"""ONNX Runtime backend: ``model.onnx`` (a file, or a folder holding it beside external data).

One ``InferenceSession`` per instance. CPU instances use the CPU execution provider (or
OpenVINO's, when ``cpu_execution_accelerator`` names it); GPU instances use CUDA, with
TensorRT in front of it when ``gpu_execution_accelerator`` names "tensorrt", and bind their
inputs and outputs on the device (IOBinding) so ONNX Runtime makes no copies of its own.
Session options come from the config's ``parameters`` with Triton's onnxruntime_backend
names (``intra_op_thread_count``, ``inter_op_thread_count``, ``execution_mode``,
``enable_mem_arena``, ``enable_mem_pattern``, ...), and ``optimization.graph.level``.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
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
from pytriton_core.backends.framework import (
    ModelTensor,
    check_config_io,
    complete_config,
    flag,
    model_path,
)
from pytriton_core.config import ModelSpec
from pytriton_core.config.spec import ExecutionAccelerator
from pytriton_core.errors import InternalError, ModelConfigError, UnsupportedError
from pytriton_core.inference.request import InferenceRequest
from pytriton_core.inference.response import InferenceResponse
from pytriton_core.inference.statistics import ComputeTiming
from pytriton_core.memory.device import DeviceArray

log = logging.getLogger(__name__)

MODEL_FILENAME = "model.onnx"

_ORT_TYPES: dict[str, types.DataType] = {
    f"tensor({name})": types.BY_WIRE_NAME[wire]
    for name, wire in (
        ("bool", "BOOL"),
        ("uint8", "UINT8"),
        ("uint16", "UINT16"),
        ("uint32", "UINT32"),
        ("uint64", "UINT64"),
        ("int8", "INT8"),
        ("int16", "INT16"),
        ("int32", "INT32"),
        ("int64", "INT64"),
        ("float16", "FP16"),
        ("float", "FP32"),
        ("double", "FP64"),
        ("string", "BYTES"),
        ("bfloat16", "BF16"),
    )
}

# optimization.graph.level, as Triton's onnxruntime backend reads it.
_GRAPH_LEVELS = {
    -1: ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
    1: ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
    2: ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
}

# Triton's TensorRT accelerator keys that differ from ONNX Runtime's TensorRT EP options.
_TRT_KEYS = {
    "max_workspace_size_bytes": "trt_max_workspace_size",
    "int8_calibration_table_name": "trt_int8_calibration_table_name",
    "int8_use_native_calibration_table": "trt_int8_use_native_calibration_table",
}
# Deprecated model parameters that configure the CUDA EP, with their numeric encodings.
_CUDA_PARAMETERS: dict[str, dict[str, str] | None] = {
    "cudnn_conv_algo_search": {"0": "EXHAUSTIVE", "1": "HEURISTIC", "2": "DEFAULT"},
    "gpu_mem_limit": None,
    "arena_extend_strategy": {"0": "kNextPowerOfTwo", "1": "kSameAsRequested"},
    "do_copy_in_default_stream": None,
}


def _model_tensors(args: Sequence[Any]) -> list[ModelTensor]:
    tensors = []
    for arg in args:
        shape = tuple(d if isinstance(d, int) and d >= 0 else -1 for d in (arg.shape or ()))
        tensors.append(ModelTensor(arg.name, _ORT_TYPES.get(arg.type), shape, arg.type))
    return tensors


class OnnxRuntimeBackend(Backend):
    name = "onnxruntime"

    def auto_complete_config(self, config: Message, location: ModelLocation) -> None:
        cfg: Any = config
        if (cfg.input or cfg.batch_input) and cfg.output:
            return
        path = _onnx_file(model_path(location, cfg.default_model_filename, MODEL_FILENAME))
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        session = _open_session(path, options, ["CPUExecutionProvider"], location.name)
        complete_config(
            config,
            _model_tensors(session.get_inputs()),
            _model_tensors(session.get_outputs()),
            location,
        )

    def load_model(self, spec: ModelSpec, location: ModelLocation, config: Message) -> BackendModel:
        return OnnxRuntimeModel(spec, location)


class OnnxRuntimeModel(BackendModel):
    def __init__(self, spec: ModelSpec, location: ModelLocation) -> None:
        self.location = location
        self.path = _onnx_file(model_path(location, spec.default_model_filename, MODEL_FILENAME))
        self.model_spec = spec
        self.parameters = spec.parameters
        optimization = spec.optimization
        self.graph_level = optimization.graph_level
        self.gpu_accelerators: tuple[ExecutionAccelerator, ...] = (
            optimization.gpu_execution_accelerators
        )
        self.cpu_accelerators: tuple[ExecutionAccelerator, ...] = (
            optimization.cpu_execution_accelerators
        )
        for accelerator in (*self.gpu_accelerators, *self.cpu_accelerators):
            if accelerator.name not in ("tensorrt", "cuda", "openvino"):
                raise ModelConfigError(
                    f"model '{location.name}': unknown execution accelerator "
                    f"'{accelerator.name}' is requested"
                )
        if flag(location.backend_config.get("enable-global-threadpool")):
            log.warning(
                "model '%s': --backend-config=onnxruntime,enable-global-threadpool is not "
                "supported; each session keeps its own thread pools",
                location.name,
            )
        if any(a.name == "openvino" for a in self.gpu_accelerators):
            raise ModelConfigError(
                f"model '{location.name}': execution accelerator 'openvino' is a CPU accelerator"
            )

    def create_instance(self, spec: InstanceSpec) -> BackendInstance:
        return OnnxRuntimeInstance(self, spec)

    def session_options(self) -> ort.SessionOptions:
        params, settings = self.parameters, self.location
        options = ort.SessionOptions()
        options.graph_optimization_level = _GRAPH_LEVELS.get(
            self.graph_level, ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        )
        for key, attribute in (
            ("intra_op_thread_count", "intra_op_num_threads"),
            ("inter_op_thread_count", "inter_op_num_threads"),
        ):
            value = params.get(key) or settings.setting(key)
            if value:
                setattr(options, attribute, _int_parameter(key, value, self.location.name))
        if params.get("execution_mode"):
            mode = _int_parameter("execution_mode", params["execution_mode"], settings.name)
            options.execution_mode = (
                ort.ExecutionMode.ORT_PARALLEL if mode == 1 else ort.ExecutionMode.ORT_SEQUENTIAL
            )
        if "enable_mem_arena" in params:
            options.enable_cpu_mem_arena = flag(params["enable_mem_arena"])
        if "enable_mem_pattern" in params:
            options.enable_mem_pattern = flag(params["enable_mem_pattern"])
        for key, value in params.items():
            if key.startswith("session."):
                options.add_session_config_entry(key, value)
        return options

    def providers(self, spec: InstanceSpec) -> list[tuple[str, dict[str, str]]]:
        """The execution providers of an instance, most preferred first."""
        if spec.kind != "GPU":
            if any(a.name == "openvino" for a in self.cpu_accelerators):
                return [("OpenVINOExecutionProvider", {}), ("CPUExecutionProvider", {})]
            return [("CPUExecutionProvider", {})]
        device = str(spec.device_id)
        cuda: dict[str, str] = {"device_id": device}
        for key, encoding in _CUDA_PARAMETERS.items():
            if key in self.parameters:
                value = self.parameters[key]
                cuda[key] = encoding.get(value, value) if encoding else value
        providers: list[tuple[str, dict[str, str]]] = []
        for accelerator in self.gpu_accelerators:
            options = dict(accelerator.parameters)
            if accelerator.name == "cuda":
                cuda.update(options)
            elif accelerator.name == "tensorrt":
                providers.append(("TensorrtExecutionProvider", _trt_options(options, device)))
        return [*providers, ("CUDAExecutionProvider", cuda), ("CPUExecutionProvider", {})]


class OnnxRuntimeInstance(BackendInstance):
    def __init__(self, model: OnnxRuntimeModel, spec: InstanceSpec) -> None:
        self._model = model
        self._spec = spec
        providers = model.providers(spec)
        missing = [p for p, _ in providers if p not in ort.get_available_providers()]
        if missing:
            hint = " (install pytriton-core[gpu])" if spec.kind == "GPU" else ""
            raise UnsupportedError(
                f"model '{model.location.name}' instance '{spec.name}' needs "
                f"{', '.join(missing)}, which this onnxruntime does not provide{hint}; "
                f"available: {', '.join(ort.get_available_providers())}"
            )
        self._session = _open_session(
            model.path, model.session_options(), providers, model.location.name
        )
        # ONNX Runtime falls back to the CPU silently when a provider fails to start.
        active = self._session.get_providers()
        if providers[0][0] not in active:
            raise InternalError(
                f"model '{model.location.name}' instance '{spec.name}': "
                f"{providers[0][0]} did not start (session runs on {', '.join(active)})"
            )
        self._string_inputs = {
            arg.name for arg in self._session.get_inputs() if arg.type == "tensor(string)"
        }
        check_config_io(
            model.model_spec,
            _model_tensors(self._session.get_inputs()),
            _model_tensors(self._session.get_outputs()),
            model.location.name,
        )
        self._run_options = ort.RunOptions()
        shrink = model.parameters.get("memory.enable_memory_arena_shrinkage")
        if shrink:
            self._run_options.add_run_config_entry("memory.enable_memory_arena_shrinkage", shrink)
        self._on_gpu = spec.kind == "GPU"
        self._runner = BatchRunner.for_instance(
            model.model_spec, model.location, spec.device_id if self._on_gpu else None
        )

    def execute(
        self, requests: Sequence[InferenceRequest], timing: ComputeTiming
    ) -> Sequence[InferenceResponse | None]:
        return self._runner.execute(requests, timing, self._run_gpu if self._on_gpu else self._run)

    def _feed(self, batch: Batch) -> dict[str, np.ndarray]:
        feed = batch.inputs
        if self._string_inputs:
            feed = dict(feed)
            for name in self._string_inputs & feed.keys():
                feed[name] = _decode_strings(feed[name])
        return feed

    def _run(self, batch: Batch) -> dict[str, np.ndarray]:
        names = batch.output_names
        results = self._session.run(names, self._feed(batch), self._run_options)
        return dict(zip(names, results, strict=True))

    def _run_gpu(self, batch: Batch) -> dict[str, np.ndarray | DeviceArray]:
        """IOBinding: inputs already on the device are bound where they are, the others
        copied host-to-device once; outputs are allocated on the device and copied to the
        host once, except those bound for a shared-memory region, which stay there."""
        device = self._spec.device_id
        binding = self._session.io_binding()
        for name, array in self._feed(batch).items():
            if name in self._string_inputs:
                binding.bind_cpu_input(name, array)
                continue
            value = ort.OrtValue.ortvalue_from_numpy(np.ascontiguousarray(array), "cuda", device)
            binding.bind_ortvalue_input(name, value)
        for name, on_device in batch.device_inputs.items():
            binding.bind_input(
                name, "cuda", device, on_device.dtype, list(on_device.shape), on_device.pointer
            )
        for name in batch.output_names:
            binding.bind_output(name, "cuda", device)
        self._session.run_with_iobinding(binding, self._run_options)
        if not batch.device_outputs:
            results = binding.copy_outputs_to_cpu()
            return dict(zip(batch.output_names, results, strict=True))
        outputs: dict[str, np.ndarray | DeviceArray] = {}
        for name, value in zip(batch.output_names, binding.get_outputs(), strict=True):
            datatype = _ORT_TYPES.get(value.data_type())
            if name in batch.device_outputs and datatype is not None and not datatype.is_bytes:
                outputs[name] = DeviceArray(
                    value.data_ptr(),
                    tuple(value.shape()),
                    datatype.numpy_dtype,
                    device,
                    value,  # keeps the device memory
                    self._runner.staging,
                )
            else:
                outputs[name] = value.numpy()
        return outputs


def _onnx_file(path: Path) -> Path:
    """A model folder (external data beside it) holds ``model.onnx``."""
    if path.is_dir():
        inner = path / MODEL_FILENAME
        if not inner.is_file():
            raise ModelConfigError(f"model folder '{path}' holds no {MODEL_FILENAME}")
        return inner
    return path


def _open_session(
    path: Path,
    options: ort.SessionOptions,
    providers: Sequence[str | tuple[str, dict[str, str]]],
    model: str,
) -> ort.InferenceSession:
    try:
        return ort.InferenceSession(str(path), options, providers=list(providers))
    except Exception as exc:
        raise InternalError(
            f"failed to load model '{model}' with onnxruntime: {type(exc).__name__}: {exc}"
        ) from exc


def _trt_options(options: Mapping[str, str], device: str) -> dict[str, str]:
    result = {"device_id": device}
    for key, value in options.items():
        if key == "precision_mode":
            if value.upper() == "FP16":
                result["trt_fp16_enable"] = "True"
            elif value.upper() == "INT8":
                result["trt_int8_enable"] = "True"
            continue
        result[_TRT_KEYS.get(key, key)] = value
    return result


def _int_parameter(key: str, value: str, model: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise ModelConfigError(
            f"model '{model}': parameter '{key}' must be an integer, got '{value}'"
        ) from None


def _decode_strings(array: np.ndarray) -> np.ndarray:
    """BYTES elements (``bytes``) as the ``str`` objects onnxruntime's string tensors take."""
    decoded = np.empty(array.shape, dtype=np.object_)
    decoded.reshape(-1)[:] = [
        e.decode("utf-8", "surrogateescape") if isinstance(e, bytes) else str(e) for e in array.flat
    ]
    return decoded


def create_backend() -> Backend:
    return OnnxRuntimeBackend()
