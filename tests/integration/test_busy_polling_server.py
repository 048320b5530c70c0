"""``--busy-poll-us``: after answering a request on its event loop, the server polls its
sockets for the window instead of sleeping; a request that waits for an instance thread
does not make it poll, nor does any request with ``--busy-poll-us 0``.

Polling shows as CPU time: the server's process spends most of a long window (0.4 s here)
running, where a sleeping server spends almost none. The thresholds are far apart (a fifth
of the window against a twentieth), so a loaded machine does not blur them.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from harness import ServerHandle, run_pytriton_server

from bench import procstats

WINDOW_S = 0.4
WARMUP = 12  # executions a model shows before a lone request may run on the loop

MODEL = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [
            pb_utils.InferenceResponse(
                [pb_utils.Tensor("OUT", pb_utils.get_input_tensor_by_name(r, "IN").as_numpy())]
            )
            for r in requests
        ]
"""

CONFIG = """
name: "{name}"
backend: "python"
max_batch_size: 0
input [ {{ name: "IN" data_type: TYPE_FP32 dims: [ 4 ] }} ]
output [ {{ name: "OUT" data_type: TYPE_FP32 dims: [ 4 ] }} ]
{extra}
"""

THREAD_ONLY = 'parameters: { key: "EXECUTE_ON_EVENT_LOOP" value: { string_value: "no" } }'


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("busy-poll")
    for name, extra in (("on_loop", ""), ("in_thread", THREAD_ONLY)):
        (root / name / "1").mkdir(parents=True)
        (root / name / "config.pbtxt").write_text(CONFIG.format(name=name, extra=extra))
        (root / name / "1" / "model.py").write_text(MODEL)
    return root


@pytest.fixture(scope="module")
def polling_server(repository: Path) -> Iterator[ServerHandle]:
    with run_pytriton_server(repository, "--busy-poll-us", str(int(WINDOW_S * 1e6))) as server:
        yield server


def infer(server: ServerHandle, model: str, count: int, grpc: bool = False) -> None:
    data = np.arange(4, dtype=np.float32)
    protocol = grpcclient if grpc else httpclient
    with protocol.InferenceServerClient(server.grpc_url if grpc else server.http_url) as client:
        for _ in range(count):
            tensor = protocol.InferInput("IN", [4], "FP32")
            tensor.set_data_from_numpy(data)
            result = client.infer(model, [tensor])
            np.testing.assert_array_equal(result.as_numpy("OUT"), data)


def cpu_after(server: ServerHandle, *models: str, grpc: bool = False) -> float:
    """Server CPU seconds over the window (and a little more) after requests to ``models``,
    one after the other."""
    for model in models:
        infer(server, model, WARMUP + 3, grpc)
    before = procstats.cpu_seconds(server.process.pid)
    time.sleep(WINDOW_S * 1.25)
    return procstats.cpu_seconds(server.process.pid) - before


def test_the_server_polls_after_an_answer_made_on_its_loop(polling_server: ServerHandle) -> None:
    assert cpu_after(polling_server, "on_loop") > WINDOW_S / 5


def test_the_server_polls_after_a_grpc_call_answered_on_its_loop(
    polling_server: ServerHandle,
) -> None:
    assert cpu_after(polling_server, "on_loop", grpc=True) > WINDOW_S / 5


def test_a_grpc_call_that_waits_for_a_thread_ends_the_polling(
    polling_server: ServerHandle,
) -> None:
    assert cpu_after(polling_server, "on_loop", "in_thread", grpc=True) < WINDOW_S / 20


def test_a_request_that_waits_for_a_thread_ends_the_polling(
    polling_server: ServerHandle,
) -> None:
    # The answers made on the loop open a window; the requests after them wait for the
    # model's thread, and the loop sleeps from the first of them on.
    assert cpu_after(polling_server, "on_loop", "in_thread") < WINDOW_S / 20


def test_no_polling_with_a_window_of_zero(repository: Path) -> None:
    with run_pytriton_server(repository, "--busy-poll-us", "0") as server:
        assert cpu_after(server, "on_loop") < WINDOW_S / 20
