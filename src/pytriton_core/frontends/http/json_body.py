"""Every JSON body the HTTP front end reads goes through ``parse_json``: the depth and size
limits are checked on the bytes before a parser builds anything (``_native.json_limits``)."""

from __future__ import annotations

from typing import Any

import orjson

from pytriton_core._native.json_limits import check_json_limits
from pytriton_core.errors import InvalidArgumentError, ServerError
from pytriton_core.frontends.http.messages import Buffer
from pytriton_core.inference.tensor_data import RequestLimits
from pytriton_core.options import LimitOptions


def parse_json(
    data: Buffer,
    limits: LimitOptions | RequestLimits,
    malformed: type[ServerError] = InvalidArgumentError,
) -> Any:
    """The JSON value of ``data``. Past a limit: INVALID_ARG (400); malformed JSON:
    ``malformed`` (Triton answers some endpoints' bad JSON with 500, others with 400)."""
    try:
        check_json_limits(data, limits.http_max_json_depth, limits.http_max_json_elements)
    except ValueError as exc:
        raise InvalidArgumentError(str(exc)) from None
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise malformed(f"failed to parse the request JSON buffer: {exc}") from None
