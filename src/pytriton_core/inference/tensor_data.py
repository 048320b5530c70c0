"""Tensor data as the front ends receive and send it: datatype names and the binary form.

The binary form (spec/protocol.md §0.3) is what HTTP's binary tensor extension and gRPC's
``raw_input_contents`` / ``raw_output_contents`` carry. Decoding makes numpy views over the
received buffer (no copy); encoding hands back a buffer over the tensor's own memory when it
is already contiguous. Both front ends call these, so they accept and refuse the same data
with the same messages.
"""

from __future__ import annotations

import numpy as np

from pytriton_core import types
from pytriton_core._native.bytes_codec import deserialize_bytes_tensor, serialize_bytes_tensor
from pytriton_core.errors import InvalidArgumentError
from pytriton_core.inference.tensor import Tensor

Buffer = bytes | bytearray | memoryview


def datatype_from_wire(name: object, input_name: str) -> types.DataType:
    """The datatype a request names for an input (``"FP32"``...)."""
    found = types.from_wire_name(name) if isinstance(name, str) else None
    if found is None:
        raise InvalidArgumentError(f"invalid datatype for input {input_name}")
    return found


def array_from_bytes(
    data: Buffer,
    datatype: types.DataType,
    shape: list[int],
    *,
    input_name: str,
    model_name: str,
    request_id: str,
) -> np.ndarray:
    """The tensor of ``shape`` that ``data`` holds in the binary form: a view, not a copy."""
    if datatype.is_bytes:
        try:
            elements: np.ndarray = deserialize_bytes_tensor(data, types.element_count(shape))
        except ValueError as exc:
            raise InvalidArgumentError(
                f"invalid BYTES data for input '{input_name}' for model '{model_name}': {exc}"
            ).with_request_id(request_id) from None
        return elements.reshape(shape)
    size = memoryview(data).nbytes
    expected = types.element_count(shape) * datatype.itemsize
    if size != expected:
        raise InvalidArgumentError(
            f"input byte size mismatch for input '{input_name}' for model '{model_name}'. "
            f"Expected {expected}, got {size}"
        ).with_request_id(request_id)
    return np.frombuffer(data, datatype.numpy_dtype, expected // datatype.itemsize).reshape(shape)


def array_to_bytes(tensor: Tensor) -> Buffer:
    """The binary form of a tensor's data; a view over the array when it is contiguous."""
    if tensor.datatype.is_bytes:
        serialized: bytes = serialize_bytes_tensor(tensor.data)
        return serialized
    array = np.ascontiguousarray(tensor.data)
    if array.dtype != tensor.datatype.numpy_dtype:
        array = array.astype(tensor.datatype.numpy_dtype)
    # A byte view: the buffer protocol has no format for some dtypes (bfloat16).
    return array.reshape(-1).view(np.uint8).data


def zeros(datatype: types.DataType, shape: list[int] | tuple[int, ...]) -> np.ndarray:
    """A tensor of zeros (BYTES: empty strings), as zero_data fills warm-up and state."""
    if datatype.is_bytes:
        array = np.empty(shape, dtype=np.object_)
        array.fill(b"")
        return array
    return np.zeros(shape, dtype=datatype.numpy_dtype)
