"""The compiled walk of the common all-JSON infer request (csrc/http/json_infer.pyx): what
it reads, it reads as orjson and the general decode read it, value for value and bit for bit;
everything else it hands over (None).

The fuzzer of JSON infer bodies (tools/fuzz/json_infer.py) compares the two decodes on
whatever it finds; tests/integration/test_fast_paths.py compares a running server's answers.
"""

from __future__ import annotations

import json
import random
from typing import Any

import numpy as np
import orjson
import pytest

from pytriton_core import types
from pytriton_core._native.json_infer import walk_json_infer
from pytriton_core._native.json_limits import check_json_limits
from pytriton_core._native.json_tensor import array_from_json_data
from pytriton_core.inference.request import RequestedOutput
from pytriton_core.inference.tensor import Tensor

DEPTH, VALUES = 128, 1 << 22
NUMERIC = ["UINT8", "UINT16", "UINT32", "UINT64", "INT8", "INT16", "INT32", "INT64", "FP32", "FP64"]


def _walk(body: bytes | str, depth: int = DEPTH, values: int = VALUES) -> Any:
    data = body.encode() if isinstance(body, str) else body
    return walk_json_infer(data, types.BY_WIRE_NAME, Tensor, RequestedOutput, depth, values)


def _general_array(data_json: str, datatype: str, shape: list[int]) -> np.ndarray:
    """The array the general decode makes of the same ``data`` (orjson, then json_tensor)."""
    return array_from_json_data(orjson.loads(data_json), datatype, tuple(shape))


def _body(inputs: list[str], extra: str = "") -> str:
    return '{"inputs":[' + ",".join(inputs) + "]" + extra + "}"


def _input(name: str, datatype: str, shape: list[int], data_json: str) -> str:
    return (
        f'{{"name":"{name}","datatype":"{datatype}","shape":{json.dumps(shape)},'
        f'"data":{data_json}}}'
    )


def _same(array: np.ndarray, expected: np.ndarray) -> None:
    assert array.dtype == expected.dtype and array.shape == expected.shape
    assert array.tobytes() == expected.tobytes()  # bit for bit: -0.0, NaN-free floats
    assert array.flags.c_contiguous and array.flags.writeable


def test_tritonclients_json_request_is_walked() -> None:
    body = json.dumps(
        {
            "id": "r-é1",
            "inputs": [
                {"name": "X", "shape": [2, 3], "datatype": "FP32", "data": [1, 2.5, -3, 4, 5, 6]},
                {"name": "B", "shape": [2], "datatype": "BOOL", "data": [True, False]},
            ],
            "outputs": [{"name": "Y", "parameters": {"binary_data": False}}, {"name": "Z"}],
            "parameters": {"binary_data_output": True},
        },
        indent=1,
        ensure_ascii=False,
    )
    walked = _walk(body)
    assert walked is not None
    request_id, binary_by_default, inputs, requested, binary_outputs = walked
    assert (request_id, binary_by_default) == ("r-é1", True)
    assert list(inputs) == ["X", "B"]
    assert inputs["X"].datatype is types.BY_WIRE_NAME["FP32"]
    _same(inputs["X"].data, np.array([[1, 2.5, -3], [4, 5, 6]], dtype=np.float32))
    _same(inputs["B"].data, np.array([True, False]))
    assert requested == {"Y": RequestedOutput("Y", 0, False), "Z": RequestedOutput("Z", 0, False)}
    assert binary_outputs == {"Y": False, "Z": False}


def test_no_id_parameters_or_outputs() -> None:
    assert _walk('{"inputs":[]}') == ("", False, {}, None, {})
    walked = _walk('{"parameters":{},"outputs":[],"inputs":[]}')
    assert walked == ("", False, {}, {}, {})


@pytest.mark.parametrize("datatype", [*NUMERIC, "BOOL"])
def test_every_datatype_nested_flat_and_scalar(datatype: str) -> None:
    rng = random.Random(datatype)
    if datatype == "BOOL":
        values = [rng.random() < 0.5 for _ in range(12)]
    elif datatype.startswith("FP"):
        values = [rng.uniform(-1e6, 1e6) for _ in range(12)]
    else:
        info = np.iinfo(np.dtype(datatype.lower()))
        # The extremes the walk reads: an integer of at most 18 digits.
        lowest, highest = max(int(info.min), -(10**18) + 1), min(int(info.max), 10**18 - 1)
        values = [lowest, highest] + [rng.randint(lowest, highest) for _ in range(10)]
    nested = json.dumps(np.array(values, dtype=object).reshape(3, 2, 2).tolist())
    for data_json, shape in (
        (json.dumps(values), [3, 4]),
        (nested, [3, 2, 2]),
        (json.dumps(values[0]), []),
    ):
        walked = _walk(_body([_input("X", datatype, shape, data_json)]))
        assert walked is not None, data_json
        _same(walked[2]["X"].data, _general_array(data_json, datatype, shape))


def _number_tokens(rng: random.Random) -> list[str]:
    tokens = [
        "0",
        "-0",
        "-0.0",
        "0.0",
        "1e-400",
        "-1e-400",
        "4.9e-324",
        "2.2250738585072011e-308",
        "1.7976931348623157e308",
        "3.4028235e38",
        "3.4028236e38",
        "1e39",
        "-1e39",
        "0.1",
        "1E5",
        "1e+5",
        "2.5E-3",
        "123456789012345678",
        "-123456789012345678",
        "9007199254740993",
        "0.10000000149011612",
        "1.00000005960464477539062500001",
    ]
    for _ in range(400):
        kind = rng.randrange(4)
        if kind == 0:
            tokens.append(repr(rng.uniform(-1e3, 1e3)))
        elif kind == 1:
            tokens.append(repr(float(np.float32(rng.uniform(-1, 1)))))
        elif kind == 2:
            digits = "".join(rng.choice("0123456789") for _ in range(rng.randint(1, 25)))
            digits = digits.lstrip("0") or "0"
            exponent = rng.randint(-330, 300)
            tokens.append(f"{rng.choice(['', '-'])}{digits[0]}.{digits[1:] or '0'}e{exponent}")
        else:
            tokens.append(str(rng.randint(-(10**18) + 1, 10**18 - 1)))
    return tokens


def _short_decimal_tokens(rng: random.Random) -> list[str]:
    """Numbers around the walk's exact fast path (at most 15 significant digits, a decimal
    exponent within 22): inside, on, and just past each of its bounds."""
    tokens = ["0.0", "-0.0", "0.25", "-0.5e-0", "1e22", "1e23", "1e-22", "1e-23", "0.5e1"]
    tokens += ["123456789012345", "1234567890123456", "0.000123456789012345", "9.99999999999999e22"]
    tokens += ["4.35", "0.3", "2.675", "1.15", "8.5e-1", "7E+0", "3.000000000000001"]
    for _ in range(2000):
        digits = str(rng.randint(0, 10 ** rng.randint(1, 17)))
        point = rng.randint(0, len(digits))
        integer, fraction = digits[:point].lstrip("0") or "0", digits[point:]
        token = integer + (f".{fraction}" if fraction else "")
        if rng.random() < 0.5:
            token += f"{rng.choice('eE')}{rng.choice(['', '+', '-'])}{rng.randint(0, 30)}"
        tokens.append(rng.choice(["", "-"]) + token)
    return tokens


@pytest.mark.parametrize("datatype", ["FP32", "FP64"])
@pytest.mark.parametrize(
    "tokens",
    [_number_tokens(random.Random(7)), _short_decimal_tokens(random.Random(11))],
    ids=["numbers", "short decimals around the exact fast path"],
)
def test_numbers_are_read_as_orjson_reads_them(datatype: str, tokens: list[str]) -> None:
    data_json = "[" + ",".join(tokens) + "]"
    walked = _walk(_body([_input("X", datatype, [len(tokens)], data_json)]))
    assert walked is not None
    _same(walked[2]["X"].data, _general_array(data_json, datatype, [len(tokens)]))


X_ENTRY = '{"name":"X","datatype":"FP32","shape":[1]'


def _outputs(parameters: str) -> str:
    return ',"outputs":[{"name":"Y","parameters":' + parameters + "}]"


HANDED_OVER = {
    "an escape in a name": _body([_input("X\\u0041", "FP32", [1], "[1]")]),
    "a control character in a name": _body([_input("X\t", "FP32", [1], "[1]")]),
    "a name not UTF-8": b'{"inputs":[{"name":"\xff","datatype":"FP32","shape":[1],"data":[1]}]}',
    "BYTES": _body([_input("X", "BYTES", [1], '["a"]')]),
    "FP16": _body([_input("X", "FP16", [1], "[1]")]),
    "an unknown datatype": _body([_input("X", "FP8", [1], "[1]")]),
    "input parameters": _body([X_ENTRY + ',"data":[1],"parameters":{}}']),
    "binary_data_size": _body([X_ENTRY + ',"parameters":{"binary_data_size":4}}']),
    "a key given twice": _body([X_ENTRY + ',"name":"Y","data":[1]}']),
    "inputs given twice": '{"inputs":[],"inputs":[]}',
    "another document key": '{"inputs":[],"extra":1}',
    "another request parameter": '{"inputs":[],"parameters":{"priority":1}}',
    "a null id": '{"id":null,"inputs":[]}',
    "a numeric id": '{"id":1,"inputs":[]}',
    "no inputs": '{"outputs":[]}',
    "not an object": "[]",
    "an empty object": "{}",
    "a name twice": _body([_input("X", "FP32", [1], "[1]"), _input("X", "FP32", [1], "[2]")]),
    "fewer elements than the shape": _body([_input("X", "FP32", [2], "[1]")]),
    "more elements than the shape": _body([_input("X", "FP32", [1], "[1,2]")]),
    "a negative dimension": _body([_input("X", "FP32", [-1], "[1]")]),
    "a float dimension": _body([_input("X", "FP32", [1.0], "[1]")]),
    "a huge shape": _body([_input("X", "FP32", [2**62, 2**62], "[1]")]),
    "a float for an integer": _body([_input("X", "INT32", [1], "[1.0]")]),
    "out of range": _body([_input("X", "UINT8", [1], "[256]")]),
    "negative unsigned": _body([_input("X", "UINT16", [1], "[-1]")]),
    "19 digits": _body([_input("X", "INT64", [1], "[1234567890123456789]")]),
    "19 digits for a float": _body([_input("X", "FP64", [1], "[1234567890123456789]")]),
    "infinite as a double": _body([_input("X", "FP64", [1], "[1e400]")]),
    "a boolean for a number": _body([_input("X", "FP32", [1], "[true]")]),
    "a number for a boolean": _body([_input("X", "BOOL", [1], "[1]")]),
    "null data": _body([_input("X", "FP32", [1], "[null]")]),
    "a string in data": _body([_input("X", "FP32", [1], '["1"]')]),
    "an object in data": _body([_input("X", "FP32", [1], "[{}]")]),
    "a leading zero": _body([_input("X", "FP32", [1], "[01]")]),
    "a bare dot": _body([_input("X", "FP32", [1], "[.5]")]),
    "a trailing dot": _body([_input("X", "FP32", [1], "[1.]")]),
    "a plus sign": _body([_input("X", "FP32", [1], "[+1]")]),
    "NaN": _body([_input("X", "FP32", [1], "[NaN]")]),
    "a trailing comma": _body([_input("X", "FP32", [1], "[1,]")]),
    "a missing comma": _body([_input("X", "FP32", [2], "[1 2]")]),
    "trailing bytes": _body([_input("X", "FP32", [1], "[1]")]) + "x",
    "two documents": _body([]) + _body([]),
    "unclosed": _body([_input("X", "FP32", [1], "[1]")])[:-1],
    "nested past 100": _body([_input("X", "FP32", [1], "[" * 101 + "1" + "]" * 101)]),
    "an output with classification": _body([], _outputs('{"classification":2}')),
    "an output in shared memory": _body([], _outputs('{"shared_memory_region":"r"}')),
    "an output without a name": '{"inputs":[],"outputs":[{"parameters":{}}]}',
    "a non-boolean binary_data": _body([], _outputs('{"binary_data":1}')),
}


@pytest.mark.parametrize("case", sorted(HANDED_OVER))
def test_anything_else_is_handed_to_the_general_decode(case: str) -> None:
    assert _walk(HANDED_OVER[case]) is None


def test_the_json_limits_are_counted_as_json_limits_counts_them() -> None:
    body = _body(
        [_input("X", "FP32", [2, 2], "[[1, 2], [3, 4]]"), _input("Y", "BOOL", [1], "[true]")],
        ',"outputs":[{"name":"Z","parameters":{"binary_data":true}}],"id":"a[b,c{"',
    ).encode()
    for depth in range(1, 8):
        for values in range(1, 40):
            try:
                check_json_limits(body, depth, values)
                fits = True
            except ValueError:
                fits = False
            assert (_walk(body, depth, values) is not None) == fits, (depth, values)
