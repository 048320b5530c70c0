"""JSON tensor fast path: numpy (np.array over the flattened list) as the oracle."""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np
import orjson
import pytest

from pytriton_core._native.json_tensor import (
    SHAPE_MISMATCH,
    array_from_json_data,
    array_to_json_data,
)

INT_RANGES = {
    "UINT8": (np.uint8, 0, 2**8 - 1),
    "UINT16": (np.uint16, 0, 2**16 - 1),
    "UINT32": (np.uint32, 0, 2**32 - 1),
    "UINT64": (np.uint64, 0, 2**64 - 1),
    "INT8": (np.int8, -(2**7), 2**7 - 1),
    "INT16": (np.int16, -(2**15), 2**15 - 1),
    "INT32": (np.int32, -(2**31), 2**31 - 1),
    "INT64": (np.int64, -(2**63), 2**63 - 1),
}

# datatype -> (numpy dtype, six sample elements as orjson would decode them)
SAMPLES: dict[str, tuple[Any, list[Any]]] = {
    "BOOL": (np.bool_, [True, False, False, True, True, False]),
    **{
        name: (dtype, [lo, hi, 0, 1, (lo + hi) // 2, hi - 1])
        for name, (dtype, lo, hi) in INT_RANGES.items()
    },
    "FP32": (np.float32, [0.5, -1.25, 3, 1e30, -0.0, 16777217]),
    "FP64": (np.float64, [0.1, -1e300, 7, 2**53 + 1, 5e-324, -3]),
}


def flatten(data: Any) -> list[Any]:
    if not isinstance(data, list):
        return [data]
    return [leaf for item in data for leaf in flatten(item)]


def check(data: Any, datatype: str, shape: tuple[int, ...]) -> np.ndarray:
    out = array_from_json_data(data, datatype, shape)
    assert out.shape == shape
    assert out.flags.c_contiguous and out.flags.writeable and out.flags.owndata
    return out


@pytest.mark.parametrize("datatype", list(SAMPLES))
def test_every_numeric_datatype_matches_numpy(datatype: str) -> None:
    dtype, values = SAMPLES[datatype]
    expected = np.array(values, dtype=dtype)
    for data, shape in [
        (values, (6,)),
        ([values[:3], values[3:]], (2, 3)),
        (
            [[[v] for v in values[:2]], [[v] for v in values[2:4]], [[v] for v in values[4:]]],
            (3, 2, 1),
        ),
    ]:
        out = check(data, datatype, shape)
        assert out.dtype == np.dtype(dtype)
        np.testing.assert_array_equal(out.reshape(-1), expected)
    # through a real JSON round trip
    decoded = orjson.loads(orjson.dumps(values))
    np.testing.assert_array_equal(check(decoded, datatype, (2, 3)).reshape(-1), expected)


def test_fp32_rounds_like_numpy_and_overflows_to_inf() -> None:
    values = [0.1, 1 / 3, 3.4028235e38, 1e39, -1e39, 2**200]
    out = check(values, "FP32", (6,))
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(out, np.array(values, dtype=np.float64).astype(np.float32))
    assert np.isinf(out[3:]).all()


def test_bytes_are_utf8_encoded_into_an_object_array() -> None:
    values = ["", "ascii", "héllo", "日本語", "😀", "\x00nul"]
    out = check([values[:3], values[3:]], "BYTES", (2, 3))
    assert out.dtype == object
    assert all(type(x) is bytes for x in out.reshape(-1))
    assert out.reshape(-1).tolist() == [v.encode() for v in values]


def test_ragged_nesting_counts_leaves_in_row_major_order() -> None:
    expected = np.arange(1, 7, dtype=np.int32).reshape(2, 3)
    for data in (
        [1, 2, 3, 4, 5, 6],
        [[1, 2, 3], [4, 5, 6]],
        [[1], [2, 3, 4, 5], 6],
        [[[1, 2]], [3, [4, [5, [6]]]]],
        [[], [1, 2, 3, 4, 5, 6], [[]]],
    ):
        np.testing.assert_array_equal(check(data, "INT32", (2, 3)), expected)


def test_scalars() -> None:
    assert check(5, "INT64", ()).item() == 5
    assert check([5], "INT64", ()).item() == 5
    assert check(2.5, "FP32", (1,)).tolist() == [2.5]
    assert check(True, "BOOL", ()).item() is True
    assert check("s", "BYTES", ()).item() == b"s"
    assert check([[[7]]], "UINT8", (1, 1, 1)).tolist() == [[[7]]]


@pytest.mark.parametrize("datatype", [*SAMPLES, "BYTES"])
@pytest.mark.parametrize(
    ("data", "shape"), [([], (0,)), ([[], []], (2, 0)), ([], (0, 5)), ([[[]]], (1, 1, 0))]
)
def test_empty_tensors(datatype: str, data: Any, shape: tuple[int, ...]) -> None:
    out = check(data, datatype, shape)
    assert out.size == 0


@pytest.mark.parametrize(
    ("data", "shape"),
    [
        ([1, 2, 3], (2, 2)),
        ([1, 2, 3, 4, 5], (2, 2)),
        ([[1, 2], [3]], (2, 2)),
        ([], (1,)),
        ([1], (0,)),
        (1, (2,)),
        ([1, 2], ()),
        ([[1, 2], [3, 4]], (2, 2, 2)),
    ],
)
def test_count_must_match_the_shape(data: Any, shape: tuple[int, ...]) -> None:
    with pytest.raises(ValueError, match=f"^{SHAPE_MISMATCH}$"):
        array_from_json_data(data, "INT32", shape)


def test_count_is_checked_before_types_and_before_allocating() -> None:
    assert SHAPE_MISMATCH == "Shape does not match true shape of 'data' field"
    with pytest.raises(ValueError, match=SHAPE_MISMATCH):
        array_from_json_data(["not", "numbers"], "FP32", (3,))
    with pytest.raises(ValueError, match=SHAPE_MISMATCH):
        array_from_json_data([1.0], "FP64", (2**40, 2**20))  # 8 PiB if it allocated first


def nest(depth: int) -> Any:
    data: Any = 1
    for _ in range(depth):
        data = [data]
    return data


def test_nesting_depth_limit_is_100() -> None:
    # nesting need not follow the shape (numpy arrays stop at 64 dimensions anyway)
    assert check(nest(100), "INT8", (1,)).item() == 1
    with pytest.raises(ValueError, match="nested more than 100 levels"):
        array_from_json_data(nest(101), "INT8", (1,))
    with pytest.raises(ValueError, match="nested more than 100 levels"):
        array_from_json_data([1, nest(100)], "INT8", (2,))


@pytest.mark.parametrize("datatype", list(INT_RANGES))
def test_integers_out_of_range(datatype: str) -> None:
    _, lo, hi = INT_RANGES[datatype]
    assert check([lo, hi], datatype, (2,)).tolist() == [lo, hi]
    for bad in (lo - 1, hi + 1, 2**64, -(2**64), 10**30):
        with pytest.raises(
            ValueError,
            match=rf"value {bad} at element 1 is out of range for "
            rf"{datatype} \[{lo}, {hi}\]",
        ):
            array_from_json_data([0, bad, 0], datatype, (3,))


def test_huge_integer_for_float_is_out_of_range() -> None:
    with pytest.raises(ValueError, match="out of range for FP64"):
        array_from_json_data([10**400], "FP64", (1,))


@pytest.mark.parametrize(
    ("datatype", "element", "found"),
    [
        ("INT32", True, "a boolean"),
        ("UINT8", False, "a boolean"),
        ("INT64", 1.0, "a float"),
        ("INT8", "1", "a string"),
        ("UINT64", None, "null"),
        ("FP32", True, "a boolean"),
        ("FP64", "1.5", "a string"),
        ("FP32", {"a": 1}, "an object"),
        ("BOOL", 1, "an integer"),
        ("BOOL", 0, "an integer"),
        ("BOOL", "true", "a string"),
        ("BOOL", 1.0, "a float"),
        ("BYTES", 1, "an integer"),
        ("BYTES", b"raw", "bytes"),
        ("BYTES", None, "null"),
    ],
)
def test_wrong_element_kinds(datatype: str, element: Any, found: str) -> None:
    good = {"BOOL": True, "BYTES": "s"}.get(datatype, 0)
    data = [[good, good], [good, good, element]]
    with pytest.raises(
        TypeError, match=rf"^{datatype} data must hold .* got {found} at element 4$"
    ):
        array_from_json_data(data, datatype, (5,))


def test_expected_kind_is_named() -> None:
    with pytest.raises(TypeError, match="FP32 data must hold a number per element"):
        array_from_json_data(["x"], "FP32", (1,))
    with pytest.raises(TypeError, match="INT32 data must hold an integer"):
        array_from_json_data([1.5], "INT32", (1,))
    with pytest.raises(TypeError, match="UINT16 data must hold a non-negative integer"):
        array_from_json_data([True], "UINT16", (1,))
    with pytest.raises(TypeError, match=r"BOOL data must hold a boolean \(true/false\)"):
        array_from_json_data([1], "BOOL", (1,))
    with pytest.raises(TypeError, match="BYTES data must hold a string"):
        array_from_json_data([1], "BYTES", (1,))


@pytest.mark.parametrize("datatype", ["FP16", "BF16"])
def test_half_precision_is_not_accepted_in_json(datatype: str) -> None:
    with pytest.raises(ValueError, match=f"^receiving {datatype} data via JSON is not supported$"):
        array_from_json_data([1.0], datatype, (1,))


@pytest.mark.parametrize("datatype", ["INVALID", "fp32", "STRING", ""])
def test_unknown_datatype(datatype: str) -> None:
    with pytest.raises(ValueError, match="invalid datatype"):
        array_from_json_data([1.0], datatype, (1,))


def test_shape_validation() -> None:
    assert check([1, 2], "INT32", (2,)).shape == (2,)
    assert array_from_json_data([1, 2], "INT32", [1, 2]).shape == (1, 2)
    assert array_from_json_data([1, 2], "INT32", np.array([2, 1])).shape == (2, 1)
    with pytest.raises(TypeError, match="integers"):
        array_from_json_data([1], "INT32", (True,))
    with pytest.raises(ValueError, match="non-negative"):
        array_from_json_data([], "INT32", (-1,))
    with pytest.raises(TypeError, match="integers"):
        array_from_json_data([1], "INT32", (1.0,))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="too many elements"):
        array_from_json_data([1], "INT32", (2**62, 2**62))


def test_large_flat_list() -> None:
    rng = np.random.default_rng(0)
    floats = orjson.loads(orjson.dumps(rng.random(100_000).tolist()))
    np.testing.assert_array_equal(
        check(floats, "FP32", (100, 1000)), np.array(floats, np.float32).reshape(100, 1000)
    )
    bools = (rng.random(100_000) > 0.5).tolist()
    np.testing.assert_array_equal(check(bools, "BOOL", (100_000,)), np.array(bools))
    ints = rng.integers(-(2**63), 2**63 - 1, 100_000).tolist()
    np.testing.assert_array_equal(check(ints, "INT64", (100_000,)), np.array(ints, np.int64))


# --- array_to_json_data -----------------------------------------------------------------


def dumps(value: Any) -> bytes:
    return orjson.dumps(value, option=orjson.OPT_SERIALIZE_NUMPY)


@pytest.mark.parametrize(
    "dtype",
    [
        np.bool_,
        np.uint8,
        np.uint16,
        np.uint32,
        np.uint64,
        np.int8,
        np.int16,
        np.int32,
        np.int64,
        np.float32,
        np.float64,
    ],
)
def test_numeric_arrays_become_flat_arrays_orjson_writes(dtype: Any) -> None:
    rng = np.random.default_rng(1)
    array = (rng.random((3, 4)) * 200 - 50).astype(dtype)
    for source in (array, array.T, array[:, ::2], array.astype(array.dtype.newbyteorder(">"))):
        out = array_to_json_data(source)
        assert isinstance(out, np.ndarray) and out.ndim == 1
        assert out.flags.c_contiguous and out.dtype.isnative
        parsed = orjson.loads(dumps({"data": out}))["data"]
        expected = np.ravel(source, order="C")
        # float32 is written at float32 precision: equal once read back as float32
        np.testing.assert_array_equal(np.array(parsed, dtype=dtype), expected)
        if dtype is np.bool_:
            assert all(type(x) is bool for x in parsed)


def test_numeric_array_is_a_view_when_possible() -> None:
    array = np.arange(12, dtype=np.float32).reshape(3, 4)
    assert np.shares_memory(array_to_json_data(array), array)
    assert array_to_json_data(np.full((), 2.5)).tolist() == [2.5]


@pytest.mark.filterwarnings("ignore::PendingDeprecationWarning")  # np.matrix
def test_ndarray_subclasses_are_flattened() -> None:
    matrix = np.asmatrix(np.arange(6, dtype=np.int32).reshape(2, 3))
    out = array_to_json_data(matrix.T)
    assert type(out) is np.ndarray and out.tolist() == [0, 3, 1, 4, 2, 5]
    assert array_to_json_data(np.asmatrix(np.array([[b"a", b"b"]], dtype=object))) == ["a", "b"]


def test_uint64_extremes_survive_json() -> None:
    array = np.array([0, 2**64 - 1], dtype=np.uint64)
    assert orjson.loads(dumps(array_to_json_data(array))) == [0, 2**64 - 1]


def test_bytes_outputs_become_str_lists() -> None:
    values = [b"", b"ascii", "héllo".encode(), "日本語".encode(), b"\x00"]
    array = np.empty(len(values), dtype=object)
    array[:] = values
    assert array_to_json_data(array) == [v.decode() for v in values]
    grid = array[:4].reshape(2, 2)
    assert array_to_json_data(grid.T) == [v.decode() for v in grid.T.reshape(-1)]
    mixed = np.array([b"b", "s", bytearray(b"ba"), np.bytes_(b"nb"), 7, None], dtype=object)
    assert array_to_json_data(mixed) == ["b", "s", "ba", "nb", "7", "None"]
    assert array_to_json_data(np.array([b"ab", b"c\x00"], dtype="S3")) == ["ab", "c"]
    assert array_to_json_data(np.array([["dé", "x"]])) == ["dé", "x"]
    assert array_to_json_data(np.empty((0, 3), dtype=object)) == []


@pytest.mark.parametrize(
    "bad", [b"ok\xff", b"\xc3", b"\xed\xa0\x80"], ids=["ff", "truncated", "surrogate"]
)
def test_bytes_outputs_must_be_utf8(bad: bytes) -> None:
    array = np.array([b"fine", bad], dtype=object)
    with pytest.raises(ValueError, match="BYTES element 1 is not valid UTF-8"):
        array_to_json_data(array)
    with pytest.raises(ValueError, match="not valid UTF-8"):
        array_to_json_data(np.array(["\ud800"], dtype=object))


def test_half_precision_outputs_are_refused() -> None:
    with pytest.raises(ValueError, match=r"^sending FP16 data via JSON is not supported$"):
        array_to_json_data(np.zeros(2, np.float16))
    with pytest.raises(ValueError, match=r"^sending BF16 data via JSON is not supported$"):
        array_to_json_data(np.zeros(2, ml_dtypes.bfloat16))
    with pytest.raises(TypeError):
        array_to_json_data(np.zeros(2, np.complex64))
    with pytest.raises(TypeError):
        array_to_json_data([1, 2])  # type: ignore[arg-type]
