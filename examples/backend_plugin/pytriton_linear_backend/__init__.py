"""An example backend plug-in: linear models ``OUTPUT0 = INPUT0 @ W + b`` from ``model.npz``.

pytriton-core finds it through the entry point ``linear`` of the group
``pytriton_core.backends`` (see pyproject.toml), or as ``<--backend-directory>/linear/``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from google.protobuf.message import Message

from pytriton_core.backends.base import (
    Backend,
    BackendInstance,
    BackendModel,
    InstanceSpec,
    ModelLocation,
)
from pytriton_core.config.spec import ModelSpec
from pytriton_core.errors import ModelConfigError
from pytriton_core.inference.request import InferenceRequest
from pytriton_core.inference.response import InferenceResponse
from pytriton_core.inference.statistics import ComputeTiming
from pytriton_core.inference.tensor import Tensor
from pytriton_core.types import from_wire_name

MODEL_FILE = "model.npz"


def _weights(version_dir: Path, name: str) -> tuple[np.ndarray, np.ndarray]:
    path = version_dir / MODEL_FILE
    if not path.is_file():
        raise ModelConfigError(f"model '{name}': no {MODEL_FILE} in {version_dir}")
    with np.load(path) as arrays:
        weights = np.asarray(arrays["W"], np.float32)
        bias = np.asarray(arrays["b"], np.float32)
    if weights.ndim != 2 or bias.shape != (weights.shape[1],):
        raise ModelConfigError(
            f"model '{name}': W must be [in, out] and b [out], got {weights.shape} and {bias.shape}"
        )
    return weights, bias


class LinearBackend(Backend):
    name = "linear"

    def auto_complete_config(self, config: Message, location: ModelLocation) -> None:
        """Fill the inputs and outputs from W's shape when the config has none."""
        cfg: Any = config
        weights, _ = _weights(location.version_dir, location.name)
        fp32 = 11  # TYPE_FP32
        if not cfg.input:
            cfg.input.add(name="INPUT0", data_type=fp32, dims=[weights.shape[0]])
        if not cfg.output:
            cfg.output.add(name="OUTPUT0", data_type=fp32, dims=[weights.shape[1]])

    def load_model(self, spec: ModelSpec, location: ModelLocation, config: Message) -> BackendModel:
        if len(spec.inputs) != 1 or len(spec.outputs) != 1:
            raise ModelConfigError(f"model '{spec.name}': a linear model has one input, one output")
        weights, bias = _weights(location.version_dir, spec.name)
        return LinearModel(spec, weights, bias)


class LinearModel(BackendModel):
    def __init__(self, spec: ModelSpec, weights: np.ndarray, bias: np.ndarray) -> None:
        self.input_name = next(iter(spec.inputs))
        self.output_name = next(iter(spec.outputs))
        self.weights = weights
        self.bias = bias

    def create_instance(self, spec: InstanceSpec) -> BackendInstance:
        return LinearInstance(self)


class LinearInstance(BackendInstance):
    def __init__(self, model: LinearModel) -> None:
        self._model = model

    def execute(
        self, requests: Sequence[InferenceRequest], timing: ComputeTiming
    ) -> Sequence[InferenceResponse | None]:
        model = self._model
        # Gather: one matrix for the whole batch, as framework backends do.
        inputs = [np.asarray(r.inputs[model.input_name].data, np.float32) for r in requests]
        rows = [x.reshape(-1, model.weights.shape[0]) for x in inputs]
        timing.mark_input_done()
        outputs = np.concatenate(rows) @ model.weights + model.bias
        timing.mark_infer_done()
        fp32 = from_wire_name("FP32")
        assert fp32 is not None
        responses: list[InferenceResponse | None] = []
        start = 0
        for x, part in zip(inputs, rows, strict=True):
            out = outputs[start : start + len(part)].reshape(*x.shape[:-1], -1)
            start += len(part)
            responses.append(InferenceResponse([Tensor(model.output_name, fp32, out)]))
        return responses


def create_backend() -> Backend:
    """What pytriton-core calls once, the first time a model names the backend."""
    return LinearBackend()
