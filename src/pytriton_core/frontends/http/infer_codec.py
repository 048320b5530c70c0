"""The KServe v2 infer body, both ways: JSON tensors and the binary tensor extension.

Binary inputs become numpy views over the received body (no copy); binary outputs go
back as memoryviews appended after the JSON header (no join).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import orjson

from pytriton_core import types
from pytriton_core._native.json_tensor import array_from_json_data, array_to_json_data
from pytriton_core.core.model import Model
from pytriton_core.core.parameters import apply_request_parameter
from pytriton_core.core.request import InferenceRequest, RequestedOutput
from pytriton_core.core.response import InferenceResponse, ParameterValue
from pytriton_core.core.tensor import Tensor
from pytriton_core.core.tensor_data import array_from_bytes, array_to_bytes, datatype_from_wire
from pytriton_core.errors import (
    InternalError,
    InvalidArgumentError,
    UnsupportedError,
)
from pytriton_core.frontends.http.messages import JSON, Buffer, HttpResponse

OCTET_STREAM = b"application/octet-stream"
_DATA_SOURCES = ("data", "binary_data_size", "shared_memory_region")
_SHM_PARAMETERS = ("shared_memory_region", "shared_memory_offset", "shared_memory_byte_size")


@dataclass(slots=True)
class DecodedInfer:
    request: InferenceRequest
    # Output name -> True for binary; outputs the client did not name use the default.
    binary_outputs: dict[str, bool] = field(default_factory=dict)
    binary_by_default: bool = False


def _parse_json(data: Buffer) -> Any:
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise InvalidArgumentError(f"failed to parse the request JSON buffer: {exc}") from None


def _request_parameters(raw: Any, request: InferenceRequest) -> bool:
    """Apply the request parameters; returns ``binary_data_output`` (HTTP's own key)."""
    if raw is None:
        return False
    if not isinstance(raw, dict):
        raise InvalidArgumentError("'parameters' must be a JSON object")
    binary_data_output = False
    for key, value in raw.items():
        if key == "binary_data_output":
            if not isinstance(value, bool):
                raise InvalidArgumentError("Unable to parse 'binary_data_output', expecting a bool")
            binary_data_output = value
        else:
            apply_request_parameter(request, key, value)
    return binary_data_output


def _shape_of(entry: Mapping[str, Any], name: str) -> list[int]:
    shape = entry.get("shape")
    if not isinstance(shape, list) or not all(
        isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape
    ):
        raise InvalidArgumentError(
            f"Unable to parse 'shape' for input '{name}': expecting an array of unsigned integers"
        )
    return shape


class _BinaryCursor:
    """Hands out consecutive slices of the binary section, as numpy views."""

    def __init__(self, body: Buffer, start: int, model_name: str) -> None:
        self._body = body
        self._offset = start
        self._end = len(body)
        self._model_name = model_name

    def take(
        self, name: str, size: int, datatype: types.DataType, shape: list[int], request_id: str
    ) -> np.ndarray:
        if size > self._end - self._offset:
            raise InvalidArgumentError(
                f"unexpected size for input '{name}', expecting {size} additional bytes for "
                f"model '{self._model_name}'"
            )
        offset = self._offset
        self._offset += size
        return array_from_bytes(
            memoryview(self._body)[offset : offset + size],
            datatype,
            shape,
            input_name=name,
            model_name=self._model_name,
            request_id=request_id,
        )

    def check_consumed(self) -> None:
        if self._offset != self._end:
            raise InvalidArgumentError(
                f"unexpected additional input data for model '{self._model_name}'"
            )


def _input_tensor(
    entry: Any, model: Model, binary: _BinaryCursor | None, request_id: str
) -> Tensor:
    if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
        raise InvalidArgumentError("each input must be a JSON object with a 'name' string")
    name: str = entry["name"]
    shape = _shape_of(entry, name)
    datatype = datatype_from_wire(entry.get("datatype"), name)
    parameters = entry.get("parameters") or {}
    if not isinstance(parameters, dict):
        raise InvalidArgumentError(f"'parameters' of input '{name}' must be a JSON object")
    present = [key for key in _DATA_SOURCES if key in entry or key in parameters]
    if len(present) != 1:
        raise InvalidArgumentError(
            "Input must set only one of the following fields: 'data', 'binary_data_size' in "
            "'parameters', 'shared_memory_region' in 'parameters'. But "
            + (f"set {', '.join(present)}" if present else "set none of them")
            + f" for input '{name}'"
        )
    source = present[0]
    if source == "shared_memory_region":
        region = parameters.get("shared_memory_region")
        raise InvalidArgumentError(f"Unable to find shared memory region: '{region}'")
    if source == "binary_data_size":
        size = parameters["binary_data_size"]
        if not isinstance(size, int) or isinstance(size, bool) or size < 0:
            raise InvalidArgumentError(
                f"Unable to parse 'binary_data_size' for input '{name}': expecting an "
                "unsigned integer"
            )
        if binary is None:
            raise InvalidArgumentError(
                "must specify valid 'Infer-Header-Content-Length' in request header and "
                "'binary_data_size' when passing inputs in binary data format"
            )
        return Tensor(name, datatype, binary.take(name, size, datatype, shape, request_id))
    if datatype.wire_name in ("FP16", "BF16"):
        raise InvalidArgumentError(
            f"receiving {datatype.wire_name} data via JSON is not supported. Please use the "
            f"binary data format for input {name}"
        )
    try:
        array = array_from_json_data(entry["data"], datatype.wire_name, tuple(shape))
    except (ValueError, TypeError) as exc:
        raise InvalidArgumentError(
            f"Failed to parse 'data' field for input '{name}': {exc}"
        ) from None
    return Tensor(name, datatype, array)


def _requested_outputs(raw: Any, decoded: DecodedInfer) -> None:
    if raw is None:
        return
    if not isinstance(raw, list):
        raise InvalidArgumentError("'outputs' must be a JSON array")
    requested: dict[str, RequestedOutput] = {}
    for entry in raw:
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
            raise InvalidArgumentError("each output must be a JSON object with a 'name' string")
        name: str = entry["name"]
        parameters = entry.get("parameters") or {}
        if not isinstance(parameters, dict):
            raise InvalidArgumentError(f"'parameters' of output '{name}' must be a JSON object")
        if "shared_memory_region" in parameters:
            raise InvalidArgumentError(
                f"Unable to find shared memory region: '{parameters['shared_memory_region']}'"
            )
        binary = parameters.get("binary_data", decoded.binary_by_default)
        class_count = parameters.get("classification", 0)
        if not isinstance(binary, bool):
            raise InvalidArgumentError(f"Unable to parse 'binary_data' for output '{name}'")
        if not isinstance(class_count, int) or isinstance(class_count, bool) or class_count < 0:
            raise InvalidArgumentError(f"Unable to parse 'classification' for output '{name}'")
        requested[name] = RequestedOutput(name, class_count)
        decoded.binary_outputs[name] = binary
    decoded.request.requested_outputs = requested


def decode_infer_request(model: Model, body: Buffer, header_length: int | None) -> DecodedInfer:
    """Parse an infer body into a core request (the caller validates it against the model)."""
    request = InferenceRequest(model_name=model.name, model_version=model.version)
    if header_length == 0:
        return _decode_raw_binary(model, body, request)
    if header_length is None:
        json_part: Buffer = body
        cursor = None
    else:
        if header_length < 0 or header_length > len(body):
            raise InvalidArgumentError(
                f"inference header size should be in range (0, {len(body)}), got: {header_length}"
            )
        json_part = memoryview(body)[:header_length]
        cursor = _BinaryCursor(body, header_length, model.name)
    document = _parse_json(json_part)
    if not isinstance(document, dict):
        raise InvalidArgumentError("the request body must be a JSON object")
    request_id = document.get("id", "")
    if not isinstance(request_id, str):
        raise InvalidArgumentError("Unable to parse 'id': expecting a string")
    request.id = request_id
    decoded = DecodedInfer(request)
    decoded.binary_by_default = _request_parameters(document.get("parameters"), request)
    inputs = document.get("inputs")
    if not isinstance(inputs, list):
        raise InvalidArgumentError("Unable to find 'inputs' as a JSON array in the request")
    for entry in inputs:
        tensor = _input_tensor(entry, model, cursor, request_id)
        request.inputs[tensor.name] = tensor
    if cursor is not None:
        cursor.check_consumed()
    _requested_outputs(document.get("outputs"), decoded)
    return decoded


def _decode_raw_binary(model: Model, body: Buffer, request: InferenceRequest) -> DecodedInfer:
    """``Inference-Header-Content-Length: 0``: the whole body is the single input's data."""
    specs = model.specs
    if len(specs.inputs) != 1:
        raise InvalidArgumentError(
            f"Raw request must only have 1 input (found {len(specs.inputs)}) to be deduced but "
            f"got {len(specs.inputs)} inputs in '{model.name}' model configuration"
        )
    spec = next(iter(specs.inputs.values()))
    batch = [1] if specs.max_batch_size > 0 else []
    if spec.datatype.is_bytes:
        array = np.empty(1, dtype=object)
        array[0] = bytes(body)
        data = array.reshape([*batch, *([1] * len(spec.dims))] if spec.dims else batch or [1])
    else:
        itemsize = spec.datatype.itemsize
        fixed = types.element_count([d for d in spec.dims if d != -1])
        variable = sum(1 for d in spec.dims if d == -1)
        if variable > 1 or len(body) % (itemsize * max(fixed, 1)):
            raise InvalidArgumentError(
                f"Raw request for model '{model.name}' cannot be deduced: the body of "
                f"{len(body)} bytes does not fit input '{spec.name}' of shape "
                f"{list(spec.dims)} and type {spec.datatype.wire_name}"
            )
        count = len(body) // itemsize
        dims = [count // max(fixed, 1) if d == -1 else d for d in spec.dims]
        data = np.frombuffer(body, spec.datatype.numpy_dtype, count).reshape([*batch, *dims])
    request.inputs[spec.name] = Tensor(spec.name, spec.datatype, data)
    return DecodedInfer(request, binary_by_default=True)


def encode_infer_response(
    model: Model, decoded: DecodedInfer, response: InferenceResponse
) -> HttpResponse:
    """JSON header + binary blobs; raises a ServerError for an output JSON cannot carry."""
    request = decoded.request
    document: dict[str, Any] = {}
    if request.id:
        document["id"] = request.id
    document["model_name"] = model.name
    document["model_version"] = str(model.version)
    if response.parameters:
        document["parameters"] = _response_parameters(response.parameters)
    outputs: list[dict[str, Any]] = []
    blobs: list[Buffer] = []
    for tensor in response.outputs:
        entry: dict[str, Any] = {
            "name": tensor.name,
            "datatype": tensor.datatype.wire_name,
            "shape": list(tensor.data.shape),
        }
        if decoded.binary_outputs.get(tensor.name, decoded.binary_by_default):
            blob = array_to_bytes(tensor)
            entry["parameters"] = {"binary_data_size": len(blob)}
            if len(blob):
                blobs.append(blob)
        else:
            entry["data"] = _json_data(tensor)
        outputs.append(entry)
    document["outputs"] = outputs
    header = orjson.dumps(document, option=orjson.OPT_SERIALIZE_NUMPY)
    if not blobs:
        return HttpResponse(200, (header,), JSON)
    return HttpResponse(
        200,
        (header, *blobs),
        OCTET_STREAM,
        [(b"Inference-Header-Content-Length", str(len(header)).encode())],
    )


def _json_data(tensor: Tensor) -> Any:
    wire = tensor.datatype.wire_name
    if wire in ("FP16", "BF16"):
        raise InvalidArgumentError(
            f"sending {wire} data via JSON is not supported. Please use the binary data "
            f"format for output {tensor.name}"
        )
    if tensor.datatype.is_bytes:
        try:
            return array_to_json_data(tensor.data)
        except ValueError:
            raise InternalError(
                f"output '{tensor.name}' holds bytes that are not valid UTF-8 and cannot be "
                "sent as JSON; request it with binary_data"
            ) from None
    # orjson writes C-contiguous numpy arrays natively, without Python objects.
    return np.ascontiguousarray(tensor.data).reshape(-1)


def _response_parameters(parameters: Mapping[str, ParameterValue]) -> dict[str, ParameterValue]:
    for key, value in parameters.items():
        if isinstance(value, (bytes, bytearray)):
            raise UnsupportedError(f"Response parameter '{key}' of type BYTES is not supported")
    return dict(parameters)
