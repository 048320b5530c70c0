"""``--http-header-forward-pattern`` / ``--grpc-header-forward-pattern``: request headers
whose names match the pattern (anywhere in the name, as RE2's PartialMatch) reach the
model as string request parameters, as Triton forwards them.

Triton 2.51 forwards every matching header, reserved parameter names (``priority``,
``triton_...``) included, as a plain string parameter that sets nothing else; so does this
server. (Triton 2.73 refuses such headers instead.)
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from pytriton_core.inference.request import InferenceRequest


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
        if pattern.search(name) is not None:
            request.parameters[name] = value
