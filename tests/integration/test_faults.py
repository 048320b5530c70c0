"""Faults in models and clients, each while a witness client (robustness.Witness) is served
over HTTP and gRPC on another model: its every answer must stay exact, and the server must
keep serving after the fault.

Faults: a model that raises, one that runs out of memory (a controlled ``MemoryError``),
one that returns too few or too many responses, one that hangs while a queued request
times out per its ``timeout``; clients that disconnect mid-request body and mid-response;
a model unloaded and loaded again under traffic. (Cancellation of executing and queued
requests is in test_cancellation.py; shared-memory regions shrunk or unregistered under a
request are in test_security_shm.py.)
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from harness import ServerHandle, run_pytriton_server, write_python_model
from robustness import Witness, connect, fp32_input, identity_config, write_identity_model
from tritonclient.utils import InferenceServerException

# every test leaves the server as it found it (leaks.py)
pytestmark = pytest.mark.usefixtures("leak_check")

FAULTY_MODEL = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        fault = %r
        if fault == "raises":
            raise RuntimeError("the model broke on purpose")
        if fault == "out_of_memory":
            np.empty(1 << 60, dtype=np.uint8)  # refused at once: nothing is allocated
        responses = []
        for request in requests:
            data = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", data)]))
        if fault == "too_few":
            return responses[:-1]
        if fault == "too_many":
            return responses + responses
        return responses
"""

# OUTPUT0 = INPUT0; a request whose first value is negative waits until the gate file
# exists, after writing "<gate>.started".
GATED_MODEL = """
import json
import os
import time

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.gate = config["parameters"]["gate_file"]["string_value"]

    def execute(self, requests):
        responses = []
        for request in requests:
            data = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            if data.size and data.flat[0] < 0:
                open(self.gate + ".started", "w").close()
                while not os.path.exists(self.gate):
                    time.sleep(0.01)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", data)]))
        return responses
"""

FAULTS = ("raises", "out_of_memory", "too_few", "too_many")
WAIT_S = 60.0


def gated_config(name: str, gate: Path, queue_policy: bool) -> str:
    config = identity_config(name, "TYPE_FP32", max_batch_size=4 if queue_policy else 0)
    config += f'parameters {{ key: "gate_file" value: {{ string_value: "{gate}" }} }}\n'
    config += "instance_group [ { count: 1, kind: KIND_CPU } ]\n"
    if queue_policy:
        # Requests may shorten their queue time with ``timeout``; the default is long.
        config += (
            "dynamic_batching { default_queue_policy { timeout_action: REJECT "
            "default_timeout_microseconds: 60000000 allow_timeout_override: true } }\n"
        )
    return config


@pytest.fixture(scope="module")
def gate(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("gate") / "open"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, gate: Path) -> Iterator[ServerHandle]:
    root = tmp_path_factory.mktemp("faults")
    write_identity_model(root, "identity")
    for fault in FAULTS:
        write_python_model(root, fault, identity_config(fault, "TYPE_FP32"), FAULTY_MODEL % fault)
    write_python_model(root, "gated", gated_config("gated", gate, False), GATED_MODEL)
    write_python_model(root, "hangs", gated_config("hangs", gate, True), GATED_MODEL)
    with run_pytriton_server(
        root, "--model-control-mode=explicit", "--load-model=*", "--exit-timeout-secs=5"
    ) as handle:
        yield handle


def _values(count: int = 4, first: float = 1.0) -> np.ndarray:
    return np.arange(first, first + count, dtype=np.float32)


def _exact(client: object, module: object, model: str, values: np.ndarray) -> None:
    result = client.infer(model, [fp32_input(module, values)])  # type: ignore[attr-defined]
    answer = result.as_numpy("OUTPUT0")
    assert answer is not None and answer.tolist() == values.tolist()


def _wait_started(gate: Path) -> None:
    started = gate.with_name(gate.name + ".started")
    deadline = time.monotonic() + WAIT_S
    while not started.exists():
        assert time.monotonic() < deadline, "the gated request never reached the model"
        time.sleep(0.01)
    started.unlink()


def _http_infer(server: ServerHandle, model: str, values: np.ndarray) -> object:
    """An infer on a client of its own (a tritonclient.http client serves one thread)."""
    with httpclient.InferenceServerClient(server.http_url, network_timeout=WAIT_S) as client:
        return client.infer(model, [fp32_input(httpclient, values)])


def _unload(server: ServerHandle, model: str) -> None:
    with httpclient.InferenceServerClient(server.http_url, network_timeout=WAIT_S) as client:
        client.unload_model(model)


class _InThread:
    """A call on a thread of its own: ``result()`` is what it returned or raised."""

    def __init__(self, call: object) -> None:
        self._outcome: list[object] = []
        self._thread = threading.Thread(target=self._run, args=(call,), daemon=True)
        self._thread.start()

    def _run(self, call: object) -> None:
        try:
            self._outcome.append(call())  # type: ignore[operator]
        except Exception as exc:
            self._outcome.append(exc)

    def result(self) -> object:
        self._thread.join(timeout=WAIT_S)
        assert self._outcome, "the call never returned"
        return self._outcome[0]


@pytest.mark.parametrize("fault", FAULTS)
def test_a_faulty_model_fails_only_its_own_request(
    server: ServerHandle, witness: Witness, fault: str
) -> None:
    expected = {
        "raises": "the model broke on purpose",
        "out_of_memory": "Unable to allocate",
        "too_few": "Number of InferenceResponse objects do not match",
        "too_many": "Number of InferenceResponse objects do not match",
    }[fault]
    with httpclient.InferenceServerClient(server.http_url) as http:
        with grpcclient.InferenceServerClient(server.grpc_url) as grpc:
            for client, module in ((http, httpclient), (grpc, grpcclient)):
                for _ in range(3):
                    with pytest.raises(InferenceServerException, match=expected):
                        client.infer(fault, [fp32_input(module, _values())])
            assert http.is_model_ready(fault)
            _exact(http, httpclient, "identity", _values(first=11))


def test_a_hung_model_times_out_the_requests_queued_behind_it(
    server: ServerHandle, witness: Witness, gate: Path
) -> None:
    gate.unlink(missing_ok=True)
    with httpclient.InferenceServerClient(server.http_url, network_timeout=WAIT_S) as http:
        with grpcclient.InferenceServerClient(server.grpc_url) as grpc:
            hung_values = -_values().reshape(1, -1)  # a batch of one: the model batches
            hung = _InThread(lambda: _http_infer(server, "hangs", hung_values))
            try:
                _wait_started(gate)
                for client, module in ((http, httpclient), (grpc, grpcclient)):
                    with pytest.raises(InferenceServerException, match="timeout"):
                        client.infer(
                            "hangs",
                            [fp32_input(module, _values(first=5).reshape(1, -1))],
                            timeout=200_000,
                        )
                # the hung instance is named, once for its one execution
                reports = re.findall(
                    r"instance 'hangs_0_0' has been executing one batch", server.log()
                )
                assert len(reports) == 1, server.log()[-3000:]
            finally:
                gate.touch()
            answer = hung.result()
            assert not isinstance(answer, Exception), answer
            assert answer.as_numpy("OUTPUT0").tolist() == hung_values.tolist()  # type: ignore[attr-defined]
            _exact(grpc, grpcclient, "hangs", _values(first=21).reshape(1, -1))
    gate.unlink(missing_ok=True)


def _infer_head(model: str, body: bytes, length: int) -> bytes:
    return (
        f"POST /v2/models/{model}/infer HTTP/1.1\r\nHost: x\r\n"
        f"Content-Type: application/json\r\nContent-Length: {length}\r\n\r\n"
    ).encode() + body


def test_clients_that_leave_mid_request_or_mid_response(
    server: ServerHandle, witness: Witness
) -> None:
    values = np.arange(1 << 18, dtype=np.float32)  # 1 MiB of answer as JSON is ~8 MiB
    body = json.dumps(
        {
            "inputs": [
                {
                    "name": "INPUT0",
                    "shape": [values.size],
                    "datatype": "FP32",
                    "data": values.tolist(),
                }
            ]
        }
    ).encode()
    for _ in range(5):
        with connect(server) as sock:  # half of a body, then gone
            sock.sendall(_infer_head("identity", body[: len(body) // 2], len(body)))
        with connect(server) as sock:  # the whole request, then gone before the answer
            sock.sendall(_infer_head("identity", body, len(body)))
            sock.recv(1024)
    # 32 MiB each way: no server answers that within the 1 ms deadline, whereas
    # a 1 MiB identity answer now can (it did once, on a CI machine).
    large = np.arange(1 << 23, dtype=np.float32)
    grpc = grpcclient.InferenceServerClient(server.grpc_url)
    try:  # a gRPC client whose deadline passes while its large answer is being sent
        for _ in range(5):
            with pytest.raises(InferenceServerException):
                grpc.infer("identity", [fp32_input(grpcclient, large)], client_timeout=0.001)
        _exact(grpc, grpcclient, "identity", values)
    finally:
        grpc.close()


def test_a_model_unloaded_and_loaded_again_under_traffic(
    server: ServerHandle, witness: Witness, gate: Path
) -> None:
    gate.unlink(missing_ok=True)
    in_flight = _InThread(lambda: _http_infer(server, "gated", -_values()))
    _wait_started(gate)
    control = httpclient.InferenceServerClient(server.http_url, network_timeout=WAIT_S)
    unloading = _InThread(lambda: _unload(server, "gated"))
    try:
        deadline = time.monotonic() + WAIT_S
        while control.is_model_ready("gated"):  # unloading waits for the request
            assert time.monotonic() < deadline, "the unload never began"
            time.sleep(0.01)
        with pytest.raises(InferenceServerException, match="gated"):
            control.infer("gated", [fp32_input(httpclient, _values())])
    finally:
        gate.touch()
    answer = in_flight.result()
    assert not isinstance(answer, Exception), answer
    assert answer.as_numpy("OUTPUT0").tolist() == (-_values()).tolist()  # type: ignore[attr-defined]
    assert unloading.result() is None
    with grpcclient.InferenceServerClient(server.grpc_url) as grpc:
        with pytest.raises(InferenceServerException, match="gated"):
            grpc.infer("gated", [fp32_input(grpcclient, _values())])
    control.load_model("gated")
    _exact(control, httpclient, "gated", _values(first=31))
    control.close()
    gate.unlink(missing_ok=True)
