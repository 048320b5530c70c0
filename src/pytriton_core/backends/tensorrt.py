"""TensorRT backend: serialized engines (``model.plan``, platform ``tensorrt_plan``); GPU only.

Each instance deserializes the engine on its GPU and owns one execution context and one
CUDA stream. A batch picks the first optimization profile whose shape ranges hold its
input shapes; inputs are copied to the device once (device buffers come from CuPy's
memory pool, so steady-state batches allocate nothing), the engine runs, and the requested
outputs are copied back once. An instance of kind CPU or MODEL runs on GPU 0: TensorRT
has no CPU mode. On a machine without a visible GPU the model fails to load.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import cupy as cp
import ml_dtypes
import numpy as np
import tensorrt as trt
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
    model_path,
)
from pytriton_core.config import ModelSpec
from pytriton_core.errors import (
    InternalError,
    InvalidArgumentError,
    UnsupportedError,
)
from pytriton_core.inference.request import InferenceRequest
from pytriton_core.inference.response import InferenceResponse
from pytriton_core.inference.statistics import ComputeTiming
from pytriton_core.memory.device import DeviceArray

log = logging.getLogger(__name__)

MODEL_FILENAME = "model.plan"

_TRT_TYPES: dict[str, types.DataType] = {
    trt_name: types.BY_WIRE_NAME[wire]
    for trt_name, wire in (
        ("FLOAT", "FP32"),
        ("HALF", "FP16"),
        ("BF16", "BF16"),
        ("INT8", "INT8"),
        ("UINT8", "UINT8"),
        ("INT32", "INT32"),
        ("INT64", "INT64"),
        ("BOOL", "BOOL"),
    )
}

_LOGGER = trt.Logger(trt.Logger.WARNING)


def _gpu_count() -> int:
    try:
        return int(cp.cuda.runtime.getDeviceCount())
    except Exception:  # no driver, no device: the CUDA runtime raises
        return 0


def _require_gpu(model: str, device: int = 0) -> None:
    count = _gpu_count()
    if count == 0:
        raise UnsupportedError(
            f"model '{model}': TensorRT engines run only on an NVIDIA GPU, and no CUDA "
            "device is visible to this server"
        )
    if device >= count:
        raise UnsupportedError(
            f"model '{model}': GPU {device} is not visible (this server sees {count} GPU(s))"
        )


def _deserialize(plan: bytes, model: str) -> Any:
    runtime = trt.Runtime(_LOGGER)
    engine = runtime.deserialize_cuda_engine(plan)
    if engine is None:
        raise InternalError(
            f"failed to load model '{model}': TensorRT could not deserialize the engine "
            "(built by another TensorRT version or for another GPU?)"
        )
    return engine


def _io_names(engine: Any, mode: Any) -> list[str]:
    names = [engine.get_tensor_name(i) for i in range(engine.num_io_tensors)]
    return [n for n in names if engine.get_tensor_mode(n) == mode]


def _model_tensors(engine: Any, names: Sequence[str]) -> list[ModelTensor]:
    tensors = []
    for name in names:
        dtype = engine.get_tensor_dtype(name)
        shape = tuple(int(d) for d in engine.get_tensor_shape(name))
        tensors.append(ModelTensor(name, _TRT_TYPES.get(dtype.name), shape, dtype.name))
    return tensors


def _numpy_dtype(datatype: types.DataType) -> np.dtype:
    return np.dtype(ml_dtypes.bfloat16) if datatype.wire_name == "BF16" else datatype.numpy_dtype


def _batch_limit(engine: Any, inputs: Sequence[str]) -> int | None:
    """The largest batch every input accepts in some optimization profile."""
    limits = []
    for name in inputs:
        if int(engine.get_tensor_shape(name)[0]) != -1:
            return None
        best = 0
        for profile in range(engine.num_optimization_profiles):
            _, _, largest = engine.get_tensor_profile_shape(name, profile)
            best = max(best, int(largest[0]))
        limits.append(best)
    return min(limits) if limits else None


class TensorRtBackend(Backend):
    name = "tensorrt"

    def auto_complete_config(self, config: Message, location: ModelLocation) -> None:
        cfg: Any = config
        if (cfg.input or cfg.batch_input) and cfg.output:
            return
        _require_gpu(location.name)
        path = model_path(location, cfg.default_model_filename, MODEL_FILENAME)
        with cp.cuda.Device(0):
            engine = _deserialize(path.read_bytes(), location.name)
            inputs = _io_names(engine, trt.TensorIOMode.INPUT)
            outputs = _io_names(engine, trt.TensorIOMode.OUTPUT)
            complete_config(
                config,
                _model_tensors(engine, inputs),
                _model_tensors(engine, outputs),
                location,
                batch_limit=_batch_limit(engine, inputs),
            )

    def load_model(self, spec: ModelSpec, location: ModelLocation, config: Message) -> BackendModel:
        _require_gpu(location.name)
        return TensorRtModel(spec, location)


class TensorRtModel(BackendModel):
    def __init__(self, spec: ModelSpec, location: ModelLocation) -> None:
        self.location = location
        self.model_spec = spec
        path: Path = model_path(location, spec.default_model_filename, MODEL_FILENAME)
        self.plan = path.read_bytes()
        for tensor in (*spec.inputs.values(), *spec.outputs.values()):
            if tensor.datatype.is_bytes:
                raise UnsupportedError(
                    f"model '{location.name}': '{tensor.name}' is TYPE_STRING, which TensorRT "
                    "does not support"
                )

    def create_instance(self, spec: InstanceSpec) -> BackendInstance:
        device = spec.device_id if spec.kind == "GPU" else 0
        if spec.kind != "GPU":
            log.warning(
                "model '%s' instance '%s' is KIND_%s; TensorRT runs it on GPU 0",
                self.location.name,
                spec.name,
                spec.kind,
            )
        _require_gpu(self.location.name, device)
        return TensorRtInstance(self, device)


class TensorRtInstance(BackendInstance):
    def __init__(self, model: TensorRtModel, device: int) -> None:
        self._model = model
        self._device = device
        name = model.location.name
        with cp.cuda.Device(device):
            self._engine = _deserialize(model.plan, name)
            self._context = self._engine.create_execution_context()
            if self._context is None:
                raise InternalError(f"model '{name}': TensorRT could not create a context")
            self._stream = cp.cuda.Stream(non_blocking=True)
        self._inputs = _io_names(self._engine, trt.TensorIOMode.INPUT)
        self._outputs = _io_names(self._engine, trt.TensorIOMode.OUTPUT)
        shape_tensors = [n for n in self._inputs if self._engine.is_shape_inference_io(n)]
        if shape_tensors:
            raise UnsupportedError(
                f"model '{name}': shape tensors ({', '.join(shape_tensors)}) are not supported"
            )
        check_config_io(
            model.model_spec,
            _model_tensors(self._engine, self._inputs),
            _model_tensors(self._engine, self._outputs),
            name,
        )
        self._dtypes = {
            t.name: _numpy_dtype(t.datatype)
            for t in _model_tensors(self._engine, self._inputs + self._outputs)
            if t.datatype is not None
        }
        self._profile = 0
        # TensorRT always runs on the GPU.
        self._runner = BatchRunner.for_instance(model.model_spec, model.location, device)

    def execute(
        self, requests: Sequence[InferenceRequest], timing: ComputeTiming
    ) -> Sequence[InferenceResponse | None]:
        return self._runner.execute(requests, timing, self._run)

    def _select_profile(self, shapes: Mapping[str, tuple[int, ...]]) -> int:
        engine = self._engine
        for profile in range(engine.num_optimization_profiles):
            fits = True
            for name, shape in shapes.items():
                low, _, high = engine.get_tensor_profile_shape(name, profile)
                if len(low) != len(shape) or not all(
                    lo <= d <= hi for lo, d, hi in zip(low, shape, high, strict=True)
                ):
                    fits = False
                    break
            if fits:
                return profile
        raise InvalidArgumentError(
            f"model '{self._model.location.name}': input shapes {dict(shapes)} are outside "
            "every optimization profile of the engine"
        )

    def _run(self, batch: Batch) -> dict[str, np.ndarray | DeviceArray]:
        context, stream = self._context, self._stream
        missing = [
            n for n in self._inputs if n not in batch.inputs and n not in batch.device_inputs
        ]
        if missing:
            raise InvalidArgumentError(
                f"model '{self._model.location.name}': TensorRT needs every input, "
                f"missing {missing}"
            )
        with cp.cuda.Device(self._device):
            shapes = {
                n: tuple((batch.device_inputs.get(n) or batch.inputs[n]).shape)
                for n in self._inputs
            }
            profile = self._select_profile(shapes)
            if profile != self._profile:
                context.set_optimization_profile_async(profile, stream.ptr)
                self._profile = profile
            keep: list[Any] = []  # device memory stays referenced until the stream is done
            for name in self._inputs:
                address = self._input_address(batch, name, keep)
                context.set_input_shape(name, shapes[name])
                context.set_tensor_address(name, address)
            device_outputs = {}
            for name in self._outputs:
                shape = tuple(int(d) for d in context.get_tensor_shape(name))
                if any(d < 0 for d in shape):
                    raise UnsupportedError(
                        f"model '{self._model.location.name}': output '{name}' has a "
                        "data-dependent shape, which is not supported"
                    )
                out = self._empty(shape, self._dtypes[name])
                context.set_tensor_address(name, out.data.ptr)
                device_outputs[name] = out
            if not context.execute_async_v3(stream.ptr):
                raise InternalError(
                    f"model '{self._model.location.name}': TensorRT execution failed"
                )
            results: dict[str, np.ndarray | DeviceArray] = {}
            for name in batch.output_names:
                out = device_outputs[name]
                if name in batch.device_outputs:
                    results[name] = DeviceArray(
                        out.data.ptr, out.shape, out.dtype, self._device, out, self._runner.staging
                    )
                else:
                    results[name] = out.get(stream=stream)
            stream.synchronize()
        del keep
        return results

    def _empty(self, shape: tuple[int, ...], dtype: np.dtype[Any]) -> Any:
        """A cupy array over memory from the server's CUDA memory pool."""
        nbytes = max(int(np.prod(shape, dtype=np.int64)) * dtype.itemsize, 1)
        return cp.ndarray(
            shape, dtype=dtype, memptr=self._runner.device_pools.allocate(self._device, nbytes)
        )

    def _input_address(self, batch: Batch, name: str, keep: list[Any]) -> int:
        """Where TensorRT reads an input: a device input in place (its datatype is the
        engine's: the config was checked against the engine at load), else a copy on the
        device (host -> device, on the stream)."""
        on_device = batch.device_inputs.get(name)
        if on_device is not None:
            keep.append(on_device)
            return on_device.pointer
        host = np.ascontiguousarray(batch.inputs[name], dtype=self._dtypes[name])
        device = self._empty(host.shape, host.dtype)
        device.set(host, stream=self._stream)
        keep.extend((device, host))
        return int(device.data.ptr)


def create_backend() -> Backend:
    return TensorRtBackend()
