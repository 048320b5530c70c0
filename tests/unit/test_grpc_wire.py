"""The hand-written protobuf wire paths of the gRPC front end, checked against protobuf."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from google.protobuf.message import DecodeError

from pytriton_core import proto, types
from pytriton_core._native import proto_wire as wire
from pytriton_core.frontends.grpc import infer_codec
from pytriton_core.inference.response import InferenceResponse
from pytriton_core.inference.tensor import Tensor

ModelInferRequest: Any = proto.inference("ModelInferRequest")
ModelInferResponse: Any = proto.inference("ModelInferResponse")
ModelStreamInferResponse: Any = proto.inference("ModelStreamInferResponse")
RAW_INPUT_CONTENTS = 7


def _request(raw: list[bytes]) -> Any:
    request = ModelInferRequest(model_name="m", model_version="3", id="x" * 200)
    request.parameters["p"].int64_param = 5
    for i in range(len(raw)):
        request.inputs.add(name=f"IN{i}", datatype="UINT8", shape=[1, 2])
    request.raw_input_contents.extend(raw)
    return request


@pytest.mark.parametrize("sizes", [[], [0], [3], [130, 0, 20000], [1 << 20]])
def test_split_field_returns_views_over_the_message(sizes: list[int]) -> None:
    raw = [bytes([i % 251]) * size for i, size in enumerate(sizes)]
    data = _request(raw).SerializeToString()
    rest, entries = wire.split_field(data, RAW_INPUT_CONTENTS)
    assert [bytes(e) for e in entries] == raw
    assert all(e.obj is data for e in entries)  # views, not copies
    expected = _request(raw)
    expected.ClearField("raw_input_contents")
    assert ModelInferRequest.FromString(rest) == expected


def test_split_field_finds_entries_between_other_fields() -> None:
    # Concatenated messages merge: raw entries may sit anywhere among the other fields.
    first = ModelInferRequest(model_name="m", raw_input_contents=[b"a"]).SerializeToString()
    second = ModelInferRequest(id="y", raw_input_contents=[b"bc"]).SerializeToString()
    third = ModelInferRequest(model_version="1").SerializeToString()
    rest, entries = wire.split_field(first + second + third, RAW_INPUT_CONTENTS)
    assert [bytes(e) for e in entries] == [b"a", b"bc"]
    assert ModelInferRequest.FromString(rest) == ModelInferRequest(
        model_name="m", id="y", model_version="1"
    )


@pytest.mark.parametrize(
    "data",
    [b"\x3a\x05abc", b"\x3a", b"\x3a\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01", b"\x0b"],
)
def test_split_field_refuses_malformed_messages(data: bytes) -> None:
    with pytest.raises(wire.WireError):
        wire.split_field(data, RAW_INPUT_CONTENTS)


@pytest.mark.parametrize(
    "data",
    [
        # Found by tools/fuzz/grpc_infer.py: protobuf skips unknown groups (wire types 3
        # and 4); the splitter refused them as malformed.
        bytes.fromhex("0a04652f5f73657175656e636d45696473693b0000000000000064"),
        # nested groups, and a raw entry after them
        b"\x0b\x13\x08\x01\x14\x0c" + b"\x3a\x02hi",
    ],
)
def test_split_field_skips_groups_as_protobuf_does(data: bytes) -> None:
    reference = ModelInferRequest.FromString(data)
    rest, entries = wire.split_field(data, RAW_INPUT_CONTENTS)
    assert [bytes(e) for e in entries] == list(reference.raw_input_contents)
    reference.ClearField("raw_input_contents")
    assert ModelInferRequest.FromString(bytes(rest)) == reference


@pytest.mark.parametrize("data", [b"\x0b\x08\x01", b"\x0b\x14", b"\x0c"])
def test_split_field_refuses_broken_groups(data: bytes) -> None:
    with pytest.raises(wire.WireError):
        wire.split_field(data, RAW_INPUT_CONTENTS)
    with pytest.raises(DecodeError):  # protobuf refuses them too
        ModelInferRequest.FromString(data)


class _Model:
    name = "m"
    version = 2
    version_text = "2"


def _decoded(request_id: str = "r1") -> infer_codec.DecodedInfer:
    request = infer_codec.InferenceRequest(model_name="m", model_version=2, id=request_id)
    return infer_codec.DecodedInfer(_Model(), request, "m", "")  # type: ignore[arg-type]


def _response() -> InferenceResponse:
    strings = np.empty(2, dtype=object)
    strings[:] = [b"", b"xyz"]
    return InferenceResponse(
        outputs=[
            Tensor("A", types.BY_WIRE_NAME["FP32"], np.arange(6, dtype=np.float32).reshape(2, 3)),
            Tensor("EMPTY", types.BY_WIRE_NAME["INT64"], np.zeros((0, 4), np.int64)),
            Tensor("S", types.BYTES, strings),
        ],
        parameters={"flag": True, "n": 7, "big": 2**64 - 1, "ratio": 0.25, "s": "v"},
    )


def _expected_response(final: bool | None) -> Any:
    expected = ModelInferResponse(model_name="m", model_version="2", id="r1")
    expected.parameters["flag"].bool_param = True
    expected.parameters["n"].int64_param = 7
    expected.parameters["big"].uint64_param = 2**64 - 1
    expected.parameters["ratio"].double_param = 0.25
    expected.parameters["s"].string_param = "v"
    if final is not None:
        expected.parameters["triton_final_response"].bool_param = final
    expected.outputs.add(name="A", datatype="FP32", shape=[2, 3])
    expected.outputs.add(name="EMPTY", datatype="INT64", shape=[0, 4])
    expected.outputs.add(name="S", datatype="BYTES", shape=[2])
    expected.raw_output_contents.extend(
        [
            np.arange(6, dtype=np.float32).tobytes(),
            b"",  # every output has its entry, so that the two lists stay aligned
            b"\x00\x00\x00\x00\x03\x00\x00\x00xyz",
        ]
    )
    return expected


def test_infer_response_parses_as_protobuf_would_write_it() -> None:
    data = infer_codec.encode_infer_response(_decoded(), _response())
    assert ModelInferResponse.FromString(data) == _expected_response(None)


@pytest.mark.parametrize("final", [True, False])
def test_stream_response_nests_the_infer_response(final: bool) -> None:
    data = infer_codec.encode_stream_response(_decoded(), _response(), final)
    parsed = ModelStreamInferResponse.FromString(data)
    assert parsed == ModelStreamInferResponse(infer_response=_expected_response(final))


def test_stream_error_and_empty_final_responses() -> None:
    error = ModelStreamInferResponse.FromString(infer_codec.encode_stream_error("bad", ""))
    assert error.error_message == "bad"
    assert error.infer_response.id == ""
    assert error.infer_response.parameters["triton_final_response"].bool_param is True
    completion = ModelStreamInferResponse.FromString(
        infer_codec.encode_stream_completion(_decoded("r9"), True, "failed")
    )
    assert completion.error_message == "failed"
    assert (completion.infer_response.id, completion.infer_response.model_name) == ("r9", "m")
    assert completion.infer_response.parameters["triton_final_response"].bool_param is True


@pytest.mark.parametrize(
    ("names", "parameters", "outputs"),
    [
        (("", "", ""), [], []),
        (("m", "1", "r"), [("off", "bool_param", False), ("neg", "int64_param", -3)], []),
        (
            ("é", "12", "x" * 300),
            [
                ("min", "int64_param", -(2**63)),
                ("max", "uint64_param", 2**64 - 1),
                ("zero", "double_param", 0.0),
                ("nan", "double_param", -1.5e300),
                ("empty", "string_param", ""),
                ("", "string_param", "ünï"),
            ],
            [("O", "FP32", (0,)), ("", "", ()), ("B", "BYTES", (2**40, 1, 300))],
        ),
    ],
)
def test_response_header_is_what_protobuf_writes(
    names: tuple[str, str, str],
    parameters: list[tuple[str, str, Any]],
    outputs: list[tuple[str, str, tuple[int, ...]]],
) -> None:
    model_name, model_version, request_id = names
    data = wire.infer_response_header(model_name, model_version, request_id, parameters, outputs)
    expected = ModelInferResponse(model_name=model_name, model_version=model_version, id=request_id)
    for key, kind, value in parameters:
        setattr(expected.parameters[key], kind, value)
    for name, datatype, shape in outputs:
        expected.outputs.add(name=name, datatype=datatype, shape=shape)
    parsed = ModelInferResponse.FromString(data)
    assert parsed == expected
    for key, kind, _ in parameters:  # the member set, even to its default value
        assert parsed.parameters[key].WhichOneof("parameter_choice") == kind


# ------------------------------------------------------------- the ModelInferRequest walk


def _common_request() -> Any:
    request = ModelInferRequest(model_name="m", model_version="2", id="é-1")
    request.parameters["sequence_id"].int64_param = 7
    request.parameters["sequence_start"].bool_param = False  # set to the default: still set
    request.parameters["priority"].uint64_param = 3
    request.parameters["ratio"].double_param = -0.25
    request.parameters["note"].string_param = "ü"
    request.parameters["empty"].SetInParent()  # no member of the oneof set
    request.inputs.add(name="IN0", datatype="FP32", shape=[1, 4])
    request.inputs.add(name="IN1", datatype="BYTES", shape=[])
    request.outputs.add(name="OUT0")
    request.raw_input_contents.extend([b"\0" * 16, b""])
    return request


def _walked_as_protobuf_reads(request: Any) -> tuple[object, ...]:
    parameters = {
        key: infer_codec._parameter_member(value) for key, value in request.parameters.items()
    }
    return (
        request.model_name,
        request.model_version,
        request.id,
        parameters or None,
        [(i.name, i.datatype, list(i.shape)) for i in request.inputs],
        [o.name for o in request.outputs],
        list(request.raw_input_contents),
    )


def test_walk_reads_the_common_request_as_protobuf_does() -> None:
    request = _common_request()
    walked = wire.walk_infer_request(request.SerializeToString())
    assert walked is not None
    *fields, raw = walked
    assert (*fields, [bytes(entry) for entry in raw]) == _walked_as_protobuf_reads(request)
    assert all(isinstance(entry, memoryview) for entry in raw)


def test_walk_takes_repeated_fields_as_protobuf_merges_them() -> None:
    first, second = ModelInferRequest(model_name="a"), ModelInferRequest(model_name="b")
    first.parameters["k"].int64_param = 1
    second.parameters["k"].string_param = "last"
    second.inputs.add(name="X", datatype="INT8", shape=[2])
    data = first.SerializeToString() + second.SerializeToString()
    unpacked_shape = bytes([0x2A, 4, 0x18, 2, 0x18, 3])  # inputs { shape: 2 shape: 3 } unpacked
    walked = wire.walk_infer_request(data + unpacked_shape)
    merged = ModelInferRequest.FromString(data + unpacked_shape)
    assert walked is not None
    assert tuple(walked) == _walked_as_protobuf_reads(merged)


def _unusual_requests() -> list[bytes]:
    contents = ModelInferRequest()
    contents.inputs.add(name="X", datatype="INT32").contents.int_contents.append(1)
    tensor_parameters = ModelInferRequest()
    tensor_parameters.inputs.add(name="X").parameters["shared_memory_region"].string_param = "r"
    output_parameters = ModelInferRequest()
    output_parameters.outputs.add(name="Y").parameters["classification"].int64_param = 2
    negative = ModelInferRequest()
    negative.inputs.add(name="X", shape=[-1])  # a 10-byte varint
    valid = ModelInferRequest(model_name="m").SerializeToString()
    return [
        contents.SerializeToString(),
        tensor_parameters.SerializeToString(),
        output_parameters.SerializeToString(),
        negative.SerializeToString(),
        valid + b"\x48\x01",  # an unknown field (9)
        valid + b"\x0d\0\0\0\0",  # a 32-bit field
        b"\x0a\x02\xc3\x28",  # model_name, invalid UTF-8
        b"\x0a\x05ab",  # truncated
        b"\x00\x00",  # field number 0
    ]


@pytest.mark.parametrize("data", _unusual_requests())
def test_walk_leaves_the_rest_to_protobuf(data: bytes) -> None:
    assert wire.walk_infer_request(data) is None
