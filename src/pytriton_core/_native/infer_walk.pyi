"""The common binary infer request read from its parsed JSON header in one pass
(csrc/http/infer_walk.pyx)."""

from collections.abc import Callable
from typing import Any, TypeVar

from typing_extensions import Buffer

T = TypeVar("T")
O = TypeVar("O")

def walk_binary_infer(
    document: dict[str, Any],
    body: Buffer,
    offset: int,
    datatypes: dict[str, Any],
    tensor_type: Callable[[str, Any, Any], T],
    output_type: Callable[[str, int, bool], O],
    max_bytes_elements: int,
) -> tuple[str, bool, dict[str, T], dict[str, O] | None, dict[str, bool]] | None:
    """(id, binary_data_output, inputs by name, requested outputs by name or None when the
    request names none, outputs' binary_data by name) of a common binary request, its
    arrays views of ``body`` from ``offset``; None for anything the general decode must
    read (the rest of the request, and every request it would refuse: a BYTES input past
    ``max_bytes_elements`` elements, or not holding that many)."""
