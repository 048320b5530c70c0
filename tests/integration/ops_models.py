"""Small Python-backend models the operations tests write into temporary repositories.

Each writer creates ``<root>/<name>/config.pbtxt`` and ``<root>/<name>/<version>/model.py``.
"""

from __future__ import annotations

from pathlib import Path

# OUTPUT0 = INPUT0 + the model's version number, so a client sees which version answered.
# Parameters: "delay_s" sleeps in execute; "gate_file": execute waits until that file exists;
# "initialize_delay_s" sleeps in initialize; "finalize_marker" is a file finalize() appends to.
VERSIONED_MODEL = """
import os
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        import json

        config = json.loads(args["model_config"])
        parameters = config.get("parameters", {})
        self.version = int(args["model_version"])
        self.delay_s = float(parameters.get("delay_s", {}).get("string_value", "0") or 0)
        self.marker = parameters.get("finalize_marker", {}).get("string_value", "")
        self.gate = parameters.get("gate_file", {}).get("string_value", "")
        delay = float(parameters.get("initialize_delay_s", {}).get("string_value", "0") or 0)
        time.sleep(delay)

    def execute(self, requests):
        while self.gate and not os.path.exists(self.gate):
            time.sleep(0.01)
        if self.delay_s:
            time.sleep(self.delay_s)
        responses = []
        for request in requests:
            data = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            output = (data + np.float32(self.version)).astype(np.float32)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", output)]))
        return responses

    def finalize(self):
        if self.marker:
            with open(self.marker, "a") as marker:
                marker.write(f"finalized {self.version}\\n")
"""

# Custom metrics: a counter of requests, a gauge of the last sum, a histogram of sizes.
METRICS_MODEL = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        requests = pb_utils.MetricFamily(
            "custom_requests", "Requests this model executed", pb_utils.MetricFamily.COUNTER
        )
        last_sum = pb_utils.MetricFamily(
            "custom_last_sum", "Sum of the last input", pb_utils.MetricFamily.GAUGE
        )
        sizes = pb_utils.MetricFamily(
            "custom_input_size", "Input element counts", pb_utils.MetricFamily.HISTOGRAM
        )
        labels = {"model": args["model_name"]}
        self.requests = requests.Metric(labels=labels)
        self.last_sum = last_sum.Metric(labels=labels)
        self.sizes = sizes.Metric(labels=labels, buckets=[1.0, 4.0, 16.0])

    def execute(self, requests):
        responses = []
        for request in requests:
            data = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            self.requests.increment(1)
            self.last_sum.set(float(data.sum()))
            self.sizes.observe(float(data.size))
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", data)]))
        return responses
"""

# Logs one line at each level from execute (pb_utils.Logger).
LOGGING_MODEL = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        pb_utils.Logger.log_info("model info line")
        pb_utils.Logger.log_warn("model warning line")
        pb_utils.Logger.log_error("model error line")
        pb_utils.Logger.log_verbose("model verbose line")
        responses = []
        for request in requests:
            data = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", data)]))
        return responses
"""


def config_text(
    name: str,
    *,
    max_batch_size: int = 0,
    parameters: dict[str, str] | None = None,
    extra: str = "",
) -> str:
    params = "".join(
        f'parameters {{ key: "{k}" value: {{ string_value: "{v}" }} }}\n'
        for k, v in (parameters or {}).items()
    )
    return (
        f'name: "{name}"\nbackend: "python"\nmax_batch_size: {max_batch_size}\n'
        'input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]\n'
        'output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]\n'
        f"{params}{extra}"
    )


def write_model(
    root: Path,
    name: str,
    *,
    versions: tuple[int, ...] = (1,),
    source: str = VERSIONED_MODEL,
    max_batch_size: int = 0,
    parameters: dict[str, str] | None = None,
    extra: str = "",
) -> Path:
    model_dir = root / name
    model_dir.mkdir(parents=True, exist_ok=True)
    (model_dir / "config.pbtxt").write_text(
        config_text(name, max_batch_size=max_batch_size, parameters=parameters, extra=extra)
    )
    for version in versions:
        add_version(model_dir, version, source)
    return model_dir


def add_version(model_dir: Path, version: int, source: str = VERSIONED_MODEL) -> None:
    version_dir = model_dir / str(version)
    version_dir.mkdir(parents=True, exist_ok=True)
    (version_dir / "model.py").write_text(source)
