"""OpenVINO backend: ``model.xml`` + ``model.bin`` (IR), or another format it reads (ONNX).

The model is read once per model version and compiled once per instance, with the
config's ``parameters`` as compile properties (``NUM_STREAMS``, ``PERFORMANCE_HINT``,
``INFERENCE_NUM_THREADS``, ``INFERENCE_PRECISION_HINT``...). These keys are the backend's
own, as in Triton's openvino_backend: ``TARGET_DEVICE`` (default CPU),
``CPU_EXTENSION_PATH``, ``HINT_BF16``, ``RESHAPE_IO_LAYERS``, ``SKIP_OV_DYNAMIC_BATCHSIZE``
and ``ENABLE_BATCH_PADDING``. Each instance runs one infer request on its worker thread
(OpenVINO releases the GIL); inputs are shared with OpenVINO, not copied, and outputs are
copied once out of the request's buffers, which the next batch reuses.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import openvino as ov
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
from pytriton_core.errors import InternalError, InvalidArgumentError, ModelConfigError
from pytriton_core.inference.request import InferenceRequest
from pytriton_core.inference.response import InferenceResponse
from pytriton_core.inference.statistics import ComputeTiming

log = logging.getLogger(__name__)

MODEL_FILENAME = "model.xml"

_OV_TYPES: dict[str, types.DataType] = {
    ov_name: types.BY_WIRE_NAME[wire]
    for ov_name, wire in (
        ("boolean", "BOOL"),
        ("u8", "UINT8"),
        ("u16", "UINT16"),
        ("u32", "UINT32"),
        ("u64", "UINT64"),
        ("i8", "INT8"),
        ("i16", "INT16"),
        ("i32", "INT32"),
        ("i64", "INT64"),
        ("f16", "FP16"),
        ("f32", "FP32"),
        ("f64", "FP64"),
        ("bf16", "BF16"),
        ("string", "BYTES"),
    )
}

# Parameters the backend itself acts on; every other parameter is a compile property.
_BACKEND_KEYS = frozenset(
    {
        "TARGET_DEVICE",
        "CPU_EXTENSION_PATH",
        "HINT_BF16",
        "RESHAPE_IO_LAYERS",
        "SKIP_OV_DYNAMIC_BATCHSIZE",
        "ENABLE_BATCH_PADDING",
    }
)


def _model_tensors(ports: Sequence[Any]) -> list[ModelTensor]:
    tensors = []
    for port in ports:
        shape = port.get_partial_shape()
        dims = (
            tuple(d.get_length() if d.is_static else -1 for d in shape)
            if shape.rank.is_static
            else ()
        )
        type_name = port.get_element_type().get_type_name()
        tensors.append(ModelTensor(port.get_any_name(), _OV_TYPES.get(type_name), dims, type_name))
    return tensors


def _read_model(core: ov.Core, path: Path, model: str) -> Any:
    if path.is_dir():
        path = path / MODEL_FILENAME
    try:
        return core.read_model(str(path))
    except Exception as exc:
        raise InternalError(
            f"failed to load model '{model}' with openvino: {type(exc).__name__}: {exc}"
        ) from exc


class OpenVinoBackend(Backend):
    name = "openvino"

    def __init__(self) -> None:
        self.core = ov.Core()

    def auto_complete_config(self, config: Message, location: ModelLocation) -> None:
        cfg: Any = config
        if (cfg.input or cfg.batch_input) and cfg.output:
            return
        path = model_path(location, cfg.default_model_filename, MODEL_FILENAME)
        model = _read_model(self.core, path, location.name)
        complete_config(
            config, _model_tensors(model.inputs), _model_tensors(model.outputs), location
        )

    def load_model(self, spec: ModelSpec, location: ModelLocation, config: Message) -> BackendModel:
        return OpenVinoModel(self.core, spec, location)


class OpenVinoModel(BackendModel):
    def __init__(self, core: ov.Core, spec: ModelSpec, location: ModelLocation) -> None:
        self.core = core
        self.location = location
        self.model_spec = spec
        params = spec.parameters
        self.device = params.get("TARGET_DEVICE") or "CPU"
        if params.get("CPU_EXTENSION_PATH"):
            core.add_extension(params["CPU_EXTENSION_PATH"])
        self.properties: dict[str, str] = {
            k: v for k, v in params.items() if k not in _BACKEND_KEYS
        }
        if flag(params.get("HINT_BF16")):
            self.properties.setdefault("INFERENCE_PRECISION_HINT", "bf16")
        self.model = _read_model(
            core, model_path(location, spec.default_model_filename, MODEL_FILENAME), location.name
        )
        if flag(params.get("RESHAPE_IO_LAYERS")):
            self._reshape_to_config()
        # A model compiled for one batch size: pad smaller batches up to it, if allowed.
        self.static_batch = 0
        self.pad_batches = flag(params.get("ENABLE_BATCH_PADDING"))
        if spec.batching and self._static_batch_dim():
            if flag(params.get("SKIP_OV_DYNAMIC_BATCHSIZE")):
                self.static_batch = self._static_batch_dim()
            else:
                self._reshape_batch_dynamic()
        check_config_io(
            spec,
            _model_tensors(self.model.inputs),
            _model_tensors(self.model.outputs),
            location.name,
        )

    def create_instance(self, spec: InstanceSpec) -> BackendInstance:
        return OpenVinoInstance(self, spec)

    def _static_batch_dim(self) -> int:
        for port in self.model.inputs:
            shape = port.get_partial_shape()
            if shape.rank.is_static and len(shape) and shape[0].is_static:
                return int(shape[0].get_length())
        return 0

    def _reshape(self, shapes: dict[str, list[int]]) -> None:
        try:
            self.model.reshape({name: ov.PartialShape(shape) for name, shape in shapes.items()})
        except Exception as exc:
            raise ModelConfigError(
                f"model '{self.location.name}': openvino cannot reshape the inputs to "
                f"{shapes}: {exc}"
            ) from exc

    def _reshape_to_config(self) -> None:
        lead = [-1] if self.model_spec.batching else []
        self._reshape({n: [*lead, *s.model_shape] for n, s in self.model_spec.model_inputs.items()})

    def _reshape_batch_dynamic(self) -> None:
        shapes = {}
        for port in self.model.inputs:
            dims = [d.get_length() if d.is_static else -1 for d in port.get_partial_shape()]
            shapes[port.get_any_name()] = [-1, *dims[1:]]
        self._reshape(shapes)


class OpenVinoInstance(BackendInstance):
    def __init__(self, model: OpenVinoModel, spec: InstanceSpec) -> None:
        self._model = model
        try:
            self._compiled = model.core.compile_model(
                model.model, model.device, dict(model.properties)
            )
        except Exception as exc:
            raise InternalError(
                f"failed to compile model '{model.location.name}' for {model.device}: "
                f"{type(exc).__name__}: {exc}"
            ) from exc
        self._request = self._compiled.create_infer_request()
        self._outputs = {
            name: self._compiled.output(name) for name in model.model_spec.model_outputs
        }
        self._runner = BatchRunner(model.model_spec, model.location.name)

    def execute(
        self, requests: Sequence[InferenceRequest], timing: ComputeTiming
    ) -> Sequence[InferenceResponse | None]:
        return self._runner.execute(requests, timing, self._run)

    def _run(self, batch: Batch) -> dict[str, np.ndarray]:
        inputs = batch.inputs
        static = self._model.static_batch
        if static and batch.size != static:
            inputs = self._padded(inputs, batch.size, static)
        results = self._request.infer(inputs, share_inputs=True, share_outputs=False)
        outputs = {name: results[self._outputs[name]] for name in batch.output_names}
        if static and batch.size != static:
            outputs = {name: array[: batch.size] for name, array in outputs.items()}
        return outputs

    def _padded(
        self, inputs: Mapping[str, np.ndarray], size: int, static: int
    ) -> dict[str, np.ndarray]:
        if size > static or not self._model.pad_batches:
            raise InvalidArgumentError(
                f"model '{self._model.location.name}' runs batches of exactly {static}, got "
                f"{size} (set parameter ENABLE_BATCH_PADDING to YES to pad smaller batches)"
            )
        padded = {}
        for name, array in inputs.items():
            full = np.zeros((static, *array.shape[1:]), dtype=array.dtype)
            full[:size] = array
            padded[name] = full
        return padded


def create_backend() -> Backend:
    return OpenVinoBackend()
