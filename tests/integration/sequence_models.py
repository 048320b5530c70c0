"""The sequence models of test_sequence_batching.py, written into a repository at run time.

* ``acc_<strategy>_<instances>``: an accumulator per sequence, kept by the model in the
  instance that runs it (so a sequence that moved between instances would give wrong sums).
  It checks what the batcher promises and fails the request otherwise: the controls agree
  with ``flags()`` and ``correlation_id()``, a START comes first, and under the direct
  strategy a sequence keeps its batch position (its slot). Each response also says which
  instance and how many requests (fillers included) the execution had.
* ``ids_uint64``, ``ids_string``, ``ids_none``: echo the CORRID control and
  ``correlation_id()``.
* ``idle``: a sequence is released after 300 ms without a request.
* ``stats_direct``: an echo for the statistics test (a model of its own, so counts are exact).
* ``state_python``, ``state_onnx``: a running sum kept as implicit state, which the server
  carries (Python: the initial sum comes from ``initial_state/start.bin``; ONNX: a graph whose
  state output is its state input plus the input).
* ``state_pytorch``, ``state_openvino``: the same loop without a START control, in
  TorchScript and in OpenVINO IR (written only where torch and openvino are installed).
* ``iterative_decoupled``, ``iterative``: iterative sequences; the model reschedules the
  request until its countdown reaches 0 (decoupled: one response per execution).
* ``reschedule_plain``: a model without sequences that asks for a reschedule.
* ``spin_sequence``: streaming_models' spin model (it holds its one slot for ``hold_ms``)
  as a sequence model without batching: one slot, so a second sequence waits in the backlog.
"""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import numpy as np
from harness import REPO_ROOT
from streaming_models import SPIN_CONFIG, SPIN_MODEL, write

SEQUENCE_EXAMPLES = REPO_ROOT / "examples" / "sequence_models"

CONTROLS = """
  control_input [
    { name: "START" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } ] },
    { name: "END" control [ { kind: CONTROL_SEQUENCE_END fp32_false_true: [ 0, 1 ] } ] },
    { name: "READY" control [ { kind: CONTROL_SEQUENCE_READY bool_false_true: [ false, true ] } ] },
    { name: "CORRID" control [ { kind: CONTROL_SEQUENCE_CORRID data_type: %s } ] }
  ]
"""

ACCUMULATOR = """
import json

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.direct = "oldest" not in config["sequence_batching"]
        self.instance = args["model_instance_name"]
        self.sums = {}
        self.positions = {}

    def execute(self, requests):
        count = len(requests)
        return [self.answer(request, index, count) for index, request in enumerate(requests)]

    def answer(self, request, index, count):
        def value(name):
            return pb_utils.get_input_tensor_by_name(request, name).as_numpy().reshape(-1)[0]

        if not value("READY"):
            return pb_utils.InferenceResponse([])
        corrid, start, end = int(value("CORRID")), bool(value("START")), bool(value("END"))
        flags = request.flags()
        problems = []
        if corrid != request.correlation_id():
            problems.append(f"CORRID {corrid} but correlation_id() {request.correlation_id()}")
        if start != bool(flags & pb_utils.TRITONSERVER_REQUEST_FLAG_SEQUENCE_START):
            problems.append(f"START {start} but flags {flags}")
        if end != bool(flags & pb_utils.TRITONSERVER_REQUEST_FLAG_SEQUENCE_END):
            problems.append(f"END {end} but flags {flags}")
        if start:
            self.sums[corrid] = 0
            self.positions[corrid] = index
        elif corrid not in self.sums:
            problems.append(f"sequence {corrid} continues on {self.instance} without a START")
        elif self.direct and self.positions[corrid] != index:
            moved = f"from slot {self.positions[corrid]} to {index}"
            problems.append(f"sequence {corrid} moved {moved}")
        if problems:
            error = pb_utils.TritonError("; ".join(problems))
            return pb_utils.InferenceResponse(error=error)
        self.sums[corrid] += int(value("INPUT"))
        total = self.sums.pop(corrid) if end else self.sums[corrid]
        return pb_utils.InferenceResponse([
            # Wrapped to int32, as the model's type would (perf_analyzer sends random data).
            pb_utils.Tensor("OUTPUT", np.array([[total]], np.int64).astype(np.int32)),
            pb_utils.Tensor("INSTANCE", np.array([[self.instance.encode()]], np.object_)),
            pb_utils.Tensor("BATCH", np.array([[count]], np.int32)),
        ])
"""

ECHO_IDS = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            corrid = pb_utils.get_input_tensor_by_name(request, "CORRID")
            if corrid is None:
                seen = "none"
            else:
                value = corrid.as_numpy().reshape(-1)[0]
                shown = value.decode() if isinstance(value, bytes) else int(value)
                seen = f"{corrid.as_numpy().dtype}:{shown}"
            outputs = [
                pb_utils.Tensor("CORRID_SEEN", np.array([[seen.encode()]], np.object_)),
                pb_utils.Tensor(
                    "ID", np.array([[repr(request.correlation_id()).encode()]], np.object_)
                ),
                pb_utils.Tensor("FLAGS", np.array([[request.flags()]], np.int32)),
            ]
            responses.append(pb_utils.InferenceResponse(outputs))
        return responses
"""

# The documented example's model (its config there starts from zero; this one from a file).
STATE_PYTHON = (SEQUENCE_EXAMPLES / "accumulate_state" / "1" / "model.py").read_text()

ITERATIVE = '''
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    """Counts down from IN: each execution takes one step, and reschedules until 0."""

    def initialize(self, args):
        self.left = {}
        self.decoupled = "decoupled" in args["model_name"]

    def execute(self, requests):
        responses = []
        for request in requests:
            corrid = request.correlation_id()
            if request.flags() & pb_utils.TRITONSERVER_REQUEST_FLAG_SEQUENCE_START:
                start = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
                self.left[corrid] = int(start.reshape(-1)[0])
            self.left[corrid] -= 1
            left = self.left[corrid]
            info = f"{corrid}:{request.flags()}".encode()
            response = pb_utils.InferenceResponse([
                pb_utils.Tensor("OUT", np.array([left], np.int32)),
                pb_utils.Tensor("INFO", np.array([info], np.object_)),
            ])
            done = left <= 0
            if not done:
                request.set_release_flags(pb_utils.TRITONSERVER_REQUEST_RELEASE_RESCHEDULE)
            if self.decoupled:
                flags = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL if done else 0
                request.get_response_sender().send(response, flags=flags)
            else:
                responses.append(response if done else None)
        return None if self.decoupled else responses
'''

RESCHEDULE_ONCE = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            request.set_release_flags(pb_utils.TRITONSERVER_REQUEST_RELEASE_RESCHEDULE)
        return [None] * len(requests)
"""

ACCUMULATOR_IO = """
input [ { name: "INPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [
  { name: "OUTPUT" data_type: TYPE_INT32 dims: [ 1 ] },
  { name: "INSTANCE" data_type: TYPE_STRING dims: [ 1 ] },
  { name: "BATCH" data_type: TYPE_INT32 dims: [ 1 ] }
]
"""

ECHO_IO = """
input [ { name: "INPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [
  { name: "CORRID_SEEN" data_type: TYPE_STRING dims: [ 1 ] },
  { name: "ID" data_type: TYPE_STRING dims: [ 1 ] },
  { name: "FLAGS" data_type: TYPE_INT32 dims: [ 1 ] }
]
"""

STATE = """
  state [ {
    input_name: "SUM_IN" output_name: "SUM_OUT" data_type: TYPE_INT32 dims: [ 1 ]
    %s
  } ]
"""

ITERATIVE_IO = """
max_batch_size: 0
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [
  { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] },
  { name: "INFO" data_type: TYPE_STRING dims: [ 1 ] }
]
sequence_batching { iterative_sequence: true }
instance_group [ { count: 1 kind: KIND_CPU } ]
"""

# A state of variable size in one buffer per sequence (%s: name, more state settings,
# instance kind); the model: write_growing_state_onnx.
GROWING_STATE_CONFIG = """
name: "%s"
backend: "onnxruntime"
max_batch_size: 1
input [ { name: "INPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUTPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
sequence_batching {
  state [ {
    input_name: "SUM_IN" output_name: "SUM_OUT" data_type: TYPE_INT32 dims: [ -1 ]
    use_same_buffer_for_input_output: true %s
  } ]
}
instance_group [ { count: 1 kind: KIND_%s } ]
"""

ACCUMULATOR_MODELS = [
    f"acc_{strategy}_{instances}" for strategy in ("direct", "oldest") for instances in (1, 2)
]
INITIAL_SUM = 100  # what initial_state/start.bin holds for state_python
IDLE_US = 300_000
# The state models' sequences outlive a slow first execution on a loaded machine (the
# default idle release is 1 s; a released sequence's next request would lack its START).
STATE_SEQUENCE = "sequence_batching {\n max_sequence_idle_microseconds: 60000000\n"


def _python_model(repository: Path, name: str, config: str, code: str) -> None:
    folder = repository / name
    (folder / "1").mkdir(parents=True)
    (folder / "config.pbtxt").write_text(f'name: "{name}"\nbackend: "python"\n' + config)
    (folder / "1" / "model.py").write_text(textwrap.dedent(code))


def write_state_onnx(path: Path, *, start_input: bool = True) -> None:
    """SUM_OUT = SUM_IN + INPUT; OUTPUT = SUM_OUT (a state loop the server closes).

    ``start_input``: a START input the graph does not use (the batcher feeds it all the same).
    """
    import onnx
    from onnx import TensorProto, helper

    def tensor(name: str) -> onnx.ValueInfoProto:
        return helper.make_tensor_value_info(name, TensorProto.INT32, ["batch", 1])

    inputs = ["INPUT", "SUM_IN", *(["START"] if start_input else [])]
    graph = helper.make_graph(
        [
            helper.make_node("Add", ["SUM_IN", "INPUT"], ["SUM_OUT"]),
            helper.make_node("Identity", ["SUM_OUT"], ["OUTPUT"]),
        ],
        "state_loop",
        [tensor(name) for name in inputs],
        [tensor("OUTPUT"), tensor("SUM_OUT")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.save(model, str(path))


def write_growing_state_onnx(path: Path) -> None:
    """A state whose size changes: SUM_OUT = ones of length INPUT (int32 [1, INPUT]);
    OUTPUT = the length of SUM_IN, the state the request was given. One request per batch."""
    import onnx
    from onnx import TensorProto, helper

    def tensor(name: str, dims: list[Any]) -> onnx.ValueInfoProto:
        return helper.make_tensor_value_info(name, TensorProto.INT32, dims)

    def const(name: str, values: list[int]) -> onnx.NodeProto:
        value = helper.make_tensor(name, TensorProto.INT64, [len(values)], values)
        return helper.make_node("Constant", [], [name], value=value)

    one = helper.make_tensor("one", TensorProto.INT32, [1], [1])
    graph = helper.make_graph(
        [
            const("one_one", [1, 1]),
            const("lead", [1]),
            helper.make_node("Shape", ["SUM_IN"], ["shape"]),
            helper.make_node("Gather", ["shape", "index"], ["length"], axis=0),
            helper.make_node("Cast", ["length"], ["length32"], to=TensorProto.INT32),
            helper.make_node("Reshape", ["length32", "one_one"], ["OUTPUT"]),
            helper.make_node("Cast", ["INPUT"], ["input64"], to=TensorProto.INT64),
            helper.make_node("Reshape", ["input64", "lead"], ["wanted"]),
            helper.make_node("Concat", ["lead", "wanted"], ["target"], axis=0),
            helper.make_node("ConstantOfShape", ["target"], ["SUM_OUT"], value=one),
        ],
        "growing_state",
        [tensor("INPUT", ["batch", 1]), tensor("SUM_IN", ["batch", "length"])],
        [tensor("OUTPUT", ["batch", 1]), tensor("SUM_OUT", ["batch", "wanted"])],
        initializer=[helper.make_tensor("index", TensorProto.INT64, [], [1])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.save(model, str(path))


def write_state_pytorch(path: Path) -> None:
    import torch

    class StateLoop(torch.nn.Module):
        def forward(
            self, INPUT: torch.Tensor, SUM_IN: torch.Tensor
        ) -> tuple[torch.Tensor, torch.Tensor]:
            total = SUM_IN + INPUT
            return total, total

    torch.jit.script(StateLoop()).save(str(path))


def _state_openvino(path: Path) -> None:
    """The ONNX state loop (without START, which OpenVINO would drop) as OpenVINO IR."""
    import openvino as ov

    onnx_path = path.with_suffix(".onnx")
    write_state_onnx(onnx_path, start_input=False)
    ov.save_model(ov.convert_model(str(onnx_path)), str(path))
    onnx_path.unlink()


FRAMEWORK_STATE_MODELS = {
    "state_pytorch": ("pytorch", "model.pt", write_state_pytorch),
    "state_openvino": ("openvino", "model.xml", _state_openvino),
}


def _framework_state_models(repository: Path, state_io: str, state: str) -> None:
    for name, (backend, filename, write_model) in FRAMEWORK_STATE_MODELS.items():
        try:
            __import__("torch" if backend == "pytorch" else "openvino")
        except ImportError:
            continue
        folder = repository / name
        (folder / "1").mkdir(parents=True)
        (folder / "config.pbtxt").write_text(
            f'name: "{name}"\nbackend: "{backend}"\n'
            + state_io
            + STATE_SEQUENCE
            + state
            + "}\ninstance_group [ { count: 1 kind: KIND_CPU } ]\n"
        )
        write_model(folder / "1" / filename)


def write_repository(repository: Path) -> None:
    """Every model of the test, in ``repository``."""
    for name in ACCUMULATOR_MODELS:
        _, strategy, instances = name.split("_")
        scheduling = (
            "oldest { max_candidate_sequences: 4 max_queue_delay_microseconds: 2000 }"
            if strategy == "oldest"
            else "direct { }"
        )
        config = (
            "max_batch_size: 4\n"
            + ACCUMULATOR_IO
            + "sequence_batching {\n max_sequence_idle_microseconds: 60000000\n "
            + scheduling
            + CONTROLS % "TYPE_UINT64"
            + "}\n"
            + f"instance_group [ {{ count: {instances} kind: KIND_CPU }} ]\n"
        )
        _python_model(repository, name, config, ACCUMULATOR)
    for name, corrid in (("ids_uint64", "TYPE_UINT64"), ("ids_string", "TYPE_STRING")):
        config = "max_batch_size: 4\n" + ECHO_IO + "sequence_batching {" + CONTROLS % corrid + "}\n"
        _python_model(repository, name, config, ECHO_IDS)
    _python_model(
        repository,
        "ids_none",
        "max_batch_size: 4\n" + ECHO_IO + "sequence_batching { }\n",
        ECHO_IDS,
    )
    idle = (
        "max_batch_size: 4\n"
        + ECHO_IO
        + f"sequence_batching {{ max_sequence_idle_microseconds: {IDLE_US} }}\n"
    )
    _python_model(repository, "idle", idle, ECHO_IDS)
    stats = (
        "max_batch_size: 4\n"
        + ECHO_IO
        + "sequence_batching { direct { } "
        + CONTROLS % "TYPE_UINT64"
        + "}\ninstance_group [ { count: 1 kind: KIND_CPU } ]\n"
    )
    _python_model(repository, "stats_direct", stats, ECHO_IDS)

    state_io = (
        "max_batch_size: 4\n"
        'input [ { name: "INPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]\n'
        'output [ { name: "OUTPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]\n'
    )
    start_controls = (
        'control_input [ { name: "START" control [ { kind: CONTROL_SEQUENCE_START '
        "int32_false_true: [ 0, 1 ] } ] } ]\n"
    )
    from_file = (
        'initial_state { name: "start" data_type: TYPE_INT32 dims: [ 1 ] data_file: "start.bin" }'
    )
    state_python = state_io + STATE_SEQUENCE + start_controls + STATE % from_file + "}\n"
    _python_model(repository, "state_python", state_python, STATE_PYTHON)
    folder = repository / "state_python" / "initial_state"
    folder.mkdir()
    (folder / "start.bin").write_bytes(np.array([INITIAL_SUM], np.int32).tobytes())

    onnx_folder = repository / "state_onnx"
    (onnx_folder / "1").mkdir(parents=True)
    zero = 'initial_state { name: "zero" data_type: TYPE_INT32 dims: [ 1 ] zero_data: true }'
    (onnx_folder / "config.pbtxt").write_text(
        'name: "state_onnx"\nbackend: "onnxruntime"\n'
        + state_io
        + STATE_SEQUENCE
        + start_controls
        + STATE % zero
        + "}\ninstance_group [ { count: 1 kind: KIND_CPU } ]\n"
    )
    write_state_onnx(onnx_folder / "1" / "model.onnx")
    growing = repository / "state_onnx_growing"
    (growing / "1").mkdir(parents=True)
    (growing / "config.pbtxt").write_text(GROWING_STATE_CONFIG % ("state_onnx_growing", "", "CPU"))
    write_growing_state_onnx(growing / "1" / "model.onnx")
    _framework_state_models(repository, state_io, STATE % zero)

    decoupled = "model_transaction_policy { decoupled: true }\n"
    _python_model(repository, "iterative_decoupled", ITERATIVE_IO + decoupled, ITERATIVE)
    _python_model(repository, "iterative", ITERATIVE_IO, ITERATIVE)
    # The same in process mode: the release flags come back from the model's worker process.
    process = 'parameters { key: "EXECUTION_MODE" value { string_value: "process" } }\n'
    _python_model(
        repository, "iterative_decoupled_proc", ITERATIVE_IO + decoupled + process, ITERATIVE
    )
    _python_model(repository, "iterative_proc", ITERATIVE_IO + process, ITERATIVE)
    plain = (
        "max_batch_size: 0\n"
        'input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]\n'
        'output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]\n'
    )
    _python_model(repository, "reschedule_plain", plain, RESCHEDULE_ONCE)
    spin = "sequence_batching { max_sequence_idle_microseconds: 60000000 }"
    config = SPIN_CONFIG.format(name="spin_sequence", max_batch_size=0, extra=spin)
    write(repository, "spin_sequence", config, SPIN_MODEL)
