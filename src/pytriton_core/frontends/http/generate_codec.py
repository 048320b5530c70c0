"""The generate extension's JSON, both ways, with Triton's mapping and its error messages
(checked against Triton 2.51).

Request: one JSON object. A key that names a model input becomes that input: a JSON scalar
or a flat array, its datatype from the model, its shape from the model's (the fixed dims
must divide the element count, the innermost variable dim takes what is left, the other
variable dims, such as the batch dim, are 1). The key ``parameters`` holds an object whose
members are read the same way. Every other key, ``id`` included, is a request parameter
(string, integer, boolean or double) passed to the model as it is: none of them is one of
the infer extension's reserved parameters here.

Response: one flat JSON object, keys sorted: ``id`` (when set), ``model_name``,
``model_version``, each response parameter, and each output tensor as its data (flat, a
bare value when it has one element; BYTES as strings).
"""

from __future__ import annotations

from typing import Any

from pytriton_core import types
from pytriton_core.config import TensorSpec
from pytriton_core.errors import InternalError, InvalidArgumentError, ServerError
from pytriton_core.frontends.http.infer_codec import (
    NonFiniteData,
    dumps_json,
    json_input_array,
    json_output_data,
)
from pytriton_core.frontends.http.json_body import parse_json
from pytriton_core.frontends.http.messages import Buffer
from pytriton_core.frontends.infer_rules import INT64_MAX, response_parameter_kind
from pytriton_core.inference.request import InferenceRequest
from pytriton_core.inference.response import InferenceResponse, ParameterValue
from pytriton_core.inference.tensor import Tensor
from pytriton_core.options import LimitOptions
from pytriton_core.runtime.model import Model

NESTED = "parameters"
ONE_RESPONSE_EXPECTED = (
    "generate expects model to produce exactly 1 response, use generate stream for model that "
    "generates various number of responses"
)
# What Triton 2.51 answers for a response's error, whatever its code (see event_stream).
ERROR_STATUS = 400


def decode_generate_request(
    model: Model, body: Buffer, max_input_size: int, limits: LimitOptions
) -> InferenceRequest:
    """A core request from a generate body (the caller validates it against the model); the
    JSON limits hold for it as for every JSON body."""
    document = parse_json(body, limits, InternalError)
    if not isinstance(document, dict):
        raise InternalError("attempt to get members for non-object")
    request = InferenceRequest(model_name=model.name, model_version=model.version)
    if "id" in document:
        request_id = document["id"]
        if not isinstance(request_id, str):
            raise InternalError("Unable to parse 'id': attempt to access JSON non-string as string")
        request.id = request_id
    _Reader(model, request, max_input_size).read(document, nested=False)
    return request


class _Reader:
    def __init__(self, model: Model, request: InferenceRequest, max_input_size: int) -> None:
        self._model = model
        self._request = request
        self._max_input_size = max_input_size
        self._consumed = 0  # input bytes so far, against --http-max-input-size

    def read(self, members: dict[str, Any], *, nested: bool) -> None:
        inputs = self._model.spec.inputs
        for key, value in members.items():
            if key == NESTED and not nested:
                self._read_nested(value)
            elif key in inputs:
                self._request.inputs[key] = self._tensor(inputs[key], value)
            else:
                self._request.parameters[key] = _parameter(key, value)

    def _read_nested(self, value: object) -> None:
        if NESTED in self._model.spec.inputs:
            raise InvalidArgumentError(
                f"Keyword '{NESTED}' for nested schema also given as input tensor name"
            )
        if not isinstance(value, dict):
            raise InternalError(
                f"Expected JSON object for keyword: '{NESTED}': attempt to access JSON "
                "non-object as object"
            )
        try:
            self.read(value, nested=True)
        except ServerError as exc:
            raise ServerError.from_code(
                exc.code, f"Converting keyword: '{NESTED}': {exc.message}"
            ) from None

    def _tensor(self, spec: TensorSpec, value: object) -> Tensor:
        count = len(value) if isinstance(value, list) else 1
        size = _byte_size(spec.datatype, value, count)
        if size + self._consumed > self._max_input_size:
            raise InvalidArgumentError(
                f"request size of {self._consumed} bytes with input '{spec.name}' of size "
                f"{size} bytes exceeds the maximum allowed input size of "
                f"{self._max_input_size}. Use --http-max-input-size to increase the limit."
            )
        self._consumed += size
        shape = fill_shape(spec.name, self._model.spec.full_shape(spec), count)
        return Tensor(
            spec.name, spec.datatype, json_input_array(spec.name, spec.datatype, value, shape)
        )


def _byte_size(datatype: types.DataType, value: object, count: int) -> int:
    if not datatype.is_bytes:
        return count * datatype.itemsize
    elements = value if isinstance(value, list) else [value]
    size = 0
    for element in elements:
        if not isinstance(element, str):
            raise InternalError(
                "Unable to parse JSON bytes array: attempt to access JSON non-string as string"
            )
        size += 4 + len(element.encode())
    return size


def fill_shape(name: str, dims: list[int], count: int) -> list[int]:
    """The model's shape with its variable dims filled in for ``count`` elements."""
    unconvertible = InvalidArgumentError(
        f"The schema can not convert input '{name}' to tensor with proper shape"
    )
    shape = list(dims)
    left = count
    for dim in reversed(shape):
        if dim != -1:
            if dim == 0 or left % dim:
                if count:  # an empty input keeps its fixed dims: the model's checks judge
                    raise unconvertible
                continue
            left //= dim
    for index in reversed(range(len(shape))):
        if shape[index] == -1:
            shape[index], left = left, 1
    if left != 1 and count:
        raise unconvertible
    return shape


def _parameter(key: str, value: object) -> ParameterValue:
    if isinstance(value, str | bool | float):
        return value
    if isinstance(value, int):
        # Beyond int64 Triton's JSON reader has only a double for it.
        return value if -INT64_MAX - 1 <= value <= INT64_MAX else float(value)
    raise InvalidArgumentError(
        f"parameter '{key}' has invalid type. It should be either 'int', 'bool', or 'string'."
    )


def encode_generate_response(
    model: Model, request: InferenceRequest, response: InferenceResponse
) -> bytes:
    """The JSON object of one successful response; a ServerError for one JSON cannot carry."""
    fields: dict[str, Any] = {}
    if request.id:
        fields["id"] = request.id
    fields["model_name"] = model.name
    fields["model_version"] = str(model.version)
    for key, value in response.parameters.items():
        response_parameter_kind(key, value)  # refuses what no wire carries
        fields.setdefault(key, value)  # the first of a name wins, as in Triton
    non_finite = False
    for tensor in response.outputs:
        data = _output_data(tensor)
        if isinstance(data, NonFiniteData):
            non_finite = True
            data = data.values()
        if types.element_count(list(tensor.shape)) == 1:
            data = data[0].item() if hasattr(data[0], "item") else data[0]
        fields.setdefault(tensor.name, data)
    return dumps_json(dict(sorted(fields.items())), non_finite)


def _output_data(tensor: Tensor) -> Any:
    try:
        return json_output_data(tensor)
    except ServerError:
        if not tensor.datatype.is_bytes:
            raise
    # Bytes that are not UTF-8: Triton writes them raw (a document no JSON reader takes);
    # here they arrive as a UTF-8 reader of Triton's would show them, with U+FFFD.
    return [bytes(element).decode("utf-8", "replace") for element in tensor.data.flat]
