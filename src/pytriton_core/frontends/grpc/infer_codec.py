"""ModelInferRequest → core request, core response → ModelInferResponse (unary and stream).

The common request is read from the wire by the compiled walk (``wire.walk_infer_request``);
the others are parsed by protobuf (``read_request``). Raw inputs become numpy views over the
received message bytes, typed
``contents`` are converted to the binary form and decoded by the same code; raw outputs are
written from the tensors' memory after the protobuf header, one entry per output, aligned
with ``outputs`` as the clients require. Shared-memory inputs are views of the client's
region (they consume no raw entry); shared-memory outputs are copied into theirs and keep an
empty raw entry. Request parameters, datatypes and byte sizes follow the rules every front
end shares (``core.parameters``, ``core.tensor_data``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
from google.protobuf.message import DecodeError

from pytriton_core import proto, types
from pytriton_core._native import proto_wire as wire
from pytriton_core._native.bytes_codec import serialize_bytes_tensor
from pytriton_core.errors import InvalidArgumentError, ServerError, UnsupportedError
from pytriton_core.frontends.infer_rules import (
    REGION,
    check_shm_output,
    requested_output,
    response_parameter_kind,
    shm_reference,
    write_to_region,
)
from pytriton_core.inference.header_forwarding import compile_pattern, forward_headers
from pytriton_core.inference.parameters import apply_request_parameter
from pytriton_core.inference.request import InferenceRequest, RequestedOutput
from pytriton_core.inference.response import InferenceResponse
from pytriton_core.inference.tensor import Tensor
from pytriton_core.inference.tensor_data import (
    Buffer,
    array_from_bytes,
    array_to_bytes,
    datatype_from_wire,
)
from pytriton_core.memory import ShmOutput
from pytriton_core.options import GrpcOptions
from pytriton_core.runtime.model import Model
from pytriton_core.service import InferenceService

# Message classes of the private pool; their fields are only known at run time.
_ModelInferRequest: Any = proto.inference("ModelInferRequest")
_ModelInferResponse: Any = proto.inference("ModelInferResponse")
_ModelStreamInferResponse: Any = proto.inference("ModelStreamInferResponse")

_RAW_INPUT_CONTENTS = _ModelInferRequest.DESCRIPTOR.fields_by_name["raw_input_contents"].number
_RAW_OUTPUT_CONTENTS = _ModelInferResponse.DESCRIPTOR.fields_by_name["raw_output_contents"].number
_STREAM_INFER_RESPONSE = _ModelStreamInferResponse.DESCRIPTOR.fields_by_name[
    "infer_response"
].number

EMPTY_FINAL_RESPONSE = "triton_enable_empty_final_response"
FINAL_RESPONSE = "triton_final_response"

# InferTensorContents field → (the datatype it is named after in errors, its numpy type).
_CONTENTS_FIELDS: dict[str, tuple[str, np.dtype[Any]]] = {
    "bool_contents": ("BOOL", np.dtype(np.bool_)),
    "int_contents": ("INT32", np.dtype(np.int32)),
    "int64_contents": ("INT64", np.dtype(np.int64)),
    "uint_contents": ("UINT32", np.dtype(np.uint32)),
    "uint64_contents": ("UINT64", np.dtype(np.uint64)),
    "fp32_contents": ("FP32", np.dtype(np.float32)),
    "fp64_contents": ("FP64", np.dtype(np.float64)),
    "bytes_contents": ("BYTES", np.dtype(np.object_)),
}
# Which field carries each datatype; FP16 and BF16 travel only as raw contents.
_FIELD_OF_DATATYPE: dict[str, str] = {
    "BOOL": "bool_contents",
    "UINT8": "uint_contents",
    "UINT16": "uint_contents",
    "UINT32": "uint_contents",
    "UINT64": "uint64_contents",
    "INT8": "int_contents",
    "INT16": "int_contents",
    "INT32": "int_contents",
    "INT64": "int64_contents",
    "FP32": "fp32_contents",
    "FP64": "fp64_contents",
    "BYTES": "bytes_contents",
}


@dataclass(slots=True)
class DecodedInfer:
    model: Model
    request: InferenceRequest
    # As the client sent them: stream errors and empty final responses echo these.
    model_name: str
    model_version: str
    enable_empty_final_response: bool = False
    received_ns: int = 0  # when the front end got the message (traces)
    # Output name -> where it goes, for outputs requested in shared memory.
    shm_outputs: dict[str, ShmOutput] = dataclasses.field(default_factory=dict)


def read_request(data: bytes) -> tuple[Any, list[memoryview]]:
    """The request message without its raw contents, and the raw contents as views."""
    try:
        header_bytes, raw = wire.split_field(data, _RAW_INPUT_CONTENTS)
        return _ModelInferRequest.FromString(header_bytes), raw
    except (wire.WireError, DecodeError) as exc:
        raise InvalidArgumentError(f"failed to parse the ModelInferRequest: {exc}") from None


def request_id_of(data: bytes) -> str:
    """The id a request that could not be decoded names, "" if it names none (stream errors)."""
    try:
        request_id: str = read_request(data)[0].id
    except InvalidArgumentError:
        return ""
    return request_id


def forward_metadata(
    request: InferenceRequest, metadata: Iterable[tuple[str, object]], options: GrpcOptions
) -> None:
    """``--grpc-header-forward-pattern``: matching metadata become request parameters."""
    pattern = compile_pattern(options.header_forward_pattern)
    if pattern is not None:
        forward_headers(request, ((str(k), str(v)) for k, v in metadata), pattern)


def decode_infer_request(service: InferenceService, data: bytes, *, unary: bool) -> DecodedInfer:
    """A core request for a serialized ModelInferRequest; the model validates it when it is
    submitted.

    The common message (raw contents, scalar parameters, outputs by name) is read by the
    compiled walk (``proto_wire.walk_infer_request``); the rest, and any message the walk
    gives up on or whose decode fails, goes through protobuf, so that its rules and its
    error messages are the only ones.
    """
    walked = wire.walk_infer_request(data)
    if walked is not None:
        try:
            decoded = _decode_walked(service, walked, unary)
        except ServerError:
            decoded = None  # the decode below refuses it too, in the general path's words
        if decoded is not None:
            return decoded
    message, raw = read_request(data)
    return _decode_message(service, message, raw, unary=unary)


def _decode_walked(
    service: InferenceService, walked: wire.WalkedRequest, unary: bool
) -> DecodedInfer | None:
    """The walked message's core request; None where the general decode must answer."""
    model_name, model_version, request_id, parameters, inputs, outputs, raw = walked
    if len(inputs) != len(raw):  # some input without data, or data for no input: an error
        return None
    decoded = _begin(service, model_name, model_version, request_id, unary)
    if parameters:
        _apply_parameters(decoded, parameters.items())
    tensors = decoded.request.inputs
    for (name, wire_datatype, shape), data in zip(inputs, raw, strict=True):
        datatype = datatype_from_wire(wire_datatype, name)
        _check_shape(name, shape)
        tensors[name] = _tensor(service, decoded, name, datatype, shape, data)
    if outputs:
        decoded.request.requested_outputs = {
            name: requested_output(service, name, 0, None, decoded.shm_outputs) for name in outputs
        }
    return decoded


def _begin(
    service: InferenceService, model_name: str, model_version: str, request_id: str, unary: bool
) -> DecodedInfer:
    model = service.model(model_name, model_version)
    if unary and model.spec.decoupled:
        raise UnsupportedError(
            "ModelInfer RPC doesn't support models with decoupled transaction policy"
        )
    request = InferenceRequest(model_name=model.name, model_version=model.version, id=request_id)
    return DecodedInfer(model, request, model_name, model_version)


def _apply_parameters(
    decoded: DecodedInfer, parameters: Iterable[tuple[str, tuple[str | None, object]]]
) -> None:
    """The request's parameters: key, (the InferParameter member set or None, its value)."""
    for key, (which, value) in parameters:
        if key in _SEQUENCE_PARAMETERS:
            value = _sequence_parameter(key, which, value)
        if key == EMPTY_FINAL_RESPONSE:
            if not isinstance(value, bool):
                raise InvalidArgumentError(f"Unable to parse '{key}', expecting a bool")
            decoded.enable_empty_final_response = value
        apply_request_parameter(
            decoded.request, key, value, allowed_reserved=(EMPTY_FINAL_RESPONSE,)
        )


def _tensor(
    service: InferenceService,
    decoded: DecodedInfer,
    name: str,
    datatype: types.DataType,
    shape: list[int],
    data: Buffer,
) -> Tensor:
    array = array_from_bytes(
        data,
        datatype,
        shape,
        input_name=name,
        model_name=decoded.model.name,
        request_id=decoded.request.id,
        max_bytes_elements=service.options.limits.max_bytes_elements,
    )
    return Tensor(name, datatype, array)


def _check_shape(name: str, shape: list[int]) -> None:
    if shape and min(shape) < 0:
        raise InvalidArgumentError(
            f"Unable to parse 'shape' for input '{name}': expecting unsigned integers"
        )


def _decode_message(
    service: InferenceService, message: Any, raw: list[memoryview], *, unary: bool
) -> DecodedInfer:
    """The general decode, from protobuf's parse of the message."""
    decoded = _begin(service, message.model_name, message.model_version, message.id, unary)
    model, request = decoded.model, decoded.request
    parameters = message.parameters
    if parameters:
        _apply_parameters(decoded, ((k, _parameter_member(p)) for k, p in parameters.items()))
    next_raw = 0
    for entry in message.inputs:
        name: str = entry.name
        datatype = datatype_from_wire(entry.datatype, name)
        shape = list(entry.shape)
        _check_shape(name, shape)
        if REGION in entry.parameters:
            if entry.HasField("contents"):
                raise InvalidArgumentError(
                    "unexpected 'content' provided when using shared memory for input tensor "
                    f"'{name}' for model '{model.name}'"
                )
            ref = shm_reference(_ProtoParameters(entry.parameters, name), name)
            request.inputs[name] = service.shm_input(
                ref,
                datatype,
                shape,
                input_name=name,
                model_name=model.name,
                request_id=request.id,
            )
            continue
        if entry.HasField("contents"):
            if raw:
                raise InvalidArgumentError(
                    "contents field must not be specified when using raw_input_contents for "
                    f"'{name}' for model '{model.name}'"
                )
            data = _contents_as_bytes(entry.contents, datatype, name, model.name)
        else:
            if next_raw >= len(raw):
                raise InvalidArgumentError(
                    f"unable to find data for input tensor '{name}' for model '{model.name}' "
                    "in request."
                )
            data = raw[next_raw]
            next_raw += 1
        request.inputs[name] = _tensor(service, decoded, name, datatype, shape, data)
    if next_raw < len(raw):  # as for too few: every raw entry must belong to an input
        raise InvalidArgumentError(
            f"unexpected additional input data for model '{model.name}': "
            f"{len(raw)} raw_input_contents for {next_raw} inputs that take raw data"
        )
    if message.outputs:
        request.requested_outputs = {
            output.name: _requested_output(output, decoded, service) for output in message.outputs
        }
    return decoded


def _parameter_member(parameter: Any) -> tuple[str | None, object]:
    """The member of an ``InferParameter``'s oneof that is set (or None), and its value."""
    which = parameter.WhichOneof("parameter_choice")
    return which, None if which is None else getattr(parameter, which)


_SEQUENCE_PARAMETERS = frozenset({"sequence_id", "sequence_start", "sequence_end"})
_UINT64_MASK = 2**64 - 1


def _sequence_parameter(key: str, which: str | None, value: object) -> object:
    """The sequence parameters in the kinds Triton's gRPC front end accepts: ``sequence_id``
    an int64 (a negative one read as the uint64 of its bits, as Triton casts it) or a
    string, ``sequence_start``/``sequence_end`` a bool."""
    if key == "sequence_id":
        if which == "int64_param":
            assert isinstance(value, int)
            return value & _UINT64_MASK
        if which == "string_param":
            return value
        raise InvalidArgumentError(
            "invalid value type for 'sequence_id' parameter, expected int64_param or string_param."
        )
    if which != "bool_param":
        raise InvalidArgumentError(
            f"invalid value type for '{key}' parameter, expected bool_param."
        )
    return value


class _ProtoParameters:
    """A tensor's ``InferParameter`` map, of the types Triton requires (negative integers
    are passed on: the region's compiled range check refuses them)."""

    __slots__ = ("_parameters", "_tensor")

    def __init__(self, parameters: Mapping[str, Any], tensor: str) -> None:
        self._parameters = parameters
        self._tensor = tensor

    def has(self, key: str) -> bool:
        return key in self._parameters

    def string(self, key: str) -> str:
        value: str = self._typed(key, "string_param")
        return value

    def integer(self, key: str) -> int:
        value: int = self._typed(key, "int64_param")
        return value

    def _typed(self, key: str, kind: str) -> Any:
        parameter = self._parameters[key]
        if parameter.WhichOneof("parameter_choice") != kind:
            raise InvalidArgumentError(
                f"invalid value type for '{key}' parameter for tensor '{self._tensor}', "
                f"expected {kind}."
            )
        return getattr(parameter, kind)


def _requested_output(
    output: Any, decoded: DecodedInfer, service: InferenceService
) -> RequestedOutput:
    class_count: object = 0
    if "classification" in output.parameters:
        class_count = _parameter_member(output.parameters["classification"])[1]
    if not isinstance(class_count, int) or isinstance(class_count, bool) or class_count < 0:
        raise InvalidArgumentError(f"Unable to parse 'classification' for output '{output.name}'")
    region = None
    if REGION in output.parameters:
        check_shm_output({"classification": class_count}, noun="output")
        region = shm_reference(_ProtoParameters(output.parameters, output.name), output.name)
    return requested_output(service, output.name, class_count, region, decoded.shm_outputs)


def _contents_as_bytes(
    contents: Any, datatype: types.DataType, name: str, model_name: str
) -> Buffer:
    """Typed contents in the binary form, so that they are checked like raw contents."""
    expected_field = _FIELD_OF_DATATYPE.get(datatype.wire_name)
    present = [field.name for field, _ in contents.ListFields()]
    for field in present:
        if field != expected_field:
            raise InvalidArgumentError(
                f"unexpected explicit tensor data for input tensor '{name}' for model "
                f"'{model_name}' of type '{_CONTENTS_FIELDS[field][0]}', expected datatype "
                f"'{datatype.wire_name}'"
            )
    if expected_field is None:  # FP16, BF16 with no contents at all
        return b""
    values = getattr(contents, expected_field)
    if datatype.is_bytes:
        elements = np.empty(len(values), dtype=np.object_)
        elements[:] = list(values)
        serialized: bytes = serialize_bytes_tensor(elements)
        return serialized
    # INT8/INT16 and UINT8/UINT16 arrive widened to 32 bits; narrow them as Triton does.
    wide = np.array(values, dtype=_CONTENTS_FIELDS[expected_field][1])
    return wide.astype(datatype.numpy_dtype, copy=False).view(np.uint8).data


# ------------------------------------------------------------------------------- responses


def _response_parts(
    decoded: DecodedInfer, response: InferenceResponse, final: bool | None
) -> list[Buffer]:
    model = decoded.model
    parameters = [
        (key, response_parameter_kind(key, value).value, value)
        for key, value in response.parameters.items()
    ]
    if final is not None:
        parameters.append((FINAL_RESPONSE, "bool_param", final))
    outputs = []
    raw: list[Buffer] = []
    for tensor in response.outputs:
        outputs.append((tensor.name, tensor.datatype.wire_name, tensor.shape))
        if write_to_region(decoded.shm_outputs, tensor):
            raw.append(b"")  # kept, so that raw entries stay aligned with outputs
        else:
            raw.append(array_to_bytes(tensor))
    header = wire.infer_response_header(
        model.name, model.version_text, decoded.request.id, parameters, outputs
    )
    parts: list[Buffer] = [header]
    wire.append_field(parts, _RAW_OUTPUT_CONTENTS, raw)
    return parts


def encode_infer_response(decoded: DecodedInfer, response: InferenceResponse) -> bytes:
    """A serialized ModelInferResponse (ModelInfer)."""
    return b"".join(_response_parts(decoded, response, None))


def encode_stream_response(
    decoded: DecodedInfer, response: InferenceResponse, final: bool
) -> bytes:
    """A serialized ModelStreamInferResponse carrying a response (ModelStreamInfer)."""
    parts = _response_parts(decoded, response, final)
    return b"".join(wire.nest(parts, _STREAM_INFER_RESPONSE))


def encode_stream_error(message: str, request_id: str) -> bytes:
    """A request that failed before it reached a model: its id, the error, and final.

    (Triton sends only the id here; the final flag too keeps "every stream response says
    whether it is its request's last" true without exception.)
    """
    response = _ModelStreamInferResponse(error_message=message)
    response.infer_response.id = request_id
    response.infer_response.parameters[FINAL_RESPONSE].bool_param = True
    serialized: bytes = response.SerializeToString()
    return serialized


def encode_stream_completion(decoded: DecodedInfer, final: bool, error: str = "") -> bytes:
    """A response without outputs: a model's error, or a decoupled request's empty final one.

    Carries what the client sent (id, model name and version) and the final flag.
    """
    response = _ModelStreamInferResponse(error_message=error)
    infer_response = response.infer_response
    infer_response.id = decoded.request.id
    infer_response.model_name = decoded.model_name
    infer_response.model_version = decoded.model_version
    infer_response.parameters[FINAL_RESPONSE].bool_param = final
    serialized: bytes = response.SerializeToString()
    return serialized
