"""The models Triton's Python client examples (the client repository's
``src/python/examples``) expect, written as Python-backend models with the names, tensors,
datatypes and shapes of Triton's own example models (its ``docs/examples/model_repository``
and the QA models the examples name).

``write_client_example_repository(root)`` writes them all under ``root``.
"""

from __future__ import annotations

from pathlib import Path

from control_models import SIMPLE_CONFIG, write_model_folder, write_simple
from pipeline_models import ADD_SUB
from robustness import IDENTITY_MODEL

# simple, simple_int8 and simple_string: INPUT0 and INPUT1 [16] in, their sum and difference
# out, max_batch_size 8. In simple_string each element is an integer written in decimal.
SIMPLE_INT8_CONFIG = SIMPLE_CONFIG.replace("TYPE_INT32", "TYPE_INT8")
SIMPLE_STRING_CONFIG = SIMPLE_CONFIG.replace("TYPE_INT32", "TYPE_STRING")

STRING_ADD_SUB_MODEL = """
import numpy as np
import triton_python_backend_utils as pb_utils


def as_integers(request, name):
    strings = pb_utils.get_input_tensor_by_name(request, name).as_numpy()
    return strings.astype(np.int64)  # int() of each bytes element


def as_strings(integers):
    written = [str(value).encode() for value in integers.flat]
    return np.array(written, dtype=np.object_).reshape(integers.shape)


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            a = as_integers(request, "INPUT0")
            b = as_integers(request, "INPUT1")
            outputs = [
                pb_utils.Tensor("OUTPUT0", as_strings(a + b)),
                pb_utils.Tensor("OUTPUT1", as_strings(a - b)),
            ]
            responses.append(pb_utils.InferenceResponse(outputs))
        return responses
"""

# simple_identity (BYTES) and custom_identity_int32 (INT32): OUTPUT0 = INPUT0.
IDENTITY_CONFIG = """
backend: "python"
max_batch_size: 8
input [ {{ name: "INPUT0" data_type: {data_type} dims: [ -1 ] }} ]
output [ {{ name: "OUTPUT0" data_type: {data_type} dims: [ -1 ] }} ]
"""

# repeat_int32, as Triton's repeat backend: for each element of IN, after DELAY[i] ms, a
# response with OUT = [IN[i]] and IDX = [i]; then, after WAIT ms, the final flag alone.
REPEAT_CONFIG = """
backend: "python"
max_batch_size: 0
model_transaction_policy { decoupled: true }
input [ { name: "IN" data_type: TYPE_INT32 dims: [ -1 ] },
        { name: "DELAY" data_type: TYPE_UINT32 dims: [ -1 ] },
        { name: "WAIT" data_type: TYPE_UINT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] },
         { name: "IDX" data_type: TYPE_UINT32 dims: [ 1 ] } ]
"""

REPEAT_MODEL = """
import time

import numpy as np
import triton_python_backend_utils as pb_utils


def tensor(request, name):
    return pb_utils.get_input_tensor_by_name(request, name).as_numpy()


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            values, delays = tensor(request, "IN"), tensor(request, "DELAY")
            wait_ms = int(tensor(request, "WAIT")[0])
            sender = request.get_response_sender()
            for index, value in enumerate(values):
                time.sleep(int(delays[index]) / 1000)
                outputs = [
                    pb_utils.Tensor("OUT", np.array([value], dtype=np.int32)),
                    pb_utils.Tensor("IDX", np.array([index], dtype=np.uint32)),
                ]
                sender.send(pb_utils.InferenceResponse(outputs))
            time.sleep(wait_ms / 1000)
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
"""

# densenet_onnx with the tensors of Triton's example (an image in, 1000 class scores out), for
# grpc_client.py, which sends any bytes and prints what comes back. A stand-in: every score is
# the image's largest value (exact, unlike a mean, whose float rounding follows numpy's
# version and the buffer's alignment).
DENSENET_CONFIG = """
backend: "python"
max_batch_size: 0
input [ { name: "data_0" data_type: TYPE_FP32 format: FORMAT_NCHW dims: [ 3, 224, 224 ] } ]
output [ { name: "fc6_1" data_type: TYPE_FP32 dims: [ 1000 ] } ]
"""

DENSENET_MODEL = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            image = pb_utils.get_input_tensor_by_name(request, "data_0").as_numpy()
            scores = np.full(1000, image.max(), dtype=np.float32)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("fc6_1", scores)]))
        return responses
"""


def write_client_example_repository(root: Path) -> Path:
    """Every model the client examples name, under ``root``."""
    write_simple(root)
    write_model_folder(root, "simple_int8", SIMPLE_INT8_CONFIG, ADD_SUB)
    write_model_folder(root, "simple_string", SIMPLE_STRING_CONFIG, STRING_ADD_SUB_MODEL)
    identity_bytes = IDENTITY_CONFIG.format(data_type="TYPE_STRING")
    write_model_folder(root, "simple_identity", identity_bytes, IDENTITY_MODEL)
    identity_int32 = IDENTITY_CONFIG.format(data_type="TYPE_INT32")
    write_model_folder(root, "custom_identity_int32", identity_int32, IDENTITY_MODEL)
    write_model_folder(root, "repeat_int32", REPEAT_CONFIG, REPEAT_MODEL)
    write_model_folder(root, "densenet_onnx", DENSENET_CONFIG, DENSENET_MODEL)
    return root
