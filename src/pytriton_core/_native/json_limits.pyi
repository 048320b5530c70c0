"""Depth and size of a JSON body, measured before it is parsed (csrc/http/json_limits.pyx)."""

from typing_extensions import Buffer

def check_json_limits(body: Buffer, max_depth: int, max_elements: int) -> None:
    """Raise ValueError if ``body`` nests arrays and objects deeper than ``max_depth`` or
    holds more than ``max_elements`` values (each array, object and each comma-separated
    entry after the first counts one). Strings are skipped; the JSON is not validated."""
