"""Process mode with two batches in flight per instance: while the worker executes one,
the next waits in its socket (docs/architecture.md, "Where executions run"). Through the
real tritonclient: exact answers while the arenas grow under concurrent load, a worker
killed with two batches in flight, and the cancellation of the batch that waits."""

from __future__ import annotations

import queue
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from harness import ServerHandle, run_pytriton_server, write_python_model
from process_mode_models import IDENTITY
from streaming_models import marker_events, write_spin
from tritonclient.utils import InferenceServerException

WAIT_S = 60.0
PROCESS_MODE = 'parameters { key: "EXECUTION_MODE" value { string_value: "process" } }\n'


IDENTITY_CONFIG = """
name: "identity"
backend: "python"
max_batch_size: 0
input [ { name: "IN" data_type: TYPE_FP32 dims: [ -1 ] },
        { name: "TEXT" data_type: TYPE_STRING dims: [ -1 ] } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ -1 ] },
         { name: "TEXT_OUT" data_type: TYPE_STRING dims: [ -1 ] } ]
instance_group [ { count: 1 kind: KIND_CPU } ]
parameters { key: "EXECUTION_MODE" value { string_value: "process" } }
"""

# IN > 0: answers IN + 1; IN == -1: logs "started" to the "marker" parameter's file,
# sleeps for "hold_ms", then the process exits (with the batch behind it in its socket).
DYING = """
import json, os, time
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        out = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            if x[0] == -1:
                parameters = json.loads(request.parameters() or "{}")
                with open(parameters["marker"], "a") as marker:
                    marker.write(f"started {time.monotonic()}\\n")
                time.sleep(parameters["hold_ms"] / 1000)
                os._exit(1)
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", x + 1)]))
        return out
"""

DYING_CONFIG = """
name: "dying"
backend: "python"
max_batch_size: 0
input [ { name: "IN" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 1 ] } ]
instance_group [ { count: 1 kind: KIND_CPU } ]
parameters { key: "EXECUTION_MODE" value { string_value: "process" } }
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerHandle]:
    root = tmp_path_factory.mktemp("process_pipeline")
    write_python_model(root, "identity", IDENTITY_CONFIG, IDENTITY)
    write_python_model(root, "dying", DYING_CONFIG, DYING)
    with (write_spin(root, "spin") / "config.pbtxt").open("a") as config:
        config.write("\n" + PROCESS_MODE)
    with run_pytriton_server(root) as handle:
        yield handle


def _wait_for(marker: Path, event: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while event not in marker_events(marker):
        assert time.monotonic() < deadline, f"the model never logged {event!r}"
        time.sleep(0.005)


def _wait_ready(client: httpclient.InferenceServerClient, model: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not client.is_model_ready(model):
        assert time.monotonic() < deadline, f"{model} did not come back"
        time.sleep(0.05)


def _identity_inputs(index: int) -> tuple[list[httpclient.InferInput], np.ndarray, np.ndarray]:
    # Sizes grow with the index, past each arena's size several times over the stream
    # (1 MiB at first): the arenas grow while another batch is in flight.
    count = 1 + 9 * index**3
    x = np.arange(count, dtype=np.float32) + index
    text = np.array([f"{index}-{i}".encode() * (1 + index) for i in range(1 + index)], np.object_)
    inputs = [
        httpclient.InferInput("IN", [count], "FP32"),
        httpclient.InferInput("TEXT", [len(text)], "BYTES"),
    ]
    inputs[0].set_data_from_numpy(x, binary_data=True)
    inputs[1].set_data_from_numpy(text, binary_data=True)
    return inputs, x, text


def test_concurrent_requests_of_growing_sizes_each_get_their_exact_answer(
    server: ServerHandle,
) -> None:
    client = httpclient.InferenceServerClient(server.http_url, concurrency=8, network_timeout=120)
    before = client.get_inference_statistics("identity")["model_stats"][0]
    pending: list[tuple[np.ndarray, np.ndarray, Any]] = []
    for index in range(48):
        inputs, x, text = _identity_inputs(index)
        pending.append((x, text, client.async_infer("identity", inputs)))
    for x, text, call in pending:
        result = call.get_result()
        np.testing.assert_array_equal(result.as_numpy("OUT"), x * 2)
        assert result.as_numpy("TEXT_OUT").tolist() == [t + b"!" for t in text.tolist()]
    after = client.get_inference_statistics("identity")["model_stats"][0]
    done = int(after["inference_stats"]["success"]["count"])
    assert done - int(before["inference_stats"]["success"]["count"]) == 48
    assert int(after["execution_count"]) - int(before["execution_count"]) == 48
    client.close()


def test_a_worker_killed_with_two_batches_in_flight_fails_both_and_restarts(
    server: ServerHandle, tmp_path: Path
) -> None:
    marker = tmp_path / "marker.log"
    client = httpclient.InferenceServerClient(server.http_url, concurrency=4, network_timeout=120)
    _wait_ready(client, "dying")

    def call(value: float, **parameters: Any) -> Any:
        inputs = [httpclient.InferInput("IN", [1], "FP32")]
        inputs[0].set_data_from_numpy(np.array([value], dtype=np.float32))
        return client.async_infer("dying", inputs, parameters=parameters or None)

    executing = call(-1, marker=str(marker), hold_ms=1500)
    _wait_for(marker, "started")
    waiting = call(7)  # goes to the worker's socket, behind the one executing
    for doomed in (executing, waiting):
        with pytest.raises(InferenceServerException) as caught:
            doomed.get_result()
        assert "worker process died (exit code 1)" in str(caught.value)
        assert "model 'dying_0_0'" in str(caught.value)
    _wait_ready(client, "dying")
    for value in (1.0, 2.0, 3.0):
        assert call(value).get_result().as_numpy("OUT").tolist() == [value + 1]
    client.close()


def test_the_batch_waiting_behind_another_sees_its_cancellation(
    server: ServerHandle, tmp_path: Path
) -> None:
    """The second batch is in the worker's socket when its request is cancelled (the
    server has handed it over: were it still queued here, it would never start); the
    model sees ``is_cancelled()`` as soon as it starts it."""
    first, second = tmp_path / "first.log", tmp_path / "second.log"
    errors: queue.Queue[Any] = queue.Queue()
    ones = np.ones([2], np.float32)

    def inputs() -> list[grpcclient.InferInput]:
        tensor = grpcclient.InferInput("INPUT0", [2], "FP32")
        tensor.set_data_from_numpy(ones)
        return [tensor]

    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        executing = client.async_infer(
            "spin",
            inputs(),
            callback=lambda result, error: errors.put(error),
            parameters={"marker": str(first)},
        )
        _wait_for(first, "started")
        waiting = client.async_infer(
            "spin",
            inputs(),
            callback=lambda result, error: errors.put(error),
            parameters={"marker": str(second)},
        )
        # Give the server the moment it needs to read the request and send its batch on:
        # the assertions below hold only once it has (they fail, never pass, if not).
        time.sleep(1.0)
        waiting.cancel()
        assert "started" not in marker_events(second)  # still behind the first one
        executing.cancel()
        _wait_for(first, "cancelled")
        _wait_for(second, "cancelled")
        for _ in range(2):
            assert "CANCELLED" in str(errors.get(timeout=WAIT_S).status())
    events = marker_events(second)
    assert "expired" not in events
    assert events["started"] <= events["cancelled"]
