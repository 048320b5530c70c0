from collections.abc import Sequence
from typing import Any

def response_header(
    request_id: str,
    model_name: str,
    model_version: str,
    outputs: Sequence[Any],
    parts: list[int | bytes],
) -> bytes | None:
    """The JSON header of a response, written as the general encode writes it through
    orjson: ``parts`` one per output, an int for one sent binary (its blob's byte size),
    bytes for one carried in JSON (its ``data`` as orjson writes it); None when a name, a
    shape or a part is not plain."""
