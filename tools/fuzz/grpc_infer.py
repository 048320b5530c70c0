"""Fuzz the gRPC infer message splitter (``split_field`` of the compiled
``_native.proto_wire``, which hands ``raw_input_contents`` out as views) and the codec that
builds the core request. The splitter is compiled: the coverage guidance sees only the
Python codec around it; the oracle checks the splitter's every result.

Oracle: the splitter agrees with protobuf's own parse of the whole message: both fail, or
both give the same raw entries and the same rest of the message.
"""

from __future__ import annotations

import sys

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

    from pytriton_core.errors import ServerError
    from pytriton_core.frontends.grpc.infer_codec import (
        _ModelInferRequest,
        decode_infer_request,
        read_request,
    )
    from pytriton_core.inference.tensor_data import check_tensor_limits
    from pytriton_core.runtime.validation import validate_request

SERVICE = serve()


def test_one_input(data: bytes) -> None:
    try:
        reference = _ModelInferRequest.FromString(data)
    except (DecodeError, RecursionError):
        reference = None
    try:
        message, raw = read_request(data)
    except ServerError:
        assert reference is None, reference
        return
    assert reference is not None, data
    assert [bytes(entry) for entry in raw] == list(reference.raw_input_contents)
    reference.ClearField("raw_input_contents")
    assert message == reference
    try:
        decoded = decode_infer_request(SERVICE, message, raw, unary=True)
        check_tensor_limits(decoded.request, SERVICE.options.limits)
        validate_request(decoded.request, decoded.model.spec)
    except ServerError:
        pass


if __name__ == "__main__":
    fuzz(test_one_input, SUBJECT)
    sys.exit(0)
