"""deploy/helm/pytriton-core: linted, rendered and validated offline with the real tools.

Helm's own Go SDK lints (strict) and renders the chart with each example values file for
several Kubernetes versions; kubernetes-validate checks the rendered objects against that
version's schemas (strict: unknown fields fail); checkov checks their security posture; the
tests below check what the server needs from them.
"""

from __future__ import annotations

import itertools
import json
import re
from pathlib import Path
from typing import Any

import pytest
from deploy_support import (
    CHART,
    CHART_EXAMPLES,
    EXAMPLE_NAMES,
    KUBE_VERSIONS,
    NAMESPACE,
    RELEASE,
    DeployTools,
    Rendering,
    container_port,
    flag_value,
    flag_values,
    project_version,
)

# Kinds whose schemas are not Kubernetes' own: kubernetes-validate only warns that it has
# none (their fields are checked below).
CRD_KINDS = {"ServiceMonitor"}

# checkov findings the chart accepts, and why. Everything else fails the test.
CHECKOV_ACCEPTED = {
    "CKV_K8S_15": "pullPolicy IfNotPresent suits immutable release tags; image.pullPolicy sets it",
    "CKV_K8S_43": "images are named by tag by default; image.digest pins one",
    "CKV_K8S_40": "uid 1000 is Triton's image's user, which volumes and policies expect",
    "CKV2_K8S_6": "network policies are the cluster's: which clients may call differs per site",
    "CKV_K8S_35": "the object-storage sync reads AWS_* variables from the credentials Secret",
}


@pytest.fixture(scope="session")
def lint_reports(
    deploy_tools: DeployTools, example_values: dict[str, dict[str, Any]]
) -> dict[tuple[str, str], dict[str, Any]]:
    keys = list(itertools.product(example_values, KUBE_VERSIONS))
    answer = deploy_tools.bridge(
        {
            "lint": [
                {"chart": str(CHART), "values": example_values[name], "kube_version": f"v{kube}"}
                for name, kube in keys
            ]
        }
    )
    return dict(zip(keys, answer["lint"], strict=True))


@pytest.mark.parametrize("kube_version", KUBE_VERSIONS)
@pytest.mark.parametrize("example", EXAMPLE_NAMES)
def test_helm_lint_strict(
    lint_reports: dict[tuple[str, str], dict[str, Any]], example: str, kube_version: str
) -> None:
    report = lint_reports[(example, kube_version)]
    # Severity 2 is a warning, 3 an error; strict lint reports warnings as errors too.
    problems = [m for m in report["messages"] if m["severity"] >= 2]
    assert not report["errors"] and not problems, json.dumps(report, indent=1)


@pytest.fixture(scope="session")
def rendered_dir(
    renderings: dict[str, Rendering], tmp_path_factory: pytest.TempPathFactory
) -> Path:
    """Every rendered object in a file of its own: <example>__<kind>__<name>.yaml (JSON is
    YAML), so each tool's report names the example and the kind."""
    folder = tmp_path_factory.mktemp("rendered")
    for rendering in renderings.values():
        for obj in rendering.objects:
            name = f"{rendering.example}__{obj['kind']}__{obj['metadata']['name']}.yaml"
            (folder / name).write_text(json.dumps(obj, indent=1))
    return folder


@pytest.fixture(scope="session")
def kubernetes_validate_report(deploy_tools: DeployTools, rendered_dir: Path) -> list[str]:
    files = sorted(rendered_dir.glob("*.yaml"))
    versions = [arg for kube in KUBE_VERSIONS for arg in ("-k", kube)]
    result = deploy_tools.run("kubernetes-validate", "--strict", *versions, *files, timeout=600)
    lines = result.stdout.splitlines()
    assert lines, result.stderr
    return lines


@pytest.mark.parametrize("example", EXAMPLE_NAMES)
def test_kubernetes_validate_strict(kubernetes_validate_report: list[str], example: str) -> None:
    """kubernetes-validate passes every object for every version; it may only warn that it
    has no schema for a CRD kind (those are checked by test_service_monitor)."""
    mine = [line for line in kubernetes_validate_report if f"/{example}__" in line]
    assert mine, f"kubernetes-validate reported nothing for {example}"
    failures = []
    for line in mine:
        level = line.split(" ", 1)[0]
        if level == "INFO":
            continue
        kind = re.search(r"__([A-Za-z]+)__", line)
        if level == "WARN" and kind and kind.group(1) in CRD_KINDS:
            continue
        failures.append(line)
    assert not failures, "\n".join(failures)


def test_checkov_rendered(deploy_tools: DeployTools, rendered_dir: Path) -> None:
    result = deploy_tools.run(
        "checkov",
        *("-d", rendered_dir, "--framework", "kubernetes", "--skip-download"),
        *("--skip-check", ",".join(CHECKOV_ACCEPTED), "--compact", "--quiet"),
        *("--output", "json"),
    )
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-2000:]


# --- what the server and the cluster need from the rendered objects ---------------------


@pytest.mark.parametrize("example", EXAMPLE_NAMES)
def test_probes_use_the_servers_health_endpoints(
    renderings: dict[str, Rendering], example: str
) -> None:
    server = renderings[example].server
    expected = {
        "startupProbe": "/v2/health/ready",
        "livenessProbe": "/v2/health/live",
        "readinessProbe": "/v2/health/ready",
    }
    for probe, path in expected.items():
        http_get = server[probe]["httpGet"]
        assert http_get == {"path": path, "port": "http"}, (probe, http_get)
    # The named port is the one the server is told to listen on.
    assert container_port(server, "http") == int(flag_value(server["args"], "--http-port"))
    assert container_port(server, "grpc") == int(flag_value(server["args"], "--grpc-port"))
    startup = server["startupProbe"]
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 300, "5 min for model loads"


@pytest.mark.parametrize("example", EXAMPLE_NAMES)
def test_service_selects_the_pods(renderings: dict[str, Rendering], example: str) -> None:
    rendering = renderings[example]
    deployment = rendering.one("Deployment")
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    selector = deployment["spec"]["selector"]["matchLabels"]
    assert selector.items() <= pod_labels.items()
    service = rendering.one("Service")
    assert service["spec"]["selector"] == selector
    container_ports = {p["name"] for p in rendering.server["ports"]}
    for port in service["spec"]["ports"]:
        assert port["targetPort"] in container_ports, port
    names = [p["name"] for p in service["spec"]["ports"]]
    assert names[:2] == ["http", "grpc"]
    metrics = rendering.values.get("metrics", {}).get("enabled", True)
    assert ("metrics" in names) == metrics
    (grpc,) = [p for p in service["spec"]["ports"] if p["name"] == "grpc"]
    assert grpc["appProtocol"] == "kubernetes.io/h2c"


@pytest.mark.parametrize("example", EXAMPLE_NAMES)
def test_pods_run_unprivileged(renderings: dict[str, Rendering], example: str) -> None:
    spec = renderings[example].pod_spec
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert spec["securityContext"]["runAsUser"] == 1000
    assert spec["automountServiceAccountToken"] is False
    for container in spec["containers"] + spec.get("initContainers", []):
        context = container["securityContext"]
        assert context["allowPrivilegeEscalation"] is False
        assert context["readOnlyRootFilesystem"] is True
        assert context["capabilities"]["drop"] == ["ALL"]
    mounts = {m["mountPath"]: m for m in renderings[example].server["volumeMounts"]}
    assert {"/tmp", "/dev/shm", "/models"} <= mounts.keys(), "writable /tmp and /dev/shm"
    assert mounts["/models"]["readOnly"] is True


@pytest.mark.parametrize("example", EXAMPLE_NAMES)
def test_graceful_stop_fits_the_grace_period(
    renderings: dict[str, Rendering], example: str
) -> None:
    spec = renderings[example].pod_spec
    exit_timeout = int(flag_value(renderings[example].server["args"], "--exit-timeout-secs"))
    assert spec["terminationGracePeriodSeconds"] > exit_timeout


def test_image_follows_the_app_version(renderings: dict[str, Rendering]) -> None:
    image = renderings["default"].server["image"]
    assert image == f"ghcr.io/pytriton-core/pytriton-core:{project_version()}"
    assert renderings["gpu"].server["image"].endswith(f":{project_version()}-gpu")


def test_chart_app_version_is_the_servers(deploy_tools: DeployTools) -> None:
    ((chart,),) = deploy_tools.load_yaml([CHART / "Chart.yaml"])
    assert chart["appVersion"] == project_version()


def test_gpu_example_requests_gpus(renderings: dict[str, Rendering]) -> None:
    assert renderings["gpu"].server["resources"]["limits"]["nvidia.com/gpu"] == 1
    for example in EXAMPLE_NAMES:
        if example != "gpu":
            assert "nvidia.com/gpu" not in renderings[example].server["resources"].get("limits", {})


def test_model_repository_sources(renderings: dict[str, Rendering]) -> None:
    def repository_volume(rendering: Rendering) -> dict[str, Any]:
        (volume,) = [v for v in rendering.pod_spec["volumes"] if v["name"] == "model-repository"]
        return volume

    assert flag_values(renderings["default"].server["args"], "--model-repository") == ["/models"]
    assert repository_volume(renderings["pvc"])["persistentVolumeClaim"] == {
        "claimName": "shared-models",
        "readOnly": True,
    }
    # ConfigMap: one key per file, laid out again at its path.
    configmap = renderings["configmap"]
    volume = repository_volume(configmap)["configMap"]
    data = configmap.one("ConfigMap")["data"]
    files = configmap.values["modelRepository"]["configMap"]["files"]
    assert {item["path"] for item in volume["items"]} == set(files)
    for item in volume["items"]:
        assert data[item["key"]] == files[item["path"]]
    assert volume["name"] == configmap.one("ConfigMap")["metadata"]["name"]
    # Object storage: an init container fills the emptyDir the server then reads.
    storage = renderings["object-storage"]
    assert "emptyDir" in repository_volume(storage)
    (init,) = storage.pod_spec["initContainers"]
    assert init["command"][:3] == ["aws", "s3", "sync"]
    assert init["command"][-2:] == ["s3://models/model_repository", "/models"]
    assert {"name": "model-repository", "mountPath": "/models"} in init["volumeMounts"]
    assert init["envFrom"] == [{"secretRef": {"name": "model-store-credentials"}}]


@pytest.mark.parametrize("example", EXAMPLE_NAMES)
def test_the_repository_api_is_off_or_behind_a_key(
    renderings: dict[str, Rendering], example: str
) -> None:
    """Explicit mode (the only one that loads through the API) gets the key from a Secret,
    which the image's entry point turns into the two restriction flags."""
    server = renderings[example].server
    mode = flag_value(server["args"], "--model-control-mode")
    env = {variable["name"]: variable for variable in server.get("env", [])}
    if mode != "explicit":
        assert "PYTRITON_REPOSITORY_API_KEY" not in env
        return
    key = env["PYTRITON_REPOSITORY_API_KEY"]["valueFrom"]["secretKeyRef"]
    api = renderings[example].values["server"]["repositoryApi"]
    assert key == {"name": api["keySecret"]["name"], "key": api["keySecret"]["key"]}
    assert env["PYTRITON_REPOSITORY_API_HEADER"]["value"] == api["header"]


def test_service_monitor(renderings: dict[str, Rendering]) -> None:
    """The ServiceMonitor (a CRD kubernetes-validate has no schema for) scrapes the metrics
    port of the chart's Service."""
    rendering = renderings["autoscaling"]
    monitor = rendering.one("ServiceMonitor")
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert set(monitor["spec"]) == {"selector", "endpoints"}
    service = rendering.one("Service")
    assert (
        monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    )
    (endpoint,) = monitor["spec"]["endpoints"]
    assert set(endpoint) == {"port", "path", "interval", "scrapeTimeout"}
    assert endpoint["port"] == "metrics" and endpoint["path"] == "/metrics"
    assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    for example in EXAMPLE_NAMES:
        if example != "autoscaling":
            assert not renderings[example].all("ServiceMonitor")


def test_autoscaler_metrics_come_from_the_adapter(
    renderings: dict[str, Rendering], adapter_rules: list[dict[str, Any]]
) -> None:
    rendering = renderings["autoscaling"]
    hpa = rendering.one("HorizontalPodAutoscaler")
    assert hpa["apiVersion"] == "autoscaling/v2"
    deployment = rendering.one("Deployment")
    assert hpa["spec"]["scaleTargetRef"] == {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "name": deployment["metadata"]["name"],
    }
    assert "replicas" not in deployment["spec"], "the autoscaler owns the replica count"
    kinds = [metric["type"] for metric in hpa["spec"]["metrics"]]
    assert kinds == ["Resource", "Pods", "Pods"]
    pod_metrics = {
        m["pods"]["metric"]["name"] for m in hpa["spec"]["metrics"] if m["type"] == "Pods"
    }
    served = {rule["name"]["as"] for rule in adapter_rules}
    assert pod_metrics == served, "every custom metric is one the adapter's rules serve"
    for rule in adapter_rules:
        assert rule["resources"]["overrides"]["pod"] == {"resource": "pod"}


BAD_VALUES = {
    "no replicas": {"replicaCount": 0},
    "unknown source": {"modelRepository": {"source": "nfs"}},
    "bad pull policy": {"image": {"pullPolicy": "Sometimes"}},
    "port out of range": {"server": {"ports": {"http": 70000}}},
    "misspelt key": {"replicas": 2},
    "negative gpus": {"gpu": {"count": -1}},
    "utilization over 100": {"autoscaling": {"cpu": {"targetAverageUtilization": 150}}},
    "unknown control mode": {"server": {"modelControlMode": "lazy"}},
    "relative mount path": {"modelRepository": {"mountPath": "models"}},
    "bad ConfigMap path": {"modelRepository": {"configMap": {"files": {"a b/x": "1"}}}},
}

BAD_COMBINATIONS = {
    "configMap without files": (
        {"modelRepository": {"source": "configMap"}},
        "modelRepository.configMap.files is empty",
    ),
    "objectStorage without uri": (
        {"modelRepository": {"source": "objectStorage"}},
        "modelRepository.objectStorage.uri is required",
    ),
    "autoscaling on nothing": (
        {"autoscaling": {"enabled": True, "cpu": {"enabled": False}}},
        "autoscaling.enabled needs at least one",
    ),
    "ServiceMonitor without metrics": (
        {"serviceMonitor": {"enabled": True}, "metrics": {"enabled": False}},
        "serviceMonitor.enabled needs metrics.enabled",
    ),
    "explicit mode with the repository API open by default": (
        {"server": {"modelControlMode": "explicit"}},
        "server.repositoryApi.keySecret.name",
    ),
}


def test_values_schema_and_guards_reject_bad_values(deploy_tools: DeployTools) -> None:
    cases = {**{k: (v, None) for k, v in BAD_VALUES.items()}, **BAD_COMBINATIONS}
    answer = deploy_tools.bridge(
        {
            "render": [
                {"chart": str(CHART), "values": values, "name": RELEASE, "namespace": NAMESPACE}
                for values, _ in cases.values()
            ]
        }
    )
    for (case, (_, message)), result in zip(cases.items(), answer["render"], strict=True):
        assert "error" in result, f"{case}: rendered without complaint"
        if message is None:
            assert result["error_type"] == "HelmValuesError", (case, result)
        else:
            assert message in result["error"], (case, result)


def test_every_value_is_documented_in_the_schema(deploy_tools: DeployTools) -> None:
    """values.yaml's keys are exactly the schema's, to the second level, so neither drifts."""
    ((values,),) = deploy_tools.load_yaml([CHART / "values.yaml"])
    schema = json.loads((CHART / "values.schema.json").read_text())
    assert set(values) == set(schema["properties"]) - {"global"}
    for key, value in values.items():
        sub = schema["properties"][key]
        if isinstance(value, dict) and "properties" in sub:
            assert set(value) == set(sub["properties"]), key


def test_examples_are_described() -> None:
    for path in CHART_EXAMPLES.values():
        assert path.read_text().startswith("# Example: "), f"{path.name} says what it shows"


def test_chart_packages(deploy_tools: DeployTools, tmp_path: Path) -> None:
    ((chart,),) = deploy_tools.load_yaml([CHART / "Chart.yaml"])
    archive = deploy_tools.bridge({"package": {"chart": str(CHART), "destination": str(tmp_path)}})
    assert Path(archive["package"]).name == f"pytriton-core-{chart['version']}.tgz"
