"""``--workers 2 --metrics-config summary_latencies=true``: the latency summaries on
``/metrics`` are those of the whole server whichever worker is scraped: counts and sums over
both workers, quantiles over both workers' windows.

The model sleeps for the delay each request asks (``DELAY_S``) and answers with its pid, so
the test knows which worker ran which request and what each request's compute time was at
least: quantile 1 (the window's largest) must be the largest delay of either worker, seen
through both. A worker killed between requests keeps its observations counted, and the
worker started in its place continues them.
"""

from __future__ import annotations

import os
import signal
import textwrap
import time
from collections.abc import Iterator

import pytest
import tritonclient.http as httpclient
from harness import ServerHandle, run_pytriton_server
from prometheus_client.parser import text_string_to_metric_families
from workers_common import (
    PID_MODEL_CONFIG,
    answering_pid,
    metrics_page,
    wait_restarted,
    worker_pids,
)

MODEL = "sleepy"
_MODEL_PY = """
import os
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            time.sleep(float(pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()[0]))
            pid = np.array([os.getpid()], dtype=np.int64)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("PID", pid)]))
        return responses
"""
REQUESTS = 24
FAMILIES = (
    "nv_inference_request_summary_us",
    "nv_inference_queue_summary_us",
    "nv_inference_compute_input_summary_us",
    "nv_inference_compute_infer_summary_us",
    "nv_inference_compute_output_summary_us",
)
# The statistics extension's duration each summary family observes (in whole µs).
_DURATIONS = dict(
    zip(
        FAMILIES,
        ("success", "queue", "compute_input", "compute_infer", "compute_output"),
        strict=True,
    )
)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerHandle]:
    root = tmp_path_factory.mktemp("workers-summaries")
    (root / MODEL / "1").mkdir(parents=True)
    (root / MODEL / "1" / "model.py").write_text(_MODEL_PY)
    (root / MODEL / "config.pbtxt").write_text(textwrap.dedent(PID_MODEL_CONFIG.format(name=MODEL)))
    with run_pytriton_server(
        root,
        "--workers=2",
        "--metrics-config=summary_latencies=true",
        "--metrics-config=summary_quantiles=0:0,0.5:0.05,1:0",
        metrics=True,
    ) as handle:
        yield handle


def _summaries(handle: ServerHandle) -> dict[str, dict[str, float]]:
    """Each summary family of the model: its samples, by suffix or quantile."""
    found: dict[str, dict[str, float]] = {}
    for family in text_string_to_metric_families(metrics_page(handle)):
        if family.name in FAMILIES:
            samples = found.setdefault(family.name, {})
            for sample in family.samples:
                if sample.labels.get("model") == MODEL:
                    key = sample.labels.get("quantile", sample.name[len(family.name) :])
                    samples[key] = float(sample.value)
    return found


def test_summaries_are_over_every_worker(server: ServerHandle) -> None:
    delays = [0.003 * i for i in range(REQUESTS)]  # 0 to 69 ms, each its own
    served: dict[int, list[float]] = {}
    slowest_at_client_us = 0.0
    for delay in delays:
        start = time.perf_counter()
        pid = answering_pid(server.http_url, MODEL, "IN", delay)  # a connection each
        slowest_at_client_us = max(slowest_at_client_us, (time.perf_counter() - start) * 1e6)
        served.setdefault(pid, []).append(delay)
    assert set(served) == set(worker_pids(server).values()), "both workers should have served"
    client = httpclient.InferenceServerClient(server.http_url)
    stats = client.get_inference_statistics(MODEL)["model_stats"][0]["inference_stats"]
    client.close()
    assert stats["success"]["count"] == REQUESTS
    longest_us = max(delays) * 1e6
    for _ in range(6):  # each scrape on a connection of its own: through either worker
        summaries = _summaries(server)
        assert set(summaries) == set(FAMILIES)
        for family, samples in summaries.items():
            assert samples["_count"] == REQUESTS, family
            # Each observation is whole microseconds: the sum of the statistics' ns,
            # each floored.
            total_us = stats[_DURATIONS[family]]["ns"] / 1000
            assert 0 <= total_us - samples["_sum"] < REQUESTS, family
            assert samples["0"] <= samples["0.5"] <= samples["1"] <= slowest_at_client_us, family
        infer = summaries["nv_inference_compute_infer_summary_us"]
        # Either worker's page has the largest delay, whichever worker slept it (the
        # other worker's own window holds none as long).
        assert infer["1"] >= longest_us
        request = summaries["nv_inference_request_summary_us"]
        assert request["1"] >= infer["1"] and request["0"] >= infer["0"]


def test_a_killed_workers_observations_still_count_and_its_successor_continues(
    server: ServerHandle,
) -> None:
    # Longer delays than before, each its own: the longest is one worker's alone.
    delays = [0.08 + 0.003 * i for i in range(8)]
    served = {delay: answering_pid(server.http_url, MODEL, "IN", delay) for delay in delays}
    before = _summaries(server)["nv_inference_request_summary_us"]["_count"]
    longest = max(delays)
    victim = served[longest]
    index = next(i for i, pid in worker_pids(server).items() if pid == victim)
    os.kill(victim, signal.SIGKILL)  # between requests: it loses none
    wait_restarted(server, index, victim)
    pids = {answering_pid(server.http_url, MODEL, "IN", 0.0) for _ in range(16)}
    assert pids == set(worker_pids(server).values()), "both workers should have served"
    for _ in range(6):  # through either worker, the new one included
        summaries = _summaries(server)
        for family, samples in summaries.items():
            assert samples["_count"] == before + 16, family
        # The dead worker's observations of the last 60 s are still in the window.
        assert summaries["nv_inference_compute_infer_summary_us"]["1"] >= longest * 1e6
