"""Tensors as the core sees them: a name, a Triton datatype, a shape and numpy data."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pytriton_core.types import DataType


@dataclass(slots=True)
class Tensor:
    """A named tensor.

    ``data`` has exactly ``shape``; for fixed-size datatypes it is often a zero-copy view
    over the received bytes (so it may be read-only), for BYTES an object array of ``bytes``.
    """

    name: str
    datatype: DataType
    data: np.ndarray

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.data.shape)
