"""The binary response's JSON header written directly (``binary_response_header``) is byte
for byte what the general encode writes through a dict and orjson; what it cannot write
plainly it leaves to the general encode (None)."""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import orjson
import pytest

from pytriton_core import types
from pytriton_core._native.infer_header import binary_response_header
from pytriton_core.inference.tensor import Tensor


def general(
    request_id: str, model: str, version: str, outputs: list[Tensor], sizes: list[int]
) -> bytes:
    """The general encode's document (``encode_infer_response``), as orjson writes it."""
    document: dict[str, Any] = {}
    if request_id:
        document["id"] = request_id
    document["model_name"] = model
    document["model_version"] = version
    document["outputs"] = [
        {
            "name": tensor.name,
            "datatype": tensor.datatype.wire_name,
            "shape": list(tensor.shape),
            "parameters": {"binary_data_size": size},
        }
        for tensor, size in zip(outputs, sizes, strict=True)
    ]
    return orjson.dumps(document, option=orjson.OPT_SERIALIZE_NUMPY)


def tensor(name: str, wire: str, shape: tuple[int, ...]) -> Tensor:
    datatype = types.BY_WIRE_NAME[wire]
    return Tensor(name, datatype, np.zeros(shape, dtype=datatype.numpy_dtype))


PLAIN_TEXT = ["", "1", "OUTPUT0", "my-model_v2.onnx", "a b/c:d", "x" * 300, "~!@#$%^&*()[]{}<>'"]
ODD_TEXT = ['a"b', "a\\b", "caf\u00e9", "tab\there", "new\nline", "\x7f", "\u2603"]


@pytest.mark.parametrize("seed", range(20))
def test_written_as_orjson_writes_it(seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(50):
        outputs = [
            tensor(
                rng.choice(PLAIN_TEXT[1:]) + str(i),
                rng.choice(["FP32", "INT64", "BOOL", "UINT8", "FP16", "BYTES"]),
                tuple(rng.randint(0, 5) for _ in range(rng.randint(0, 4))),
            )
            for i in range(rng.randint(0, 3))
        ]
        sizes = [rng.choice([0, 4, 64, 1 << 40]) for _ in outputs]
        request_id = rng.choice(PLAIN_TEXT)
        model = rng.choice(PLAIN_TEXT[1:])
        version = rng.choice(["1", "12", "0"])
        written = binary_response_header(request_id, model, version, outputs, sizes)
        assert written == general(request_id, model, version, outputs, sizes)


@pytest.mark.parametrize("odd", ODD_TEXT)
@pytest.mark.parametrize("where", ["id", "model", "output"])
def test_a_name_json_would_escape_is_left_to_the_general_encode(odd: str, where: str) -> None:
    outputs = [tensor(odd if where == "output" else "OUTPUT0", "FP32", (1, 16))]
    request_id = odd if where == "id" else "7"
    model = odd if where == "model" else "m"
    assert binary_response_header(request_id, model, "1", outputs, [64]) is None


def test_a_shape_or_size_not_a_plain_int_is_left_to_the_general_encode() -> None:
    output = tensor("OUTPUT0", "FP32", (1, 16))
    assert binary_response_header("", "m", "1", [output], [1 << 63]) is None
    assert binary_response_header("", "m", "1", [output], [-1]) is None
    assert binary_response_header("", "m", "1", [output], [64, 8]) is None


def test_a_header_past_the_writers_capacity_is_left_to_the_general_encode() -> None:
    outputs = [tensor(f"OUTPUT{i}", "FP32", (1, 16)) for i in range(40)]
    assert binary_response_header("", "m", "1", outputs, [64] * 40) is None
    few = outputs[:5]
    assert binary_response_header("", "m", "1", few, [64] * 5) == general(
        "", "m", "1", few, [64] * 5
    )
