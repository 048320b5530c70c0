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
from pytriton_core.errors import InvalidArgumentError, ServerError
from pytriton_core.inference.request import InferenceRequest
from pytriton_core.inference.tensor import Tensor
from pytriton_core.options import LimitOptions

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
    max_bytes_elements: int | None = None,
) -> np.ndarray:
    """The tensor of ``shape`` that ``data`` holds in the binary form: a view, not a copy.

    BYTES elements are objects, built here: past ``max_bytes_elements`` (the shape says how
    many before any is built) the input is refused."""
    if shape and min(shape) < 0:
        # The front ends refuse these first; two negatives, or a zero beside one, would
        # pass the size check below.
        raise _negative_shape_error(shape, input_name, model_name, request_id)
    if datatype.is_bytes:
        count = types.element_count(shape)
        if max_bytes_elements is not None and count > max_bytes_elements:
            raise bytes_elements_error(input_name, model_name, count, max_bytes_elements)
        try:
            elements: np.ndarray = deserialize_bytes_tensor(data, count)
        except ValueError as exc:
            raise InvalidArgumentError(
                f"invalid BYTES data for input '{input_name}' for model '{model_name}': {exc}"
            ).with_request_id(request_id) from None
        return elements.reshape(shape)
    view = memoryview(data)
    size = view.nbytes
    expected = types.element_count(shape) * datatype.itemsize
    if size != expected:
        raise InvalidArgumentError(
            f"input byte size mismatch for input '{input_name}' for model '{model_name}'. "
            f"Expected {expected}, got {size}"
        ).with_request_id(request_id)
    # One call (no frombuffer, then reshape); the array's base is the view, which holds
    # the buffer (a bytearray cannot be resized under it), as frombuffer's does.
    array: np.ndarray = np.ndarray(shape, datatype.numpy_dtype, view)
    return array


def _negative_shape_error(
    shape: list[int], input_name: str, model_name: str, request_id: str
) -> ServerError:
    return InvalidArgumentError(
        f"invalid shape {list(shape)} for input '{input_name}' for model '{model_name}': "
        "dimensions must not be negative"
    ).with_request_id(request_id)


def bytes_elements_error(input_name: str, model_name: str, count: int, limit: int) -> ServerError:
    return InvalidArgumentError(
        f"input '{input_name}' for model '{model_name}' has {count} BYTES elements, more "
        f"than the limit of {limit} (--max-bytes-element-count)"
    )


class RequestLimits:
    """The limits of ``LimitOptions`` every request is checked against (its tensors, its
    JSON body), read once, as C fields (an extension type, tensor_data.pxd): a frozen
    dataclass's attributes cost a dictionary lookup each, on every request."""

    def __init__(self, limits: LimitOptions) -> None:
        self.max_tensor_element_count = limits.max_tensor_element_count
        self.max_bytes_elements = limits.max_bytes_elements
        self.max_tensor_byte_size = limits.max_tensor_byte_size
        self.http_max_json_depth = limits.http_max_json_depth
        self.http_max_json_elements = limits.http_max_json_elements


def check_tensor_limits(request: InferenceRequest, limits: RequestLimits) -> None:
    """Refuse an input past ``--max-tensor-byte-size``, ``--max-tensor-element-count`` or
    (for BYTES that arrived as JSON) ``--max-bytes-element-count``. The inputs are already
    decoded, within the memory their bodies took: this is the policy, not the guard."""
    max_elements = limits.max_tensor_element_count
    max_bytes_elements = limits.max_bytes_elements
    max_byte_size = limits.max_tensor_byte_size
    for tensor in request.inputs.values():
        # The shape, not ``data``: a GPU input's data is a copy to the host, made on use.
        count = 1  # (``types.element_count``, spelled out: every input passes here)
        for dim in tensor.shape:
            count *= dim
        if count > max_elements:
            raise InvalidArgumentError(
                f"input '{tensor.name}' for model '{request.model_name}' has {count} elements, "
                f"more than the limit of {max_elements} (--max-tensor-element-count)"
            ).with_request_id(request.id)
        datatype = tensor.datatype
        if datatype.is_bytes:
            if count > max_bytes_elements:
                raise bytes_elements_error(
                    tensor.name, request.model_name, count, max_bytes_elements
                ).with_request_id(request.id)
        elif count * datatype.itemsize > max_byte_size:
            raise InvalidArgumentError(
                f"input '{tensor.name}' for model '{request.model_name}' holds "
                f"{count * datatype.itemsize} bytes, more than the limit of "
                f"{max_byte_size} (--max-tensor-byte-size)"
            ).with_request_id(request.id)


def array_to_bytes(tensor: Tensor) -> Buffer:
    """The binary form of a tensor's data; a view over the array when it is contiguous."""
    datatype = tensor.datatype
    data = tensor.data
    if datatype.is_bytes:
        serialized: bytes = serialize_bytes_tensor(data)
        return serialized
    if data.dtype is datatype.numpy_dtype:  # (numpy's builtin dtypes are singletons)
        # The common case in one step: C-contiguous data of a dtype the buffer protocol
        # names. Anything else is refused here (a strided array, an empty one of more
        # than one dimension, bfloat16) and copied or viewed below.
        try:
            return memoryview(data).cast("B")  # type: ignore[arg-type]  # (numpy's stubs lack the buffer protocol)
        except (TypeError, ValueError):
            pass
    array = np.ascontiguousarray(data)
    if array.dtype != datatype.numpy_dtype:
        array = array.astype(datatype.numpy_dtype)
    # A byte view: the buffer protocol has no format for some dtypes (bfloat16).
    return array.reshape(-1).view(np.uint8).data


def zeros(datatype: types.DataType, shape: list[int] | tuple[int, ...]) -> np.ndarray:
    """A tensor of zeros (BYTES: empty strings), as zero_data fills warm-up and state."""
    if datatype.is_bytes:
        array = np.empty(shape, dtype=np.object_)
        array.fill(b"")
        return array
    return np.zeros(shape, dtype=datatype.numpy_dtype)
