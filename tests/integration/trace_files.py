"""Reading the trace files a server writes with ``--trace-config=triton,log-frequency=1``
(one ``<file>.<n>`` per finished trace, numbered in the order the traces finished)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

# The stamps of a child trace (an ensemble step, a BLS call), in Triton 2.51's order: the
# core's, none of a front end's.
CORE_STAMPS = [
    "REQUEST_START",
    "QUEUE_START",
    "COMPUTE_START",
    "COMPUTE_INPUT_END",
    "COMPUTE_OUTPUT_START",
    "COMPUTE_END",
    "REQUEST_END",
]


def traces_written(trace_file: Path) -> int:
    """How many traces the server has written so far."""
    return len(list(trace_file.parent.glob(f"{trace_file.name}.*")))


def read_traces(trace_file: Path, start: int, count: int, wait_s: float = 30.0) -> list[Any]:
    """The entries of traces ``start`` .. ``start + count - 1``, in the order written,
    waiting for them to be written."""
    paths = [Path(f"{trace_file}.{index}") for index in range(start, start + count)]
    deadline = time.monotonic() + wait_s
    while not all(path.is_file() for path in paths):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {count} traces after {start}")
        time.sleep(0.05)
    return [entry for path in paths for entry in json.loads(path.read_text())]


def trace_stamps(entries: list[Any], trace_id: int) -> list[str]:
    """The stamp names of one trace, in the order written (time order, as Triton's)."""
    found = [
        stamp
        for entry in entries
        if entry["id"] == trace_id
        for stamp in entry.get("timestamps", ())
    ]
    assert [s["ns"] for s in found] == sorted(s["ns"] for s in found)
    return [stamp["name"] for stamp in found]
