"""The protobuf wire format of the tensor fields of gRPC inference messages
(csrc/grpc/proto_wire.pyx)."""

from collections.abc import Sequence

from pytriton_core.inference.tensor_data import Buffer

class WireError(ValueError):
    """The received bytes are not a well-formed protobuf message."""

def split_field(data: bytes, field_number: int) -> tuple[Buffer, list[memoryview]]: ...
def field_prefix(field_number: int, size: int) -> bytes: ...
def append_field(parts: list[Buffer], field_number: int, entries: Sequence[Buffer]) -> None: ...
def nest(parts: list[Buffer], field_number: int) -> list[Buffer]: ...
def infer_response_header(
    model_name: str,
    model_version: str,
    request_id: str,
    parameters: Sequence[tuple[str, str, bool | int | float | str]],
    outputs: Sequence[tuple[str, str, Sequence[int]]],
) -> bytes: ...

# (model_name, model_version, id, parameters: key -> (member name or None, value), inputs:
# (name, datatype, shape), outputs by name, raw_input_contents as views)
WalkedRequest = tuple[
    str,
    str,
    str,
    dict[str, tuple[str | None, object]] | None,
    list[tuple[str, str, list[int]]],
    list[str],
    list[memoryview],
]

def walk_infer_request(data: bytes) -> WalkedRequest | None: ...
