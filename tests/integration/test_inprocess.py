"""The in-process API (``pytriton_core.Server``) answers as the HTTP API does.

One server runs in this process with its HTTP front end on: each bundled model gets the
same inputs through ``Server.infer`` / ``Server.infer_async`` and through
``tritonclient.http``, and the outputs must be identical.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.http as httpclient
from harness import EXAMPLES_REPOSITORY, LOOPBACK, free_ports

from pytriton_core import NotFoundError, Server, ServerError

CASES: dict[str, dict[str, np.ndarray]] = {
    "add_sub": {
        "INPUT0": np.array([1.0, 2.0, 3.0, 4.0], np.float32),
        "INPUT1": np.array([10.0, 20.0, 30.0, 40.0], np.float32),
    },
    "identity_fp32": {"INPUT0": np.arange(12, dtype=np.float32).reshape(3, 4)},
    "string_identity": {"INPUT0": np.array([b"a", b"bc", "d\u00e9".encode()], dtype=object)},
}
HTTP_DATATYPES = {np.dtype(np.float32): "FP32", np.dtype(object): "BYTES"}


@pytest.fixture(scope="module")
def server() -> Iterator[tuple[Server, str]]:
    http_port, metrics_port = free_ports(2)
    with Server(
        model_repository=EXAMPLES_REPOSITORY,
        allow_http=True,
        http_address=LOOPBACK,
        http_port=http_port,
        allow_metrics=True,
        metrics_address=LOOPBACK,
        metrics_port=metrics_port,
    ) as in_process:
        yield in_process, f"{LOOPBACK}:{http_port}"


def http_infer(url: str, model: str, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    with httpclient.InferenceServerClient(url) as client:
        tensors = []
        for name, array in inputs.items():
            tensor = httpclient.InferInput(name, list(array.shape), HTTP_DATATYPES[array.dtype])
            tensor.set_data_from_numpy(array)
            tensors.append(tensor)
        result = client.infer(model, tensors)
        return {o["name"]: result.as_numpy(o["name"]) for o in result.get_response()["outputs"]}


def assert_same(actual: dict[str, Any], expected: dict[str, np.ndarray]) -> None:
    assert sorted(actual) == sorted(expected)
    for name, array in expected.items():
        assert actual[name].dtype == array.dtype, name
        np.testing.assert_array_equal(actual[name], array)


@pytest.mark.parametrize("model", sorted(CASES))
def test_infer_answers_as_http_does(server: tuple[Server, str], model: str) -> None:
    in_process, url = server
    expected = http_infer(url, model, CASES[model])
    assert_same(in_process.infer(model, CASES[model]), expected)


@pytest.mark.parametrize("model", sorted(CASES))
def test_infer_async_answers_as_http_does(server: tuple[Server, str], model: str) -> None:
    in_process, url = server
    expected = http_infer(url, model, CASES[model])

    async def many() -> list[dict[str, np.ndarray]]:
        return await asyncio.gather(
            *(in_process.infer_async(model, CASES[model]) for _ in range(8))
        )

    for answer in asyncio.run(many()):
        assert_same(answer, expected)


def test_requested_outputs_and_errors(server: tuple[Server, str]) -> None:
    in_process, _ = server
    only = in_process.infer("add_sub", CASES["add_sub"], outputs=["OUTPUT1"])
    np.testing.assert_array_equal(only["OUTPUT1"], np.array([-9, -18, -27, -36], np.float32))
    assert list(only) == ["OUTPUT1"]
    with pytest.raises(NotFoundError, match="unknown model"):
        in_process.infer("no_such_model", {})
    with pytest.raises(ServerError, match="unexpected shape"):
        in_process.infer(
            "add_sub", {"INPUT0": np.zeros(3, np.float32), "INPUT1": np.zeros(3, np.float32)}
        )


def test_metadata_statistics_and_metrics_match_http(server: tuple[Server, str]) -> None:
    in_process, url = server
    with httpclient.InferenceServerClient(url) as client:
        assert in_process.model_metadata("add_sub") == client.get_model_metadata("add_sub")
        assert in_process.statistics("add_sub") == client.get_inference_statistics("add_sub")
    page = in_process.metrics()
    assert 'nv_inference_request_success{model="add_sub",version="1"}' in page


def test_load_and_unload(server: tuple[Server, str]) -> None:
    in_process, url = server
    in_process.unload_model("identity_fp32")
    assert not in_process.is_model_ready("identity_fp32")
    with httpclient.InferenceServerClient(url) as client:
        assert not client.is_model_ready("identity_fp32")
        # Strict readiness ignores versions unloaded on request, as Triton does.
        assert in_process.is_ready()
        in_process.load_model("identity_fp32")
        assert client.is_model_ready("identity_fp32")
    assert in_process.is_model_ready("identity_fp32")
    assert in_process.is_ready()
    data = np.ones((1, 2), np.float32)
    assert_same(in_process.infer("identity_fp32", {"INPUT0": data}), {"OUTPUT0": data})


def test_settings_extensions_in_process(server: tuple[Server, str]) -> None:
    in_process, url = server
    assert in_process.log_settings()["log_verbose_level"] == 0
    assert in_process.log_settings(log_verbose_level=2)["log_verbose_level"] == 2
    in_process.log_settings(log_verbose_level=0)
    with httpclient.InferenceServerClient(url) as client:
        assert client.get_log_settings()["log_verbose_level"] == 0
        in_process.trace_settings("add_sub", trace_rate="7")
        assert client.get_trace_settings("add_sub")["trace_rate"] == "7"
        in_process.trace_settings("add_sub", trace_rate=None)
        assert client.get_trace_settings("add_sub")["trace_rate"] == "1000"


COUNTING_CONFIG = """
name: "counting"
backend: "python"
max_batch_size: 0
input [ { name: "X" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "Y" data_type: TYPE_FP32 dims: [ 1 ] } ]
"""

# Creates its counter on its first request: a family made while another server runs in
# the same process must still land in this model's own server.
COUNTING_MODEL = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    counter = None

    def execute(self, requests):
        if self.counter is None:
            family = pb_utils.MetricFamily(
                "counted_requests", "Requests counted", pb_utils.MetricFamily.COUNTER
            )
            self.counter = family.Metric()
        responses = []
        for request in requests:
            self.counter.increment(1)
            x = pb_utils.get_input_tensor_by_name(request, "X").as_numpy()
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("Y", x)]))
        return responses
"""


def test_each_server_keeps_its_own_custom_metrics(tmp_path: Path) -> None:
    model_dir = tmp_path / "counting"
    (model_dir / "1").mkdir(parents=True)
    (model_dir / "config.pbtxt").write_text(COUNTING_CONFIG)
    (model_dir / "1" / "model.py").write_text(COUNTING_MODEL)
    first_port, second_port = free_ports(2)
    x = {"X": np.ones(1, np.float32)}

    def metrics(port: int) -> dict[str, Any]:
        return {"metrics_address": LOOPBACK, "metrics_port": port}

    with (
        Server(model_repository=tmp_path, allow_metrics=True, **metrics(first_port)) as a,
        Server(model_repository=tmp_path, allow_metrics=True, **metrics(second_port)) as b,
    ):
        for _ in range(3):
            a.infer("counting", x)
        b.infer("counting", x)
        assert "counted_requests 3" in a.metrics().splitlines()
        assert "counted_requests 1" in b.metrics().splitlines()


def test_an_in_process_server_refuses_workers(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"Server\(workers=2\).*--workers N"):
        Server(model_repository=tmp_path, workers=2)
