"""``--workers 2``: a Python model that loads or unloads a model from its ``execute``
(``pb_utils.load_model`` / ``unload_model``, BLS) changes every worker, in the parent's
order of changes, before its call returns, in process and in process mode; a failed load's
error reaches the model; a model unloading itself finishes; a change asked while the
parent holds the order for an unload of the asking model is refused at once (that unload
waits for the asking execution).

One server for the module, explicit model control.
"""

from __future__ import annotations

import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from harness import ServerHandle, run_pytriton_server, write_python_model
from tritonclient.utils import InferenceServerException
from workers_common import PID_MODEL_CONFIG, WAIT_S, answering_pid, worker_pids

CONNECTIONS = 16  # each request on a connection of its own: both workers take some
EXIT_TIMEOUT_S = 10  # how long an unload waits for the requests in flight

# ACTION ("load", "load_files", "load_broken", "unload", "unload_self", "wait_then_load")
# on NAME; answers READY (NAME's readiness on this worker afterwards) and PID, or the
# call's error.
_MANAGER_CONFIG = """
name: "{name}"
backend: "python"
max_batch_size: 0
input [
  {{ name: "ACTION", data_type: TYPE_STRING, dims: [ 1 ] }},
  {{ name: "NAME", data_type: TYPE_STRING, dims: [ 1 ] }}
]
output [
  {{ name: "READY", data_type: TYPE_BOOL, dims: [ 1 ] }},
  {{ name: "PID", data_type: TYPE_INT64, dims: [ 1 ] }}
]
instance_group [ {{ count: 1, kind: KIND_CPU }} ]
{extra}
"""

_MANAGER_PY = """
import json
import os
import time

import numpy as np
import triton_python_backend_utils as pb_utils

BROKEN = b'''
class TritonPythonModel:
    def initialize(self, args):
        raise RuntimeError("broken on purpose")

    def execute(self, requests):
        return []
'''


class TritonPythonModel:
    def initialize(self, args):
        self.folder = args["model_repository"]
        self.name = args["model_name"]

    def execute(self, requests):
        responses = []
        for request in requests:
            action = pb_utils.get_input_tensor_by_name(request, "ACTION").as_numpy()[0].decode()
            name = pb_utils.get_input_tensor_by_name(request, "NAME").as_numpy()[0].decode()
            try:
                if action == "load":
                    pb_utils.load_model(name)
                elif action == "load_files":  # "other"'s model, from a config and files
                    config = {
                        "name": name,
                        "backend": "python",
                        "max_batch_size": 0,
                        "input": [{"name": "IN", "data_type": "TYPE_FP32", "dims": [1]}],
                        "output": [{"name": "PID", "data_type": "TYPE_INT64", "dims": [1]}],
                        "instance_group": [{"count": 1, "kind": "KIND_CPU"}],
                    }
                    source = os.path.join(os.path.dirname(self.folder), "other", "1", "model.py")
                    with open(source, "rb") as code:
                        files = {"file:1/model.py": code.read()}
                    pb_utils.load_model(name, config=json.dumps(config), files=files)
                elif action == "load_broken":
                    config = {"name": name, "backend": "python", "max_batch_size": 0}
                    pb_utils.load_model(
                        name, config=json.dumps(config), files={"file:1/model.py": BROKEN}
                    )
                elif action in ("unload", "unload_self"):
                    pb_utils.unload_model(self.name if action == "unload_self" else name)
                elif action == "wait_then_load":
                    # Tell the test this execution runs, then wait until it says go on.
                    open(os.path.join(self.folder, "started"), "w").close()
                    go = os.path.join(self.folder, "go")
                    deadline = time.monotonic() + 60
                    while not os.path.exists(go) and time.monotonic() < deadline:
                        time.sleep(0.02)
                    pb_utils.load_model(name)
            except pb_utils.TritonModelException as exc:
                responses.append(pb_utils.InferenceResponse(error=pb_utils.TritonError(str(exc))))
                continue
            ready = np.array([pb_utils.is_model_ready(name)], np.bool_)
            pid = np.array([os.getpid()], np.int64)
            outputs = [pb_utils.Tensor("READY", ready), pb_utils.Tensor("PID", pid)]
            responses.append(pb_utils.InferenceResponse(outputs))
        return responses
"""

_PID_PY = """
import os

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        pid = np.array([os.getpid()], dtype=np.int64)
        return [pb_utils.InferenceResponse([pb_utils.Tensor("PID", pid)]) for _ in requests]
"""

_PROCESS_MODE = 'parameters { key: "EXECUTION_MODE" value: { string_value: "process" } }'
_MANAGERS = {"manager": "", "manager_proc": _PROCESS_MODE, "self_unloader": "", "waiter": ""}


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("workers-bls-changes")
    for name, extra in _MANAGERS.items():
        config = textwrap.dedent(_MANAGER_CONFIG.format(name=name, extra=extra))
        write_python_model(root, name, config, _MANAGER_PY)
    pid_config = textwrap.dedent(PID_MODEL_CONFIG.format(name="other"))
    write_python_model(root, "other", pid_config, _PID_PY)
    return root


@pytest.fixture(scope="module")
def server(repository: Path) -> Iterator[ServerHandle]:
    with run_pytriton_server(
        repository,
        "--workers=2",
        "--model-control-mode=explicit",
        *(f"--load-model={name}" for name in _MANAGERS),
        "--worker-change-timeout-secs=30",
        f"--exit-timeout-secs={EXIT_TIMEOUT_S}",
    ) as handle:
        yield handle


def _ask(handle: ServerHandle, manager: str, action: str, name: str) -> Any:
    """``manager``'s answer to ``action`` on ``name`` (raises the model's error)."""
    client = httpclient.InferenceServerClient(handle.http_url, network_timeout=WAIT_S)
    try:
        inputs = []
        for input_name, value in (("ACTION", action), ("NAME", name)):
            tensor = httpclient.InferInput(input_name, [1], "BYTES")
            tensor.set_data_from_numpy(np.array([value.encode()], dtype=np.object_))
            inputs.append(tensor)
        return client.infer(manager, inputs)
    finally:
        client.close()


def _views(handle: ServerHandle, name: str) -> list[tuple[bool, list[str]]]:
    """``name``'s readiness and its states in the repository index, as each of
    ``CONNECTIONS`` connections (either worker) sees them."""
    views = []
    for _ in range(CONNECTIONS):
        client = grpcclient.InferenceServerClient(handle.grpc_url)
        try:
            index = client.get_model_repository_index(as_json=True).get("models", [])
            states = [entry.get("state", "") for entry in index if entry["name"] == name]
            views.append((client.is_model_ready(name), states))
        finally:
            client.close()
    return views


def _other_pids(handle: ServerHandle) -> set[int]:
    return {answering_pid(handle.http_url, "other", "IN", 0.0) for _ in range(CONNECTIONS)}


@pytest.mark.parametrize("manager", ["manager", "manager_proc"], ids=["in_process", "process_mode"])
def test_a_load_and_an_unload_from_execute_reach_every_worker_before_the_call_returns(
    server: ServerHandle, manager: str
) -> None:
    pids = set(worker_pids(server).values())
    assert _ask(server, manager, "load", "other").as_numpy("READY")[0]
    # Right after the call: every connection, whichever worker it reaches, finds it.
    assert _views(server, "other") == [(True, ["READY"])] * CONNECTIONS
    assert _other_pids(server) == pids, "both workers should serve the model loaded"

    assert not _ask(server, manager, "unload", "other").as_numpy("READY")[0]
    assert _views(server, "other") == [(False, ["UNAVAILABLE"])] * CONNECTIONS
    for _ in range(CONNECTIONS):
        with pytest.raises(InferenceServerException, match="has no available versions"):
            answering_pid(server.http_url, "other", "IN", 0.0)
    assert set(worker_pids(server).values()) == pids, "no worker was restarted"


def test_a_load_with_a_config_and_files_from_execute_reaches_every_worker(
    server: ServerHandle,
) -> None:
    pids = set(worker_pids(server).values())
    assert _ask(server, "manager", "load_files", "from_files").as_numpy("READY")[0]
    assert _views(server, "from_files") == [(True, ["READY"])] * CONNECTIONS
    served = {answering_pid(server.http_url, "from_files", "IN", 0.0) for _ in range(CONNECTIONS)}
    assert served == pids, "both workers should serve the model loaded from files"
    assert not _ask(server, "manager", "unload", "from_files").as_numpy("READY")[0]


def test_a_failed_load_from_execute_reaches_the_model(server: ServerHandle) -> None:
    with pytest.raises(InferenceServerException) as failed:
        _ask(server, "manager", "load_broken", "broken")
    assert "Failed to load model" in str(failed.value)
    assert "broken on purpose" in str(failed.value)
    assert {ready for ready, _ in _views(server, "broken")} == {False}


def test_a_model_that_unloads_itself_from_execute_finishes(server: ServerHandle) -> None:
    pids = set(worker_pids(server).values())
    finished = threading.Event()

    def unload_self() -> None:
        try:
            _ask(server, "self_unloader", "unload_self", "self_unloader")
        except InferenceServerException:
            pass  # answered after the model stopped: either way, it returns
        finished.set()

    threading.Thread(target=unload_self, daemon=True).start()
    # Its own worker's unload waits --exit-timeout-secs for this very execution, as in one
    # process; then the call returns, with the model unloaded everywhere.
    assert finished.wait(WAIT_S), "a model unloading itself from execute never returned"
    assert {ready for ready, _ in _views(server, "self_unloader")} == {False}
    assert set(worker_pids(server).values()) == pids, "no worker was restarted"


def test_a_load_from_execute_while_an_unload_of_that_model_waits_for_it_is_refused(
    server: ServerHandle, repository: Path
) -> None:
    pids = set(worker_pids(server).values())
    folder = repository / "waiter"
    for mark in ("started", "go"):
        (folder / mark).unlink(missing_ok=True)
    answer: dict[str, BaseException | None] = {}

    def ask() -> None:
        try:
            _ask(server, "waiter", "wait_then_load", "other")
            answer["error"] = None
        except InferenceServerException as exc:
            answer["error"] = exc

    asking = threading.Thread(target=ask, daemon=True)
    asking.start()
    deadline = time.monotonic() + WAIT_S
    while not (folder / "started").exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    unloaded = threading.Event()

    def unload() -> None:
        client = httpclient.InferenceServerClient(server.http_url, network_timeout=WAIT_S)
        try:
            client.unload_model("waiter")
        finally:
            client.close()
        unloaded.set()

    threading.Thread(target=unload, daemon=True).start()
    # The unload holds the order once a worker has unloaded it (the other waits for the
    # execution): only then may the execution ask.
    deadline = time.monotonic() + WAIT_S
    while all(ready for ready, _ in _views(server, "waiter")) and time.monotonic() < deadline:
        time.sleep(0.02)
    (folder / "go").touch()
    asking.join(WAIT_S)
    assert unloaded.wait(WAIT_S), "the unload never returned"
    error = answer.get("error")
    assert error is not None, "the load should have been refused"
    assert "which waits for the executions of 'waiter' to end" in str(error)
    assert {ready for ready, _ in _views(server, "other")} == {False}
    assert set(worker_pids(server).values()) == pids, "no worker was restarted"
