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
