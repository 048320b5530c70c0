"""Triton's reserved request parameters: one set of rules for every front end.

A front end turns its wire form of a parameter (a JSON value, a gRPC ``InferParameter``)
into a Python value and hands it to ``apply_request_parameter``, which either sets the
request field the key is reserved for (sequence id and flags, priority, timeout) or keeps
it as a custom parameter for the model. Keys starting ``triton_`` are Triton's own.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import TypeGuard

from pytriton_core.errors import InvalidArgumentError
from pytriton_core.inference.request import SEQUENCE_END, SEQUENCE_START, InferenceRequest

RESERVED_PREFIX = "triton_"


def _is_unsigned(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def apply_request_parameter(
    request: InferenceRequest,
    key: str,
    value: object,
    *,
    allowed_reserved: Collection[str] = (),
) -> None:
    """Apply one request parameter; raises InvalidArgumentError for a value the key refuses.

    ``allowed_reserved`` names the ``triton_`` keys the calling front end understands; they
    are accepted here and left for the caller to act on.
    """
    if key == "sequence_id":
        if not (isinstance(value, str) or _is_unsigned(value)):
            raise InvalidArgumentError(
                "Unable to parse 'sequence_id', expecting an unsigned integer or a string"
            )
        request.correlation_id = value
    elif key in ("sequence_start", "sequence_end"):
        if not isinstance(value, bool):
            raise InvalidArgumentError(f"Unable to parse '{key}', expecting a bool")
        if value:
            request.flags |= SEQUENCE_START if key == "sequence_start" else SEQUENCE_END
    elif key in ("priority", "timeout"):
        if not _is_unsigned(value):
            raise InvalidArgumentError(f"Unable to parse '{key}', expecting an unsigned integer")
        if key == "priority":
            request.priority = value
        else:
            request.timeout_us = value
    elif key.startswith(RESERVED_PREFIX):
        if key in allowed_reserved:
            return
        if allowed_reserved:
            raise InvalidArgumentError(
                "parameter keys starting with 'triton_' are reserved for Triton usage. Only the "
                "following keys starting with 'triton_' are allowed: "
                + ", ".join(sorted(allowed_reserved))
            )
        raise InvalidArgumentError(
            "parameter keys starting with 'triton_' are reserved for Triton usage and should "
            "not be specified."
        )
    elif isinstance(value, (str, int, float)):  # bool is an int
        request.parameters[key] = value
    else:
        raise InvalidArgumentError(
            f"parameter '{key}' has invalid type. It should be either 'int', 'bool', or 'string'."
        )
