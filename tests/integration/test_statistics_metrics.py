"""Statistics equal the traffic sent, and ``/metrics`` equals the statistics.

A real server, the real ``tritonclient`` (HTTP and gRPC), and real scrapes of ``/metrics``
parsed with ``prometheus_client``'s parser. Expected names, types, HELP texts and labels are
Triton 2.51's (checked against it: ../shared/spec/metrics-ops.md §1).
"""

from __future__ import annotations

import http.client
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from harness import TEST_MODELS_REPOSITORY, ServerHandle, run_pytriton_server
from ops_models import METRICS_MODEL, write_model
from prometheus_client.parser import text_string_to_metric_families

from pytriton_core.metrics import FAMILIES

REASONS = ["REJECTED", "CANCELED", "BACKEND", "OTHER"]

# Triton 2.51's HELP texts, as its /metrics prints them.
TRITON_HELP = {
    "nv_inference_request_success": "Number of successful inference requests, all batch sizes",
    "nv_inference_request_failure": "Number of failed inference requests, all batch sizes",
    "nv_inference_count": "Number of inferences performed (does not include cached requests)",
    "nv_inference_exec_count": (
        "Number of model executions performed (does not include cached requests)"
    ),
    "nv_inference_request_duration_us": (
        "Cumulative inference request duration in microseconds (includes cached requests)"
    ),
    "nv_inference_queue_duration_us": (
        "Cumulative inference queuing duration in microseconds (includes cached requests)"
    ),
    "nv_inference_compute_input_duration_us": (
        "Cumulative compute input duration in microseconds (does not include cached requests)"
    ),
    "nv_inference_compute_infer_duration_us": (
        "Cumulative compute inference duration in microseconds (does not include cached requests)"
    ),
    "nv_inference_compute_output_duration_us": (
        "Cumulative inference compute output duration in microseconds (does not include "
        "cached requests)"
    ),
    "nv_inference_pending_request_count": (
        "Instantaneous number of pending requests awaiting execution per-model."
    ),
    "nv_pinned_memory_pool_total_bytes": "Pinned memory pool total memory size, in bytes",
    "nv_pinned_memory_pool_used_bytes": "Pinned memory pool used memory size, in bytes",
    "nv_cpu_utilization": "CPU utilization rate [0.0 - 1.0]",
    "nv_cpu_memory_total_bytes": "CPU total memory (RAM), in bytes",
    "nv_cpu_memory_used_bytes": "CPU used memory (RAM), in bytes",
}


def build_repository(root: Path) -> Path:
    write_model(root, "plain")  # OUTPUT0 = INPUT0 + 1
    write_model(root, "batched", max_batch_size=8)
    write_model(root, "custom_metrics", source=METRICS_MODEL)
    (root / "raise_error").symlink_to(TEST_MODELS_REPOSITORY / "raise_error")
    return root


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerHandle]:
    repository = build_repository(tmp_path_factory.mktemp("stats-metrics"))
    with run_pytriton_server(repository, metrics=True) as handle:
        yield handle


@pytest.fixture(scope="module")
def client(server: ServerHandle) -> Iterator[httpclient.InferenceServerClient]:
    with httpclient.InferenceServerClient(server.http_url) as http_client:
        yield http_client


def fetch(url: str, path: str, method: str = "GET") -> tuple[int, dict[str, str], bytes]:
    host, port = url.rsplit(":", 1)
    connection = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        connection.request(method, path)
        response = connection.getresponse()
        return response.status, dict(response.getheaders()), response.read()
    finally:
        connection.close()


def scrape(server: ServerHandle) -> dict[str, Any]:
    """name -> prometheus_client Metric (its samples, type and documentation)."""
    assert server.metrics_url is not None
    status, headers, body = fetch(server.metrics_url, "/metrics")
    assert status == 200
    assert headers["Content-Type"] == "text/plain; charset=utf-8"
    return {family.name: family for family in text_string_to_metric_families(body.decode())}


def value(families: dict[str, Any], name: str, **labels: str) -> float:
    """The one sample of ``name`` whose labels include ``labels``."""
    matches = [
        s.value
        for family in families.values()
        for s in family.samples
        if s.name in (name, name + "_total") and labels.items() <= s.labels.items()
    ]
    assert len(matches) == 1, (name, labels, matches)
    return matches[0]


def infer(client: httpclient.InferenceServerClient, model: str, data: np.ndarray) -> np.ndarray:
    tensor = httpclient.InferInput("INPUT0", list(data.shape), "FP32")
    tensor.set_data_from_numpy(data)
    return client.infer(model, [tensor]).as_numpy("OUTPUT0")


def grpc_infer(server: ServerHandle, model: str, data: np.ndarray) -> np.ndarray:
    with grpcclient.InferenceServerClient(server.grpc_url) as grpc_client:
        tensor = grpcclient.InferInput("INPUT0", list(data.shape), "FP32")
        tensor.set_data_from_numpy(data)
        return grpc_client.infer(model, [tensor]).as_numpy("OUTPUT0")


def inference_stats(client: httpclient.InferenceServerClient, model: str) -> dict[str, Any]:
    (stats,) = client.get_inference_statistics(model)["model_stats"]
    return stats


def counts(stats: dict[str, Any]) -> dict[str, int]:
    return {key: entry["count"] for key, entry in stats["inference_stats"].items()}


# --------------------------------------------------------------------------- statistics


def test_statistics_equal_the_traffic_sent(
    server: ServerHandle, client: httpclient.InferenceServerClient
) -> None:
    for i in range(5):
        np.testing.assert_array_equal(
            infer(client, "plain", np.full(3, i, np.float32)), np.full(3, i + 1, np.float32)
        )
    for _ in range(2):
        grpc_infer(server, "plain", np.zeros(2, np.float32))
    stats = inference_stats(client, "plain")
    assert (stats["inference_count"], stats["execution_count"]) == (7, 7)
    assert counts(stats) == {
        "success": 7,
        "fail": 0,
        "queue": 7,
        "compute_input": 7,
        "compute_infer": 7,
        "compute_output": 7,
        "cache_hit": 0,
        "cache_miss": 0,
    }
    assert stats["batch_stats"][0]["batch_size"] == 1
    assert stats["batch_stats"][0]["compute_infer"]["count"] == 7
    assert stats["last_inference"] > 0


def test_the_durations_cover_the_whole_request(
    server: ServerHandle, client: httpclient.InferenceServerClient
) -> None:
    """As Triton's: a request's duration is its queue and compute durations together
    (perf_analyzer reports the rest as "overhead", about 1 µs against Triton), and
    compute_output includes handing the responses back to the front ends."""
    for i in range(5):
        infer(client, "plain", np.full(3, i, np.float32))
        grpc_infer(server, "plain", np.zeros(2, np.float32))
    durations = inference_stats(client, "plain")["inference_stats"]
    parts = ("queue", "compute_input", "compute_infer", "compute_output")
    assert durations["success"]["ns"] == sum(durations[part]["ns"] for part in parts)
    assert all(durations[part]["ns"] > 0 for part in parts)


def test_a_batch_counts_one_request_and_its_size_in_inferences(
    client: httpclient.InferenceServerClient,
) -> None:
    infer(client, "batched", np.ones((4, 2), np.float32))
    infer(client, "batched", np.ones((3, 2), np.float32))
    stats = inference_stats(client, "batched")
    assert stats["inference_stats"]["success"]["count"] == 2
    assert (stats["inference_count"], stats["execution_count"]) == (7, 2)
    assert sorted(b["batch_size"] for b in stats["batch_stats"]) == [3, 4]


def test_failures_are_counted_with_their_reason(
    server: ServerHandle, client: httpclient.InferenceServerClient
) -> None:
    for _ in range(3):
        with pytest.raises(httpclient.InferenceServerException):
            infer(client, "raise_error", np.array([-1.0], np.float32))
    infer(client, "raise_error", np.array([1.0], np.float32))
    stats = inference_stats(client, "raise_error")
    assert counts(stats)["fail"] == 3
    assert counts(stats)["success"] == 1
    assert stats["execution_count"] == 4
    families = scrape(server)
    failures = {
        reason: value(families, "nv_inference_request_failure", model="raise_error", reason=reason)
        for reason in REASONS
    }
    assert failures == {"REJECTED": 0, "CANCELED": 0, "BACKEND": 3, "OTHER": 0}


# --------------------------------------------------------------------------- metrics


def test_metrics_equal_the_statistics(
    server: ServerHandle, client: httpclient.InferenceServerClient
) -> None:
    for _ in range(4):
        infer(client, "plain", np.ones(2, np.float32))
    families = scrape(server)
    everything = client.get_inference_statistics()["model_stats"]
    assert {s["name"] for s in everything} == {"plain", "batched", "custom_metrics", "raise_error"}
    for stats in everything:
        labels = {"model": stats["name"], "version": stats["version"]}
        inference = stats["inference_stats"]
        expected = {
            "nv_inference_request_success": inference["success"]["count"],
            "nv_inference_count": stats["inference_count"],
            "nv_inference_exec_count": stats["execution_count"],
            "nv_inference_request_duration_us": inference["success"]["ns"] // 1000,
            "nv_inference_queue_duration_us": inference["queue"]["ns"] // 1000,
            "nv_inference_compute_input_duration_us": inference["compute_input"]["ns"] // 1000,
            "nv_inference_compute_infer_duration_us": inference["compute_infer"]["ns"] // 1000,
            "nv_inference_compute_output_duration_us": inference["compute_output"]["ns"] // 1000,
            "nv_inference_pending_request_count": 0,
        }
        scraped = {name: value(families, name, **labels) for name in expected}
        assert scraped == expected, stats["name"]
        failures = sum(
            value(families, "nv_inference_request_failure", reason=reason, **labels)
            for reason in REASONS
        )
        assert failures == inference["fail"]["count"]


def test_metric_families_have_tritons_names_types_help_and_labels(server: ServerHandle) -> None:
    families = scrape(server)
    for name, help_text in TRITON_HELP.items():
        assert families[name].documentation == help_text, name
    for family in FAMILIES:
        if family.name in families:
            assert families[family.name].type == family.kind.value, family.name
    success = families["nv_inference_request_success"]
    assert success.type == "counter"
    for sample in success.samples:
        assert set(sample.labels) == {"model", "version"}
    failure_labels = {
        (s.labels["model"], s.labels["reason"])
        for s in families["nv_inference_request_failure"].samples
    }
    assert failure_labels == {
        (m, r) for m in ("plain", "batched", "custom_metrics", "raise_error") for r in REASONS
    }
    assert families["nv_inference_pending_request_count"].type == "gauge"
    # Off by default: summaries. On by default (unlike Triton): the latency histograms.
    assert "nv_inference_request_summary_us" not in families
    for family in (
        "nv_inference_first_response_histogram_ms",
        "nv_inference_request_duration_histogram_us",
        "nv_inference_queue_duration_histogram_us",
        "nv_inference_compute_input_duration_histogram_us",
        "nv_inference_compute_infer_duration_histogram_us",
        "nv_inference_compute_output_duration_histogram_us",
    ):
        assert families[family].type == "histogram", family


def test_cpu_and_staging_pool_metrics(server: ServerHandle) -> None:
    families = scrape(server)
    # The default pool size where page-locked memory is available, else 0 (pageable).
    assert value(families, "nv_pinned_memory_pool_total_bytes") in (0, 256 << 20)
    assert value(families, "nv_pinned_memory_pool_used_bytes") == 0
    total = value(families, "nv_cpu_memory_total_bytes")
    used = value(families, "nv_cpu_memory_used_bytes")
    assert 0 < used <= total
    assert 0.0 <= value(families, "nv_cpu_utilization") <= 1.0


def test_gpu_metrics_only_where_nvml_finds_a_gpu(server: ServerHandle) -> None:
    families = scrape(server)
    try:
        import pynvml

        pynvml.nvmlInit()
        gpus = pynvml.nvmlDeviceGetCount()
    except Exception:
        gpus = 0
    if gpus:
        assert len(families["nv_gpu_utilization"].samples) == gpus
        assert all("gpu_uuid" in s.labels for s in families["nv_gpu_memory_total_bytes"].samples)
    else:
        assert not any(name.startswith("nv_gpu_") for name in families)
        assert "GPU metrics are off" in server.log()


def test_custom_metrics_from_python_models(
    server: ServerHandle, client: httpclient.InferenceServerClient
) -> None:
    for size in (1, 3, 10):
        infer(client, "custom_metrics", np.ones(size, np.float32))
    families = scrape(server)
    labels = {"model": "custom_metrics"}
    assert families["custom_requests"].type == "counter"
    assert families["custom_requests"].documentation == "Requests this model executed"
    assert value(families, "custom_requests", **labels) == 3
    assert value(families, "custom_last_sum", **labels) == 10
    sizes = {
        s.labels["le"]: s.value
        for s in families["custom_input_size"].samples
        if s.name == "custom_input_size_bucket"
    }
    assert sizes == {"1": 1, "4": 2, "16": 3, "+Inf": 3}
    assert value(families, "custom_input_size_count", **labels) == 3
    assert value(families, "custom_input_size_sum", **labels) == 14


def test_metrics_port_answers_other_paths_empty_and_only_get(server: ServerHandle) -> None:
    assert server.metrics_url is not None
    status, _, body = fetch(server.metrics_url, "/metrics/")
    assert status == 200 and b"nv_inference_count" in body
    assert fetch(server.metrics_url, "/other")[::2] == (200, b"")
    assert fetch(server.metrics_url, "/metrics", "POST")[0] == 405


def test_summaries_and_histogram_when_configured(tmp_path: Path) -> None:
    write_model(tmp_path, "plain")
    flags = (
        "--metrics-config=summary_latencies=true",
        "--metrics-config=summary_quantiles=0.5:0.05,0.9:0.01",
        "--metrics-config=histogram_latencies=true",
        "--metrics-config=counter_latencies=false",
        "--allow-cpu-metrics=false",
    )
    with (
        run_pytriton_server(tmp_path, *flags, metrics=True) as server,
        httpclient.InferenceServerClient(server.http_url) as client,
    ):
        client_ms = []  # each request's time at the client: at least the server's
        for _ in range(6):
            start = time.perf_counter()
            infer(client, "plain", np.ones(2, np.float32))
            client_ms.append((time.perf_counter() - start) * 1000)
        families = scrape(server)
        stats = inference_stats(client, "plain")
    labels = {"model": "plain", "version": "1"}
    assert "nv_inference_request_duration_us" not in families
    assert not any(name.startswith("nv_cpu_") for name in families)
    summary = families["nv_inference_request_summary_us"]
    assert summary.type == "summary"
    assert value(families, "nv_inference_request_summary_us_count", **labels) == 6
    quantiles = sorted(s.labels["quantile"] for s in summary.samples if "quantile" in s.labels)
    assert quantiles == ["0.5", "0.9"]
    queue_sum = value(families, "nv_inference_queue_summary_us_sum", **labels)
    # Each observation is whole microseconds, so the sum may fall short by < 1 µs each.
    assert 0 <= stats["inference_stats"]["queue"]["ns"] / 1000 - queue_sum < 6
    histogram = families["nv_inference_first_response_histogram_ms"]
    assert histogram.type == "histogram"
    buckets = {s.labels["le"]: s.value for s in histogram.samples if s.name.endswith("_bucket")}
    assert list(buckets) == ["100", "500", "2000", "5000", "+Inf"]
    assert buckets["+Inf"] == 6
    counts = [buckets[le] for le in buckets]
    assert counts == sorted(counts)  # cumulative
    for le in ("100", "500", "2000", "5000"):
        # A request answered within le ms at the client was within le ms at the server (a
        # loaded machine can make one slower than a bucket, so no exact count).
        assert sum(ms <= float(le) for ms in client_ms) <= buckets[le] <= 6
