"""The common binary infer request read from its parsed JSON header in one pass, and the
memo of those readings by header (csrc/http/infer_walk.pyx)."""

from collections.abc import Callable
from typing import Any, TypeAlias, TypeVar

from typing_extensions import Buffer

T = TypeVar("T")
O = TypeVar("O")

# (id, binary_data_output, inputs by name, requested outputs by name or None, their binary_data)
Walked: TypeAlias = tuple[str, bool, dict[str, T], dict[str, O] | None, dict[str, bool]]

def walk_binary_infer(
    document: dict[str, Any],
    body: Buffer,
    offset: int,
    datatypes: dict[str, Any],
    tensor_type: Callable[[str, Any, Any], T],
    output_type: Callable[[str, int, bool], O],
    max_bytes_elements: int,
) -> Walked[T, O] | None:
    """(id, binary_data_output, inputs by name, requested outputs by name or None when the
    request names none, outputs' binary_data by name) of a common binary request, its
    arrays views of ``body`` from ``offset``; None for anything the general decode must
    read (the rest of the request, and every request it would refuse: a BYTES input past
    ``max_bytes_elements`` elements, or not holding that many)."""

class HeaderMemo:
    """The walk's readings by the exact bytes of their JSON header (see the module)."""

    def __init__(self, capacity: int = 256, max_header_bytes: int = 2048) -> None: ...
    def __len__(self) -> int: ...
    def recall(
        self,
        header: Buffer,
        body: Buffer,
        offset: int,
        tensor_type: Callable[[str, Any, Any], T],
        output_type: Callable[[str, int, bool], O],
    ) -> Walked[T, O] | None:
        """The walk's answer for a remembered header over ``body`` from ``offset``; None
        when not remembered or when the binary section is not the size it gives."""
    def remember(
        self,
        header: Buffer,
        walked: Walked[Any, Any],
    ) -> None:
        """Keep ``walked`` for ``header`` (not for a BYTES input or a header too long)."""
    def recall_document(self, body: Buffer) -> Any:
        """What ``remember_document`` kept for this whole JSON body, or None."""
    def remember_document(self, body: Buffer, plan: object) -> None:
        """Keep the front end's reading ``plan`` of a whole JSON body (not one too long)."""
