"""Fuzz the gRPC infer decode: the compiled splitter (``split_field``) and walk
(``walk_infer_request``) of ``_native.proto_wire``, and the codec that builds the core
request from either. Both are compiled: the coverage guidance sees only the Python codec
around them; the oracles check their every result.

Oracles:
- the splitter agrees with protobuf's own parse of the whole message: both fail, or both
  give the same raw entries and the same rest of the message;
- a message the walk accepts is one protobuf parses, to the same fields;
- the decode (walk first, protobuf where the walk gives up) and the general decode from
  protobuf's parse give the same core request, or the same error in the same words.
"""

from __future__ import annotations

import sys
from typing import Any

import instrumentation

# what this target fuzzes (instrumentation.py)
SUBJECT = (
    "pytriton_core.frontends.grpc",
    "pytriton_core.inference",
    "pytriton_core.runtime.validation",
)

with instrumentation.imports(SUBJECT):
    from common import fuzz, serve
    from google.protobuf.message import DecodeError

    from pytriton_core._native import proto_wire
    from pytriton_core.errors import ServerError
    from pytriton_core.frontends.grpc.infer_codec import (
        _decode_message,
        _ModelInferRequest,
        _parameter_member,
        decode_infer_request,
        read_request,
    )
    from pytriton_core.inference.tensor_data import check_tensor_limits
    from pytriton_core.runtime.validation import validate_request

SERVICE = serve()


def _outcome(decode: Any) -> object:
    """What a decode gives, comparable: the request's observable fields, or the error."""
    try:
        decoded = decode()
    except ServerError as exc:
        return (type(exc).__name__, exc.message)
    request = decoded.request
    inputs = {
        name: (t.datatype.wire_name, t.data.shape, t.data.dtype.str, _content(t.data))
        for name, t in request.inputs.items()
    }
    outputs = request.requested_outputs
    return (
        decoded.model.name,
        decoded.model_name,
        decoded.model_version,
        decoded.enable_empty_final_response,
        request.id,
        request.correlation_id,
        request.flags,
        request.priority,
        request.timeout_us,
        _comparable(request.parameters),
        inputs,
        None if outputs is None else dict(outputs),
    )


def _comparable(parameters: Any) -> dict[str, object]:
    """Parameters (values, or (member, value) pairs) with NaN equal to itself."""

    def plain(value: object) -> object:
        if isinstance(value, tuple):
            return tuple(plain(v) for v in value)
        return repr(value) if isinstance(value, float) else value

    return {key: plain(value) for key, value in dict(parameters).items()}


def _content(array: Any) -> object:
    return array.tolist() if array.dtype.hasobject else array.tobytes()


def _walk_agrees(data: bytes, reference: Any) -> None:
    walked = proto_wire.walk_infer_request(data)
    if walked is None:
        return
    assert reference is not None, data
    model_name, model_version, request_id, parameters, inputs, outputs, raw = walked
    assert (model_name, model_version, request_id) == (
        reference.model_name,
        reference.model_version,
        reference.id,
    )
    expected = {key: _parameter_member(p) for key, p in reference.parameters.items()}
    assert _comparable(parameters or {}) == _comparable(expected), (parameters, expected)
    assert inputs == [(i.name, i.datatype, list(i.shape)) for i in reference.inputs]
    assert all(not i.parameters and not i.HasField("contents") for i in reference.inputs)
    assert outputs == [o.name for o in reference.outputs]
    assert all(not o.parameters for o in reference.outputs)
    assert [bytes(entry) for entry in raw] == list(reference.raw_input_contents)


def test_one_input(data: bytes) -> None:
    try:
        reference = _ModelInferRequest.FromString(data)
    except (DecodeError, RecursionError):
        reference = None
    _walk_agrees(data, reference)
    try:
        message, raw = read_request(data)
    except ServerError:
        assert reference is None, reference
        message = None
    if message is not None:
        assert reference is not None, data
        assert [bytes(entry) for entry in raw] == list(reference.raw_input_contents)
        reference.ClearField("raw_input_contents")
        assert message == reference

    def general() -> Any:
        header, entries = read_request(data)
        return _decode_message(SERVICE, header, entries, unary=True)

    fast = _outcome(lambda: decode_infer_request(SERVICE, data, unary=True))
    assert fast == _outcome(general), (fast, _outcome(general))
    try:
        decoded = decode_infer_request(SERVICE, data, unary=True)
        check_tensor_limits(decoded.request, SERVICE.request_limits)
        validate_request(decoded.request, decoded.model.spec)
    except ServerError:
        pass


if __name__ == "__main__":
    fuzz(test_one_input, SUBJECT)
    sys.exit(0)
