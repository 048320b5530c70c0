"""Decoupled sequence models of test_sequence_decoupled.py, written at run time.

* ``dstate_direct``, ``dstate_oldest``: a running sum kept as implicit state by a decoupled
  model that answers from a thread of its own, 30 ms after ``execute`` has returned. Each
  request gets three responses: OUTPUT with a decoy state (the sum + 1000), OUTPUT with the
  real state, then a flag-only final one; so the sums are right only when the state is taken
  from the last response that carries it and the sequence's next request waits for it.
  INPUT ``FAIL`` is answered with an error response (the state stays), INPUT ``RAISE``
  makes ``execute`` raise. Four slots (direct) or two candidate sequences (oldest) per
  instance: more sequences than that wait in the backlog. ``dstate_process`` is
  ``dstate_direct`` in a worker process (``EXECUTION_MODE: process``).
* ``ordered_decoupled``: the oldest strategy with ``preserve_ordering``; the requests of a
  batch answer in reverse order (the last one first, from threads of their own), two
  responses each, saying which execution and position they belong to.
  ``ordered_dynamic`` is the same model behind the dynamic batcher with
  ``preserve_ordering``, ``unordered_dynamic`` without it.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

FAIL = -1000
RAISE = -2000
DECOY = 1000
INITIAL_SUM = 7

STATE_MODEL = f"""
import threading
import time

import numpy as np
import triton_python_backend_utils as pb_utils

FINAL = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL


def value(request, name):
    return int(pb_utils.get_input_tensor_by_name(request, name).as_numpy().reshape(-1)[0])


def tensor(name, number):
    return pb_utils.Tensor(name, np.array([[number]], np.int32))


class TritonPythonModel:
    def execute(self, requests):
        work = []
        for request in requests:
            sender = request.get_response_sender()
            if not value(request, "READY"):  # a filler of an idle slot
                sender.send(flags=FINAL)
                continue
            if value(request, "INPUT") == {RAISE}:
                raise pb_utils.TritonModelException("asked to raise")
            work.append((sender, value(request, "INPUT"), value(request, "SUM_IN")))
        threading.Thread(target=self.answer, args=(work,)).start()
        return None

    def answer(self, work):
        time.sleep(0.03)
        for sender, number, state in work:
            if number == {FAIL}:
                error = pb_utils.TritonError("asked to fail")
                sender.send(pb_utils.InferenceResponse(error=error), flags=FINAL)
                continue
            total = state + number
            decoy = pb_utils.InferenceResponse(
                [tensor("OUTPUT", total), tensor("SUM_OUT", total + {DECOY})]
            )
            sender.send(decoy)
            outputs = [tensor("OUTPUT", total), tensor("SUM_OUT", total)]
            sender.send(pb_utils.InferenceResponse(outputs))
            sender.send(flags=FINAL)
"""

ORDERED_MODEL = """
import threading
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.executions = 0

    def execute(self, requests):
        self.executions += 1
        count = len(requests)
        for position, request in enumerate(requests):
            delay = 0.04 * (count - position)  # the last request of the batch answers first
            args = (request.get_response_sender(), self.executions, position, count, delay)
            threading.Thread(target=self.answer, args=args).start()
        return None

    def answer(self, sender, execution, position, count, delay):
        time.sleep(delay)
        for index in range(2):
            where = np.array([[execution, position, count, index]], np.int32)
            flags = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL if index else 0
            sender.send(pb_utils.InferenceResponse([pb_utils.Tensor("WHERE", where)]), flags=flags)
"""

CONTROLS = """
  control_input [
    { name: "START" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } ] },
    { name: "READY" control [ { kind: CONTROL_SEQUENCE_READY int32_false_true: [ 0, 1 ] } ] }
  ]
"""

STATE = """
  state [ {
    input_name: "SUM_IN" output_name: "SUM_OUT" data_type: TYPE_INT32 dims: [ 1 ]
    initial_state { name: "start" data_type: TYPE_INT32 dims: [ 1 ] data_file: "start.bin" }
  } ]
"""

PROCESS_MODE = 'parameters { key: "EXECUTION_MODE" value: { string_value: "process" } }\n'

COMMON = """
backend: "python"
max_batch_size: 4
model_transaction_policy { decoupled: true }
instance_group [ { count: 1 kind: KIND_CPU } ]
"""


def _model(repository: Path, name: str, config: str, code: str) -> Path:
    folder = repository / name
    (folder / "1").mkdir(parents=True)
    (folder / "config.pbtxt").write_text(f'name: "{name}"\n' + COMMON + config)
    (folder / "1" / "model.py").write_text(textwrap.dedent(code))
    return folder


def write_repository(repository: Path, *, state: bool = True) -> None:
    """The models, in ``repository``; ``state=False`` leaves out the state models (the
    real Triton 2.51's Python backend carries no state)."""
    if state:
        io = (
            'input [ { name: "INPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]\n'
            'output [ { name: "OUTPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]\n'
        )
        strategies = {
            "dstate_direct": "direct { }",
            "dstate_oldest": (
                "oldest { max_candidate_sequences: 2 max_queue_delay_microseconds: 1000 }"
            ),
        }
        strategies["dstate_process"] = strategies["dstate_direct"]
        for name, strategy in strategies.items():
            config = (
                io
                + "sequence_batching {\n max_sequence_idle_microseconds: 60000000\n "
                + strategy
                + CONTROLS
                + STATE
                + "}\n"
            )
            if name == "dstate_process":  # the model in a worker process of its own
                config += PROCESS_MODE
            folder = _model(repository, name, config, STATE_MODEL)
            (folder / "initial_state").mkdir()
            (folder / "initial_state" / "start.bin").write_bytes(
                INITIAL_SUM.to_bytes(4, "little", signed=True)
            )
    ordered = (
        'input [ { name: "INPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]\n'
        'output [ { name: "WHERE" data_type: TYPE_INT32 dims: [ 4 ] } ]\n'
        "sequence_batching {\n max_sequence_idle_microseconds: 60000000\n"
        " oldest { max_candidate_sequences: 4 max_queue_delay_microseconds: 300000"
        " preferred_batch_size: [ 3 ] preserve_ordering: true }\n}\n"
    )
    _model(repository, "ordered_decoupled", ordered, ORDERED_MODEL)
    # The same answers behind the dynamic batcher, with preserve_ordering and without.
    for name, preserve in (("ordered_dynamic", "true"), ("unordered_dynamic", "false")):
        batched = (
            'input [ { name: "INPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]\n'
            'output [ { name: "WHERE" data_type: TYPE_INT32 dims: [ 4 ] } ]\n'
            "dynamic_batching { max_queue_delay_microseconds: 300000"
            f" preferred_batch_size: [ 3 ] preserve_ordering: {preserve} }}\n"
        )
        _model(repository, name, batched, ORDERED_MODEL)
