"""Graceful shutdown and readiness: SIGTERM/SIGINT finish what is in flight, report
"Server exiting" and refuse new requests meanwhile, finalize every model and exit 0;
strict readiness."""

from __future__ import annotations

import http.client
import json
import signal
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from harness import LOOPBACK, ServerHandle, free_port, run_pytriton_server
from ops_models import write_model
from prometheus_client.parser import text_string_to_metric_families

from pytriton_core import ModelControlMode, Server

IN_FLIGHT = 50
DELAY_S = 0.02  # per execution, one instance, once the gate opens


def get(url: str, path: str) -> tuple[int, bytes]:
    host, port = url.rsplit(":", 1)
    connection = http.client.HTTPConnection(host, int(port), timeout=10)
    try:
        connection.request("GET", path)
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


def wait_for(condition: Callable[[], bool], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.02)


def scraped(server: ServerHandle, *names: str) -> float:
    """The sum of these metrics of the model "slow" (from /metrics)."""
    assert server.metrics_url is not None
    status, body = get(server.metrics_url, "/metrics")
    assert status == 200
    total = 0.0
    for family in text_string_to_metric_families(body.decode()):
        if family.name in names:
            total += sum(s.value for s in family.samples if s.labels.get("model") == "slow")
    return total


def accepted(server: ServerHandle) -> float:
    """Requests the server has taken once one is executing (one instance): pending +
    executed + that one."""
    return scraped(server, "nv_inference_pending_request_count", "nv_inference_exec_count") + 1


def infer_http(url: str, value: float) -> np.ndarray:
    with httpclient.InferenceServerClient(url, network_timeout=60) as client:
        tensor = httpclient.InferInput("INPUT0", [1], "FP32")
        tensor.set_data_from_numpy(np.array([value], np.float32))
        return client.infer("slow", [tensor]).as_numpy("OUTPUT0")


def infer_grpc(url: str, value: float) -> np.ndarray:
    with grpcclient.InferenceServerClient(url) as client:
        tensor = grpcclient.InferInput("INPUT0", [1], "FP32")
        tensor.set_data_from_numpy(np.array([value], np.float32))
        return client.infer("slow", [tensor], client_timeout=60).as_numpy("OUTPUT0")


def _input(module: object, value: float) -> list[object]:
    tensor = module.InferInput("INPUT0", [1], "FP32")  # type: ignore[attr-defined]
    tensor.set_data_from_numpy(np.array([value], np.float32))
    return [tensor]


@pytest.mark.parametrize("stop_signal", [signal.SIGTERM, signal.SIGINT])
def test_signal_finishes_every_request_in_flight_and_exits_0(
    tmp_path: Path, stop_signal: signal.Signals
) -> None:
    marker = tmp_path / "finalized.txt"
    gate = tmp_path / "gate"  # executions wait until it exists
    repository = tmp_path / "models"
    write_model(
        repository,
        "slow",
        parameters={
            "delay_s": str(DELAY_S),
            "finalize_marker": str(marker),
            "gate_file": str(gate),
        },
    )
    with (
        run_pytriton_server(repository, metrics=True) as server,
        httpclient.InferenceServerClient(
            server.http_url, concurrency=IN_FLIGHT // 2, network_timeout=60
        ) as http_client,
        grpcclient.InferenceServerClient(server.grpc_url) as grpc_client,
    ):
        # Half over HTTP, half over gRPC, all sent at once.
        grpc_results: dict[int, Future[np.ndarray]] = {}

        def on_grpc(i: int, result: object, error: object) -> None:
            future = grpc_results[i]
            if error is not None:
                future.set_exception(error)  # type: ignore[arg-type]
            else:
                future.set_result(result.as_numpy("OUTPUT0"))  # type: ignore[attr-defined]

        http_requests = {}
        for i in range(IN_FLIGHT):
            if i % 2:
                http_requests[i] = http_client.async_infer("slow", _input(httpclient, i))
            else:
                grpc_results[i] = Future()
                grpc_client.async_infer(
                    "slow",
                    _input(grpcclient, i),
                    callback=lambda result, error, i=i: on_grpc(i, result, error),
                    client_timeout=60,
                )
        # Every request has reached the server (queued or executed) before the signal.
        wait_for(lambda: accepted(server) >= IN_FLIGHT)
        server.process.send_signal(stop_signal)
        # While the requests drain the server is up, but exiting: not live, not ready.
        wait_for(lambda: get(server.http_url, "/v2/health/ready")[0] == 503, 10)
        exiting = json.dumps({"error": "Server exiting"}, separators=(",", ":")).encode()
        assert get(server.http_url, "/v2/health/ready") == (503, exiting)
        assert get(server.http_url, "/v2/health/live") == (503, exiting)
        # New requests are refused as Triton's stopped schedulers refuse them.
        with pytest.raises(
            httpclient.InferenceServerException,
            match=r"\[request id: <id_unknown>\] Server is stopping, scheduler for model has "
            "stopped accepting new inference requests$",
        ):
            infer_http(server.http_url, -1.0)
        assert scraped(server, "nv_inference_exec_count") == 0  # all still in flight
        gate.touch()
        outputs = {
            i: r.get_result(timeout=60).as_numpy("OUTPUT0") for i, r in http_requests.items()
        }
        outputs.update({i: f.result(timeout=60) for i, f in grpc_results.items()})
        returncode = server.process.wait(timeout=60)
    assert returncode == 0
    assert sorted(outputs) == list(range(IN_FLIGHT))
    for i, output in outputs.items():
        np.testing.assert_array_equal(output, np.array([i + 1.0], np.float32))
    assert marker.read_text() == "finalized 1\n"


def test_exit_timeout_bounds_the_wait(tmp_path: Path) -> None:
    """Requests still executing when the exit timeout expires are abandoned: the process
    ends at once with status 1 and says so, as tritonserver does."""
    write_model(tmp_path, "slow", parameters={"delay_s": "30"})
    with run_pytriton_server(
        tmp_path, "--exit-timeout-secs=1", metrics=True, check_exit=False
    ) as server:

        def send() -> None:
            try:
                infer_http(server.http_url, 1.0)
            except Exception:
                pass  # the server leaves without answering it

        for _ in range(2):  # one executing, one queued behind it
            threading.Thread(target=send, daemon=True).start()
        wait_for(lambda: scraped(server, "nv_inference_pending_request_count") >= 1)
        started = time.monotonic()
        server.process.send_signal(signal.SIGTERM)
        returncode = server.process.wait(timeout=20)
        assert time.monotonic() - started < 10
        assert "Timeout 1: Found 2 in-flight inference requests" in server.log()
        assert (
            "failed to stop server: Internal - Exit timeout expired. Exiting immediately."
            in server.log()
        )
    assert returncode == 1


# --------------------------------------------------------------------------- readiness


def in_process(repository: Path, **options: object) -> tuple[Server, str]:
    port = free_port()
    server = Server(
        model_repository=repository,
        allow_http=True,
        http_address=LOOPBACK,
        http_port=port,
        **options,
    )
    return server, f"{LOOPBACK}:{port}"


def broken_repository(root: Path) -> Path:
    write_model(root, "good")
    broken = write_model(root, "broken")
    (broken / "1" / "model.py").write_text("raise RuntimeError('cannot load')\n")
    return root


def test_strict_readiness_waits_for_every_model(tmp_path: Path) -> None:
    server, url = in_process(broken_repository(tmp_path), exit_on_error=False)
    with server:
        assert get(url, "/v2/health/live") == (200, b"")
        assert get(url, "/v2/health/ready") == (400, b"")
        assert get(url, "/v2/models/good/ready") == (200, b"")


def test_without_strict_readiness_a_failed_model_does_not_matter(tmp_path: Path) -> None:
    server, url = in_process(
        broken_repository(tmp_path), exit_on_error=False, strict_readiness=False
    )
    with server:
        assert get(url, "/v2/health/ready") == (200, b"")


def test_not_ready_while_a_model_marked_for_load_is_loading(tmp_path: Path) -> None:
    write_model(tmp_path, "slow_start", parameters={"initialize_delay_s": "2"})
    server, url = in_process(tmp_path, model_control_mode=ModelControlMode.EXPLICIT, load_models=())
    with server:
        assert get(url, "/v2/health/ready") == (200, b"")
        loader = threading.Thread(target=server.load_model, args=("slow_start",))
        loader.start()
        wait_for(lambda: get(url, "/v2/health/ready")[0] == 400, 10)
        loader.join(timeout=30)
        assert get(url, "/v2/health/ready") == (200, b"")
        assert server.is_model_ready("slow_start")
