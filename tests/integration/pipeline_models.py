"""Small models the ensemble and BLS tests write into temporary repositories.

``write_python(root, name, source, config)`` writes ``<root>/<name>/config.pbtxt`` and
``<root>/<name>/1/model.py``; ``write_ensemble`` writes an ensemble's config and its empty
version folder. Model parameters (``parameters { key: ... }``) tune the behaviour where a
source says so.
"""

from __future__ import annotations

from pathlib import Path


def write_python(root: Path, name: str, source: str, config: str) -> Path:
    model_dir = root / name
    (model_dir / "1").mkdir(parents=True, exist_ok=True)
    (model_dir / "1" / "model.py").write_text(source)
    (model_dir / "config.pbtxt").write_text(f'name: "{name}"\nbackend: "python"\n{config}\n')
    return model_dir


def step(model: str, inputs: dict[str, str], outputs: dict[str, str], version: int = -1) -> str:
    """One ``ensemble_scheduling.step``: model tensor -> ensemble tensor, both ways."""
    maps = "".join(f' input_map {{ key: "{k}" value: "{v}" }}' for k, v in inputs.items())
    maps += "".join(f' output_map {{ key: "{k}" value: "{v}" }}' for k, v in outputs.items())
    return f'{{ model_name: "{model}" model_version: {version}{maps} }}'


def write_ensemble(root: Path, name: str, io: str, steps: list[str], extra: str = "") -> Path:
    model_dir = root / name
    (model_dir / "1").mkdir(parents=True, exist_ok=True)
    (model_dir / "config.pbtxt").write_text(
        f'name: "{name}"\nplatform: "ensemble"\n{io}\n{extra}\n'
        f"ensemble_scheduling {{ step [ {', '.join(steps)} ] }}\n"
    )
    return model_dir


def tensors(kind: str, **declared: str) -> str:
    """``input``/``output`` entries: ``NAME="TYPE_FP32 [4]"``."""
    entries = []
    for name, text in declared.items():
        datatype, dims = text.split(" ", 1)
        entries.append(f'{{ name: "{name}" data_type: {datatype} dims: {dims} }}')
    return f"{kind} [ {', '.join(entries)} ]"


# Y = f(X) elementwise, FP32; parameter "op": "double" (2x, the default), "square" (x*x),
# "negate" (-x); "delay_s" sleeps in execute; "started_file" is created when execute starts;
# "fail": every response is an error. MAX_RUNNING (when declared) reports the most executes
# seen running at once in this model (all instances share the module).
UNARY = """
import json
import os
import threading
import time

import numpy as np
import triton_python_backend_utils as pb_utils

_lock = threading.Lock()
_running = [0, 0]  # now, most seen


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        p = {k: v["string_value"] for k, v in config.get("parameters", {}).items()}
        self.op = p.get("op", "double")
        self.delay_s = float(p.get("delay_s", "0"))
        self.started_file = p.get("started_file", "")
        self.fail = p.get("fail", "") == "yes"
        self.outputs = [o["name"] for o in config["output"]]

    def execute(self, requests):
        with _lock:
            _running[0] += 1
            _running[1] = max(_running)
        try:
            if self.started_file:
                open(self.started_file, "a").close()
            if self.delay_s:
                time.sleep(self.delay_s)
            return [self._answer(request) for request in requests]
        finally:
            with _lock:
                _running[0] -= 1

    def _answer(self, request):
        if self.fail:
            return pb_utils.InferenceResponse(
                error=pb_utils.TritonError("the model refused", pb_utils.TritonError.INVALID_ARG)
            )
        x = pb_utils.get_input_tensor_by_name(request, "X").as_numpy()
        y = {"double": x * 2, "square": x * x, "negate": -x}[self.op].astype(np.float32)
        out = [pb_utils.Tensor("Y", y)]
        if "MAX_RUNNING" in self.outputs:
            out.append(pb_utils.Tensor("MAX_RUNNING", np.array([_running[1]], np.int32)))
        return pb_utils.InferenceResponse(out)
"""

UNARY_CONFIG = """
input [ { name: "X" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "Y" data_type: TYPE_FP32 dims: [ 4 ] } ]
"""


def unary_config(op: str = "double", extra: str = "", outputs: str = "") -> str:
    output = 'output [ { name: "Y" data_type: TYPE_FP32 dims: [ 4 ] } ]'
    if outputs:
        output = f'output [ {{ name: "Y" data_type: TYPE_FP32 dims: [ 4 ] }}, {outputs} ]'
    return (
        'input [ { name: "X" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
        f"{output}\n"
        f'parameters {{ key: "op" value: {{ string_value: "{op}" }} }}\n{extra}'
    )


def parameter(key: str, value: str) -> str:
    return f'parameters {{ key: "{key}" value: {{ string_value: "{value}" }} }}'


# OUTPUT0 = INPUT0 + INPUT1, OUTPUT1 = INPUT0 - INPUT1 (FP32 [4]).
ADD_SUB = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            a = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            b = pb_utils.get_input_tensor_by_name(request, "INPUT1").as_numpy()
            responses.append(
                pb_utils.InferenceResponse(
                    [pb_utils.Tensor("OUTPUT0", a + b), pb_utils.Tensor("OUTPUT1", a - b)]
                )
            )
        return responses
"""

ADD_SUB_CONFIG = """
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] },
        { name: "INPUT1" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] },
         { name: "OUTPUT1" data_type: TYPE_FP32 dims: [ 4 ] } ]
"""

# Y = X, and META (BYTES [1]): what the model saw of its request, as JSON.
META = """
import json

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            seen = {
                "id": request.request_id(),
                "parameters": json.loads(request.parameters()),
                "correlation_id": request.correlation_id(),
                "flags": request.flags(),
                "timeout": request.timeout(),
            }
            x = pb_utils.get_input_tensor_by_name(request, "X").as_numpy()
            meta = np.array([json.dumps(seen).encode()], dtype=np.object_)
            responses.append(
                pb_utils.InferenceResponse(
                    [pb_utils.Tensor("Y", x), pb_utils.Tensor("META", meta)]
                )
            )
        return responses
"""

META_CONFIG = """
input [ { name: "X" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "Y" data_type: TYPE_FP32 dims: [ 4 ] },
         { name: "META" data_type: TYPE_STRING dims: [ 1 ] } ]
"""

# Decoupled: for N = COUNT[0], N responses, the i-th with Y = X + i; then a flag-only final.
# Until the caller cancels: "until_cancelled" keeps sending (up to 10000, 5 ms apart) until
# the request is cancelled, then ends.
REPEAT = """
import json
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        p = {k: v["string_value"] for k, v in config.get("parameters", {}).items()}
        self.until_cancelled = p.get("until_cancelled", "") == "yes"
        # Seconds execute goes on after its final response (a slow clean-up).
        self.linger_s = float(p.get("linger_s", "0"))

    def execute(self, requests):
        for request in requests:
            sender = request.get_response_sender()
            x = pb_utils.get_input_tensor_by_name(request, "X").as_numpy()
            count = int(pb_utils.get_input_tensor_by_name(request, "COUNT").as_numpy()[0])
            if self.until_cancelled:
                count = 10000
            for i in range(count):
                if self.until_cancelled:
                    if request.is_cancelled():
                        break
                    time.sleep(0.005)
                y = (x + np.float32(i)).astype(np.float32)
                sender.send(pb_utils.InferenceResponse([pb_utils.Tensor("Y", y)]))
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        time.sleep(self.linger_s)
        return None
"""

REPEAT_CONFIG = """
model_transaction_policy { decoupled: true }
input [ { name: "X" data_type: TYPE_FP32 dims: [ 4 ] },
        { name: "COUNT" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "Y" data_type: TYPE_FP32 dims: [ 4 ] } ]
"""
