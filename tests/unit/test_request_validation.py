"""Request validation: which error a request with several faults gets, in Triton's order.

The check runs one loop over the inputs in the common case; a request with more than one
fault must still get the error Triton reports first: a wrong input count, then an unknown
input name, then a missing required input, then the first input's own datatype or shape.
"""

from __future__ import annotations

import numpy as np
import pytest

from pytriton_core import types
from pytriton_core.config import ModelSpec, normalize_config, parse_config_text, validate_config
from pytriton_core.errors import InvalidArgumentError
from pytriton_core.inference.request import InferenceRequest, RequestedOutput
from pytriton_core.inference.tensor import Tensor
from pytriton_core.runtime.validation import validate_request

FP32 = types.BY_WIRE_NAME["FP32"]
INT32 = types.BY_WIRE_NAME["INT32"]

CONFIG = """
name: "m"
backend: "python"
max_batch_size: 4
input [
  { name: "A" data_type: TYPE_FP32 dims: [ 3 ] },
  { name: "B" data_type: TYPE_FP32 dims: [ -1 ] },
  { name: "C" data_type: TYPE_FP32 dims: [ 2 ] optional: true }
]
output [ { name: "Y" data_type: TYPE_FP32 dims: [ 3 ] } ]
"""


def _spec(text: str = CONFIG) -> ModelSpec:
    config = parse_config_text(text, "test")
    normalize_config(config, gpu_ids=[])
    validate_config(config)
    return ModelSpec.from_config(config, 1)


def _tensor(name: str, shape: tuple[int, ...], datatype: types.DataType = FP32) -> Tensor:
    return Tensor(name, datatype, np.zeros(shape, dtype=datatype.numpy_dtype))


def _request(*tensors: Tensor, outputs: tuple[str, ...] | None = None) -> InferenceRequest:
    requested = None if outputs is None else {n: RequestedOutput(n) for n in outputs}
    return InferenceRequest(
        "m", id="r1", inputs={t.name: t for t in tensors}, requested_outputs=requested
    )


def _message(request: InferenceRequest) -> str:
    with pytest.raises(InvalidArgumentError) as raised:
        validate_request(request, _spec())
    return str(raised.value)


def test_a_valid_request_gets_its_batch_size() -> None:
    request = _request(_tensor("A", (2, 3)), _tensor("B", (2, 7)))
    validate_request(request, _spec())
    assert request.batch_size == 2
    request = _request(_tensor("A", (1, 3)), _tensor("B", (1, 1)), _tensor("C", (1, 2)))
    validate_request(request, _spec())
    assert request.batch_size == 1


def test_an_unknown_input_comes_before_an_earlier_inputs_datatype() -> None:
    request = _request(_tensor("A", (1, 3), INT32), _tensor("WRONG", (1, 3)))
    assert _message(request) == "unexpected inference input 'WRONG' for model 'm'"


def test_an_unknown_input_comes_before_an_earlier_inputs_shape() -> None:
    request = _request(_tensor("A", (1, 9)), _tensor("WRONG", (1, 3)))
    assert _message(request) == "unexpected inference input 'WRONG' for model 'm'"


def test_a_missing_input_comes_before_an_inputs_datatype() -> None:
    request = _request(_tensor("A", (1, 3), INT32), _tensor("C", (1, 2)))
    message = _message(request)
    assert message.startswith("[request id: r1] expected 2 inputs but got 2 inputs")
    assert "missing required input(s) ['B']" in message


def test_a_wrong_count_comes_first() -> None:
    request = _request(_tensor("WRONG", (1, 3)))
    assert "expected 2 inputs but got 1 inputs" in _message(request)


def test_each_inputs_own_error_when_the_names_are_right() -> None:
    wrong_type = _request(_tensor("A", (1, 3)), _tensor("B", (1, 3), INT32))
    assert _message(wrong_type) == (
        "[request id: r1] inference input 'B' data-type is 'INT32', but model 'm' expects 'FP32'"
    )
    wrong_shape = _request(_tensor("A", (1, 4)), _tensor("B", (1, 3)))
    assert _message(wrong_shape).startswith(
        "[request id: r1] unexpected shape for input 'A' for model 'm'. Expected [-1,3], got [1,4]."
    )
    too_big = _request(_tensor("A", (5, 3)), _tensor("B", (5, 3)))
    assert _message(too_big) == "[request id: r1] inference request batch-size must be <= 4 for 'm'"
    unequal = _request(_tensor("A", (2, 3)), _tensor("B", (3, 3)))
    assert _message(unequal) == (
        "[request id: r1] input 'B' batch size does not match other inputs for 'm'"
    )


def test_an_unknown_requested_output() -> None:
    request = _request(_tensor("A", (1, 3)), _tensor("B", (1, 3)), outputs=("Z",))
    assert _message(request) == "unexpected inference output 'Z' for model 'm'"
