"""The control tensors the sequence batcher adds to each request (``control_input``).

For each configured control the model gets one tensor per request, of shape ``[1, 1]``
(``[1]`` for a model without batching): START true on a sequence's first request, END on
its last, READY true for a real request and false for a slot's filler, CORRID the
correlation ID in the control's ``data_type`` (integers truncated to 32 bits for the
32-bit types, strings as BYTES). A filler gets every control false and CORRID 0 (or ""),
as Triton's null requests do.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pytriton_core import types
from pytriton_core.config.spec import (
    CONTROL_CORRID,
    CONTROL_END,
    CONTROL_READY,
    CONTROL_START,
    ModelSpec,
)
from pytriton_core.inference.request import SEQUENCE_END, SEQUENCE_START
from pytriton_core.inference.tensor import Tensor

CorrelationId = int | str


@dataclass(frozen=True, slots=True)
class _Boolean:
    name: str
    datatype: types.DataType
    false: Tensor
    true: Tensor


@dataclass(frozen=True, slots=True)
class _CorrelationControl:
    name: str
    datatype: types.DataType


class ControlTensors:
    """Makes the control tensors of one model (built once, from its spec)."""

    def __init__(self, spec: ModelSpec) -> None:
        sequence = spec.sequence_batching
        assert sequence is not None
        self._shape: tuple[int, ...] = (1, 1) if spec.batching else (1,)
        self._booleans: dict[str, _Boolean] = {}
        for kind in (CONTROL_START, CONTROL_END, CONTROL_READY):
            found = sequence.control(kind)
            if found is None:
                continue
            name, control = found
            datatype = control.tensor_datatype
            assert datatype is not None
            false, true = control.false_true
            self._booleans[kind] = _Boolean(
                name,
                datatype,
                self._tensor(name, datatype, false),
                self._tensor(name, datatype, true),
            )
        corrid = sequence.control(CONTROL_CORRID)
        self._corrid: _CorrelationControl | None = None
        if corrid is not None and corrid[1].datatype is not None:
            self._corrid = _CorrelationControl(corrid[0], corrid[1].datatype)

    @property
    def corrid_datatype(self) -> types.DataType | None:
        """The CORRID control's datatype, when the model has one."""
        return None if self._corrid is None else self._corrid.datatype

    @property
    def corrid_name(self) -> str:
        return "" if self._corrid is None else self._corrid.name

    def for_request(self, flags: int, correlation_id: CorrelationId) -> dict[str, Tensor]:
        """The controls of a real request with sequence ``flags``."""
        values = {
            CONTROL_START: bool(flags & SEQUENCE_START),
            CONTROL_END: bool(flags & SEQUENCE_END),
            CONTROL_READY: True,
        }
        tensors = {
            control.name: control.true if values[kind] else control.false
            for kind, control in self._booleans.items()
        }
        if self._corrid is not None:
            tensors[self._corrid.name] = self._correlation_tensor(correlation_id)
        return tensors

    def for_filler(self) -> dict[str, Tensor]:
        """The controls of a slot's filler: not ready, no correlation ID."""
        tensors = {control.name: control.false for control in self._booleans.values()}
        if self._corrid is not None:
            empty: CorrelationId = "" if self._corrid.datatype.is_bytes else 0
            tensors[self._corrid.name] = self._correlation_tensor(empty)
        return tensors

    def _correlation_tensor(self, correlation_id: CorrelationId) -> Tensor:
        assert self._corrid is not None
        datatype = self._corrid.datatype
        if datatype.is_bytes:
            text = correlation_id if isinstance(correlation_id, str) else str(correlation_id)
            array = np.empty(self._shape, dtype=np.object_)
            array.reshape(-1)[0] = text.encode()
            return Tensor(self._corrid.name, datatype, array)
        value = int(correlation_id) if isinstance(correlation_id, int) else 0
        # Triton copies the low bytes of the 64-bit ID into the control's type.
        low = np.array([value], np.uint64).view(np.uint8)[: datatype.itemsize]
        array = low.view(datatype.numpy_dtype).reshape(self._shape)
        return Tensor(self._corrid.name, datatype, array)

    def _tensor(self, name: str, datatype: types.DataType, value: object) -> Tensor:
        array = np.full(self._shape, value, dtype=datatype.numpy_dtype)
        array.flags.writeable = False  # shared by every request
        return Tensor(name, datatype, array)
