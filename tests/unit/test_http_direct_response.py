"""The infer response's header written directly (``_direct_response``) is the general
encode's, byte for byte, for outputs sent binary and outputs carried in JSON across
datatypes, shapes, layouts and special values; errors are the same errors; what it cannot
write (NaN and infinities, a ``null`` in a string, names JSON escapes) the general encode
writes."""

from __future__ import annotations

import asyncio
import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from pytriton_core import types
from pytriton_core.backends.base import BackendInstance, BackendModel, InstanceSpec
from pytriton_core.config import ModelSpec, normalize_config, parse_config_text, validate_config
from pytriton_core.errors import ServerError
from pytriton_core.frontends.http.infer_codec import DecodedInfer, encode_infer_response
from pytriton_core.inference.request import InferenceRequest
from pytriton_core.inference.response import InferenceResponse
from pytriton_core.inference.tensor import Tensor
from pytriton_core.runtime.model import Model

CONFIG = """
name: "m" backend: "python" max_batch_size: 0
input [ { name: "X" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "X" data_type: TYPE_FP32 dims: [ 1 ] } ]
"""


class _NeverRun(BackendModel):
    """The encode reads only the model's name and version: no instance is made."""

    def create_instance(self, spec: InstanceSpec) -> BackendInstance:
        raise AssertionError("not started")


@pytest.fixture(scope="module")
def model() -> Model:
    config = parse_config_text(CONFIG, "test")
    normalize_config(config)
    validate_config(config)
    loop = asyncio.new_event_loop()
    return Model(ModelSpec.from_config(config, 1), config, Path("/nonexistent"), _NeverRun(), loop)


def _values(wire: str, rng: random.Random, count: int) -> np.ndarray:
    if wire == "BYTES":
        words = [b"", b"a", b"null", "caf\u00e9".encode(), b'q"uote', b"\\", b"\xff"]
        return np.array([rng.choice(words[:-1]) for _ in range(count)], dtype=object)
    if wire == "BOOL":
        return np.array([rng.random() < 0.5 for _ in range(count)])
    dtype = types.BY_WIRE_NAME[wire].numpy_dtype
    if dtype.kind == "f":
        big = 6e4 if dtype.itemsize == 2 else 3.4e38  # within FP16's range
        values = [
            rng.choice([0.1, -0.0, 1e-45, big, 1 / 3, rng.uniform(-big, big)]) for _ in range(count)
        ]
        return np.array(values, dtype=dtype)
    info = np.iinfo(dtype)
    return np.array([rng.randint(int(info.min), int(info.max)) for _ in range(count)], dtype=dtype)


def _tensor(name: str, wire: str, rng: random.Random) -> Tensor:
    shape = tuple(rng.randint(0, 3) for _ in range(rng.randint(0, 3)))
    array = _values(wire, rng, int(np.prod(shape, dtype=np.int64))).reshape(shape)
    if array.ndim == 2 and rng.random() < 0.3:
        array = array.T  # not C-contiguous
    return Tensor(name, types.BY_WIRE_NAME[wire], array)


def _outcome(
    model: Model, decoded: DecodedInfer, response: InferenceResponse, general: bool
) -> Any:
    try:
        answer = encode_infer_response(model, decoded, response, general)
    except ServerError as exc:
        return type(exc), str(exc)
    body = tuple(bytes(part) for part in answer.body)
    return answer.status, body, answer.content_type, answer.headers


WIRES = ["FP32", "FP64", "INT64", "INT32", "UINT64", "UINT8", "INT8", "BOOL", "BYTES", "FP16"]
IDS = ["", "1", "req-7", 'q"uote', "caf\u00e9", "nul\x00l", "null"]


@pytest.mark.parametrize("seed", range(30))
def test_written_as_the_general_encode_writes_it(model: Model, seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(40):
        outputs = [_tensor(f"O{i}", rng.choice(WIRES), rng) for i in range(rng.randint(0, 3))]
        if rng.random() < 0.2 and outputs and outputs[0].datatype.numpy_dtype.kind == "f":
            outputs[0].data.reshape(-1)[:1] = rng.choice([np.nan, np.inf, -np.inf])
        request = InferenceRequest("m", 1)
        request.id = rng.choice(IDS)
        binary_outputs = {t.name: rng.random() < 0.5 for t in outputs if rng.random() < 0.7}
        decoded = DecodedInfer(request, binary_outputs, rng.random() < 0.5)
        response = InferenceResponse(outputs=outputs)
        direct = _outcome(model, decoded, response, general=False)
        assert direct == _outcome(model, decoded, response, general=True)


def test_non_finite_floats_are_written_as_triton_writes_them(model: Model) -> None:
    data = np.array([1.5, np.nan, np.inf, -np.inf], dtype=np.float32)
    response = InferenceResponse(outputs=[Tensor("O", types.BY_WIRE_NAME["FP32"], data)])
    decoded = DecodedInfer(InferenceRequest("m", 1))
    answer = encode_infer_response(model, decoded, response)
    assert b'"data":[1.5,NaN,Infinity,-Infinity]' in bytes(answer.body[0])
