"""HTTP JSON output data: the bytes written for each numeric datatype, layout and special
value are those of the plain numpy route (contiguous copy, float32 widened to double,
``np.isfinite`` over every element), which the fast route must match byte for byte."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from pytriton_core import types
from pytriton_core.frontends.http.infer_codec import (
    NonFiniteData,
    dump_document,
    dumps_json,
    json_output_data,
    json_output_values,
)
from pytriton_core.inference.tensor import Tensor

SPECIALS = [0.0, -0.0, 0.1, -2.5, 1e-45, 3.4e38, -3.4e38, 1.0 / 3.0, 123456.789]
NON_FINITE = [[np.nan], [np.inf], [-np.inf], [np.nan, np.inf, -np.inf], [np.inf, -np.inf]]
NUMERIC = ["BOOL", "UINT8", "UINT16", "UINT32", "UINT64", "INT8", "INT16", "INT32", "INT64"]


def _reference_bytes(tensor: Tensor) -> bytes:
    data = np.ascontiguousarray(tensor.data).reshape(-1)
    if tensor.datatype.wire_name == "FP32":
        data = data.astype(np.float64)
    non_finite = data.dtype.kind == "f" and not bool(np.isfinite(data).all())
    value: Any = NonFiniteData(data) if non_finite else data
    return dumps_json({"data": value}, non_finite)


def _written_bytes(tensor: Tensor) -> bytes:
    value = json_output_data(tensor)
    return dumps_json({"data": value}, isinstance(value, NonFiniteData))


def _layouts(array: np.ndarray) -> list[np.ndarray]:
    """The same values as C-ordered, Fortran-ordered, transposed and strided arrays."""
    square = np.resize(array, (4, 6))
    return [
        array,
        square,
        np.asfortranarray(square),
        square.T,
        square[:, ::2],
        square[::-1],
        square.reshape(2, 3, 4),
        square[:0],
    ]


def _tensor(wire: str, array: np.ndarray) -> Tensor:
    datatype = types.from_wire_name(wire)
    assert datatype is not None
    return Tensor("OUTPUT0", datatype, array)


@pytest.mark.parametrize("wire", ["FP32", "FP64"])
@pytest.mark.parametrize("extra", [[], *NON_FINITE])
def test_float_outputs_match_the_numpy_route(wire: str, extra: list[float]) -> None:
    dtype = np.float32 if wire == "FP32" else np.float64
    base = np.array(SPECIALS + extra, dtype=dtype)
    for array in _layouts(base):
        tensor = _tensor(wire, array)
        assert _written_bytes(tensor) == _reference_bytes(tensor), array


def test_large_doubles_whose_sum_overflows_stay_numbers() -> None:
    tensor = _tensor("FP64", np.array([1.7e308, 1.7e308, -1e308], dtype=np.float64))
    written = _written_bytes(tensor)
    assert written == _reference_bytes(tensor)
    assert b"Infinity" not in written


@pytest.mark.parametrize("wire", NUMERIC)
def test_integer_and_bool_outputs_match_the_numpy_route(wire: str) -> None:
    datatype = types.from_wire_name(wire)
    assert datatype is not None
    info = np.iinfo(datatype.numpy_dtype) if wire != "BOOL" else None
    values = [0, 1] if info is None else [info.min, info.max, 0, 1, info.max // 3]
    base = np.array(values * 5, dtype=datatype.numpy_dtype)
    for array in _layouts(base):
        tensor = _tensor(wire, array)
        assert _written_bytes(tensor) == _reference_bytes(tensor), array


def test_float32_is_written_as_the_double_it_widens_to() -> None:
    written = _written_bytes(_tensor("FP32", np.array([0.1, np.nan], dtype=np.float32)))
    assert written == b'{"data":[0.10000000149011612,NaN]}'


@pytest.mark.parametrize("wire", ["FP32", "FP64", "INT32"])
@pytest.mark.parametrize("extra", [[], *NON_FINITE])
@pytest.mark.parametrize("request_id", ["", "null", "a null here"])
def test_a_response_document_checks_its_floats_only_when_it_has_a_null(
    wire: str, extra: list[float], request_id: str
) -> None:
    """``dump_document`` (the infer response's header) writes what the checked route writes:
    two outputs, one of them with the non-finite values, and an ``id`` that may say null."""
    datatype = types.from_wire_name(wire)
    assert datatype is not None
    plain = _tensor(wire, np.array([1, 2, 3], dtype=datatype.numpy_dtype))
    values = [4.0, *extra] if wire != "INT32" else [4]
    special = _tensor(wire, np.array(values, dtype=datatype.numpy_dtype))
    reference = [json_output_data(t) for t in (plain, special)]
    expected = dumps_json(
        {
            "id": request_id,
            "outputs": [{"name": "A", "data": reference[0]}, {"data": reference[1]}],
        },
        any(isinstance(data, NonFiniteData) for data in reference),
    )
    entries: list[dict[str, Any]] = [
        {"name": "A", "data": json_output_values(plain)},
        {"data": json_output_values(special)},
    ]
    assert dump_document({"id": request_id, "outputs": entries}, entries) == expected
