"""BLS callers executing on the event loop (docs/architecture.md, "Where executions run").

A lone request to a short Python model that calls the server runs on the loop, in an
``InlineExecution``: a call whose target can answer at once executes right there; any other
call suspends the execution, the loop goes on serving, and the answer resumes it. Covered,
with the caller on the loop (it reports its thread: the loop's is ``MainThread``): a call
executed on the loop too; calls that must wait (a dynamic batcher, a busy model, a
decoupled stream, a process-mode model, a model that calls the server itself, a model
load), each answered right and none holding up another client (``witness``); a self-call
with no free instance, refused as from a thread.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import tritonclient.http as httpclient
from harness import ServerHandle, run_pytriton_server
from pipeline_models import parameter, write_python
from robustness import write_identity_model
from test_bls import THREAD_NAME, THREAD_NAME_BATCHED_CONFIG, THREAD_NAME_CONFIG
from tritonclient.utils import InferenceServerException

LOOP = "MainThread"  # the server's event loop runs in its main thread

# THREAD: the thread this executes on. Given the request parameter "target", calls that
# model with X first (``decoupled``: as a stream; ``next``: passed on as the call's
# "target") and answers with the THREAD of each of its responses in TARGETS, or with its
# error; given "load", loads that model and answers whether it is ready.
WHERE = """
import json
import threading

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            parameters = json.loads(request.parameters())
            targets = []
            error = None
            if "load" in parameters:
                pb_utils.load_model(parameters["load"])
                targets.append(str(pb_utils.is_model_ready(parameters["load"])))
            if "target" in parameters:
                passed = {"target": parameters["next"]} if "next" in parameters else {}
                call = pb_utils.InferenceRequest(
                    model_name=parameters["target"],
                    requested_output_names=["THREAD"],
                    inputs=[pb_utils.get_input_tensor_by_name(request, "X")],
                    parameters=passed,
                )
                if parameters.get("decoupled"):
                    answers = list(call.exec(decoupled=True))
                else:
                    answers = [call.exec()]
                for answer in answers:
                    if answer.has_error():
                        error = answer.error()
                        break
                    thread = pb_utils.get_output_tensor_by_name(answer, "THREAD")
                    if thread is not None:  # not the flag-only final of a stream
                        targets.extend(t.decode() for t in thread.as_numpy().reshape(-1))
            if error is not None:
                responses.append(pb_utils.InferenceResponse(error=error))
                continue
            own = np.array([threading.current_thread().name.encode()], np.object_)
            called = np.array([t.encode() for t in targets], np.object_)
            outputs = [pb_utils.Tensor("THREAD", own), pb_utils.Tensor("TARGETS", called)]
            responses.append(pb_utils.InferenceResponse(outputs))
        return responses
"""

WHERE_CONFIG = """
input [ { name: "X" data_type: TYPE_FP32 dims: [ 1, 4 ] } ]
output [
  { name: "THREAD" data_type: TYPE_STRING dims: [ 1 ] },
  { name: "TARGETS" data_type: TYPE_STRING dims: [ -1 ] }
]
"""

# Decoupled: three responses with the thread's name, then the flag-only final one.
THREAD_STREAM = """
import threading

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        name = np.array([threading.current_thread().name.encode()], np.object_)
        for request in requests:
            sender = request.get_response_sender()
            for _ in range(3):
                sender.send(pb_utils.InferenceResponse([pb_utils.Tensor("THREAD", name)]))
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
"""

# Answers with its thread's name after SLEEP_S: busy meanwhile.
SLEEPER = THREAD_NAME.replace("import threading", "import threading\nimport time").replace(
    "        name = np.array", "        time.sleep(0.5)\n        name = np.array"
)
SLEEP_S = 0.5

PROCESS_MODE = parameter("EXECUTION_MODE", "process")

# Calls "thread_name" from a thread of its own (in a copy of its context, so that the
# thread sees the server), waits for it, and answers with its own thread's name and the
# call's answer; the thread is started by ``helper`` (THREAD_HELPER) when model.py says
# nothing of threads, by model.py itself otherwise.
THREADED = """
import json
import threading

import numpy as np
import triton_python_backend_utils as pb_utils
{imports}

def call(x):
    answer = pb_utils.InferenceRequest(
        model_name="thread_name", requested_output_names=["THREAD"], inputs=[x]
    ).exec()
    if answer.has_error():
        raise pb_utils.TritonModelException(answer.error().message())
    return pb_utils.get_output_tensor_by_name(answer, "THREAD").as_numpy().reshape(-1)


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "X")
            targets = []
            if json.loads(request.parameters()).get("threaded"):
                targets = list(in_thread(call, x))
            own = np.array([threading.current_thread().name.encode()], np.object_)
            outputs = [
                pb_utils.Tensor("THREAD", own),
                pb_utils.Tensor("TARGETS", np.array(targets, np.object_)),
            ]
            responses.append(pb_utils.InferenceResponse(outputs))
        return responses
"""

IN_THREAD = """
import contextvars
import threading


def in_thread(work, *args):
    result = []

    def run():
        try:
            result.append(work(*args))
        except Exception as exc:  # raised again in the caller's thread
            result.append(exc)

    thread = threading.Thread(target=contextvars.copy_context().run, args=(run,))
    thread.start()
    thread.join()
    if isinstance(result[0], Exception):
        raise result[0]
    return result[0]
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerHandle]:
    root = tmp_path_factory.mktemp("bls-inline")
    write_python(root, "where", WHERE, WHERE_CONFIG)
    write_python(root, "where_too", WHERE, WHERE_CONFIG)
    write_python(root, "thread_name", THREAD_NAME, THREAD_NAME_CONFIG)
    write_python(root, "thread_name_batched", THREAD_NAME, THREAD_NAME_BATCHED_CONFIG)
    write_python(root, "thread_name_proc", THREAD_NAME, THREAD_NAME_CONFIG + PROCESS_MODE)
    write_python(
        root,
        "thread_stream",
        THREAD_STREAM,
        THREAD_NAME_CONFIG + "model_transaction_policy { decoupled: true }",
    )
    write_python(root, "sleeper", SLEEPER, THREAD_NAME_CONFIG)
    write_python(root, "loaded_later", THREAD_NAME, THREAD_NAME_CONFIG)
    write_identity_model(root, "identity")  # the witness's
    write_python(root, "threaded", THREADED.format(imports=IN_THREAD), WHERE_CONFIG)
    helped = write_python(
        root,
        "threaded_by_helper",
        THREADED.format(imports="from helper import in_thread"),
        WHERE_CONFIG,
    )
    (helped / "1" / "helper.py").write_text(IN_THREAD)
    startup = [
        f"--load-model={name}"
        for name in (
            "where",
            "where_too",
            "thread_name",
            "thread_name_batched",
            "thread_name_proc",
            "thread_stream",
            "sleeper",
            "identity",
            "threaded",
            "threaded_by_helper",
        )
    ]
    with run_pytriton_server(root, "--model-control-mode=explicit", *startup) as handle:
        yield handle


def _where(http: httpclient.InferenceServerClient, **parameters: Any) -> tuple[str, list[str]]:
    """(the thread ``where`` ran on, the threads its call's responses came from)."""
    x = httpclient.InferInput("X", [1, 4], "FP32")
    x.set_data_from_numpy(np.zeros((1, 4), np.float32))
    result = http.infer("where", [x], parameters=parameters)
    targets = result.as_numpy("TARGETS")
    return result.as_numpy("THREAD")[0].decode(), [t.decode() for t in targets.reshape(-1)]


def _inline(http: httpclient.InferenceServerClient, **parameters: Any) -> list[str]:
    """A call of ``where`` that executes on the loop (its last executions were short: a
    few calling nothing first, as many times as it takes), and what it answered."""
    for _ in range(20):
        for _ in range(12):
            if _where(http)[0] == LOOP:
                break
        thread, targets = _where(http, **parameters)
        if thread == LOOP:
            return targets
    raise AssertionError(f"where never executed on the loop with {parameters}")


def test_a_call_to_a_model_that_can_answer_at_once_executes_on_the_loop_too(
    http: httpclient.InferenceServerClient,
) -> None:
    def counts(model: str) -> tuple[int, int]:
        stats = http.get_inference_statistics(model)["model_stats"][0]
        return stats["inference_stats"]["success"]["count"], stats["execution_count"]

    # Once the target's own last executions were short (in its thread, at first).
    for _ in range(12):
        if _inline(http, target="thread_name") == [LOOP]:
            break
    before = counts("thread_name")
    assert _inline(http, target="thread_name") == [LOOP]
    # Counted as an execution in the target's thread would be.
    assert counts("thread_name") == (before[0] + 1, before[1] + 1)


@pytest.mark.parametrize(
    ("parameters", "targets"),
    [
        ({"target": "thread_name_batched"}, ["instance-thread_name_batched_0"]),
        ({"target": "thread_stream", "decoupled": True}, ["instance-thread_stream_0"] * 3),
        # A model that calls the server goes to its thread from an inline execution; its
        # own call executes there.
        (
            {"target": "where_too", "next": "thread_name"},
            ["instance-where_too_0"],
        ),
    ],
    ids=["dynamic_batcher", "decoupled", "calls_the_server"],
)
def test_a_call_that_must_wait_suspends_the_execution_on_the_loop(
    parameters: dict[str, Any], targets: list[str], http: httpclient.InferenceServerClient
) -> None:
    assert _inline(http, **parameters) == targets


def test_a_call_to_a_process_mode_model_from_the_loop(
    http: httpclient.InferenceServerClient,
) -> None:
    # Answered by the worker process (where the model runs in the main thread too).
    assert _inline(http, target="thread_name_proc") == ["MainThread"]


def test_a_call_to_a_busy_model_waits_without_holding_up_the_loop(
    http: httpclient.InferenceServerClient, server: ServerHandle, witness: Any
) -> None:
    """While the inline caller waits for the busy ``sleeper``, other clients are served
    (the witness's answers are checked at the end)."""
    x = httpclient.InferInput("X", [1, 4], "FP32")
    x.set_data_from_numpy(np.zeros((1, 4), np.float32))

    def keep_busy() -> None:
        with httpclient.InferenceServerClient(server.http_url, network_timeout=60) as other:
            for _ in range(4):
                other.infer("sleeper", [x])

    busy = threading.Thread(target=keep_busy)
    busy.start()
    try:
        assert _inline(http, target="sleeper") == ["instance-sleeper_0"]
    finally:
        busy.join()


def test_a_model_load_from_the_loop(http: httpclient.InferenceServerClient) -> None:
    assert _inline(http, load="loaded_later") == ["True"]
    assert http.is_model_ready("loaded_later")


def test_a_self_call_with_no_free_instance_still_fails(
    http: httpclient.InferenceServerClient,
) -> None:
    for _ in range(12):
        _where(http)
    with pytest.raises(InferenceServerException) as caught:
        _where(http, target="where")
    assert "no instance of model 'where' can get free" in caught.value.message()
    assert _inline(http, target="thread_name") == [LOOP]  # and the server still serves


def _threaded(http: httpclient.InferenceServerClient, model: str, **parameters: Any) -> str:
    x = httpclient.InferInput("X", [1, 4], "FP32")
    x.set_data_from_numpy(np.zeros((1, 4), np.float32))
    return http.infer(model, [x], parameters=parameters).as_numpy("THREAD")[0].decode()


def test_a_model_whose_threads_call_the_server_stays_in_its_thread(
    http: httpclient.InferenceServerClient,
) -> None:
    """On the loop its execution would block the loop while it waits for its thread, whose
    call needs the loop: model.py naming threads keeps it in its instance's thread."""
    threads = {_threaded(http, "threaded") for _ in range(12)}
    assert threads == {"instance-threaded_0"}
    assert _threaded(http, "threaded", threaded=True) == "instance-threaded_0"


def test_a_call_from_a_thread_of_an_execution_on_the_loop_is_refused_not_hung(
    http: httpclient.InferenceServerClient,
) -> None:
    """Threads started by a module model.py imports: the first such call, made while the
    execution holds the loop, is refused (it could never be answered); the model's
    executions then stay in its thread, where the same call runs."""
    for _ in range(12):
        if _threaded(http, "threaded_by_helper") == LOOP:
            break
    else:
        raise AssertionError("threaded_by_helper never executed on the loop")
    with pytest.raises(InferenceServerException) as caught:
        _threaded(http, "threaded_by_helper", threaded=True)
    assert "called the server from a thread of its own" in caught.value.message()
    assert _threaded(http, "threaded_by_helper", threaded=True) == "instance-threaded_by_helper_0"
    assert {_threaded(http, "threaded_by_helper") for _ in range(12)} == {
        "instance-threaded_by_helper_0"
    }
