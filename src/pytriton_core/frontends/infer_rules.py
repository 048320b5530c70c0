"""The rules of an infer request and response that every wire shares, in no wire's format.

Each codec (``frontends/http/infer_codec.py``, ``frontends/grpc/infer_codec.py``) reads its
own format and hands the values here, so both front ends accept and refuse the same things:

* a tensor's shared-memory reference (``shm_reference``), read through the codec's typed
  accessors (``ShmParameters``), which refuse a value of the wrong type in their wire's words;
* what an output bound for a client's region cannot also ask for (``check_shm_output``), and
  binding it to its region before the model runs (``requested_output``);
* writing such an output into its region when the response is encoded (``write_to_region``);
* which response parameters a wire can carry, and as what (``response_parameter_kind``);
* the 64-bit limits (``INT64_MAX``): integers above it travel as unsigned or as doubles.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, MutableMapping
from typing import Protocol

from pytriton_core.errors import InvalidArgumentError, UnsupportedError
from pytriton_core.inference.request import RequestedOutput
from pytriton_core.inference.response import ParameterValue
from pytriton_core.inference.tensor import Tensor
from pytriton_core.memory import ShmOutput, ShmReference
from pytriton_core.service import InferenceService

INT64_MAX = 2**63 - 1

REGION = "shared_memory_region"
BYTE_SIZE = "shared_memory_byte_size"
OFFSET = "shared_memory_offset"


class ShmParameters(Protocol):
    """A tensor's parameters as a codec reads them: each accessor refuses a value of the
    wrong type with its wire's message."""

    def has(self, key: str) -> bool: ...
    def string(self, key: str) -> str: ...
    def integer(self, key: str) -> int: ...


def shm_reference(parameters: ShmParameters, tensor: str) -> ShmReference:
    """The region, offset and byte size a tensor names (its parameters have ``REGION``).

    The numbers are passed on as the client sent them: the region's compiled range check
    refuses negative values and values past the region.
    """
    region = parameters.string(REGION)
    if not parameters.has(BYTE_SIZE):
        raise InvalidArgumentError(
            f"'{BYTE_SIZE}' must be specified along with '{REGION}' parameter for tensor '{tensor}'"
        )
    byte_size = parameters.integer(BYTE_SIZE)
    offset = parameters.integer(OFFSET) if parameters.has(OFFSET) else 0
    return ShmReference(region, offset, byte_size)


def check_shm_output(settings: Mapping[str, object], *, noun: str) -> None:
    """Refuse an output in a region that also sets one of ``settings`` (``classification``;
    over HTTP ``binary_data`` too): the data goes to the region, so it has no other form.
    ``noun`` is how the wire's message begins ("Output" over HTTP, "output" over gRPC)."""
    for key, value in settings.items():
        if value:
            raise InvalidArgumentError(f"{noun} can't set both '{REGION}' and '{key}'")


def requested_output(
    service: InferenceService,
    name: str,
    class_count: int,
    region: ShmReference | None,
    shm_outputs: MutableMapping[str, ShmOutput],
) -> RequestedOutput:
    """An output the client asked for; one bound for a region has its range checked now,
    before the model runs, and is remembered in ``shm_outputs`` for the response."""
    if region is not None:
        shm_outputs[name] = service.shm_output(name, region)
    return RequestedOutput(name, class_count, region is not None)


def write_to_region(shm_outputs: Mapping[str, ShmOutput], tensor: Tensor) -> bool:
    """Copy an output bound for a client's region into it; False for any other output.
    The response then names the output (datatype, shape) without its data."""
    target = shm_outputs.get(tensor.name)
    if target is None:
        return False
    target.write(tensor)
    return True


class ParameterKind(enum.Enum):
    """What a response parameter travels as (gRPC's ``InferParameter`` fields; JSON values)."""

    BOOL = "bool_param"
    INT64 = "int64_param"
    UINT64 = "uint64_param"
    DOUBLE = "double_param"
    STRING = "string_param"


def response_parameter_kind(key: str, value: ParameterValue) -> ParameterKind:
    """How a response parameter travels; UNSUPPORTED for a value no wire carries."""
    if isinstance(value, bool):
        return ParameterKind.BOOL
    if isinstance(value, int):
        return ParameterKind.UINT64 if value > INT64_MAX else ParameterKind.INT64
    if isinstance(value, float):
        return ParameterKind.DOUBLE
    if isinstance(value, str):
        return ParameterKind.STRING
    kind = "BYTES" if isinstance(value, bytes | bytearray) else type(value).__name__
    raise UnsupportedError(f"Response parameter '{key}' of type {kind} is not supported")
