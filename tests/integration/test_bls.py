"""BLS end to end: Python models calling models through the server, with the real
tritonclient (HTTP and gRPC).

The server runs in explicit model-control mode over a repository this module writes; the
tests load what they use. Covered: ``exec`` (the target named by the request), errors of the
called model reaching the caller, ``async_exec`` (ten calls in flight at once, which the
target only answers once all ten have arrived), ``exec(decoupled=True)`` with 0, 1 and 100
responses and ``cancel()``, ``load_model``/``unload_model``/``is_model_ready`` from a model,
and a model calling itself with no free instance (an error, not a hang).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from harness import ServerHandle, run_pytriton_server
from pipeline_models import ADD_SUB, ADD_SUB_CONFIG, REPEAT, REPEAT_CONFIG, parameter, write_python
from trace_files import CORE_STAMPS, read_traces, trace_stamps, traces_written
from tritonclient.utils import InferenceServerException

# Runs INPUT0/INPUT1 on the model named by the request parameter "target" and answers with
# its outputs, or with its error (code kept) when the call failed; passes its request's
# trace to the call when the parameter "pass_trace" is true.
CALLER = """
import json

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            parameters = json.loads(request.parameters())
            # "pass_trace": the call is traced as a child of this request, if it is traced.
            traced = {"trace": request.trace()} if parameters.get("pass_trace") else {}
            call = pb_utils.InferenceRequest(
                model_name=parameters["target"],
                requested_output_names=["OUTPUT0", "OUTPUT1"],
                inputs=[
                    pb_utils.get_input_tensor_by_name(request, "INPUT0"),
                    pb_utils.get_input_tensor_by_name(request, "INPUT1"),
                ],
                request_id=request.request_id(),
                **traced,
            )
            answer = call.exec()
            if answer.has_error():
                responses.append(pb_utils.InferenceResponse(error=answer.error()))
            else:
                responses.append(pb_utils.InferenceResponse(answer.output_tensors()))
        return responses
"""

# Answers INPUT0 + INPUT1 and INPUT0 - INPUT1 itself, or, given the request parameter
# "target", through that model (BLS): a model that calls the server only now and then.
SOMETIMES_CALLER = """
import json

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            a = pb_utils.get_input_tensor_by_name(request, "INPUT0")
            b = pb_utils.get_input_tensor_by_name(request, "INPUT1")
            target = json.loads(request.parameters()).get("target")
            if target is None:
                x, y = a.as_numpy(), b.as_numpy()
                outputs = [pb_utils.Tensor("OUTPUT0", x + y), pb_utils.Tensor("OUTPUT1", x - y)]
                responses.append(pb_utils.InferenceResponse(outputs))
                continue
            call = pb_utils.InferenceRequest(
                model_name=target, requested_output_names=["OUTPUT0", "OUTPUT1"], inputs=[a, b]
            )
            answer = call.exec()
            if answer.has_error():
                responses.append(pb_utils.InferenceResponse(error=answer.error()))
            else:
                responses.append(pb_utils.InferenceResponse(answer.output_tensors()))
        return responses
"""

RAISING = """
class TritonPythonModel:
    def execute(self, requests):
        raise ValueError("boom")
"""

# Default mode, async: ten async_exec calls to "rendezvous" at once; SEEN holds, per call,
# how many calls the target had received when it answered.
GATHER = """
import asyncio

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    async def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "X")
            calls = [
                pb_utils.InferenceRequest(
                    model_name="rendezvous", requested_output_names=["SEEN"], inputs=[x]
                ).async_exec(decoupled=True)
                for _ in range(10)
            ]
            seen = []
            for stream in await asyncio.gather(*calls):
                for answer in stream:
                    if answer.has_error():
                        raise pb_utils.TritonModelException(answer.error().message())
                    out = pb_utils.get_output_tensor_by_name(answer, "SEEN")
                    seen.append(int(out.as_numpy()[0]))
            responses.append(
                pb_utils.InferenceResponse([pb_utils.Tensor("SEEN", np.array(seen, np.int32))])
            )
        return responses
"""

# Decoupled, async: each request waits (up to 30 s) until ten requests have arrived, then
# answers with how many had arrived. Only concurrent executes can all see ten.
RENDEZVOUS = """
import asyncio

import numpy as np
import triton_python_backend_utils as pb_utils

_arrived = [0]
_all_here = None


class TritonPythonModel:
    async def execute(self, requests):
        global _all_here
        if _all_here is None:
            _all_here = asyncio.Event()
        for request in requests:
            _arrived[0] += 1
            if _arrived[0] >= 10:
                _all_here.set()
            try:
                await asyncio.wait_for(_all_here.wait(), 30)
            except asyncio.TimeoutError:
                pass
            sender = request.get_response_sender()
            seen = np.array([_arrived[0]], np.int32)
            sender.send(
                pb_utils.InferenceResponse([pb_utils.Tensor("SEEN", seen)]),
                flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL,
            )
"""

# exec(decoupled=True) on "repeat": RESPONSES = how many came back, TOTAL = their Y summed.
# With the parameter "cancel_after" = n, reads n responses from "forever", cancels, drains.
COUNTER = """
import json

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            parameters = json.loads(request.parameters())
            cancel_after = parameters.get("cancel_after", -1)
            call = pb_utils.InferenceRequest(
                model_name="forever" if cancel_after >= 0 else "repeat",
                requested_output_names=["Y"],
                inputs=[
                    pb_utils.get_input_tensor_by_name(request, "X"),
                    pb_utils.get_input_tensor_by_name(request, "COUNT"),
                ],
            )
            count, total = 0, np.zeros(4, np.float32)
            stream = call.exec(decoupled=True)
            for answer in stream:
                if answer.has_error():
                    raise pb_utils.TritonModelException(answer.error().message())
                y = pb_utils.get_output_tensor_by_name(answer, "Y")
                if y is None:
                    continue  # the flag-only final response
                count += 1
                total += y.as_numpy()
                if count == cancel_after:
                    stream.cancel()
            responses.append(
                pb_utils.InferenceResponse(
                    [
                        pb_utils.Tensor("RESPONSES", np.array([count], np.int32)),
                        pb_utils.Tensor("TOTAL", total),
                    ]
                )
            )
        return responses
"""

COUNTER_CONFIG = """
input [ { name: "X" data_type: TYPE_FP32 dims: [ 4 ] },
        { name: "COUNT" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "RESPONSES" data_type: TYPE_INT32 dims: [ 1 ] },
         { name: "TOTAL" data_type: TYPE_FP32 dims: [ 4 ] } ]
"""

# ACTION (load | load_files | unload | ready) on the model NAME; READY: is_model_ready
# afterwards. load_files loads NAME from a config and a model.py given with the call.
MANAGER = """
import json

import numpy as np
import triton_python_backend_utils as pb_utils

SOURCE = b'''
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [
            pb_utils.InferenceResponse([pb_utils.Tensor("Y", r.inputs()[0].as_numpy() * 3)])
            for r in requests
        ]
'''
CONFIG = {
    "backend": "python",
    "input": [{"name": "X", "data_type": "TYPE_FP32", "dims": [4]}],
    "output": [{"name": "Y", "data_type": "TYPE_FP32", "dims": [4]}],
}


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            action = pb_utils.get_input_tensor_by_name(request, "ACTION").as_numpy()[0].decode()
            name = pb_utils.get_input_tensor_by_name(request, "NAME").as_numpy()[0].decode()
            if action == "load":
                pb_utils.load_model(name)
            elif action == "load_files":
                config = json.dumps({"name": name, **CONFIG})
                pb_utils.load_model(name, config=config, files={"file:1/model.py": SOURCE})
            elif action == "unload":
                pb_utils.unload_model(name)
            ready = np.array([pb_utils.is_model_ready(name)], np.bool_)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("READY", ready)]))
        return responses
"""

MANAGER_CONFIG = """
input [ { name: "ACTION" data_type: TYPE_STRING dims: [ 1 ] },
        { name: "NAME" data_type: TYPE_STRING dims: [ 1 ] } ]
output [ { name: "READY" data_type: TYPE_BOOL dims: [ 1 ] } ]
"""

# DEPTH > 0: calls itself with DEPTH - 1 and passes the answer (or its error) on.
RECURSIVE = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.name = args["model_name"]

    def execute(self, requests):
        responses = []
        for request in requests:
            depth = int(pb_utils.get_input_tensor_by_name(request, "DEPTH").as_numpy()[0])
            if depth == 0:
                responses.append(
                    pb_utils.InferenceResponse([pb_utils.Tensor("DEPTH", np.array([0], np.int32))])
                )
                continue
            answer = pb_utils.InferenceRequest(
                model_name=self.name,
                requested_output_names=["DEPTH"],
                inputs=[pb_utils.Tensor("DEPTH", np.array([depth - 1], np.int32))],
            ).exec()
            if answer.has_error():
                responses.append(pb_utils.InferenceResponse(error=answer.error()))
            else:
                responses.append(pb_utils.InferenceResponse(answer.output_tensors()))
        return responses
"""

RECURSIVE_CONFIG = """
input [ { name: "DEPTH" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "DEPTH" data_type: TYPE_INT32 dims: [ 1 ] } ]
"""

# Answers with the name of the thread it executes on.
THREAD_NAME = """
import threading

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        name = np.array([threading.current_thread().name.encode()], np.object_)
        return [pb_utils.InferenceResponse([pb_utils.Tensor("THREAD", name)]) for _ in requests]
"""

THREAD_NAME_CONFIG = """
input [ { name: "X" data_type: TYPE_FP32 dims: [ 1, 4 ] } ]
output [ { name: "THREAD" data_type: TYPE_STRING dims: [ 1 ] } ]
"""

# The same with a dynamic batcher (X [4] per batch entry, the caller's X a batch of one).
THREAD_NAME_BATCHED_CONFIG = """
max_batch_size: 4
dynamic_batching { }
input [ { name: "X" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "THREAD" data_type: TYPE_STRING dims: [ 1 ] } ]
"""

# Calls the model named by the request parameter "target" with X, and answers with its own
# thread's name and the target's answer (THREAD), or with the target's error.
THREAD_CALLER = """
import json
import threading

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            answer = pb_utils.InferenceRequest(
                model_name=json.loads(request.parameters())["target"],
                requested_output_names=["THREAD"],
                inputs=[pb_utils.get_input_tensor_by_name(request, "X")],
            ).exec()
            if answer.has_error():
                responses.append(pb_utils.InferenceResponse(error=answer.error()))
                continue
            own = np.array([threading.current_thread().name.encode()], np.object_)
            target = pb_utils.get_output_tensor_by_name(answer, "THREAD").as_numpy()
            target = target.reshape(-1)
            responses.append(
                pb_utils.InferenceResponse(
                    [pb_utils.Tensor("CALLER", own), pb_utils.Tensor("TARGET", target)]
                )
            )
        return responses
"""

THREAD_CALLER_CONFIG = """
input [ { name: "X" data_type: TYPE_FP32 dims: [ 1, 4 ] } ]
output [
  { name: "CALLER" data_type: TYPE_STRING dims: [ 1 ] },
  { name: "TARGET" data_type: TYPE_STRING dims: [ 1 ] }
]
"""

# DEPTH > 0: calls the model its config parameter NEXT names with DEPTH - 1.
CHAIN = RECURSIVE.replace(
    'self.name = args["model_name"]',
    'self.name = json.loads(args["model_config"])["parameters"]["NEXT"]["string_value"]',
).replace("import numpy as np", "import json\n\nimport numpy as np")

WAIT_S = 120.0
PROCESS_MODE = parameter("EXECUTION_MODE", "process")


def _repository(root: Path) -> None:
    write_python(root, "add_sub", ADD_SUB, ADD_SUB_CONFIG)
    write_python(root, "raising", RAISING, ADD_SUB_CONFIG)
    write_python(root, "caller", CALLER, ADD_SUB_CONFIG)
    write_python(root, "sometimes_caller", SOMETIMES_CALLER, ADD_SUB_CONFIG)
    write_python(
        root,
        "gather",
        GATHER,
        'input [ { name: "X" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
        'output [ { name: "SEEN" data_type: TYPE_INT32 dims: [ 10 ] } ]',
    )
    write_python(
        root,
        "rendezvous",
        RENDEZVOUS,
        "model_transaction_policy { decoupled: true }\n"
        'input [ { name: "X" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
        'output [ { name: "SEEN" data_type: TYPE_INT32 dims: [ 1 ] } ]',
    )
    write_python(root, "repeat", REPEAT, REPEAT_CONFIG)
    write_python(root, "forever", REPEAT, REPEAT_CONFIG + parameter("until_cancelled", "yes"))
    write_python(root, "counter", COUNTER, COUNTER_CONFIG)
    write_python(root, "manager", MANAGER, MANAGER_CONFIG)
    write_python(root, "managed", ADD_SUB, ADD_SUB_CONFIG)
    write_python(root, "recursive", RECURSIVE, RECURSIVE_CONFIG)
    write_python(root, "thread_name", THREAD_NAME, THREAD_NAME_CONFIG)
    write_python(
        root,
        "thread_name_batched",
        THREAD_NAME,
        THREAD_NAME_BATCHED_CONFIG,
    )
    write_python(root, "thread_raising", RAISING, THREAD_NAME_CONFIG)
    # X [1, 5]: the caller's X [1, 4] fails validation, on the caller's thread or in the queue.
    wide = THREAD_NAME_CONFIG.replace("dims: [ 1, 4 ]", "dims: [ 1, 5 ]")
    write_python(root, "thread_wide", THREAD_NAME, wide)
    write_python(
        root, "thread_wide_queued", THREAD_NAME, wide + parameter("EXECUTE_ON_EVENT_LOOP", "no")
    )
    write_python(root, "thread_caller", THREAD_CALLER, THREAD_CALLER_CONFIG)
    write_python(
        root,
        "recursive_pair",
        RECURSIVE,
        RECURSIVE_CONFIG + "instance_group [ { count: 2 kind: KIND_CPU } ]",
    )
    # The same calls from (and to) models in process mode (their own worker processes).
    write_python(root, "caller_proc", CALLER, ADD_SUB_CONFIG + PROCESS_MODE)
    write_python(root, "add_sub_proc", ADD_SUB, ADD_SUB_CONFIG + PROCESS_MODE)
    write_python(
        root,
        "gather_proc",
        GATHER.replace('"rendezvous"', '"rendezvous_proc"'),
        'input [ { name: "X" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
        'output [ { name: "SEEN" data_type: TYPE_INT32 dims: [ 10 ] } ]\n' + PROCESS_MODE,
    )
    write_python(
        root,
        "rendezvous_proc",
        RENDEZVOUS,
        "model_transaction_policy { decoupled: true }\n"
        'input [ { name: "X" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
        'output [ { name: "SEEN" data_type: TYPE_INT32 dims: [ 1 ] } ]\n' + PROCESS_MODE,
    )
    write_python(root, "counter_proc", COUNTER, COUNTER_CONFIG + PROCESS_MODE)
    write_python(root, "manager_proc", MANAGER, MANAGER_CONFIG + PROCESS_MODE)
    write_python(root, "managed_by_proc", ADD_SUB, ADD_SUB_CONFIG)
    write_python(root, "recursive_proc", RECURSIVE, RECURSIVE_CONFIG + PROCESS_MODE)
    two = "instance_group [ { count: 2 kind: KIND_CPU } ]\n"
    # A cycle through both kinds: ping (in process) -> pong (process mode) -> ping.
    write_python(root, "ping", CHAIN, RECURSIVE_CONFIG + parameter("NEXT", "pong_proc"))
    pong = RECURSIVE_CONFIG + parameter("NEXT", "ping") + PROCESS_MODE
    write_python(root, "pong_proc", CHAIN, pong)
    write_python(root, "recursive_pair_proc", RECURSIVE, RECURSIVE_CONFIG + two + PROCESS_MODE)


@pytest.fixture(scope="module")
def trace_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where the server writes traces, one file per trace (``<file>.<n>``); tracing is off
    until a test turns it on for a model."""
    return tmp_path_factory.mktemp("bls-traces") / "trace.json"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, trace_file: Path) -> Iterator[ServerHandle]:
    root = tmp_path_factory.mktemp("bls")
    _repository(root)
    tracing = [f"--trace-config=triton,file={trace_file}", "--trace-config=triton,log-frequency=1"]
    startup = [
        f"--load-model={name}"
        for name in (
            "add_sub",
            "raising",
            "caller",
            "sometimes_caller",
            "gather",
            "rendezvous",
            "repeat",
            "forever",
            "counter",
            "manager",
            "recursive",
            "recursive_pair",
            "thread_name",
            "thread_name_batched",
            "thread_raising",
            "thread_wide",
            "thread_wide_queued",
            "thread_caller",
            "caller_proc",
            "add_sub_proc",
            "gather_proc",
            "rendezvous_proc",
            "counter_proc",
            "manager_proc",
            "recursive_proc",
            "recursive_pair_proc",
            "ping",
            "pong_proc",
        )
    ]
    with run_pytriton_server(root, "--model-control-mode=explicit", *tracing, *startup) as handle:
        yield handle


def _tensor(module: Any, name: str, data: np.ndarray) -> Any:
    datatypes = {np.float32: "FP32", np.int32: "INT32", np.object_: "BYTES"}
    tensor = module.InferInput(name, list(data.shape), datatypes[data.dtype.type])
    tensor.set_data_from_numpy(data)
    return tensor


def _pair(module: Any) -> tuple[list[Any], np.ndarray, np.ndarray]:
    a = np.array([1.0, 2.0, 3.0, 4.0], np.float32)
    b = np.array([0.5, 0.5, -1.0, 2.0], np.float32)
    return [_tensor(module, "INPUT0", a), _tensor(module, "INPUT1", b)], a, b


@pytest.mark.parametrize(
    ("caller", "target"),
    [("caller", "add_sub"), ("caller_proc", "add_sub"), ("caller", "add_sub_proc")],
    ids=["in_process", "from_process_mode", "to_process_mode"],
)
@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_exec_runs_the_target_model(
    protocol: str,
    caller: str,
    target: str,
    http: httpclient.InferenceServerClient,
    grpc: grpcclient.InferenceServerClient,
) -> None:
    module: Any = httpclient if protocol == "http" else grpcclient
    client: Any = http if protocol == "http" else grpc
    inputs, a, b = _pair(module)
    result = client.infer(caller, inputs, parameters={"target": target})
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)


def test_a_model_that_calls_now_and_then_after_many_short_executions(
    http: httpclient.InferenceServerClient,
) -> None:
    """Lone requests to a short Python model may execute on the event loop; one whose
    code calls the server must not (its ``exec`` waits for the loop): after many short
    executions, its call is still answered."""
    inputs, a, b = _pair(httpclient)
    for _ in range(12):
        result = http.infer("sometimes_caller", inputs)
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
    result = http.infer("sometimes_caller", inputs, parameters={"target": "add_sub"})
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)


@pytest.mark.parametrize("caller", ["caller", "caller_proc"])
def test_errors_of_the_called_model_reach_the_caller(
    caller: str, http: httpclient.InferenceServerClient
) -> None:
    inputs, _, _ = _pair(httpclient)
    with pytest.raises(InferenceServerException) as caught:
        http.infer(caller, inputs, parameters={"target": "raising"})
    assert caught.value.message().startswith(
        "Failed to process the request(s) for model 'raising_0', message: ValueError: boom"
    )
    assert caught.value.status() == "500"
    with pytest.raises(InferenceServerException) as caught:
        http.infer(caller, inputs, parameters={"target": "nowhere"})
    assert caught.value.message() == (
        "Model nowhere - Error when running inference: Failed for execute the inference "
        "request. Model 'nowhere' is not ready."
    )
    with pytest.raises(InferenceServerException) as caught:
        http.infer(caller, inputs, parameters={"target": "repeat"})
    assert "Model repeat is using the decoupled" in caught.value.message()


@pytest.mark.parametrize("model", ["gather", "gather_proc"])
def test_ten_async_exec_calls_are_in_flight_at_once(
    model: str, grpc: grpcclient.InferenceServerClient
) -> None:
    """gather_proc: both the caller and the target run in process mode."""
    x = np.zeros(4, np.float32)
    result = grpc.infer(model, [_tensor(grpcclient, "X", x)], client_timeout=WAIT_S)
    # Each call was answered only after all ten had reached the target.
    assert result.as_numpy("SEEN").tolist() == [10] * 10


@pytest.mark.parametrize("model", ["counter", "counter_proc"])
@pytest.mark.parametrize("count", [0, 1, 100])
def test_exec_decoupled_iterates_every_response(
    count: int, model: str, http: httpclient.InferenceServerClient
) -> None:
    x = np.array([1.0, 0.0, -1.0, 2.0], np.float32)
    inputs = [
        _tensor(httpclient, "X", x),
        _tensor(httpclient, "COUNT", np.array([count], np.int32)),
    ]
    result = http.infer(model, inputs)
    assert result.as_numpy("RESPONSES").tolist() == [count]
    expected = sum((x + i for i in range(count)), np.zeros(4, np.float32))
    np.testing.assert_allclose(result.as_numpy("TOTAL"), expected)


@pytest.mark.parametrize("model", ["counter", "counter_proc"])
def test_cancel_stops_a_decoupled_callee(
    model: str, http: httpclient.InferenceServerClient
) -> None:
    x = np.zeros(4, np.float32)
    inputs = [_tensor(httpclient, "X", x), _tensor(httpclient, "COUNT", np.array([1], np.int32))]
    result = http.infer(model, inputs, parameters={"cancel_after": 3})
    # The callee stops at the next check of request.is_cancelled(); it would send 10000.
    received = int(result.as_numpy("RESPONSES")[0])
    assert 3 <= received < 10000


@pytest.mark.parametrize(
    ("manager", "managed", "adhoc"),
    [("manager", "managed", "adhoc"), ("manager_proc", "managed_by_proc", "adhoc_by_proc")],
    ids=["in_process", "process_mode"],
)
def test_models_load_and_unload_models(
    manager: str, managed: str, adhoc: str, http: httpclient.InferenceServerClient
) -> None:
    def act(action: str, name: str) -> bool:
        inputs = [
            _tensor(httpclient, "ACTION", np.array([action.encode()], np.object_)),
            _tensor(httpclient, "NAME", np.array([name.encode()], np.object_)),
        ]
        return bool(http.infer(manager, inputs).as_numpy("READY")[0])

    assert act("ready", managed) is False
    assert act("load", managed) is True
    assert http.is_model_ready(managed)
    inputs, a, b = _pair(httpclient)
    np.testing.assert_array_equal(http.infer(managed, inputs).as_numpy("OUTPUT0"), a + b)
    assert act("unload", managed) is False
    assert not http.is_model_ready(managed)
    # With a config and files of its own: a model that is in no repository.
    assert act("load_files", adhoc) is True
    x = np.array([1.0, 2.0, 3.0, 4.0], np.float32)
    answer = http.infer(adhoc, [_tensor(httpclient, "X", x)])
    np.testing.assert_array_equal(answer.as_numpy("Y"), 3 * x)


def _depth(client: Any, module: Any, model: str, depth: int) -> Any:
    return client.infer(model, [_tensor(module, "DEPTH", np.array([depth], np.int32))])


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_a_model_calling_itself_without_a_free_instance_fails(
    protocol: str, http: httpclient.InferenceServerClient, grpc: grpcclient.InferenceServerClient
) -> None:
    module: Any = httpclient if protocol == "http" else grpcclient
    client: Any = http if protocol == "http" else grpc
    assert _depth(client, module, "recursive", 0).as_numpy("DEPTH").tolist() == [0]
    with pytest.raises(InferenceServerException) as caught:
        _depth(client, module, "recursive", 1)
    assert "deadlock" in caught.value.message()
    assert "no instance of model 'recursive' can get free" in caught.value.message()
    # With a second instance, one level of self-call runs; a second level has none free.
    assert _depth(client, module, "recursive_pair", 1).as_numpy("DEPTH").tolist() == [0]
    with pytest.raises(InferenceServerException, match="deadlock"):
        _depth(client, module, "recursive_pair", 2)
    # The server still serves.
    assert _depth(client, module, "recursive", 0).as_numpy("DEPTH").tolist() == [0]


def _counts(client: httpclient.InferenceServerClient, model: str) -> tuple[int, int, int, int]:
    """(successes, failures, executions, compute_infer ns) of the model's statistics."""
    stats = client.get_inference_statistics(model)["model_stats"][0]
    inference = stats["inference_stats"]
    return (
        inference["success"]["count"],
        inference["fail"]["count"],
        stats["execution_count"],
        inference["compute_infer"]["ns"],
    )


def _thread_call(http: httpclient.InferenceServerClient, target: str) -> tuple[str, str]:
    x = np.zeros((1, 4), np.float32)
    result = http.infer(
        "thread_caller", [_tensor(httpclient, "X", x)], parameters={"target": target}
    )
    caller = result.as_numpy("CALLER")[0]
    target_thread = result.as_numpy("TARGET")[0]
    return caller.decode(), target_thread.decode()


def test_a_call_to_an_idle_default_scheduled_model_runs_on_the_callers_thread(
    http: httpclient.InferenceServerClient,
) -> None:
    """The target executes on the caller's thread (no hand-off), and is counted in its
    statistics as a queued execution would be."""
    before = _counts(http, "thread_name")
    caller, target = _thread_call(http, "thread_name")
    # (After enough short executions the caller runs on the loop, and its call with it:
    # test_bls_inline.py.)
    assert caller == target
    assert caller in ("instance-thread_caller_0", "MainThread")
    successes, failures, executions, compute_ns = _counts(http, "thread_name")
    assert (successes, failures, executions) == (before[0] + 1, before[1], before[2] + 1)
    assert compute_ns > before[3]


def test_a_call_to_a_batching_model_goes_through_its_queue(
    http: httpclient.InferenceServerClient,
) -> None:
    """A dynamic batcher must see the request (it may batch it with others): the target
    executes on its own instance's thread."""
    caller, target = _thread_call(http, "thread_name_batched")
    assert caller == "instance-thread_caller_0"
    assert target == "instance-thread_name_batched_0"


def test_a_failing_call_on_the_callers_thread_counts_as_a_failure(
    http: httpclient.InferenceServerClient,
) -> None:
    before = _counts(http, "thread_raising")
    with pytest.raises(InferenceServerException) as caught:
        _thread_call(http, "thread_raising")
    assert caught.value.message().startswith(
        "Failed to process the request(s) for model 'thread_raising_0', message: ValueError: boom"
    )
    successes, failures, executions, _ = _counts(http, "thread_raising")
    assert (successes, failures, executions) == (before[0], before[1] + 1, before[2] + 1)


def test_a_call_refused_on_the_callers_thread_is_refused_as_in_the_queue(
    http: httpclient.InferenceServerClient,
) -> None:
    """A request the target refuses (here: a wrong input shape) gets the same error on the
    caller's thread as through the target's queue, and is counted nowhere, as in Triton."""
    errors = {}
    for target in ("thread_wide", "thread_wide_queued"):
        before = _counts(http, target)
        with pytest.raises(InferenceServerException) as caught:
            _thread_call(http, target)
        errors[target] = (caught.value.status(), caught.value.message().replace(target, "T"))
        assert _counts(http, target) == before
    assert errors["thread_wide"] == errors["thread_wide_queued"]
    status, message = errors["thread_wide"]
    assert status == "400"
    assert message.startswith("Model T - Error when running inference: "), message
    assert "'X'" in message
    # Both still serve a call they can take.
    assert _thread_call(http, "thread_name")[1] == "instance-thread_caller_0"


def test_a_call_given_the_requests_trace_is_traced_as_its_child(
    http: httpclient.InferenceServerClient, trace_file: Path
) -> None:
    """As Triton: a BLS call gets a child trace (parent_id, the core's stamps) only when the
    model passes ``trace=request.trace()``; the child is written before its parent."""
    start = traces_written(trace_file)
    http.update_trace_settings("caller", {"trace_level": ["TIMESTAMPS"], "trace_rate": "1"})
    try:
        inputs, a, _ = _pair(httpclient)
        http.infer("caller", inputs, parameters={"target": "add_sub"})
        traced = http.infer("caller", inputs, parameters={"target": "add_sub", "pass_trace": True})
        np.testing.assert_array_equal(traced.as_numpy("OUTPUT0"), a + _pair(httpclient)[2])
    finally:
        http.update_trace_settings("caller", {"trace_level": None, "trace_rate": None})
    entries = read_traces(trace_file, start, 3)
    headers = [e for e in entries if "model_name" in e]
    first, parent = headers[0]["id"], headers[2]["id"]
    assert [h["model_name"] for h in headers] == ["caller", "add_sub", "caller"]
    child = headers[1]
    assert child == {
        "id": child["id"],
        "model_name": "add_sub",
        "model_version": 1,
        "parent_id": parent,
    }
    assert first < parent < child["id"]
    assert trace_stamps(entries, child["id"]) == CORE_STAMPS
    # The caller's own trace has its front end's and its compute stamps.
    assert {"HTTP_RECV_START", "COMPUTE_START", "HTTP_SEND_END"} <= set(
        trace_stamps(entries, parent)
    )


def test_a_process_mode_model_calling_itself_without_a_free_instance_fails(
    http: httpclient.InferenceServerClient,
) -> None:
    assert _depth(http, httpclient, "recursive_proc", 0).as_numpy("DEPTH").tolist() == [0]
    with pytest.raises(InferenceServerException) as caught:
        _depth(http, httpclient, "recursive_proc", 1)
    message = caught.value.message()
    assert message.startswith("Model recursive_proc - Error when running inference: deadlock")
    assert "no instance of model 'recursive_proc' can get free" in message
    assert _depth(http, httpclient, "recursive_proc", 0).as_numpy("DEPTH").tolist() == [0]
    # The server knows every worker's instance: with two, one level of self-call runs.
    assert _depth(http, httpclient, "recursive_pair_proc", 1).as_numpy("DEPTH").tolist() == [0]
    with pytest.raises(InferenceServerException, match="deadlock"):
        _depth(http, httpclient, "recursive_pair_proc", 2)


def test_a_cycle_through_a_process_mode_model_fails_instead_of_hanging(
    http: httpclient.InferenceServerClient,
) -> None:
    assert _depth(http, httpclient, "ping", 1).as_numpy("DEPTH").tolist() == [0]
    with pytest.raises(InferenceServerException) as caught:
        _depth(http, httpclient, "ping", 2)  # pong_proc would wait on ping's only instance
    assert "no instance of model 'ping' can get free" in caught.value.message()
