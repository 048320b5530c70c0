"""The compiled walk of the common binary infer header (csrc/http/infer_walk.pyx): what it
reads, it reads as the general decode does; everything else it hands over (None).

The integration tests (test_fast_paths.py) check the answers and statistics of a running
server byte for byte against the general decode; these check which requests the walk takes.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from pytriton_core import types
from pytriton_core._native.bytes_codec import serialize_bytes_tensor
from pytriton_core._native.infer_walk import HeaderMemo, walk_binary_infer
from pytriton_core.inference.request import RequestedOutput
from pytriton_core.inference.tensor import Tensor

MAX_BYTES_ELEMENTS = 1000
F32 = np.arange(6, dtype=np.float32).reshape(2, 3)
WORDS = np.array([b"a", b"", b"\xc3\xa9"], dtype=object)
BINARY = F32.tobytes() + bytes(serialize_bytes_tensor(WORDS))


def _inputs() -> list[dict[str, Any]]:
    return [
        {"name": "X", "datatype": "FP32", "shape": [2, 3], "parameters": {"binary_data_size": 24}},
        {
            "name": "W",
            "datatype": "BYTES",
            "shape": [3],
            "parameters": {"binary_data_size": len(BINARY) - 24},
        },
    ]


def _walk(document: dict[str, Any], binary: bytes = BINARY, prefix: bytes = b"head") -> Any:
    return walk_binary_infer(
        document,
        prefix + binary,
        len(prefix),
        types.BY_WIRE_NAME,
        Tensor,
        RequestedOutput,
        MAX_BYTES_ELEMENTS,
    )


def test_the_common_request_is_walked() -> None:
    outputs = [{"name": "Y"}, {"name": "Z", "parameters": {"binary_data": True}}]
    document = {
        "id": "r1",
        "inputs": _inputs(),
        "outputs": outputs,
        "parameters": {"binary_data_output": True},
    }
    walked = _walk(document)
    assert walked is not None
    request_id, binary_by_default, inputs, requested, binary_outputs = walked
    assert (request_id, binary_by_default) == ("r1", True)
    assert list(inputs) == ["X", "W"]
    assert inputs["X"].datatype is types.BY_WIRE_NAME["FP32"]
    np.testing.assert_array_equal(inputs["X"].data, F32)
    assert inputs["W"].data.tolist() == WORDS.tolist()
    assert requested == {"Y": RequestedOutput("Y", 0, False), "Z": RequestedOutput("Z", 0, False)}
    assert binary_outputs == {"Y": False, "Z": True}


def test_a_request_with_no_id_parameters_or_outputs_is_walked() -> None:
    walked = _walk({"inputs": _inputs()})
    assert walked is not None
    assert walked[0:2] == ("", False)
    assert walked[3] is None and walked[4] == {}
    walked = _walk({"inputs": [], "parameters": {}, "outputs": None}, b"")
    assert walked == ("", False, {}, None, {})


def _unusual() -> list[tuple[dict[str, Any], bytes]]:
    def changed(index: int, **members: Any) -> dict[str, Any]:
        inputs = _inputs()
        inputs[index].update(members)
        return {"inputs": inputs}

    size_only = {"binary_data_size": 24}
    return [
        ({"inputs": _inputs(), "unknown": 1}, BINARY),
        ({"inputs": _inputs(), "id": 7}, BINARY),
        ({"inputs": _inputs(), "id": None}, BINARY),
        ({"inputs": _inputs(), "parameters": {"priority": 1}}, BINARY),
        ({"inputs": _inputs(), "parameters": {"binary_data_output": 1}}, BINARY),
        ({"inputs": _inputs(), "parameters": []}, BINARY),
        ({"inputs": {}}, BINARY),
        ({}, BINARY),
        ({"inputs": _inputs()}, BINARY + b"x"),  # bytes left over
        ({"inputs": _inputs()}, BINARY[:-1]),  # too few
        (changed(0, data=[1.0]), BINARY),
        (changed(0, name=1), BINARY),
        (changed(1, name="X"), BINARY),  # a repeated input
        (changed(0, datatype="FP99"), BINARY),
        (changed(0, shape=[2, -3]), BINARY),
        (changed(0, shape=[2, True]), BINARY),
        (changed(0, shape=[2, 2**70]), BINARY),
        (changed(0, shape=[3, 3]), BINARY),  # the size is not the shape's
        (changed(0, parameters={"binary_data_size": True}), BINARY),
        (changed(0, parameters={"binary_data_size": -24}), BINARY),
        (changed(0, parameters={**size_only, "shared_memory_region": "r"}), BINARY),
        (changed(0, parameters=None), BINARY),
        (changed(1, shape=[2 * MAX_BYTES_ELEMENTS]), BINARY),  # past the BYTES limit
        (changed(1, shape=[4]), BINARY),  # not 4 well-formed elements
        (
            {"inputs": _inputs(), "outputs": [{"name": "Y", "parameters": {"classification": 2}}]},
            BINARY,
        ),
        (
            {"inputs": _inputs(), "outputs": [{"name": "Y", "parameters": {"binary_data": 1}}]},
            BINARY,
        ),
        ({"inputs": _inputs(), "outputs": [{"name": 3}]}, BINARY),
        ({"inputs": _inputs(), "outputs": ["Y"]}, BINARY),
        ({"inputs": _inputs(), "outputs": {"name": "Y"}}, BINARY),
    ]


@pytest.mark.parametrize(("document", "binary"), _unusual())
def test_anything_else_is_handed_to_the_general_decode(
    document: dict[str, Any], binary: bytes
) -> None:
    assert _walk(document, binary) is None


# ------------------------------------------------------------- the memo of common headers

FIXED = np.arange(8, dtype=np.float32).reshape(2, 4)
FIXED_HEADER = {
    "inputs": [
        {"name": "X", "datatype": "FP32", "shape": [2, 4], "parameters": {"binary_data_size": 32}},
        {"name": "B", "datatype": "BOOL", "shape": [3], "parameters": {"binary_data_size": 3}},
    ],
    "outputs": [{"name": "Y", "parameters": {"binary_data": True}}, {"name": "Z"}],
}
FIXED_HEAD = b'{"inputs": "stand-in for the header bytes"}'


def _remembered(memo: HeaderMemo, document: dict[str, Any], head: bytes, body: bytes) -> Any:
    walked = walk_binary_infer(
        document,
        body,
        len(head),
        types.BY_WIRE_NAME,
        Tensor,
        RequestedOutput,
        MAX_BYTES_ELEMENTS,
    )
    assert walked is not None
    memo.remember(head, walked)
    return walked


def _recall(memo: HeaderMemo, head: bytes, body: bytes) -> Any:
    return memo.recall(memoryview(body)[: len(head)], body, len(head), Tensor, RequestedOutput)


def test_a_remembered_header_reads_new_data_as_the_walk_does() -> None:
    memo = HeaderMemo()
    first_data = FIXED.tobytes() + b"\x01\x00\x01"
    first = FIXED_HEAD + first_data
    assert _recall(memo, FIXED_HEAD, first) is None  # not seen yet
    walked = _remembered(memo, FIXED_HEADER, FIXED_HEAD, first)
    assert len(memo) == 1
    second_data = (FIXED * 2).tobytes() + b"\x00\x01\x00"
    second = FIXED_HEAD + second_data
    recalled = _recall(memo, FIXED_HEAD, second)
    assert recalled is not None
    walked_again = walk_binary_infer(
        FIXED_HEADER,
        second,
        len(FIXED_HEAD),
        types.BY_WIRE_NAME,
        Tensor,
        RequestedOutput,
        MAX_BYTES_ELEMENTS,
    )
    assert walked_again is not None
    request_id, binary_by_default, inputs, requested, binary_outputs = recalled
    assert (request_id, binary_by_default) == (walked[0], walked[1]) == ("", False)
    assert list(inputs) == ["X", "B"]
    for name, tensor in inputs.items():
        expected = walked_again[2][name]
        assert tensor.datatype is expected.datatype
        assert tensor.data.dtype == expected.data.dtype and tensor.data.shape == expected.data.shape
        np.testing.assert_array_equal(tensor.data, expected.data)
    np.testing.assert_array_equal(inputs["X"].data, FIXED * 2)
    assert inputs["B"].data.tolist() == [False, True, False]
    assert requested == walked_again[3]
    assert binary_outputs == {"Y": True, "Z": False}
    # Each recall answers with objects of its own: nothing of one request reaches another.
    again = _recall(memo, FIXED_HEAD, second)
    assert again[3] == requested and again[3] is not requested
    assert again[4] == binary_outputs and again[4] is not binary_outputs
    binary_outputs["Y"] = False
    assert _recall(memo, FIXED_HEAD, second)[4] == {"Y": True, "Z": False}


def test_a_remembered_header_over_a_section_of_another_size_is_not_recalled() -> None:
    memo = HeaderMemo()
    data = FIXED.tobytes() + b"\x01\x00\x01"
    _remembered(memo, FIXED_HEADER, FIXED_HEAD, FIXED_HEAD + data)
    assert _recall(memo, FIXED_HEAD, FIXED_HEAD + data + b"x") is None
    assert _recall(memo, FIXED_HEAD, FIXED_HEAD + data[:-1]) is None
    assert _recall(memo, FIXED_HEAD, FIXED_HEAD + data) is not None
    assert _recall(memo, FIXED_HEAD + b" ", FIXED_HEAD + b" " + data) is None  # other bytes


def test_headers_with_bytes_inputs_or_too_long_are_not_remembered() -> None:
    memo = HeaderMemo(max_header_bytes=64)
    _remembered(memo, {"inputs": _inputs()}, b"head", b"head" + BINARY)  # a BYTES input
    assert len(memo) == 0
    long_head = b"h" * 65
    _remembered(memo, FIXED_HEADER, long_head, long_head + FIXED.tobytes() + b"\x01\x00\x01")
    assert len(memo) == 0


def test_the_memo_starts_over_at_its_capacity() -> None:
    memo = HeaderMemo(capacity=3)
    data = FIXED.tobytes() + b"\x01\x00\x01"
    heads = [b"head-%d" % index for index in range(4)]
    for head in heads[:3]:
        _remembered(memo, FIXED_HEADER, head, head + data)
    assert len(memo) == 3
    _remembered(memo, FIXED_HEADER, heads[3], heads[3] + data)
    assert len(memo) == 1
    assert _recall(memo, heads[0], heads[0] + data) is None
    assert _recall(memo, heads[3], heads[3] + data) is not None


def test_an_empty_request_is_remembered() -> None:
    memo = HeaderMemo()
    _remembered(memo, {"inputs": []}, b"{}", b"{}")
    assert _recall(memo, b"{}", b"{}") == ("", False, {}, None, {})
    assert _recall(memo, b"{}", b"{}x") is None
