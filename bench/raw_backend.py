"""The backend's raw throughput: the limit a server could reach with this model.

For the Python identity model, "raw" is the model's own ``execute`` called in a loop in this
process, with ``pb_utils`` request objects built from ready numpy arrays (pytriton-core's
``triton_python_backend_utils``), no server, no sockets. Comparing served throughput with it at
the same batch size says how much of the time per request the serving itself takes.
"""

from __future__ import annotations

import importlib.util
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from bench.payloads import EXAMPLE_MODEL, INPUT_NAME, MODEL_NAME, input_array

PB_UTILS_MODULE = "triton_python_backend_utils"
MAX_CALLS_PER_WINDOW = 5_000_000


@dataclass(frozen=True)
class RawResult:
    batch_size: int
    elements: int
    windows_inf_per_s: tuple[float, ...]

    @property
    def inf_per_s(self) -> float:
        return statistics.median(self.windows_inf_per_s)

    @property
    def us_per_inference(self) -> float:
        return 1e6 / self.inf_per_s if self.inf_per_s else float("nan")


def _load_model(model_dir: Path) -> tuple[Any, ModuleType]:
    from pytriton_core.backends.python import pb_utils  # the server's own pb_utils

    sys.modules.setdefault(PB_UTILS_MODULE, pb_utils)
    spec = importlib.util.spec_from_file_location("bench_raw_model", model_dir / "1" / "model.py")
    if spec is None or spec.loader is None:
        raise RuntimeError(f"cannot import {model_dir / '1' / 'model.py'}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    model = module.TritonPythonModel()
    if hasattr(model, "initialize"):
        model.initialize({"model_name": MODEL_NAME, "model_version": "1"})
    return model, pb_utils


def measure_raw(
    batch_sizes: tuple[int, ...], elements: int, window_s: float, windows: int
) -> list[RawResult]:
    """Inferences per second of ``execute`` on batches of ``batch_size`` requests, per window."""
    model, pb_utils = _load_model(EXAMPLE_MODEL)
    array = input_array(elements)
    results = []
    for batch_size in batch_sizes:

        def call(batch_size: int = batch_size) -> None:
            requests = [
                pb_utils.InferenceRequest(
                    model_name=MODEL_NAME, inputs=[pb_utils.Tensor(INPUT_NAME, array)]
                )
                for _ in range(batch_size)
            ]
            responses = model.execute(requests)
            if len(responses) != batch_size:
                raise RuntimeError(f"execute returned {len(responses)} responses")

        for _ in range(200):  # warm-up
            call()
        rates = []
        for _ in range(windows):
            calls, start = 0, time.perf_counter()
            deadline = start + window_s
            while calls < MAX_CALLS_PER_WINDOW:
                call()
                calls += 1
                if calls % 64 == 0 and time.perf_counter() >= deadline:
                    break
            rates.append(calls * batch_size / (time.perf_counter() - start))
        results.append(RawResult(batch_size, elements, tuple(rates)))
    return results
