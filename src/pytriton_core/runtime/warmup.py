"""Model warm-up (``model_warmup``): sample requests each instance runs before it is ready.

Backend-independent: the samples are built once per model from its spec
(``warmup_samples``) and each instance's worker thread runs them straight through its
backend instance (``run_warmup``) after creating it and before taking requests, as
Triton does. A sample of ``batch_size`` b executes b requests of batch size 1 together,
``count`` times. Input data is zeros (``zero_data``), random values (``random_data``), or
a file under ``<model>/warmup/`` in the binary tensor form (``input_data_file``). Any
failure (bad sample, error response) fails the instance, and so the model's load.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import numpy as np

from pytriton_core import types
from pytriton_core.backends.base import BackendInstance
from pytriton_core.config.spec import ModelSpec, WarmupInput
from pytriton_core.errors import InternalError, ModelConfigError, ServerError
from pytriton_core.inference.request import InferenceRequest
from pytriton_core.inference.response import InferenceResponse
from pytriton_core.inference.statistics import ComputeTiming
from pytriton_core.inference.tensor import Tensor
from pytriton_core.inference.tensor_data import array_from_bytes, zeros
from pytriton_core.paths import confined_path

WARMUP_DIR = "warmup"
# How long a decoupled model may take to send the final response of a warm-up request.
DECOUPLED_FINAL_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class WarmupSample:
    model_name: str
    name: str
    batch_size: int  # requests executed together
    count: int  # times the sample runs
    inputs: Mapping[str, Tensor]  # one request's inputs


def warmup_samples(spec: ModelSpec, model_dir: Path) -> list[WarmupSample]:
    """The spec's warm-up samples with their data; ModelConfigError for a bad one."""
    model = spec.name
    max_batch_size = spec.max_batch_size
    samples = []
    for index, setting in enumerate(spec.warmup):
        name = setting.name or f"sample_{index}"
        where = f"model '{model}' warm-up sample '{name}'"
        batch_size = setting.batch_size
        if max_batch_size > 0 and batch_size > max_batch_size:
            raise ModelConfigError(
                f"{where}: batch_size {batch_size} exceeds max_batch_size {max_batch_size}"
            )
        if max_batch_size == 0 and batch_size != 1:
            raise ModelConfigError(
                f"{where}: batch_size must be 1 for a model without batching (max_batch_size 0)"
            )
        inputs = {}
        for input_name, data in setting.inputs.items():
            # Sequence models' samples carry the control (and state) inputs themselves.
            declared = spec.model_inputs.get(input_name)
            if declared is None:
                raise ModelConfigError(f"{where}: the model has no input '{input_name}'")
            tensor = _sample_tensor(input_name, data, max_batch_size > 0, model_dir, where)
            if tensor.datatype is not declared.datatype:
                raise ModelConfigError(
                    f"{where}: input '{input_name}' is {tensor.datatype.config_name}, but the "
                    f"model expects {declared.datatype.config_name}"
                )
            inputs[input_name] = tensor
        samples.append(WarmupSample(model, name, batch_size, setting.count, inputs))
    return samples


def _sample_tensor(
    name: str, data: WarmupInput, batching: bool, model_dir: Path, where: str
) -> Tensor:
    datatype = data.datatype
    if datatype is None:
        raise ModelConfigError(f"{where}: input '{name}' has no valid data_type")
    dims = list(data.dims)
    if any(d < 0 for d in dims):
        raise ModelConfigError(f"{where}: input '{name}' dims {dims} must all be >= 0")
    shape = [1, *dims] if batching else dims
    count = types.element_count(shape)
    array: np.ndarray
    if data.input_data_file:
        path = confined_path(
            model_dir,
            WARMUP_DIR,
            data.input_data_file,
            what=f"{where}: input_data_file '{data.input_data_file}'",
        )
        try:
            raw = path.read_bytes()
        except OSError as exc:
            raise ModelConfigError(f"{where}: cannot read '{path}': {exc.strerror}") from None
        if not datatype.is_bytes:
            # Triton takes the first bytes of a larger file.
            raw = raw[: count * datatype.itemsize]
        try:
            array = array_from_bytes(
                raw, datatype, shape, input_name=name, model_name=where, request_id=""
            )
        except ServerError as exc:
            raise ModelConfigError(f"{where}: file '{path}': {exc.message}") from None
    elif data.random_data:
        array = _random(datatype, shape)
    elif data.zero_data:
        array = zeros(datatype, shape)
    else:
        raise ModelConfigError(
            f"{where}: input '{name}' sets none of zero_data, random_data, input_data_file"
        )
    return Tensor(name, datatype, array)


def _random(datatype: types.DataType, shape: list[int]) -> np.ndarray:
    rng = np.random.default_rng()
    dtype = datatype.numpy_dtype
    if datatype.is_bytes:
        # As Triton does, random BYTES elements are empty strings.
        return zeros(datatype, shape)
    if dtype.kind == "b":
        return rng.integers(0, 2, size=shape).astype(np.bool_)
    if dtype.kind in ("i", "u"):
        return rng.integers(0, 100, size=shape).astype(dtype)
    return rng.random(size=shape, dtype=np.float64).astype(dtype)


class _ImmediateLoop:
    """Stands in for the event loop of warm-up requests: decoupled senders call back inline."""

    def call_soon_threadsafe(self, callback: Callable[..., object], *args: Any) -> None:
        callback(*args)


def run_warmup(
    instance: BackendInstance, samples: Sequence[WarmupSample], instance_name: str
) -> None:
    """Run every sample through ``instance``; raise on the first error."""
    for sample in samples:
        for _ in range(sample.count):
            _run_sample(instance, sample, instance_name)


def _run_sample(instance: BackendInstance, sample: WarmupSample, instance_name: str) -> None:
    errors: list[ServerError] = []
    finals = threading.Semaphore(0)

    def on_response(response: InferenceResponse | None, final: bool) -> None:
        if response is not None and response.error is not None:
            errors.append(response.error)
        if final:
            finals.release()

    loop = cast(asyncio.AbstractEventLoop, _ImmediateLoop())
    requests = [
        InferenceRequest(
            model_name=sample.model_name,
            id=f"warmup_{sample.name}",
            inputs=dict(sample.inputs),
            on_response=on_response,
            loop=loop,
        )
        for _ in range(sample.batch_size)
    ]
    fail = f"failed to warm up model '{sample.model_name}' instance '{instance_name}' with "
    fail += f"sample '{sample.name}'"
    try:
        responses = instance.execute(requests, ComputeTiming())
    except ServerError as exc:
        raise InternalError(f"{fail}: {exc.message}") from exc
    except Exception as exc:
        raise InternalError(f"{fail}: {type(exc).__name__}: {exc}") from exc
    for request, response in zip(requests, responses, strict=True):
        if response is not None:
            request.deliver(response, True)
    for _ in requests:
        if not finals.acquire(timeout=DECOUPLED_FINAL_TIMEOUT_S):
            raise InternalError(f"{fail}: no final response within {DECOUPLED_FINAL_TIMEOUT_S} s")
    if errors:
        raise InternalError(f"{fail}: {errors[0].message}")
