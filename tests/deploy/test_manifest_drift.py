"""The manifests against the real server: it is started with the arguments the chart and the
KServe runtime render, and answers on exactly the probe paths, ports and metric names they
name. Change a path, a flag or a metric on either side and these fail.

Ports are the harness's free loopback ports (the rendered ones may be taken here); that the
rendered probes, container ports and flags name the same port is checked statically in
test_helm_chart.py and test_kserve.py.
"""

from __future__ import annotations

import http.client
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from deploy_support import (
    EXAMPLE_NAMES,
    Rendering,
    add_sub_roundtrip,
    flag_value,
    flag_values,
    without_flags,
)
from harness import EXAMPLES_REPOSITORY, ServerHandle, run_pytriton_server

# The harness gives these on its own (free ports, loopback, the repository under test).
HARNESS_FLAGS = (
    "--model-repository",
    "--model-store",
    "--http-port",
    "--grpc-port",
    "--metrics-port",
    "--allow-metrics",
)
PROBES = ("startupProbe", "livenessProbe", "readinessProbe")


def _get(url: str, path: str, method: str = "GET") -> tuple[int, bytes]:
    host, port = url.rsplit(":", 1)
    connection = http.client.HTTPConnection(host, int(port), timeout=10)
    try:
        connection.request(method, path)
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


def _repository_from_configmap(rendering: Rendering, root: Path) -> Path:
    """The model repository as the pod sees it: the ConfigMap's keys laid out at the
    volume's item paths."""
    data = rendering.one("ConfigMap")["data"]
    (volume,) = [v for v in rendering.pod_spec["volumes"] if v["name"] == "model-repository"]
    for item in volume["configMap"]["items"]:
        path = root / item["path"]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(data[item["key"]])
    return root


def _add_sub(server: ServerHandle) -> None:
    add_sub_roundtrip(server.http_url, server.grpc_url)


@pytest.mark.parametrize("example", EXAMPLE_NAMES)
def test_chart_arguments_serve_the_probes(
    renderings: dict[str, Rendering], example: str, tmp_path: Path
) -> None:
    rendering = renderings[example]
    server_spec = rendering.server
    args = server_spec["args"]
    if rendering.values.get("modelRepository", {}).get("source") == "configMap":
        repository = _repository_from_configmap(rendering, tmp_path / "models")
    else:
        repository = EXAMPLES_REPOSITORY
    metrics = flag_value(args, "--allow-metrics") == "true"
    with run_pytriton_server(
        repository, *without_flags(args, *HARNESS_FLAGS), metrics=metrics
    ) as server:
        for probe in PROBES:
            path = server_spec[probe]["httpGet"]["path"]
            status, body = _get(server.http_url, path)
            assert status == 200, f"{example}: {probe} GET {path} -> {status} {body!r}"
        # The Service's gRPC port serves the same server.
        client = grpcclient.InferenceServerClient(server.grpc_url)
        assert client.is_server_live() and client.is_server_ready()
        client.close()
        for model in flag_values(args, "--load-model"):
            assert _get(server.http_url, f"/v2/models/{model}/ready")[0] == 200, model
        if repository == EXAMPLES_REPOSITORY:
            _add_sub(server)
        else:
            _check_configmap_model(server)


def _check_configmap_model(server: ServerHandle) -> None:
    """The ConfigMap example's model, served from the files the chart renders."""
    client = httpclient.InferenceServerClient(server.http_url)
    data = np.array([[1.0, -2.0, 3.5]], dtype=np.float32)
    infer_input = httpclient.InferInput("INPUT0", list(data.shape), "FP32")
    infer_input.set_data_from_numpy(data)
    result = client.infer("scale_fp32", [infer_input])
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), data * 2)
    client.close()


def test_metrics_the_monitors_and_autoscaler_read(
    renderings: dict[str, Rendering],
    adapter_rules: list[dict[str, Any]],
    cluster_runtime: dict[str, Any],
) -> None:
    """/metrics (the ServiceMonitor's and KServe's path) serves every nv_* series the
    Prometheus adapter's rules turn into the autoscaler's metrics."""
    (endpoint,) = renderings["autoscaling"].one("ServiceMonitor")["spec"]["endpoints"]
    path = endpoint["path"]
    assert cluster_runtime["spec"]["annotations"]["prometheus.kserve.io/path"] == path
    wanted = set()
    for rule in adapter_rules:
        wanted.update(re.findall(r"\bnv_[a-z_]+", rule["seriesQuery"] + rule["metricsQuery"]))
    assert {
        "nv_inference_queue_duration_us",
        "nv_inference_request_success",
        "nv_inference_pending_request_count",
    } <= wanted
    args = renderings["autoscaling"].server["args"]
    with run_pytriton_server(
        EXAMPLES_REPOSITORY, *without_flags(args, *HARNESS_FLAGS), metrics=True
    ) as server:
        _add_sub(server)
        assert server.metrics_url is not None
        try:
            status, body = _get(server.metrics_url, path)
        except OSError as exc:
            if "metrics endpoint is not available" in server.log():
                pytest.skip(f"this build serves no metrics endpoint yet: {exc}")
            raise
        assert status == 200, body
        served = set(re.findall(r"^(nv_[a-z_]+)\{", body.decode(), flags=re.MULTILINE))
        assert wanted <= served, f"not served: {sorted(wanted - served)}"
        # Per model, as the adapter's per-pod sums expect.
        assert re.search(
            r'^nv_inference_request_success\{[^}]*model="add_sub"', body.decode(), re.M
        )


def test_kserve_runtime_arguments_serve(cluster_runtime: dict[str, Any]) -> None:
    """The runtime's own command line (model store, ports aside) plus what KServe appends:
    the server starts, its probes answer, and explicit model control loads on request."""
    (container,) = cluster_runtime["spec"]["containers"]
    args = container["args"][1:]  # after the `tritonserver` command
    command = [
        f"--model-store={EXAMPLES_REPOSITORY}",
        *without_flags(args, *HARNESS_FLAGS),
        "--model-control-mode=explicit",
    ]
    with run_pytriton_server([], *command) as server:
        for probe in ("readinessProbe", "livenessProbe"):
            path = container[probe]["httpGet"]["path"]
            assert _get(server.http_url, path)[0] == 200, (probe, path)
        # Explicit control: nothing loaded until asked, as Triton under KServe.
        assert _get(server.http_url, "/v2/models/add_sub/ready")[0] != 200
        status, body = _get(server.http_url, "/v2/repository/models/add_sub/load", "POST")
        assert status == 200, body
        assert _get(server.http_url, "/v2/models/add_sub/ready")[0] == 200
        _add_sub(server)
