"""The response's JSON header written directly (``response_header``) is byte for byte what
the general encode writes through a dict and orjson, outputs sent binary and outputs carried
in JSON alike; what it cannot write plainly it leaves to the general encode (None)."""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import orjson
import pytest

from pytriton_core import types
from pytriton_core._native.infer_header import response_header
from pytriton_core.inference.tensor import Tensor


def general(
    request_id: str, model: str, version: str, outputs: list[Tensor], parts: list[Any]
) -> bytes:
    """The general encode's document (``encode_infer_response``), as orjson writes it."""
    document: dict[str, Any] = {}
    if request_id:
        document["id"] = request_id
    document["model_name"] = model
    document["model_version"] = version
    document["outputs"] = []
    for tensor, part in zip(outputs, parts, strict=True):
        entry: dict[str, Any] = {
            "name": tensor.name,
            "datatype": tensor.datatype.wire_name,
            "shape": list(tensor.shape),
        }
        if isinstance(part, int):
            entry["parameters"] = {"binary_data_size": part}
        else:
            entry["data"] = tensor.data.reshape(-1)
        document["outputs"].append(entry)
    return orjson.dumps(document, option=orjson.OPT_SERIALIZE_NUMPY)


def json_part(output: Tensor) -> bytes:
    """An output's data as the direct writer is given it: orjson's JSON of the array alone."""
    return orjson.dumps(output.data.reshape(-1), option=orjson.OPT_SERIALIZE_NUMPY)


def tensor(name: str, wire: str, shape: tuple[int, ...], seed: int = 0) -> Tensor:
    datatype = types.BY_WIRE_NAME[wire]
    values = np.random.default_rng(seed).uniform(-100, 100, shape)
    return Tensor(name, datatype, values.astype(datatype.numpy_dtype))


JSON_DATATYPES = ("FP32", "INT64", "BOOL", "UINT8")
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
                seed=i,
            )
            for i in range(rng.randint(0, 3))
        ]
        parts: list[Any] = [
            json_part(output)
            if output.datatype.wire_name in JSON_DATATYPES and rng.random() < 0.5
            else rng.choice([0, 4, 64, 1 << 40])
            for output in outputs
        ]
        request_id = rng.choice(PLAIN_TEXT)
        model = rng.choice(PLAIN_TEXT[1:])
        version = rng.choice(["1", "12", "0"])
        written = response_header(request_id, model, version, outputs, parts)
        assert written == general(request_id, model, version, outputs, parts)


@pytest.mark.parametrize("odd", ODD_TEXT)
@pytest.mark.parametrize("where", ["id", "model", "output"])
def test_a_name_json_would_escape_is_left_to_the_general_encode(odd: str, where: str) -> None:
    outputs = [tensor(odd if where == "output" else "OUTPUT0", "FP32", (1, 16))]
    request_id = odd if where == "id" else "7"
    model = odd if where == "model" else "m"
    assert response_header(request_id, model, "1", outputs, [64]) is None


def test_a_shape_or_part_not_plain_is_left_to_the_general_encode() -> None:
    output = tensor("OUTPUT0", "FP32", (1, 16))
    assert response_header("", "m", "1", [output], [1 << 63]) is None
    assert response_header("", "m", "1", [output], [-1]) is None
    assert response_header("", "m", "1", [output], [64, 8]) is None
    assert response_header("", "m", "1", [output], ["[1.0]"]) is None
    assert response_header("", "m", "1", [output], [bytearray(b"[1.0]")]) is None


def test_a_long_header_is_written_whole() -> None:
    outputs = [tensor(f"OUTPUT{i}", "FP32", (1, 16), seed=i) for i in range(40)]
    parts: list[Any] = [json_part(output) if i % 2 else 64 for i, output in enumerate(outputs)]
    written = response_header("", "m", "1", outputs, parts)
    assert written is not None and len(written) > 4096
    assert written == general("", "m", "1", outputs, parts)
