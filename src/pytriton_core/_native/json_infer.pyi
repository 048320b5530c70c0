"""The common all-JSON infer request read from its bytes in one pass
(csrc/http/json_infer.pyx)."""

from collections.abc import Callable
from typing import Any, TypeVar

from typing_extensions import Buffer

from pytriton_core._native.infer_walk import Walked

T = TypeVar("T")
O = TypeVar("O")

def walk_json_infer(
    body: Buffer,
    datatypes: dict[str, Any],
    tensor_type: Callable[[str, Any, Any], T],
    output_type: Callable[[str, int, bool], O],
    max_depth: int,
    max_values: int,
) -> Walked[T, O] | None:
    """What ``walk_binary_infer`` answers, for a whole JSON body whose inputs carry their
    numbers or booleans in ``data``: each array read from the bytes; None for anything the
    general decode must read (every other request, every one it would refuse, a body past
    the JSON limits ``max_depth`` and ``max_values``)."""
