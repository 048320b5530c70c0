"""The datatype table: one row per Triton datatype, the single source of truth.

Config enum name (``TYPE_FP32``) ↔ wire name (``FP32``) ↔ numpy dtype ↔ element size.
"""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np


class DataType:
    """One row of the table: an extension type (types.pxd) whose fields are read-only, and
    read as C fields by the compiled request path (every tensor of every request asks
    them). Rows compare by value; the table's rows are the only ones made."""

    def __init__(
        self,
        wire_name: str,  # "FP32": the protocol string
        config_name: str,  # "TYPE_FP32": the ModelConfig enum name
        config_value: int,  # 11: the ModelConfig enum value
        numpy_dtype: np.dtype[Any],  # object for BYTES
        itemsize: int,  # 0 for BYTES (variable-size elements)
    ) -> None:
        self.wire_name = wire_name
        self.config_name = config_name
        self.config_value = config_value
        self.numpy_dtype = numpy_dtype
        self.itemsize = itemsize
        self.is_bytes = wire_name == "BYTES"

    def _key(self) -> tuple[str, str, int, np.dtype[Any], int]:
        return (
            self.wire_name,
            self.config_name,
            self.config_value,
            self.numpy_dtype,
            self.itemsize,
        )

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, DataType):
            return NotImplemented
        return self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        return (
            f"DataType(wire_name={self.wire_name!r}, config_name={self.config_name!r}, "
            f"config_value={self.config_value!r}, numpy_dtype={self.numpy_dtype!r}, "
            f"itemsize={self.itemsize!r}, is_bytes={self.is_bytes!r})"
        )


def _row(wire: str, config: str, value: int, dtype: object, size: int) -> DataType:
    return DataType(wire, config, value, np.dtype(dtype), size)  # type: ignore[call-overload]


DATATYPES: tuple[DataType, ...] = (
    _row("BOOL", "TYPE_BOOL", 1, np.bool_, 1),
    _row("UINT8", "TYPE_UINT8", 2, np.uint8, 1),
    _row("UINT16", "TYPE_UINT16", 3, np.uint16, 2),
    _row("UINT32", "TYPE_UINT32", 4, np.uint32, 4),
    _row("UINT64", "TYPE_UINT64", 5, np.uint64, 8),
    _row("INT8", "TYPE_INT8", 6, np.int8, 1),
    _row("INT16", "TYPE_INT16", 7, np.int16, 2),
    _row("INT32", "TYPE_INT32", 8, np.int32, 4),
    _row("INT64", "TYPE_INT64", 9, np.int64, 8),
    _row("FP16", "TYPE_FP16", 10, np.float16, 2),
    _row("FP32", "TYPE_FP32", 11, np.float32, 4),
    _row("FP64", "TYPE_FP64", 12, np.float64, 8),
    _row("BYTES", "TYPE_STRING", 13, np.object_, 0),
    _row("BF16", "TYPE_BF16", 14, ml_dtypes.bfloat16, 2),
)

BY_WIRE_NAME: dict[str, DataType] = {dt.wire_name: dt for dt in DATATYPES}
BY_CONFIG_NAME: dict[str, DataType] = {dt.config_name: dt for dt in DATATYPES}
BY_CONFIG_VALUE: dict[int, DataType] = {dt.config_value: dt for dt in DATATYPES}
_BY_NUMPY: dict[np.dtype, DataType] = {dt.numpy_dtype: dt for dt in DATATYPES}
BYTES = BY_WIRE_NAME["BYTES"]


def from_wire_name(name: str) -> DataType | None:
    return BY_WIRE_NAME.get(name)


def from_numpy(dtype: np.dtype) -> DataType | None:
    """The Triton datatype of a numpy dtype; numpy ``S``/``U`` strings map to BYTES."""
    found = _BY_NUMPY.get(dtype)
    if found is None and dtype.kind in ("S", "U", "O"):
        return BYTES
    return found


def element_count(shape: tuple[int, ...] | list[int]) -> int:
    count = 1
    for dim in shape:
        count *= dim
    return count
