from collections.abc import Sequence
from typing import Any

def binary_response_header(
    request_id: str, model_name: str, model_version: str, outputs: Sequence[Any], sizes: list[int]
) -> bytes | None:
    """The JSON header of a response whose outputs are all sent binary (``sizes``: their
    blobs' byte sizes), written as the general encode writes it through orjson; None when
    a name, a shape or the whole is not plain."""
