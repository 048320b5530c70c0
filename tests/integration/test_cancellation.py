"""Cancellation end to end with real clients: a gRPC cancel or deadline and an HTTP client
that closes its connection cancel the request. Still queued, it never runs (the model's
statistics show one execution fewer) and is counted as a CANCELED failure; executing, a
Python model polling ``is_cancelled()`` sees it turn true; a decoupled stream stops.

How long the model takes to notice is printed (``pytest -s``); the asserted bound is
generous on purpose (the machine is shared), the figure is what the report quotes.
"""

from __future__ import annotations

import http.client
import json
import queue
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from harness import ServerHandle, run_pytriton_server
from httpx_sse import connect_sse
from prometheus_client.parser import text_string_to_metric_families
from streaming_models import marker_events, raw_post, write_spin, write_tokens

# A generous bound for noticing a cancellation; the target is 100 ms.
NOTICE_BOUND_S = 1.0
WAIT_S = 30.0


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerHandle]:
    root = tmp_path_factory.mktemp("cancellation")
    write_spin(root, "spin")
    write_spin(root, "spin_batched", dynamic_batching=True)
    write_tokens(root, "tokens")
    # The same models in process mode: the cancellation crosses to their worker processes.
    for model_dir in (write_spin(root, "spin_proc"), write_tokens(root, "tokens_proc")):
        with (model_dir / "config.pbtxt").open("a") as config:
            config.write(
                '\nparameters { key: "EXECUTION_MODE" value { string_value: "process" } }\n'
            )
    with run_pytriton_server(root, metrics=True) as handle:
        yield handle


@pytest.fixture
def marker(tmp_path: Path) -> Path:
    return tmp_path / "marker.log"


def wait_for(marker: Path, event: str, timeout: float = WAIT_S) -> float:
    """When the model logged ``event`` (monotonic seconds), waiting for it to happen."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        events = marker_events(marker)
        found = [moment for name, moment in events.items() if name.startswith(event)]
        if found:
            return found[0]
        time.sleep(0.005)
    raise AssertionError(f"the model never logged {event!r}: {marker_events(marker)}")


def report_notice(what: str, closed_at: float, noticed_at: float) -> float:
    delay = noticed_at - closed_at
    print(f"\n{what}: the model noticed the cancellation {delay * 1000:.1f} ms later")
    assert 0 <= delay < NOTICE_BOUND_S
    return delay


def grpc_inputs(shape: list[int]) -> list[grpcclient.InferInput]:
    tensor = grpcclient.InferInput("INPUT0", shape, "FP32")
    tensor.set_data_from_numpy(np.ones(shape, np.float32))
    return [tensor]


def statistics(server: ServerHandle, model: str) -> dict[str, Any]:
    with httpclient.InferenceServerClient(server.http_url) as client:
        (stats,) = client.get_inference_statistics(model)["model_stats"]
    return stats


def cancel_failures(server: ServerHandle, model: str) -> float:
    assert server.metrics_url is not None
    host, port = server.metrics_url.rsplit(":", 1)
    connection = http.client.HTTPConnection(host, int(port), timeout=30)
    connection.request("GET", "/metrics")
    body = connection.getresponse().read().decode()
    connection.close()
    for family in text_string_to_metric_families(body):
        for sample in family.samples:
            labels = sample.labels
            if (
                sample.name.startswith("nv_inference_request_failure")
                and labels.get("model") == model
                and labels.get("reason") == "CANCELED"
            ):
                return float(sample.value)
    raise AssertionError(f"no CANCELED failure sample for {model}")


def wait_idle(server: ServerHandle, model: str, executions: int) -> dict[str, Any]:
    deadline = time.monotonic() + WAIT_S
    while True:
        stats = statistics(server, model)
        done = (
            stats["inference_stats"]["success"]["count"] + stats["inference_stats"]["fail"]["count"]
        )
        if stats["execution_count"] >= executions and done >= executions:
            return stats
        assert time.monotonic() < deadline, stats
        time.sleep(0.05)


# ------------------------------------------------------------------------------- gRPC


@pytest.mark.parametrize("model", ["spin", "spin_proc"])
def test_grpc_cancel_reaches_a_python_model_polling_is_cancelled(
    server: ServerHandle, marker: Path, model: str
) -> None:
    results: queue.Queue[Any] = queue.Queue()
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        call = client.async_infer(
            model,
            grpc_inputs([2]),
            callback=lambda result, error: results.put(error),
            parameters={"marker": str(marker)},
        )
        wait_for(marker, "started")
        cancelled_at = time.monotonic()
        call.cancel()
        noticed = wait_for(marker, "cancelled")
        error = results.get(timeout=WAIT_S)
    report_notice(f"gRPC cancel ({model})", cancelled_at, noticed)
    assert "CANCELLED" in str(error.status())


def test_a_grpc_deadline_cancels_the_request(server: ServerHandle, marker: Path) -> None:
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        started = time.monotonic()
        with pytest.raises(grpcclient.InferenceServerException) as caught:
            client.infer(
                "spin", grpc_inputs([2]), parameters={"marker": str(marker)}, client_timeout=0.5
            )
        assert "DEADLINE_EXCEEDED" in str(caught.value.status())
    noticed = wait_for(marker, "cancelled")
    report_notice("gRPC deadline", started + 0.5, noticed)


@pytest.mark.parametrize(
    ("model", "shape"), [("spin", [2]), ("spin_batched", [1, 2])], ids=["default", "dynamic"]
)
def test_a_request_cancelled_in_the_queue_never_executes(
    server: ServerHandle, model: str, shape: list[int], tmp_path: Path
) -> None:
    before = statistics(server, model)
    failures_before = cancel_failures(server, model)
    holder_marker = tmp_path / "holder.log"
    outcomes: queue.Queue[tuple[str, Any]] = queue.Queue()
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        client.async_infer(
            model,
            grpc_inputs(shape),
            callback=lambda result, error: outcomes.put(("holder", error)),
            parameters={"hold_ms": 1500, "marker": str(holder_marker)},
        )
        wait_for(holder_marker, "started")  # the only instance is busy from now on
        queued = client.async_infer(
            model,
            grpc_inputs(shape),
            callback=lambda result, error: outcomes.put(("queued", error)),
            parameters={"hold_ms": 0},
        )
        time.sleep(0.2)  # it reaches the queue
        queued.cancel()
        first = outcomes.get(timeout=WAIT_S)
        second = outcomes.get(timeout=WAIT_S)
    by_name = dict([first, second])
    assert by_name["holder"] is None
    assert "CANCELLED" in str(by_name["queued"].status())
    after = wait_idle(server, model, before["execution_count"] + 1)
    assert after["execution_count"] == before["execution_count"] + 1
    assert after["inference_stats"]["success"]["count"] == (
        before["inference_stats"]["success"]["count"] + 1
    )
    assert after["inference_stats"]["fail"]["count"] == (
        before["inference_stats"]["fail"]["count"] + 1
    )
    assert cancel_failures(server, model) == failures_before + 1


@pytest.mark.parametrize("model", ["tokens", "tokens_proc"])
def test_a_cancelled_grpc_stream_stops_a_decoupled_model(
    server: ServerHandle, marker: Path, model: str
) -> None:
    received: queue.Queue[Any] = queue.Queue()
    text = grpcclient.InferInput("text_input", [1], "BYTES")
    text.set_data_from_numpy(np.array([b"t"], np.object_))
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        client.start_stream(lambda result, error: received.put((result, error)))
        client.async_stream_infer(
            model,
            [text],
            parameters={"until_cancelled": True, "delay_ms": 5, "marker": str(marker)},
        )
        for _ in range(3):
            result, error = received.get(timeout=WAIT_S)
            assert error is None and result.as_numpy("text_output") is not None
        cancelled_at = time.monotonic()
        client.stop_stream(cancel_requests=True)
    noticed = wait_for(marker, "cancelled-after")
    report_notice(f"gRPC stream cancel ({model})", cancelled_at, noticed)


# ------------------------------------------------------------------------------- HTTP


def raw_infer(model: str, parameters: dict[str, Any], *, close: bool = False) -> bytes:
    document = {
        "inputs": [{"name": "INPUT0", "shape": [2], "datatype": "FP32", "data": [1.0, 1.0]}],
        "parameters": parameters,
    }
    return raw_post(f"/v2/models/{model}/infer", document, close=close)


def connect(server: ServerHandle) -> socket.socket:
    host, port = server.http_url.rsplit(":", 1)
    return socket.create_connection((host, int(port)), timeout=WAIT_S)


def read_all(sock: socket.socket) -> bytes:
    received = bytearray()
    while chunk := sock.recv(1 << 16):
        received += chunk
    return bytes(received)


def test_closing_the_http_connection_reaches_a_python_model(
    server: ServerHandle, marker: Path
) -> None:
    sock = connect(server)
    sock.sendall(raw_infer("spin", {"marker": str(marker)}))
    wait_for(marker, "started")
    closed_at = time.monotonic()
    sock.close()
    noticed = wait_for(marker, "cancelled")
    report_notice("HTTP connection closed (/infer)", closed_at, noticed)


def test_closing_a_generate_stream_stops_a_decoupled_model(
    server: ServerHandle, marker: Path
) -> None:
    body = {"text_input": "t", "until_cancelled": True, "delay_ms": 5, "marker": str(marker)}
    with (
        httpx.Client(timeout=WAIT_S) as client,
        connect_sse(
            client, "POST", f"http://{server.http_url}/v2/models/tokens/generate_stream", json=body
        ) as source,
    ):
        events = source.iter_sse()
        for index in range(3):
            assert json.loads(next(events).data)["index"] == index
        closed_at = time.monotonic()
    noticed = wait_for(marker, "cancelled-after")
    report_notice("HTTP event stream closed (/generate_stream)", closed_at, noticed)


def test_a_request_whose_http_client_left_while_queued_never_executes(
    server: ServerHandle, tmp_path: Path
) -> None:
    before = statistics(server, "spin")
    failures_before = cancel_failures(server, "spin")
    holder_marker = tmp_path / "holder.log"
    with connect(server) as holder:
        holder.sendall(
            raw_infer("spin", {"hold_ms": 1500, "marker": str(holder_marker)}, close=True)
        )
        wait_for(holder_marker, "started")
        queued = connect(server)
        queued.sendall(raw_infer("spin", {"hold_ms": 0}))
        time.sleep(0.2)  # it reaches the queue
        queued.close()
        assert read_all(holder).startswith(b"HTTP/1.1 200 OK")
    after = wait_idle(server, "spin", before["execution_count"] + 1)
    assert after["execution_count"] == before["execution_count"] + 1
    assert cancel_failures(server, "spin") == failures_before + 1


def test_a_half_closed_client_still_gets_its_answer(server: ServerHandle, tmp_path: Path) -> None:
    # shutdown(SHUT_WR) after the request (what `nc -N` does) looks like a close to the
    # server: the interim 100 Continue it probes with is read here, and the answer follows.
    holder_marker = tmp_path / "holder.log"
    with connect(server) as sock:
        sock.sendall(raw_infer("spin", {"hold_ms": 300, "marker": str(holder_marker)}))
        wait_for(holder_marker, "started")
        sock.shutdown(socket.SHUT_WR)
        received = read_all(sock)
    interim, _, answer = received.partition(b"\r\n\r\n")
    assert interim == b"HTTP/1.1 100 Continue"
    assert answer.startswith(b"HTTP/1.1 200 OK")
    assert json.loads(answer.split(b"\r\n\r\n", 1)[1])["outputs"][0]["data"] == [1.0, 1.0]
