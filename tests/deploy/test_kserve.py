"""deploy/kserve: validated against KServe's CRD schemas, and checked to be a drop-in for
KServe's Triton runtime (same arguments, ports, protocols and metrics annotations)."""

from __future__ import annotations

from typing import Any

import pytest
from deploy_support import KSERVE_CRDS, DeployTools, flag_value, project_version

from pytriton_core.cli import build_parser

CRD_FILES = sorted(KSERVE_CRDS.glob("serving.kserve.io_*.yaml"))

# What KServe adds to a Triton runtime's arguments (its defaulter appends explicit model
# control when an InferenceService has no storageUri), and the flags ModelMesh's and other
# published Triton runtimes pass: the server must accept them all.
KSERVE_DEFAULTER_ARGS = ["--model-control-mode=explicit"]
TRITON_RUNTIME_FLAGS = [
    "--model-repository=/models/_triton_models",
    "--model-control-mode=explicit",
    "--strict-model-config=false",
    "--strict-readiness=false",
    "--allow-http=true",
    "--allow-grpc=true",
    "--allow-sagemaker=false",
    "--allow-vertex-ai=false",
    "--allow-metrics=true",
    "--metrics-port=8002",
    "--exit-on-error=true",
    "--log-verbose=0",
    "--load-model=*",
]
# KServe's Triton ports: HTTP 8080 (its default), gRPC 9000; metrics on Triton's 8002.
KSERVE_HTTP_PORT, KSERVE_GRPC_PORT, METRICS_PORT = 8080, 9000, 8002


def _container(runtime: dict[str, Any]) -> dict[str, Any]:
    (container,) = runtime["spec"]["containers"]
    return container


def test_manifests_match_kserve_crds(
    deploy_tools: DeployTools, kserve_manifests: dict[str, list[dict[str, Any]]]
) -> None:
    if not CRD_FILES:
        pytest.skip(f"KServe's CRDs are not at {KSERVE_CRDS} (../shared/data/kserve-crds)")
    documents = [doc for docs in kserve_manifests.values() for doc in docs]
    kinds = sorted(doc["kind"] for doc in documents)
    assert kinds == [
        "ClusterServingRuntime",
        "InferenceService",
        "InferenceService",
        "ServingRuntime",
    ]
    # A misspelt field must fail, or the check would prove nothing.
    typo = {
        "apiVersion": "serving.kserve.io/v1alpha1",
        "kind": "ClusterServingRuntime",
        "metadata": {"name": "typo"},
        "spec": {"containers": [{"name": "kserve-container", "imag": "x"}]},
    }
    results = deploy_tools.bridge(
        {"crd_check": {"crds": [str(p) for p in CRD_FILES], "documents": [*documents, typo]}}
    )["crd_check"]
    *checked, typo_result = results
    assert any("'imag' was unexpected" in e for e in typo_result["errors"]), typo_result
    failures = {f"{r['kind']}/{r['name']}": r["errors"] for r in checked if r["errors"]}
    assert not failures, failures


def test_namespaced_runtime_is_the_cluster_one(
    kserve_manifests: dict[str, list[dict[str, Any]]], cluster_runtime: dict[str, Any]
) -> None:
    (runtime,) = kserve_manifests["serving-runtime.yaml"]
    assert runtime["kind"] == "ServingRuntime"
    assert runtime["spec"] == cluster_runtime["spec"]
    assert runtime["metadata"] == cluster_runtime["metadata"]


def test_runtime_is_a_triton_drop_in(cluster_runtime: dict[str, Any]) -> None:
    spec = cluster_runtime["spec"]
    assert cluster_runtime["metadata"]["annotations"]["serving.kserve.io/server-type"] == (
        "tritonserver"
    )
    formats = {f["name"] for f in spec["supportedModelFormats"]}
    assert {"triton", "onnx", "pytorch", "openvino", "tensorrt"} <= formats
    assert spec["protocolVersions"] == ["v2", "grpc-v2"]
    container = _container(cluster_runtime)
    assert container["name"] == "kserve-container"
    assert container["image"].endswith(f":{project_version()}")
    args = container["args"]
    # Started as KServe's Triton runtime starts tritonserver: the image runs the command.
    assert args[0] == "tritonserver"
    assert flag_value(args, "--model-store") == "/mnt/models"
    assert int(flag_value(args, "--http-port")) == KSERVE_HTTP_PORT
    assert int(flag_value(args, "--grpc-port")) == KSERVE_GRPC_PORT
    assert int(flag_value(args, "--metrics-port")) == METRICS_PORT
    assert spec["annotations"]["prometheus.kserve.io/port"] == str(METRICS_PORT)
    assert spec["annotations"]["prometheus.kserve.io/path"] == "/metrics"
    for probe, path in (
        ("readinessProbe", "/v2/health/ready"),
        ("livenessProbe", "/v2/health/live"),
    ):
        assert container[probe]["httpGet"] == {"path": path, "port": KSERVE_HTTP_PORT}
    assert container["securityContext"]["runAsNonRoot"] is True
    assert container["securityContext"]["runAsUser"] == 1000


def test_runtime_arguments_parse(cluster_runtime: dict[str, Any]) -> None:
    """pytriton-server accepts the runtime's arguments, what KServe appends to them, and the
    flags other published Triton runtimes pass."""
    parser = build_parser()
    args = _container(cluster_runtime)["args"][1:]
    parsed = parser.parse_args(args + KSERVE_DEFAULTER_ARGS)
    assert [str(p) for p in parsed.model_repository] == ["/mnt/models"]
    assert parsed.model_control_mode == "explicit"
    parsed = parser.parse_args(TRITON_RUNTIME_FLAGS)
    assert parsed.strict_readiness is False and parsed.load_model == ["*"]
    with pytest.raises(SystemExit):
        parser.parse_args(["--allow-sagemaker=true"])  # no SageMaker front end: refused


def test_inference_services_use_the_runtime(
    kserve_manifests: dict[str, list[dict[str, Any]]], cluster_runtime: dict[str, Any]
) -> None:
    formats = {(f["name"], f["version"]) for f in cluster_runtime["spec"]["supportedModelFormats"]}
    services = [
        doc
        for docs in kserve_manifests.values()
        for doc in docs
        if doc["kind"] == "InferenceService"
    ]
    protocols = set()
    for service in services:
        model = service["spec"]["predictor"]["model"]
        assert model["runtime"] == cluster_runtime["metadata"]["name"]
        assert (model["modelFormat"]["name"], model["modelFormat"]["version"]) in formats
        assert model["protocolVersion"] in cluster_runtime["spec"]["protocolVersions"]
        protocols.add(model["protocolVersion"])
        if model["protocolVersion"] == "grpc-v2":
            # Knative exposes one port: the gRPC one, named h2c, where the server listens.
            grpc_port = int(flag_value(_container(cluster_runtime)["args"], "--grpc-port"))
            assert model["ports"] == [
                {"name": "h2c", "containerPort": grpc_port, "protocol": "TCP"}
            ]
    assert protocols == {"v2", "grpc-v2"}, "an example for each protocol"
