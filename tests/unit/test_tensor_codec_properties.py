"""Property tests (hypothesis) of the binary tensor codecs: for every datatype and shape,
bytes -> tensor -> bytes is the identity, the tensor equals numpy's own reading of the bytes,
and the compiled BYTES codec agrees with a plain-Python oracle of the wire form."""

from __future__ import annotations

import struct

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pytriton_core import types
from pytriton_core._native.bytes_codec import deserialize_bytes_tensor, serialize_bytes_tensor
from pytriton_core.errors import InvalidArgumentError
from pytriton_core.inference.tensor import Tensor
from pytriton_core.inference.tensor_data import array_from_bytes, array_to_bytes

FIXED = [datatype for datatype in types.DATATYPES if not datatype.is_bytes]
SHAPES = st.lists(st.integers(0, 5), min_size=0, max_size=4)


def _decode(data: bytes, datatype: types.DataType, shape: list[int]) -> np.ndarray:
    return array_from_bytes(
        data, datatype, shape, input_name="INPUT0", model_name="m", request_id=""
    )


def _wire(elements: list[bytes]) -> bytes:
    """The oracle: each element as a 4-byte little-endian length, then its bytes."""
    return b"".join(struct.pack("<I", len(element)) + element for element in elements)


@pytest.mark.parametrize("datatype", FIXED, ids=lambda datatype: datatype.wire_name)
@settings(max_examples=60, deadline=None)
@given(shape=SHAPES, data=st.data())
def test_fixed_size_round_trip_is_the_identity(
    datatype: types.DataType, shape: list[int], data: st.DataObject
) -> None:
    size = types.element_count(shape) * datatype.itemsize
    payload = data.draw(st.binary(min_size=size, max_size=size))
    array = _decode(payload, datatype, shape)
    oracle = np.frombuffer(payload, datatype.numpy_dtype).reshape(shape)
    assert array.shape == oracle.shape and array.dtype == oracle.dtype
    assert array.tobytes() == oracle.tobytes()
    assert bytes(array_to_bytes(Tensor("OUTPUT0", datatype, array))) == payload


@pytest.mark.parametrize("datatype", FIXED, ids=lambda datatype: datatype.wire_name)
@settings(max_examples=30, deadline=None)
@given(shape=SHAPES, delta=st.integers(-9, 9).filter(bool))
def test_a_wrong_byte_count_is_refused(
    datatype: types.DataType, shape: list[int], delta: int
) -> None:
    size = types.element_count(shape) * datatype.itemsize + delta
    if size < 0:
        return
    with pytest.raises(InvalidArgumentError, match="byte size mismatch"):
        _decode(b"\0" * size, datatype, shape)


@settings(max_examples=200, deadline=None)
@given(elements=st.lists(st.binary(max_size=40), max_size=30), data=st.data())
def test_bytes_codec_agrees_with_the_oracle(elements: list[bytes], data: st.DataObject) -> None:
    count = len(elements)
    shape = data.draw(st.sampled_from([[count], [1, count], [count, 1]]))
    wire = _wire(elements)
    array = _decode(wire, types.BYTES, shape)
    assert array.shape == tuple(shape)
    assert list(array.reshape(-1)) == elements
    assert bytes(array_to_bytes(Tensor("OUTPUT0", types.BYTES, array))) == wire
    assert bytes(serialize_bytes_tensor(np.array(elements, dtype=np.object_))) == wire


@settings(max_examples=200, deadline=None)
@given(wire=st.binary(max_size=200), count=st.integers(0, 12))
def test_bytes_decoding_refuses_what_the_oracle_cannot_read(wire: bytes, count: int) -> None:
    elements: list[bytes] = []
    position = 0
    while position + 4 <= len(wire) and len(elements) < count:
        (length,) = struct.unpack_from("<I", wire, position)
        if position + 4 + length > len(wire):
            break
        elements.append(wire[position + 4 : position + 4 + length])
        position += 4 + length
    readable = len(elements) == count and position == len(wire)
    if readable:
        assert list(deserialize_bytes_tensor(wire, count)) == elements
    else:
        with pytest.raises(ValueError):
            deserialize_bytes_tensor(wire, count)


@pytest.mark.parametrize(
    "datatype", [*FIXED[:2], types.BY_WIRE_NAME["BYTES"]], ids=lambda datatype: datatype.wire_name
)
@settings(max_examples=40, deadline=None)
@given(
    shape=st.lists(st.integers(-3, 4), min_size=1, max_size=4).filter(lambda s: min(s) < 0),
)
def test_a_negative_dimension_is_refused_whatever_the_bytes(
    datatype: types.DataType, shape: list[int]
) -> None:
    # A zero beside a negative, or two negatives, make a count the bytes can match (the
    # shared-memory fuzzer found [-1, 40, 0] over an empty range raising ValueError).
    count = max(types.element_count(shape), 0)
    payload = _wire([b""] * count) if datatype.is_bytes else b"\0" * (count * datatype.itemsize)
    with pytest.raises(InvalidArgumentError, match="must not be negative"):
        _decode(payload, datatype, shape)


def _layouts(array: np.ndarray) -> list[np.ndarray]:
    """The same values as C-ordered, Fortran-ordered, strided, reversed, 0-d and empty
    arrays, and in the other byte order."""
    square = np.resize(array, (4, 6))
    return [
        square,
        np.asfortranarray(square),
        square.T,
        square[:, ::2],
        square[::-1],
        square[0, :1].reshape(()),
        square[:0],
        square[:, :0],
        square.astype(square.dtype.newbyteorder()),
    ]


@pytest.mark.parametrize("datatype", FIXED, ids=lambda datatype: datatype.wire_name)
def test_the_binary_form_is_the_contiguous_array_s_bytes_in_every_layout(
    datatype: types.DataType,
) -> None:
    """``array_to_bytes`` (a view of the data where it is already in the binary form) gives
    the bytes of the contiguous array of the datatype's own dtype, whatever the layout."""
    base = np.arange(24).astype(datatype.numpy_dtype)
    for array in _layouts(base):
        expected = np.ascontiguousarray(array).astype(datatype.numpy_dtype).tobytes()
        assert bytes(array_to_bytes(Tensor("OUTPUT0", datatype, array))) == expected, array
