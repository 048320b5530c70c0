"""The classification extension: replace an output with its top-k "value:index[:label]"."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from pytriton_core import types
from pytriton_core.errors import InvalidArgumentError
from pytriton_core.inference.tensor import Tensor


def read_labels(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines()


def _format_value(value: object) -> str:
    # Triton formats with std::to_string: six decimals for floating point.
    if isinstance(value, np.floating):
        return f"{float(value):f}"
    if isinstance(value, np.bool_):
        return str(int(value))
    return str(value)


def classify(tensor: Tensor, class_count: int, batched: bool, labels: list[str]) -> Tensor:
    """Top ``class_count`` entries per batch item (or of the whole tensor), as BYTES."""
    if tensor.datatype.is_bytes:
        raise InvalidArgumentError(
            f"class result not available for output due to unsupported type "
            f"'{tensor.datatype.wire_name}'"
        )
    data = np.asarray(tensor.data)
    rows = data.reshape(data.shape[0], -1) if batched and data.ndim > 1 else data.reshape(1, -1)
    k = min(class_count, rows.shape[1])
    results = []
    for row in rows:
        order = np.argsort(-row.astype(np.float64), kind="stable")[:k]
        for index in order:
            entry = f"{_format_value(row[index])}:{index}"
            if index < len(labels):
                entry += f":{labels[index]}"
            results.append(entry.encode())
    out = np.empty(len(results), dtype=object)
    out[:] = results
    shape = (rows.shape[0], k) if batched and data.ndim > 1 else (k,)
    return Tensor(tensor.name, types.BYTES, out.reshape(shape))
