"""``response_stats`` of a decoupled model count each response the model sent, by its index
within the request, in Triton's categories (success, fail, empty_response for a flag-only
completion, cancel), alike over HTTP and gRPC; the first-response histogram counts one
observation per request, as index "0" of ``response_stats`` does."""

from __future__ import annotations

import http.client
import queue
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from harness import ServerHandle, run_pytriton_server
from prometheus_client.parser import text_string_to_metric_families
from streaming_models import marker_events, write_tokens

DELAY_MS = 30
WAIT_S = 30.0
KINDS = ("success", "fail", "empty_response", "cancel")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerHandle]:
    root = tmp_path_factory.mktemp("response-stats")
    write_tokens(root, "tokens")
    with run_pytriton_server(
        root, "--metrics-config=histogram_latencies=true", metrics=True
    ) as handle:
        yield handle


def stream(server: ServerHandle, requests: list[tuple[int, dict[str, Any]]]) -> list[Any]:
    """Send each (count, parameters) on one gRPC stream; every response, once all ended."""
    received: queue.Queue[Any] = queue.Queue()
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        client.start_stream(lambda result, error: received.put((result, error)))
        for number, (count, parameters) in enumerate(requests):
            text = grpcclient.InferInput("text_input", [1], "BYTES")
            text.set_data_from_numpy(np.array([b"s"], np.object_))
            size = grpcclient.InferInput("count", [1], "INT32")
            size.set_data_from_numpy(np.array([count], np.int32))
            client.async_stream_infer(
                "tokens",
                [text, size],
                request_id=str(number),
                parameters=parameters,
                enable_empty_final_response=True,
            )
        finals = 0
        results = []
        while finals < len(requests):
            result, error = received.get(timeout=WAIT_S)
            results.append((result, error))
            # An error response is not final here; each request ends with an empty final.
            if result is not None:
                final = result.get_response().parameters["triton_final_response"].bool_param
                finals += final
        client.stop_stream()
    return results


def http_response_stats(server: ServerHandle) -> dict[str, Any]:
    with httpclient.InferenceServerClient(server.http_url) as client:
        (stats,) = client.get_inference_statistics("tokens")["model_stats"]
    return stats["response_stats"]


def grpc_response_stats(server: ServerHandle) -> dict[str, Any]:
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        (stats,) = client.get_inference_statistics("tokens", as_json=True)["model_stats"]
    return {
        index: {
            name: {"count": int(d.get("count", 0)), "ns": int(d.get("ns", 0))}
            for name, d in entry.items()
        }
        for index, entry in stats.get("response_stats", {}).items()
    }


def counts(response_stats: dict[str, Any]) -> dict[str, dict[str, int]]:
    return {
        index: {name: entry[name]["count"] for name in (*KINDS, "compute_infer", "compute_output")}
        for index, entry in response_stats.items()
    }


def first_response_count(server: ServerHandle) -> float:
    assert server.metrics_url is not None
    host, port = server.metrics_url.rsplit(":", 1)
    connection = http.client.HTTPConnection(host, int(port), timeout=WAIT_S)
    connection.request("GET", "/metrics")
    body = connection.getresponse().read().decode()
    connection.close()
    for family in text_string_to_metric_families(body):
        for sample in family.samples:
            if sample.name == "nv_inference_first_response_histogram_ms_count" and (
                sample.labels.get("model") == "tokens"
            ):
                return float(sample.value)
    raise AssertionError("no first-response histogram for tokens")


def entry(success: int = 0, fail: int = 0, empty: int = 0, cancel: int = 0) -> dict[str, int]:
    return {
        "success": success,
        "fail": fail,
        "empty_response": empty,
        "cancel": cancel,
        "compute_infer": success + fail + empty,
        "compute_output": success + fail,
    }


def test_response_stats_match_the_responses_sent(server: ServerHandle, tmp_path: Path) -> None:
    delay = {"delay_ms": DELAY_MS}
    results = stream(
        server,
        [
            (3, delay),  # 3 responses, then FINAL alone (index 3: an empty response)
            (2, {**delay, "final_with_last": True}),  # FINAL with the 2nd: no empty response
            (3, {**delay, "fail_at": 1}),  # index 1 an error response
        ],
    )
    errors = [error for _, error in results if error is not None]
    assert [str(error) for error in errors] == ["failed at 1"]
    http_stats = http_response_stats(server)
    assert list(http_stats) == ["0", "1", "2", "3"]
    assert counts(http_stats) == {
        "0": entry(success=3),
        "1": entry(success=2, fail=1),
        "2": entry(success=2),
        "3": entry(empty=2),
    }
    assert grpc_response_stats(server) == http_stats
    first = http_stats["0"]
    # Every index-0 response is a success: its time splits into infer and output exactly;
    # the model slept DELAY_MS before each.
    assert first["success"]["ns"] == first["compute_infer"]["ns"] + first["compute_output"]["ns"]
    assert first["compute_infer"]["ns"] >= 3 * DELAY_MS * 1_000_000
    assert first_response_count(server) == 3  # one first response per request

    # A cancelled request whose model answers CANCELLED counts a cancel at its last index.
    marker = tmp_path / "marker.log"
    received: queue.Queue[Any] = queue.Queue()
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        client.start_stream(lambda result, error: received.put((result, error)))
        text = grpcclient.InferInput("text_input", [1], "BYTES")
        text.set_data_from_numpy(np.array([b"c"], np.object_))
        client.async_stream_infer(
            "tokens",
            [text],
            parameters={
                "until_cancelled": True,
                "delay_ms": 5,
                "cancel_error": True,
                "marker": str(marker),
            },
        )
        for _ in range(2):
            received.get(timeout=WAIT_S)
        client.stop_stream(cancel_requests=True)
    deadline = time.monotonic() + WAIT_S
    while not any(e.startswith("cancelled-after") for e in marker_events(marker)):
        assert time.monotonic() < deadline
        time.sleep(0.01)
    sent = int(next(e for e in marker_events(marker) if e.startswith("cancelled-after"))[16:])
    deadline = time.monotonic() + WAIT_S
    while str(sent) not in http_response_stats(server):
        assert time.monotonic() < deadline
        time.sleep(0.01)
    after = counts(http_response_stats(server))
    assert after[str(sent)]["cancel"] == 1
    assert after["0"]["success"] == 4
    assert first_response_count(server) == 4
