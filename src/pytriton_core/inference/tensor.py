"""Tensors as the core sees them: a name, a Triton datatype, a shape and numpy data."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import numpy as np

from pytriton_core.errors import ServerError
from pytriton_core.types import DataType


class Tensor:
    """A named tensor.

    ``data`` has exactly ``shape``; for fixed-size datatypes it is often a zero-copy view
    over the received bytes (so it may be read-only), for BYTES an object array of ``bytes``.

    An extension type (tensor.pxd): every request's inputs and outputs are made as one.
    ``DeviceTensor`` overrides ``data`` with a property, so compiled code reads ``data``
    through the attribute protocol, never as a typed field.
    """

    def __init__(self, name: str, datatype: DataType, data: np.ndarray) -> None:
        self.name = name
        self.datatype = datatype
        self.data = data

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(name={self.name!r}, datatype={self.datatype!r}, "
            f"data={self.data!r})"
        )

    @property
    def shape(self) -> tuple[int, ...]:
        return self.data.shape  # (numpy's shape is a tuple already)


class DeviceData(Protocol):
    """Tensor data in GPU memory (``memory.device.DeviceArray``)."""

    @property
    def shape(self) -> tuple[int, ...]: ...
    def to_host(self) -> np.ndarray: ...


class DeviceTensor(Tensor):
    """A tensor whose data lives on a GPU: a CUDA shared-memory input, or a GPU backend's
    output bound for a client's region.

    GPU backends and shared-memory outputs use ``device`` as it is; ``data`` (what
    everything else reads) is a host copy made on first use.
    """

    __slots__ = ("_host", "device")

    def __init__(self, name: str, datatype: DataType, device: DeviceData) -> None:
        self.name = name
        self.datatype = datatype
        self.device = device
        self._host: np.ndarray | None = None

    @property
    def data(self) -> np.ndarray:
        if self._host is None:
            self._host = self.device.to_host()
        return self._host

    @data.setter
    def data(self, value: np.ndarray) -> None:
        self._host = value

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.device.shape)

    @property
    def on_host(self) -> bool:
        """Whether the host copy has been made."""
        return self._host is not None


class GuardedTensor(Tensor):
    """A tensor over memory its client can take away while the request runs (a system
    shared-memory region it can shrink). ``lost()`` is the error to answer with once that
    happened, else None; the request checks it as it delivers each response."""

    __slots__ = ("lost",)

    def __init__(
        self,
        name: str,
        datatype: DataType,
        data: np.ndarray,
        lost: Callable[[], ServerError | None],
    ) -> None:
        self.name = name
        self.datatype = datatype
        self.data = data
        self.lost = lost
