"""Server exit with a sequence in flight, through the real tritonclient, beside the real
Triton 2.51 where it is installed.

On SIGTERM Triton stops every model's scheduler: a new request to a model without
sequences and a new sequence (START) are refused with UNAVAILABLE "Server is stopping,
...", health and model readiness are UNAVAILABLE, and the sequences in flight keep taking
their next requests; the server exits once they have ended (or at the exit timeout).
"""

from __future__ import annotations

import shutil
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from harness import ServerHandle, require_real_triton, run_pytriton_server, run_real_triton
from sequence_models import SEQUENCE_EXAMPLES
from tritonclient.utils import InferenceServerException

STOPPING = "Server is stopping, scheduler for model has stopped accepting new inference requests"

PLAIN_CONFIG = """
name: "plain"
backend: "python"
max_batch_size: 8
input [ { name: "INPUT0", data_type: TYPE_INT32, dims: [ 1 ] } ]
output [ { name: "OUTPUT0", data_type: TYPE_INT32, dims: [ 1 ] } ]
"""

PLAIN_MODEL = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        outputs = [pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy() for r in requests]
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", o)]) for o in outputs]
"""

Outcome = tuple[str, Any]


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("shutdown-models")
    sequence = root / "seq"
    shutil.copytree(SEQUENCE_EXAMPLES / "simple_sequence", sequence)
    config = (sequence / "config.pbtxt").read_text()
    config = config.replace('name: "simple_sequence"', 'name: "seq"').replace(
        "sequence_batching {",
        # Long enough that the sequence in flight is not released while the test runs.
        "sequence_batching {\n  max_sequence_idle_microseconds: 60000000",
    )
    (sequence / "config.pbtxt").write_text(config)
    (root / "plain" / "1").mkdir(parents=True)
    (root / "plain" / "config.pbtxt").write_text(PLAIN_CONFIG)
    (root / "plain" / "1" / "model.py").write_text(PLAIN_MODEL)
    return root


def _input(module: Any, name: str, value: int) -> list[Any]:
    tensor = module.InferInput(name, [1, 1], "INT32")
    tensor.set_data_from_numpy(np.array([[value]], np.int32))
    return [tensor]


def _outcome(call: Callable[[], Any]) -> Outcome:
    try:
        return ("ok", call())
    except InferenceServerException as error:
        return (str(error.status()), error.message())


def _step(client: Any, module: Any, sequence_id: int, value: int, **flags: bool) -> Outcome:
    def call() -> Any:
        result = client.infer(
            "seq", _input(module, "INPUT", value), sequence_id=sequence_id, **flags
        )
        return result.as_numpy("OUTPUT").tolist()

    return _outcome(call)


def _wait_exiting(client: grpcclient.InferenceServerClient) -> None:
    deadline = time.monotonic() + 30
    while _outcome(client.is_server_live)[0] == "ok":
        assert time.monotonic() < deadline, "the server did not start exiting"
        time.sleep(0.05)


def _exit_with_sequence_in_flight(server: ServerHandle) -> dict[str, Outcome]:
    """Start sequence 1, SIGTERM, probe the server over gRPC while it waits, end the
    sequence: what each call answered, and how the process ended."""
    outcomes: dict[str, Outcome] = {}
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        outcomes["start"] = _step(client, grpcclient, 1, 1, sequence_start=True)
        server.process.send_signal(signal.SIGTERM)
        _wait_exiting(client)
        outcomes["live"] = _outcome(client.is_server_live)
        outcomes["ready"] = _outcome(client.is_server_ready)
        outcomes["model ready"] = _outcome(lambda: client.is_model_ready("seq"))
        outcomes["next"] = _step(client, grpcclient, 1, 10)
        outcomes["new sequence"] = _step(client, grpcclient, 2, 1, sequence_start=True)
        outcomes["no START"] = _step(client, grpcclient, 3, 1)
        outcomes["plain"] = _outcome(
            lambda: client.infer("plain", _input(grpcclient, "INPUT0", 7)).as_numpy("OUTPUT0")
        )
        outcomes["end"] = _step(client, grpcclient, 1, 100, sequence_end=True)
    outcomes["exit status"] = ("ok", server.process.wait(timeout=30))
    return outcomes


EXPECTED = {
    "start": ("ok", [[2]]),
    "live": ("StatusCode.UNAVAILABLE", "Server exiting"),
    "ready": ("StatusCode.UNAVAILABLE", "Server exiting"),
    "model ready": ("StatusCode.UNAVAILABLE", "Server not ready"),
    "next": ("ok", [[10]]),
    "new sequence": ("StatusCode.UNAVAILABLE", STOPPING),
    "no START": (
        "StatusCode.INVALID_ARGUMENT",
        "inference request for sequence 3 to model 'seq' must specify the START flag on the "
        "first request of the sequence",
    ),
    "plain": ("StatusCode.UNAVAILABLE", f"[request id: <id_unknown>] {STOPPING}"),
    "end": ("ok", [[100]]),
    "exit status": ("ok", 0),
}


def test_sequence_in_flight_finishes_during_the_exit(repository: Path) -> None:
    with run_pytriton_server(repository, "--exit-timeout-secs=20") as server:
        assert _exit_with_sequence_in_flight(server) == EXPECTED
        assert "Timeout 20: Found 1 in-flight inference requests" in server.log()


@pytest.mark.real_triton
def test_exit_with_a_sequence_in_flight_as_triton(repository: Path) -> None:
    require_real_triton()
    with run_real_triton(repository, "--exit-timeout-secs=20") as server:
        assert _exit_with_sequence_in_flight(server) == EXPECTED


def test_http_sequence_continues_during_the_exit(repository: Path) -> None:
    """Our HTTP front end stays up while the exit waits, with the same rules (Triton 2.51
    drains and closes HTTP connections before it stops the models: docs/sequence-batching.md)."""
    with run_pytriton_server(repository, "--exit-timeout-secs=20") as server:
        with httpclient.InferenceServerClient(server.http_url) as client:
            assert _step(client, httpclient, 5, 1, sequence_start=True) == ("ok", [[2]])
            server.process.send_signal(signal.SIGTERM)
            with grpcclient.InferenceServerClient(server.grpc_url) as grpc:
                _wait_exiting(grpc)
            assert _step(client, httpclient, 6, 1, sequence_start=True) == ("503", STOPPING)
            assert _step(client, httpclient, 5, 10) == ("ok", [[10]])
            assert server.process.poll() is None  # still waiting for sequence 5
            assert _step(client, httpclient, 5, 100, sequence_end=True) == ("ok", [[100]])
        assert server.process.wait(timeout=30) == 0
