"""``--http-header-forward-pattern`` / ``--grpc-header-forward-pattern``: request headers
whose names match the pattern (anywhere in the name, as RE2's PartialMatch) reach the
model as string request parameters, as Triton forwards them. A matching header whose name
is a reserved parameter key or starts with ``triton_`` fails the request.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from pytriton_core.errors import InvalidArgumentError
from pytriton_core.inference.parameters import RESERVED_PREFIX
from pytriton_core.inference.request import InferenceRequest

# Triton's reserved parameter keys (common.h), which no header may set.
RESERVED_KEYS = frozenset(
    {
        "sequence_id",
        "sequence_start",
        "sequence_end",
        "priority",
        "timeout",
        "headers",
        "binary_data_output",
    }
)


def compile_pattern(pattern: str | None) -> re.Pattern[str] | None:
    return re.compile(pattern) if pattern else None


def forward_headers(
    request: InferenceRequest,
    headers: Iterable[tuple[str, str]],
    pattern: re.Pattern[str] | None,
) -> None:
    """Set each header whose name matches ``pattern`` as a request parameter."""
    if pattern is None:
        return
    for name, value in headers:
        if pattern.search(name) is None:
            continue
        if name in RESERVED_KEYS or name.startswith(RESERVED_PREFIX):
            raise InvalidArgumentError(
                f"Header '{name}' is reserved for Triton usage and cannot be forwarded."
            )
        request.parameters[name] = value
