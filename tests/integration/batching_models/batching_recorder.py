"""The model behind every batching test model: it answers, and records what it saw.

Each ``<model>/1/model.py`` imports ``RecordingModel`` from here (this file sits at the top of
the repository, where neither server looks for models). Every model has one input and
these outputs, all per request row (a request of batch size N gets N equal rows):

* ``OUTPUT0`` (FP32, INPUT0's dims): ``INPUT0 * 2 + sum(INPUT0 row)``, computed the way a
  batching backend does it: one concatenated batch, split back per request; the answer for a
  request never depends on what it was batched with.
* ``BATCH_REQUESTS`` / ``BATCH_SIZE`` (INT32): requests / total batch size of the ``execute``
  call the request was part of.
* ``BATCH_SHAPES`` (INT32): distinct non-batch shapes of INPUT0 within that call (1 unless
  requests of different shapes were merged).
* ``EXEC_SEQ`` (INT64): the instance's execution counter (1 for its first ``execute``) and
  ``POSITION`` (INT32): the request's index in that call, so order can be checked.
* ``INSTANCE`` (STRING): the instance's name; ``START_NS`` / ``END_NS`` (INT64): wall-clock
  time (``time.time_ns``) when the call began / finished computing.

Request parameters steer it: ``sleep_ms`` (the call sleeps the sum over its requests, to hold
an instance busy) and ``start_file`` (a path the call creates as it begins, so a test knows
the request is executing).
"""

import json
import time
from pathlib import Path

import numpy as np
import triton_python_backend_utils as pb_utils


def _column(name, value, dtype, rows):
    """A per-request output: ``rows`` equal rows of one ``value``."""
    return pb_utils.Tensor(name, np.full((rows, 1), value, dtype=dtype))


def answer(values):
    """The unbatched answer for INPUT0 ``values`` (a batch of rows)."""
    values = np.asarray(values, dtype=np.float32)
    return (values * 2 + values.sum(axis=-1, keepdims=True)).astype(np.float32)


class RecordingModel:
    def initialize(self, args):
        self.instance_name = args["model_instance_name"]
        self.executions = 0

    def execute(self, requests):
        self.executions += 1
        sequence = self.executions
        start_ns = time.time_ns()
        parameters = [json.loads(request.parameters()) for request in requests]
        for params in parameters:
            if "start_file" in params:
                Path(params["start_file"]).touch()
        inputs = [
            pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy() for request in requests
        ]
        sizes = [values.shape[0] for values in inputs]
        shapes = {values.shape[1:] for values in inputs}
        sleep_ms = sum(float(params.get("sleep_ms", 0)) for params in parameters)
        if sleep_ms:
            time.sleep(sleep_ms / 1000)
        if len(shapes) == 1:
            merged = answer(np.concatenate(inputs))
            outputs = np.split(merged, np.cumsum(sizes)[:-1])
        else:  # merged shapes: still answer, BATCH_SHAPES tells the test
            outputs = [answer(values) for values in inputs]
        end_ns = time.time_ns()

        responses = []
        for position, (rows, output) in enumerate(zip(sizes, outputs, strict=True)):
            tensors = [
                pb_utils.Tensor("OUTPUT0", output),
                _column("BATCH_REQUESTS", len(requests), np.int32, rows),
                _column("BATCH_SIZE", sum(sizes), np.int32, rows),
                _column("BATCH_SHAPES", len(shapes), np.int32, rows),
                _column("EXEC_SEQ", sequence, np.int64, rows),
                _column("POSITION", position, np.int32, rows),
                _column("INSTANCE", self.instance_name.encode(), np.object_, rows),
                _column("START_NS", start_ns, np.int64, rows),
                _column("END_NS", end_ns, np.int64, rows),
            ]
            responses.append(pb_utils.InferenceResponse(output_tensors=tensors))
        return responses
