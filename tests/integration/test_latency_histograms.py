"""The latency histograms on /metrics: on by default, one observation per successful
request in each, their buckets set server-wide by ``--metrics-config`` and per model by
``model_metrics``, parsed with prometheus_client's parser."""

from __future__ import annotations

import urllib.request
from pathlib import Path
from typing import Any

import numpy as np
import tritonclient.http as httpclient
from harness import ServerHandle, run_pytriton_server
from ops_models import write_model
from prometheus_client.parser import text_string_to_metric_families

DURATIONS = ("request", "queue", "compute_input", "compute_infer", "compute_output")


def scrape(server: ServerHandle) -> dict[str, Any]:
    assert server.metrics_url is not None
    with urllib.request.urlopen(f"http://{server.metrics_url}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    return {family.name: family for family in text_string_to_metric_families(text)}


def buckets(families: dict[str, Any], family: str, model: str) -> dict[str, float]:
    return {
        s.labels["le"]: s.value
        for s in families[family].samples
        if s.name == f"{family}_bucket" and s.labels["model"] == model
    }


def test_histograms_count_every_request_with_their_buckets(tmp_path: Path) -> None:
    write_model(tmp_path, "plain")
    write_model(
        tmp_path,
        "tuned",
        extra="model_metrics { metric_control [ { metric_identifier { family: "
        '"nv_inference_queue_duration_histogram_us" } histogram_options { buckets: [ 7, 70 ] } '
        "} ] }\n",
    )
    flag = "--metrics-config=nv_inference_request_duration_histogram_us=10,100000000"
    with (
        run_pytriton_server(tmp_path, flag, metrics=True) as server,
        httpclient.InferenceServerClient(server.http_url) as client,
    ):
        data = np.ones(3, np.float32)
        for model in ("plain", "tuned"):
            for _ in range(5):
                tensor = httpclient.InferInput("INPUT0", [3], "FP32")
                tensor.set_data_from_numpy(data)
                client.infer(model, [tensor])
        families = scrape(server)
    for duration in DURATIONS:
        family = f"nv_inference_{duration}_duration_histogram_us"
        assert families[family].type == "histogram"
        for model in ("plain", "tuned"):
            assert buckets(families, family, model)["+Inf"] == 5, (family, model)
    # The server's buckets for every model; a model's own where it sets them.
    request = buckets(families, "nv_inference_request_duration_histogram_us", "plain")
    assert set(request) == {"10", "100000000", "+Inf"}
    assert request["100000000"] == 5
    assert set(buckets(families, "nv_inference_queue_duration_histogram_us", "tuned")) == {
        "7",
        "70",
        "+Inf",
    }
    assert set(buckets(families, "nv_inference_queue_duration_histogram_us", "plain")) == {
        "100",
        "1000",
        "5000",
        "10000",
        "50000",
        "+Inf",
    }


def test_histogram_latencies_false_turns_them_off(tmp_path: Path) -> None:
    write_model(tmp_path, "plain")
    with run_pytriton_server(
        tmp_path, "--metrics-config=histogram_latencies=false", metrics=True
    ) as server:
        families = scrape(server)
    assert not any(name.endswith("_histogram_us") for name in families)
    assert "nv_inference_request_duration_us" in families
