"""Python-backend models the streaming and cancellation tests write into temporary
repositories: decoupled token streams, models that loop until they are cancelled, large
outputs for slow readers.

A model that notices its cancellation appends ``<event> <time.monotonic()>`` lines to the
file named by the request's ``marker`` parameter; CLOCK_MONOTONIC is one clock for every
process of the machine, so a test compares it with the moment its client went away.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

# Non-decoupled. Parameters: "hold_ms" sleeps that long, then answers; otherwise it loops
# until request.is_cancelled() (at most "limit_s", default 30 s), logging to "marker".
SPIN_MODEL = """
import json
import time

import numpy as np
import triton_python_backend_utils as pb_utils


def mark(path, event):
    if path:
        with open(path, "a") as marker:
            marker.write(f"{event} {time.monotonic()}\\n")


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            parameters = json.loads(request.parameters() or "{}")
            marker = parameters.get("marker", "")
            mark(marker, "started")
            if "hold_ms" in parameters:
                time.sleep(parameters["hold_ms"] / 1000)
            else:
                deadline = time.monotonic() + parameters.get("limit_s", 30)
                while not request.is_cancelled() and time.monotonic() < deadline:
                    time.sleep(0.001)
                mark(marker, "cancelled" if request.is_cancelled() else "expired")
            data = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", data)]))
        return responses
"""

SPIN_CONFIG = """
name: "{name}"
backend: "python"
max_batch_size: {max_batch_size}
input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] }} ]
output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] }} ]
instance_group [ {{ count: 1 kind: KIND_CPU }} ]
{extra}
"""

# Decoupled: text_input (BYTES [1]) and the optional count (INT32 [1], default 1). Sends
# `count` responses {text_output: "<text_input><i>", index: i}, then FINAL on its own, or
# with the last response when the "final_with_last" parameter is true. Parameters:
# "fail_at" makes that response an error; "delay_ms" sleeps before each response;
# "until_cancelled": keeps sending (every "delay_ms") until the sender is cancelled,
# logging to "marker", then ends with FINAL alone or, with "cancel_error", with a CANCELLED
# error response.
TOKENS_MODEL = """
import json
import time

import numpy as np
import triton_python_backend_utils as pb_utils

FINAL = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL


def mark(path, event):
    if path:
        with open(path, "a") as marker:
            marker.write(f"{event} {time.monotonic()}\\n")


def token(text, index):
    return pb_utils.InferenceResponse(
        output_tensors=[
            pb_utils.Tensor("text_output", np.array([text + str(index).encode()], np.object_)),
            pb_utils.Tensor("index", np.array([index], np.int32)),
        ]
    )


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            parameters = json.loads(request.parameters() or "{}")
            sender = request.get_response_sender()
            text = pb_utils.get_input_tensor_by_name(request, "text_input").as_numpy()
            text = bytes(text.reshape(-1)[0])
            count_tensor = pb_utils.get_input_tensor_by_name(request, "count")
            count = 1 if count_tensor is None else int(count_tensor.as_numpy().reshape(-1)[0])
            delay_s = parameters.get("delay_ms", 0) / 1000
            if parameters.get("until_cancelled"):
                marker = parameters.get("marker", "")
                mark(marker, "started")
                index = 0
                while not sender.is_cancelled() and index < 100000:
                    sender.send(token(text, index))
                    index += 1
                    time.sleep(delay_s or 0.001)
                mark(marker, f"cancelled-after-{index}")
                if parameters.get("cancel_error"):
                    error = pb_utils.TritonError("cancelled", pb_utils.TritonError.CANCELLED)
                    sender.send(pb_utils.InferenceResponse(error=error), flags=FINAL)
                else:
                    sender.send(flags=FINAL)
                continue
            fail_at = parameters.get("fail_at", -1)
            final_with_last = parameters.get("final_with_last", False)
            for index in range(count):
                if delay_s:
                    time.sleep(delay_s)
                if index == fail_at:
                    response = pb_utils.InferenceResponse(
                        error=pb_utils.TritonError(f"failed at {index}")
                    )
                else:
                    response = token(text, index)
                last = final_with_last and index == count - 1
                sender.send(response, flags=FINAL if last else 0)
            if not (final_with_last and count):
                sender.send(flags=FINAL)
        return None
"""

TOKENS_CONFIG = """
name: "{name}"
backend: "python"
max_batch_size: 0
model_transaction_policy {{ decoupled: true }}
input [
  {{ name: "text_input" data_type: TYPE_STRING dims: [ 1 ] }},
  {{ name: "count" data_type: TYPE_INT32 dims: [ 1 ] optional: true }}
]
output [
  {{ name: "text_output" data_type: TYPE_STRING dims: [ 1 ] }},
  {{ name: "index" data_type: TYPE_INT32 dims: [ 1 ] }}
]
instance_group [ {{ count: {instances} kind: KIND_CPU }} ]
"""

# Non-decoupled, for the generate mapping: text_output echoes text_input, ivec_out the
# optional ivec (INT32 [-1]), fmat_out the optional fmat (FP32 [2, -1]), and params is the
# JSON of the request parameters the model received.
ECHO_MODEL = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            text = pb_utils.get_input_tensor_by_name(request, "text_input").as_numpy()
            ivec = pb_utils.get_input_tensor_by_name(request, "ivec")
            fmat = pb_utils.get_input_tensor_by_name(request, "fmat")
            outputs = [
                pb_utils.Tensor("text_output", text.astype(np.object_)),
                pb_utils.Tensor("params", np.array([request.parameters().encode()], np.object_)),
            ]
            if ivec is not None:
                outputs.append(pb_utils.Tensor("ivec_out", ivec.as_numpy()))
            if fmat is not None:
                outputs.append(pb_utils.Tensor("fmat_out", fmat.as_numpy()))
            responses.append(pb_utils.InferenceResponse(outputs))
        return responses
"""

ECHO_CONFIG = """
name: "{name}"
backend: "python"
max_batch_size: 0
input [
  {{ name: "text_input" data_type: TYPE_STRING dims: [ 1 ] }},
  {{ name: "ivec" data_type: TYPE_INT32 dims: [ -1 ] optional: true }},
  {{ name: "fmat" data_type: TYPE_FP32 dims: [ 2, -1 ] optional: true }}
]
output [
  {{ name: "text_output" data_type: TYPE_STRING dims: [ 1 ] }},
  {{ name: "params" data_type: TYPE_STRING dims: [ 1 ] }},
  {{ name: "ivec_out" data_type: TYPE_INT32 dims: [ -1 ] }},
  {{ name: "fmat_out" data_type: TYPE_FP32 dims: [ 2, -1 ] }}
]
"""

# Non-decoupled: OUT is "mib" MiB of uint8 (parameter; INPUT0 is ignored).
BLOB_MODEL = """
import json

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            parameters = json.loads(request.parameters() or "{}")
            size = int(parameters.get("mib", 1)) << 20
            out = np.full(size, 7, np.uint8)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", out)]))
        return responses
"""

BLOB_CONFIG = """
name: "{name}"
backend: "python"
max_batch_size: 0
input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] }} ]
output [ {{ name: "OUT" data_type: TYPE_UINT8 dims: [ -1 ] }} ]
"""

# Decoupled: "chunks" responses whose text_output is a 1 MiB string each, as fast as the
# server takes them.
CHUNKS_MODEL = """
import json

import numpy as np
import triton_python_backend_utils as pb_utils

FINAL = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            parameters = json.loads(request.parameters() or "{}")
            sender = request.get_response_sender()
            for index in range(int(parameters.get("chunks", 1))):
                if sender.is_cancelled():
                    break
                text = np.array([b"%07d" % index + b"x" * ((1 << 20) - 7)], np.object_)
                sender.send(
                    pb_utils.InferenceResponse([pb_utils.Tensor("text_output", text)])
                )
            sender.send(flags=FINAL)
        return None
"""

CHUNKS_CONFIG = """
name: "{name}"
backend: "python"
max_batch_size: 0
model_transaction_policy {{ decoupled: true }}
input [ {{ name: "text_input" data_type: TYPE_STRING dims: [ 1 ] }} ]
output [ {{ name: "text_output" data_type: TYPE_STRING dims: [ 1 ] }} ]
"""


def write(root: Path, name: str, config: str, source: str) -> Path:
    model_dir = root / name
    (model_dir / "1").mkdir(parents=True, exist_ok=True)
    (model_dir / "config.pbtxt").write_text(config)
    (model_dir / "1" / "model.py").write_text(source)
    return model_dir


def write_spin(root: Path, name: str, *, dynamic_batching: bool = False) -> Path:
    extra = "dynamic_batching { max_queue_delay_microseconds: 0 }" if dynamic_batching else ""
    batch = 4 if dynamic_batching else 0
    return write(
        root, name, SPIN_CONFIG.format(name=name, max_batch_size=batch, extra=extra), SPIN_MODEL
    )


def write_tokens(root: Path, name: str = "tokens", *, instances: int = 1) -> Path:
    return write(root, name, TOKENS_CONFIG.format(name=name, instances=instances), TOKENS_MODEL)


def write_echo(root: Path, name: str = "echo") -> Path:
    return write(root, name, ECHO_CONFIG.format(name=name), ECHO_MODEL)


def write_blob(root: Path, name: str = "blob") -> Path:
    return write(root, name, BLOB_CONFIG.format(name=name), BLOB_MODEL)


def write_chunks(root: Path, name: str = "chunks") -> Path:
    return write(root, name, CHUNKS_CONFIG.format(name=name), CHUNKS_MODEL)


def marker_events(path: Path) -> dict[str, float]:
    """The events a model logged to ``path``: event -> monotonic time (the last of each)."""
    if not path.exists():
        return {}
    events: dict[str, float] = {}
    for line in path.read_text().splitlines():
        event, _, moment = line.partition(" ")
        events[event] = float(moment)
    return events


def raw_post(path: str, document: Any, *, close: bool = False) -> bytes:
    """An HTTP/1.1 POST of ``document`` as JSON, as bytes for a socket."""
    body = json.dumps(document).encode()
    connection = b"Connection: close\r\n" if close else b""
    return (
        b"POST %s HTTP/1.1\r\nHost: t\r\n%sContent-Type: application/json\r\n"
        b"Content-Length: %d\r\n\r\n%s" % (path.encode(), connection, len(body), body)
    )
