"""The KServe v2 infer body, both ways: JSON tensors and the binary tensor extension.

Binary inputs become numpy views over the received body (no copy); binary outputs go
back as memoryviews appended after the JSON header (no join). Shared-memory inputs are views
of the client's region; shared-memory outputs are copied into theirs once, and the response
carries only their name, datatype and shape.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import orjson
from orjson import OPT_SERIALIZE_NUMPY as _SERIALIZE_NUMPY
from orjson import dumps as _orjson_dumps

from pytriton_core import types
from pytriton_core._native.infer_header import response_header
from pytriton_core._native.infer_walk import HeaderMemo, walk_binary_infer
from pytriton_core._native.json_infer import walk_json_infer
from pytriton_core._native.json_tensor import (
    SHAPE_MISMATCH,
    array_from_json_data,
    array_to_json_data,
)
from pytriton_core.errors import (
    InternalError,
    InvalidArgumentError,
)
from pytriton_core.frontends.http.json_body import parse_json
from pytriton_core.frontends.http.messages import JSON, Buffer, HttpResponse
from pytriton_core.frontends.infer_rules import (
    BYTE_SIZE,
    INT64_MAX,
    OFFSET,
    REGION,
    check_shm_output,
    requested_output,
    response_parameter_kind,
    shm_reference,
    write_to_region,
)
from pytriton_core.inference.parameters import apply_request_parameter
from pytriton_core.inference.request import InferenceRequest, RequestedOutput
from pytriton_core.inference.response import InferenceResponse, ParameterValue
from pytriton_core.inference.tensor import Tensor
from pytriton_core.inference.tensor_data import array_from_bytes, array_to_bytes, datatype_from_wire
from pytriton_core.memory import ShmOutput, ShmReference
from pytriton_core.runtime.model import Model
from pytriton_core.service.inference_service import InferenceService

OCTET_STREAM = b"application/octet-stream"
_DATA_SOURCES = ("data", "binary_data_size", REGION)

if TYPE_CHECKING:
    from pytriton_core._native.infer_walk import Walked


class DecodedInfer:
    """An infer body, decoded: the core request and how its answer is to be written (an
    extension type, infer_codec.pxd)."""

    def __init__(
        self,
        request: InferenceRequest,
        binary_outputs: dict[str, bool] | None = None,
        binary_by_default: bool = False,
        shm_outputs: dict[str, ShmOutput] | None = None,
        reserved: dict[str, Any] | None = None,
    ) -> None:
        self.request = request
        # Output name -> True for binary; outputs the client did not name use the default.
        self.binary_outputs: dict[str, bool] = {} if binary_outputs is None else binary_outputs
        self.binary_by_default = binary_by_default
        # Output name -> where it goes, for outputs requested in shared memory.
        self.shm_outputs: dict[str, ShmOutput] = {} if shm_outputs is None else shm_outputs
        # The ``triton_`` request parameters the caller allowed, as sent.
        self.reserved: dict[str, Any] = {} if reserved is None else reserved


# Triton reports a malformed infer document as INTERNAL (HTTP 500) in its JSON library's
# words; clients and tests match on these, so they are kept.
_MISSING = "attempt to access non-existing object member '{}'"
_NOT_UNSIGNED = "attempt to access JSON non-unsigned-integer as unsigned-integer"
_NOT_SIGNED = "attempt to access JSON non-signed-integer as signed-integer"
_NOT_BOOL = "attempt to access JSON non-boolean as boolean"
_NOT_STRING = "attempt to access JSON non-string as string"
_NOT_ARRAY = "attempt to access JSON non-array as array"
_JSON_KIND_ERRORS = {
    "BOOL": _NOT_BOOL,
    "BYTES": _NOT_STRING,
    "FP32": "attempt to access JSON non-number as double",
    "FP64": "attempt to access JSON non-number as double",
    **{
        f"INT{bits}": "attempt to access JSON non-signed-integer as signed-integer"
        for bits in (8, 16, 32, 64)
    },
    **{f"UINT{bits}": _NOT_UNSIGNED for bits in (8, 16, 32, 64)},
}
_UINT64_MAX = 2**64 - 1


def _unparsable(field: str, detail: str) -> InternalError:
    return InternalError(f"Unable to parse '{field}': {detail}")


def _is_unsigned(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _member(entry: Mapping[str, Any], key: str) -> Any:
    if key not in entry:
        raise _unparsable(key, _MISSING.format(key))
    return entry[key]


def _request_parameters(
    raw: Any, request: InferenceRequest, reserved: dict[str, Any], allowed: tuple[str, ...]
) -> bool:
    """Apply the request parameters, keeping the ``allowed`` reserved ones in ``reserved``;
    returns ``binary_data_output`` (HTTP's own key)."""
    if raw is None:
        return False
    if not isinstance(raw, dict):
        raise InvalidArgumentError("'parameters' must be a JSON object")
    binary_data_output = False
    for key, value in raw.items():
        if key in ("binary_data_output", "sequence_start", "sequence_end"):
            if not isinstance(value, bool):
                raise _unparsable(key, _NOT_BOOL)
        elif key in ("priority", "timeout") and not _is_unsigned(value):
            raise _unparsable(key, _NOT_UNSIGNED)
        elif key == "sequence_id":
            # A uint64 or a string; Triton reads anything else as a string, and fails.
            if not (isinstance(value, str) or (_is_unsigned(value) and value <= _UINT64_MAX)):
                raise _unparsable(key, _NOT_STRING)
            apply_request_parameter(request, key, value)
            continue
        if key == "binary_data_output":
            binary_data_output = value
            continue
        if isinstance(value, int) and not isinstance(value, bool) and value > INT64_MAX:
            value = float(value)  # as Triton's JSON reader hands it on: beyond int64, a double
        apply_request_parameter(request, key, value, allowed_reserved=allowed)
        if key in allowed:
            reserved[key] = value
    return binary_data_output


def _shape_of(entry: Mapping[str, Any]) -> list[int]:
    shape = _member(entry, "shape")
    if not isinstance(shape, list):
        raise _unparsable("shape", _NOT_ARRAY)
    for dim in shape:
        if type(dim) is not int or dim < 0:  # bool is not int here: it is refused
            raise _unparsable("shape", _NOT_UNSIGNED)
    return shape


class _BinaryCursor:
    """Hands out consecutive slices of the binary section, as numpy views."""

    def __init__(self, body: Buffer, start: int, model_name: str, max_bytes_elements: int) -> None:
        self._body = body
        self._offset = start
        self._end = len(body)
        self._model_name = model_name
        self._max_bytes_elements = max_bytes_elements

    def take(
        self, name: str, size: int, datatype: types.DataType, shape: list[int], request_id: str
    ) -> np.ndarray:
        available = self._end - self._offset
        if size > available:
            raise InvalidArgumentError(
                f"unexpected size for input '{name}', expecting {size - available} additional "
                f"bytes for model '{self._model_name}'"
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
            max_bytes_elements=self._max_bytes_elements,
        )

    def check_consumed(self) -> None:
        if self._offset != self._end:
            raise InvalidArgumentError(
                f"unexpected additional input data for model '{self._model_name}'"
            )


class _JsonParameters:
    """A tensor's JSON ``parameters``, typed as Triton's JSON reader requires them."""

    __slots__ = ("_parameters",)

    def __init__(self, parameters: Mapping[str, Any]) -> None:
        self._parameters = parameters

    def has(self, key: str) -> bool:
        return key in self._parameters

    def string(self, key: str) -> str:
        value = self._parameters[key]
        if not isinstance(value, str):
            raise _unparsable(key, _NOT_STRING)
        return value

    def integer(self, key: str) -> int:
        value = self._parameters[key]
        if not _is_unsigned(value):
            raise _unparsable(key, _NOT_UNSIGNED)
        return int(value)


def _input_tensor(
    entry: Any,
    binary: _BinaryCursor,
    request_id: str,
    service: InferenceService,
    model_name: str,
) -> Tensor:
    if not isinstance(entry, dict):
        raise InvalidArgumentError("each input must be a JSON object")
    name = _member(entry, "name")
    if not isinstance(name, str):
        raise _unparsable("name", _NOT_STRING)
    shape = _shape_of(entry)
    datatype_name = _member(entry, "datatype")
    if not isinstance(datatype_name, str):
        raise _unparsable("datatype", _NOT_STRING)
    datatype = datatype_from_wire(datatype_name, name)
    parameters = entry.get("parameters") or {}
    if not isinstance(parameters, dict):
        raise InvalidArgumentError(f"'parameters' of input '{name}' must be a JSON object")
    # "data" is a member of the input, the other two are parameters (as in Triton); one in
    # the other place is not a source (it was taken for one, then looked up where it is not).
    present = [
        key for key in _DATA_SOURCES if (key in entry if key == "data" else key in parameters)
    ]
    if len(present) != 1:
        raise InvalidArgumentError(
            "Input must set only one of the following fields: 'data', 'binary_data_size' in "
            "'parameters', 'shared_memory_region' in 'parameters'. But "
            + ("set " + " ".join(f"'{key}'" for key in present) if present else "no field is set")
        )
    source = present[0]
    if source == REGION:
        ref = shm_reference(_JsonParameters(parameters), name)
        return service.shm_input(
            ref,
            datatype,
            shape,
            input_name=name,
            model_name=model_name,
            request_id=request_id,
        )
    if source == "binary_data_size":
        size = parameters["binary_data_size"]
        if not _is_unsigned(size):
            raise _unparsable("binary_data_size", _NOT_UNSIGNED)
        return Tensor(name, datatype, binary.take(name, size, datatype, shape, request_id))
    return Tensor(name, datatype, json_input_array(name, datatype, entry["data"], shape))


def json_input_array(
    name: str, datatype: types.DataType, data: object, shape: Sequence[int]
) -> np.ndarray:
    """An input's JSON data as an array of ``shape``, refused in Triton's words (the infer
    and the generate extension read JSON tensors alike)."""
    if datatype.wire_name in ("FP16", "BF16"):
        raise InvalidArgumentError(
            f"receiving {datatype.wire_name} data via JSON is not supported. Please use the "
            f"binary data format for input {name}"
        )
    try:
        return array_from_json_data(data, datatype.wire_name, tuple(shape))
    except TypeError:
        if datatype.is_bytes:
            raise InternalError(f"Unable to parse JSON bytes array: {_NOT_STRING}") from None
        raise _unparsable("data", _JSON_KIND_ERRORS[datatype.wire_name]) from None
    except ValueError as exc:
        if str(exc) == SHAPE_MISMATCH:
            raise _unparsable("data", SHAPE_MISMATCH) from None
        if datatype.wire_name.startswith("UINT") and "value -" in str(exc):
            raise _unparsable("data", _NOT_UNSIGNED) from None
        # Out-of-range integers: Triton wraps them silently; this server refuses them.
        raise InvalidArgumentError(f"Unable to parse 'data': {exc}") from None


def _requested_outputs(raw: Any, decoded: DecodedInfer, service: InferenceService) -> None:
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
        # binary_data_output is the default only for the outputs a request does not name.
        binary = parameters.get("binary_data", False)
        class_count = parameters.get("classification", 0)
        if not isinstance(binary, bool):
            raise _unparsable("binary_data", _NOT_BOOL)
        if not _is_unsigned(class_count):
            raise InternalError(f"Unable to set 'classification': {_NOT_UNSIGNED}")
        region = None
        if REGION in parameters:
            check_shm_output({"binary_data": binary, "classification": class_count}, noun="Output")
            region = shm_reference(_JsonParameters(parameters), name)
        requested[name] = requested_output(service, name, class_count, region, decoded.shm_outputs)
        decoded.binary_outputs[name] = binary
    decoded.request.requested_outputs = requested


def decode_infer_request(
    model: Model,
    body: Buffer,
    header_length: int | None,
    service: InferenceService,
    allowed_reserved: tuple[str, ...] = (),
    general: bool = False,
    memo: HeaderMemo | None = None,
) -> DecodedInfer:
    """Parse an infer body into a core request (the caller validates it against the model).

    Inputs and outputs in shared memory are resolved by ``service``: inputs become views of
    their regions, outputs' ranges are checked. ``allowed_reserved``: the ``triton_``
    parameters the caller acts on (kept in ``DecodedInfer.reserved``). ``general``: skip
    the compiled walks of the common requests, binary and all-JSON (the fuzzer compares
    them with it). ``memo``: the
    server's readings of common headers, which a header seen before is read from (and a
    common one read now is kept in).
    """
    request = InferenceRequest(model.name, model.version)
    if header_length == 0:
        return _decode_raw_binary(model, body, request)
    limits = service.request_limits
    remembering = memo is not None and not allowed_reserved and not general
    if header_length is None:
        json_part: Buffer = body
        binary_start = len(body)  # no binary section
    else:
        if header_length < 0 or header_length > len(body):
            raise InvalidArgumentError(
                f"inference header size should be in range (0, {len(body)}), got: {header_length}"
            )
        json_part = memoryview(body)[:header_length]
        binary_start = header_length
    if remembering:
        assert memo is not None
        if binary_start == len(body):  # all JSON (perf_analyzer's shared-memory requests)
            plan: _ShmPlan | None = memo.recall_document(json_part)
            if plan is not None:
                return plan.apply(request, service, model.name)
        if header_length is not None:
            walked = memo.recall(json_part, body, binary_start, Tensor, RequestedOutput)
            if walked is not None:
                return _walked(request, walked)
    if header_length is None and not allowed_reserved and not general:
        # The common all-JSON request, its numbers read from the bytes into their arrays;
        # None: the general decode reads it.
        walked = walk_json_infer(
            json_part,
            types.BY_WIRE_NAME,
            Tensor,
            RequestedOutput,
            limits.http_max_json_depth,
            limits.http_max_json_elements,
        )
        if walked is not None:
            return _walked(request, walked)
    document = parse_json(json_part, limits, InternalError)
    if (
        header_length is not None
        and type(document) is dict
        and not allowed_reserved
        and not general
    ):
        # The common binary request in one compiled pass; None: the general decode reads it.
        # (A body without Inference-Header-Content-Length is all JSON: its tensors are
        # read from JSON, by the general decode.)
        walked = walk_binary_infer(
            document,
            body,
            binary_start,
            types.BY_WIRE_NAME,
            Tensor,
            RequestedOutput,
            limits.max_bytes_elements,
        )
        if walked is not None:
            if memo is not None:
                memo.remember(json_part, walked)
            return _walked(request, walked)
    cursor = _BinaryCursor(body, binary_start, model.name, limits.max_bytes_elements)
    decoded = _decode_document(document, request, cursor, service, model.name, allowed_reserved)
    if remembering and binary_start == len(body):
        assert memo is not None
        plan = _shm_plan(document, decoded)
        if plan is not None:
            memo.remember_document(json_part, plan)
    return decoded


def _walked(request: InferenceRequest, walked: Walked[Tensor, RequestedOutput]) -> DecodedInfer:
    """The decoded request from the walk's answer (``walk_binary_infer``, ``HeaderMemo``)."""
    request.id, binary_by_default, request.inputs, requested, binary_outputs = walked
    if requested is not None:
        request.requested_outputs = requested
    return DecodedInfer(request, binary_outputs, binary_by_default)


_PLAN_DOCUMENT_KEYS = frozenset(("id", "inputs", "outputs", "parameters"))
_PLAN_INPUT_KEYS = frozenset(("name", "datatype", "shape", "parameters"))
_PLAN_OUTPUT_KEYS = frozenset(("name", "parameters"))
_SHM_KEYS = frozenset((REGION, BYTE_SIZE, OFFSET))
_PLAN_OUTPUT_PARAMETER_KEYS = _SHM_KEYS | {"binary_data", "classification"}


class _ShmPlan:
    """The general decode's reading of a whole JSON body whose inputs are all in shared
    memory (what perf_analyzer and shared-memory clients send over and over), kept in the
    server's ``HeaderMemo`` by the body's bytes (an extension type, infer_codec.pxd).

    Applying it makes the calls the general decode made, in its order, with the values it
    read: each input over its region (``shm_input``), then each output bound for a region
    (``shm_output``). So a region unregistered, resized or out of range since is refused as
    the general decode refuses it; only the JSON parse and the walk of the document are
    skipped.
    """

    def __init__(
        self,
        request_id: str,
        binary_by_default: bool,
        inputs: tuple[tuple[str, types.DataType, tuple[int, ...], ShmReference], ...],
        outputs: tuple[tuple[str, ShmReference | None, bool], ...] | None,
    ) -> None:
        self.request_id = request_id
        self.binary_by_default = binary_by_default
        self.inputs = inputs  # (name, datatype, shape, region reference), in body order
        self.outputs = outputs  # (name, region reference or None, binary_data); None: none named

    def apply(
        self, request: InferenceRequest, service: InferenceService, model_name: str
    ) -> DecodedInfer:
        request_id = self.request_id
        request.id = request_id
        decoded = DecodedInfer(request)
        decoded.binary_by_default = self.binary_by_default
        inputs = request.inputs
        for name, datatype, shape, ref in self.inputs:
            inputs[name] = service.shm_input(
                ref,
                datatype,
                list(shape),
                input_name=name,
                model_name=model_name,
                request_id=request_id,
            )
        if self.outputs is not None:
            requested: dict[str, RequestedOutput] = {}
            binary_outputs = decoded.binary_outputs
            shm_outputs = decoded.shm_outputs
            for name, region, binary in self.outputs:
                requested[name] = requested_output(service, name, 0, region, shm_outputs)
                binary_outputs[name] = binary
            request.requested_outputs = requested
        return decoded


def _shm_plan(document: Any, decoded: DecodedInfer) -> _ShmPlan | None:
    """The plan of a body the general decode read (``document``, ``decoded``) when every
    input is in shared memory and nothing else is set but the outputs (each bound for a
    region or not) and ``binary_data_output``; else None."""
    # Every all-JSON request comes here once: the check that turns away the common one (an
    # input with its data in the JSON) comes first.
    request = decoded.request
    inputs = []
    for entry in document["inputs"]:
        entry_parameters = entry.get("parameters") or {}
        if (
            REGION not in entry_parameters
            or not _SHM_KEYS.issuperset(entry_parameters)
            or not _PLAN_INPUT_KEYS.issuperset(entry)
        ):
            return None
        name = entry["name"]
        reference = shm_reference(_JsonParameters(entry_parameters), name)
        inputs.append((name, request.inputs[name].datatype, tuple(entry["shape"]), reference))
    if not _PLAN_DOCUMENT_KEYS.issuperset(document):
        return None
    parameters = document.get("parameters")
    if parameters is not None and not {"binary_data_output"}.issuperset(parameters):
        return None
    outputs = None
    raw_outputs = document.get("outputs")
    if raw_outputs is not None:
        outputs = []
        for entry in raw_outputs:
            entry_parameters = entry.get("parameters") or {}
            if (
                not _PLAN_OUTPUT_KEYS.issuperset(entry)
                or not _PLAN_OUTPUT_PARAMETER_KEYS.issuperset(entry_parameters)
                or entry_parameters.get("classification", 0) != 0
            ):
                return None
            name = entry["name"]
            region = (
                shm_reference(_JsonParameters(entry_parameters), name)
                if REGION in entry_parameters
                else None
            )
            outputs.append((name, region, decoded.binary_outputs[name]))
    return _ShmPlan(
        request.id,
        decoded.binary_by_default,
        tuple(inputs),
        None if outputs is None else tuple(outputs),
    )


def _decode_document(
    document: Any,
    request: InferenceRequest,
    cursor: _BinaryCursor,
    service: InferenceService,
    model_name: str,
    allowed_reserved: tuple[str, ...],
) -> DecodedInfer:
    """The general decode of a parsed infer header, in Triton's words for what it refuses."""
    if not isinstance(document, dict):
        raise InvalidArgumentError("the request body must be a JSON object")
    request_id = document.get("id", "")
    if not isinstance(request_id, str):
        raise InvalidArgumentError("Unable to parse 'id': expecting a string")
    request.id = request_id
    decoded = DecodedInfer(request)
    decoded.binary_by_default = _request_parameters(
        document.get("parameters"), request, decoded.reserved, allowed_reserved
    )
    inputs = _member(document, "inputs")
    if not isinstance(inputs, list):
        raise _unparsable("inputs", _NOT_ARRAY)
    for entry in inputs:
        tensor = _input_tensor(entry, cursor, request_id, service, model_name)
        if tensor.name in request.inputs:
            raise InvalidArgumentError(
                f"input '{tensor.name}' already exists in request"
            ).with_request_id(request_id)
        request.inputs[tensor.name] = tensor
    cursor.check_consumed()
    _requested_outputs(document.get("outputs"), decoded, service)
    return decoded


def _decode_raw_binary(model: Model, body: Buffer, request: InferenceRequest) -> DecodedInfer:
    """``Inference-Header-Content-Length: 0``: the whole body is the single input's data.

    As in Triton, the request's one input is called ``raw_input`` until it is matched to
    the model's input, and it is a batch of one for batching models.
    """
    inputs = model.spec.inputs
    if len(inputs) != 1:
        raise InvalidArgumentError(
            f"Raw request must only have 1 input (found 1) to be deduced but got "
            f"{len(inputs)} inputs in '{model.name}' model configuration"
        ).with_request_id(request.id)
    spec = next(iter(inputs.values()))
    batch = [1] if model.spec.batching else []
    if spec.datatype.is_bytes:
        if list(spec.dims) != [1]:
            raise InvalidArgumentError(
                f"For BYTE datatype raw input '{spec.name}', the model must have input shape [1]"
            ).with_request_id(request.id)
        array = np.empty([*batch, 1], dtype=object)
        array.flat[0] = bytes(body)
        data = array
    else:
        variable = sum(1 for d in spec.dims if d == -1)
        if variable > 1:
            raise InvalidArgumentError(
                f"Raw request for input '{spec.name}' of model '{model.name}' cannot be "
                f"deduced: its shape {list(spec.dims)} has more than one variable dimension"
            ).with_request_id(request.id)
        fixed = types.element_count([d for d in spec.dims if d != -1])
        count = len(body) // spec.datatype.itemsize // max(fixed, 1)
        shape = [*batch, *(count if d == -1 else d for d in spec.dims)]
        data = array_from_bytes(
            body,
            spec.datatype,
            shape,
            input_name="raw_input",
            model_name=model.name,
            request_id=request.id,
        )
    request.inputs[spec.name] = Tensor(spec.name, spec.datatype, data)
    return DecodedInfer(request, binary_by_default=True)


def encode_infer_response(
    model: Model, decoded: DecodedInfer, response: InferenceResponse, general: bool = False
) -> HttpResponse:
    """JSON header + binary blobs; raises a ServerError for an output JSON cannot carry.
    ``general``: skip the header's direct writer (the tests compare the two)."""
    request = decoded.request
    if not general and not response.parameters and not decoded.shm_outputs:
        answer = _direct_response(model, decoded, response)
        if answer is not None:
            return answer
    document: dict[str, Any] = {}
    if request.id:
        document["id"] = request.id
    document["model_name"] = model.name
    document["model_version"] = model.version_text
    if response.parameters:
        document["parameters"] = _response_parameters(response.parameters)
    outputs: list[dict[str, Any]] = []
    blobs: list[Buffer] = []
    json_entries: list[dict[str, Any]] = []  # outputs written as JSON data
    shm_outputs = decoded.shm_outputs
    binary_outputs, binary_by_default = decoded.binary_outputs, decoded.binary_by_default
    for tensor in response.outputs:
        entry: dict[str, Any] = {
            "name": tensor.name,
            "datatype": tensor.datatype.wire_name,
            "shape": list(tensor.shape),
        }
        if shm_outputs and write_to_region(shm_outputs, tensor):
            pass  # the response names it; the data is in the region
        elif binary_outputs.get(tensor.name, binary_by_default):
            blob = array_to_bytes(tensor)
            entry["parameters"] = {"binary_data_size": (size := len(blob))}
            if size:
                blobs.append(blob)
        else:
            entry["data"] = json_output_values(tensor)
            json_entries.append(entry)
        outputs.append(entry)
    document["outputs"] = outputs
    header = dump_document(document, json_entries)
    return _answer(header, blobs)


def _direct_response(
    model: Model, decoded: DecodedInfer, response: InferenceResponse
) -> HttpResponse | None:
    """The common answer (no parameters, no output to a region) with its header written
    directly, byte for byte as the general encode writes it; None when it is not that (the
    general encode then answers)."""
    binary_outputs, binary_by_default = decoded.binary_outputs, decoded.binary_by_default
    outputs = response.outputs
    blobs: list[Buffer] = []
    parts: list[int | bytes] = []
    for tensor in outputs:
        if binary_outputs.get(tensor.name, binary_by_default):
            blob = array_to_bytes(tensor)
            size = len(blob)
            parts.append(size)
            if size:
                blobs.append(blob)
        else:
            # (NaN or infinities, written null, make the header None: see dump_document)
            parts.append(_orjson_dumps(json_output_values(tensor), option=_SERIALIZE_NUMPY))
    header = response_header(decoded.request.id, model.name, model.version_text, outputs, parts)
    if header is None:
        return None
    return _answer(header, blobs)


def _answer(header: bytes, blobs: list[Buffer]) -> HttpResponse:
    """The infer answer: the JSON header alone, or followed by the binary outputs' blobs."""
    if not blobs:
        return HttpResponse(200, (header,), JSON)
    return HttpResponse(
        200,
        (header, *blobs),
        OCTET_STREAM,
        [(b"Inference-Header-Content-Length", b"%d" % len(header))],
    )


def dump_document(document: dict[str, Any], json_entries: list[dict[str, Any]]) -> bytes:
    """The response ``document`` as JSON, the ``data`` of its ``json_entries`` (outputs from
    ``json_output_values``) holding NaN or infinities written as Triton writes them.

    orjson writes NaN and infinities as null, and no other part of a response is null: only
    a header with a null somewhere (rarely) has its float data checked, and is written
    again; a request's ``id`` holding the word costs that check, nothing else."""
    header = dumps_json(document, False)
    if json_entries and header.find(b"null") >= 0:  # (``find``: see _direct_response)
        non_finite = False
        for entry in json_entries:
            entry["data"] = data = _checked_finite(entry["data"])
            non_finite = non_finite or isinstance(data, NonFiniteData)
        if non_finite:
            header = dumps_json(document, True)
    return header


def json_output_data(tensor: Tensor) -> Any:
    """An output's data for JSON, flat in C order (a ``NonFiniteData`` for floats holding
    NaN or infinities); a ServerError for data JSON cannot carry."""
    return _checked_finite(json_output_values(tensor))


def _checked_finite(data: Any) -> Any:
    """Float ``data`` holding NaN or infinities as a ``NonFiniteData``; else as it is."""
    if isinstance(data, np.ndarray) and data.dtype.kind == "f" and not np.isfinite(data).all():
        return NonFiniteData(data)
    return data


def json_output_values(tensor: Tensor) -> Any:
    """``json_output_data`` without its check for NaN and infinities (which orjson writes
    as ``null``: see ``encode_infer_response``)."""
    datatype = tensor.datatype
    wire = datatype.wire_name
    if wire in ("FP16", "BF16"):
        raise InvalidArgumentError(
            f"sending {wire} data via JSON is not supported. Please use the binary data "
            "format for output"
        )
    if datatype.is_bytes:
        try:
            return array_to_json_data(tensor.data)
        except ValueError:
            raise InternalError(
                f"output '{tensor.name}' holds bytes that are not valid UTF-8 and cannot be "
                "sent as JSON; request it with binary_data"
            ) from None
    # Triton writes each float32 as the double it converts to (0.1 -> 0.10000000149...).
    # orjson writes C-contiguous numpy arrays natively, without Python objects.
    return array_to_json_data(tensor.data, wire == "FP32")


class NonFiniteData:
    """Float data with NaN/Infinity, which Triton writes as those bare words (not JSON)."""

    MARK = "\x00nonfinite\x00"

    def __init__(self, data: np.ndarray) -> None:
        self.data = data

    def values(self) -> list[object]:
        return [
            v if np.isfinite(v) else f"{self.MARK}{_NON_FINITE[str(v)]}" for v in self.data.tolist()
        ]


_NON_FINITE = {"nan": "NaN", "inf": "Infinity", "-inf": "-Infinity"}


def dumps_json(document: dict[str, Any], non_finite: bool) -> bytes:
    """``document`` as JSON bytes; ``non_finite``: it holds ``NonFiniteData`` somewhere."""
    if not non_finite:
        return _orjson_dumps(document, option=_SERIALIZE_NUMPY)
    header = orjson.dumps(
        document,
        option=orjson.OPT_SERIALIZE_NUMPY,
        default=lambda value: value.values() if isinstance(value, NonFiniteData) else None,
    )
    for word in _NON_FINITE.values():
        marked = orjson.dumps(f"{NonFiniteData.MARK}{word}")
        header = header.replace(marked, word.encode())
    return header


def _response_parameters(parameters: Mapping[str, ParameterValue]) -> dict[str, ParameterValue]:
    for key, value in parameters.items():
        response_parameter_kind(key, value)  # refuses what no wire carries
    return dict(parameters)
