"""Fixtures of the deploy tests: the tools, the chart rendered with each example, the KServe
manifests. Helpers live in deploy_support.py; the image test in test_container_image.py."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
from deploy_support import (
    ADAPTER_VALUES,
    CHART,
    CHART_EXAMPLES,
    KSERVE_DIR,
    NAMESPACE,
    RELEASE,
    VENV,
    DeployTools,
    Rendering,
    install_tools,
)

# The integration tests' server harness (run_pytriton_server), for the drift tests.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "integration"))


# First runs install the tools (a minute), debootstrap a base and build wheels and an image
# (minutes on 2 cores): more than the suite's default per-test timeout allows.
DEPLOY_TEST_TIMEOUT_S = 1800


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).resolve().parent
    for item in items:
        if item.path.parent == here:
            item.add_marker(pytest.mark.timeout(DEPLOY_TEST_TIMEOUT_S))


@pytest.fixture(scope="session")
def deploy_tools() -> DeployTools:
    """The linters and validators, installed on first use (tools/install-deploy-tools.sh)."""
    result = install_tools()
    if result.returncode != 0:
        pytest.fail(f"tools/install-deploy-tools.sh failed:\n{result.stderr}", pytrace=False)
    return DeployTools(VENV)


@pytest.fixture(scope="session")
def example_values(deploy_tools: DeployTools) -> dict[str, dict[str, Any]]:
    """Each example's values: the chart's defaults ("default") and every ci/*-values.yaml."""
    loaded = deploy_tools.load_yaml(CHART_EXAMPLES.values())
    values = {"default": {}}
    for name, documents in zip(CHART_EXAMPLES, loaded, strict=True):
        values[name] = documents[0]
    return values


@pytest.fixture(scope="session")
def renderings(
    deploy_tools: DeployTools, example_values: dict[str, dict[str, Any]]
) -> dict[str, Rendering]:
    """The chart rendered (values schema enforced) with each example's values."""
    answer = deploy_tools.bridge(
        {
            "render": [
                {"chart": str(CHART), "values": v, "name": RELEASE, "namespace": NAMESPACE}
                for v in example_values.values()
            ]
        }
    )
    renderings = {}
    for (name, values), result in zip(example_values.items(), answer["render"], strict=True):
        if "error" in result:
            pytest.fail(f"the chart does not render with {name}: {result['error']}", pytrace=False)
        renderings[name] = Rendering(name, values, result["templates"], result["objects"])
    return renderings


@pytest.fixture(scope="session")
def kserve_manifests(deploy_tools: DeployTools) -> dict[str, list[dict[str, Any]]]:
    """deploy/kserve/*.yaml: file name -> its documents."""
    paths = sorted(KSERVE_DIR.glob("*.yaml"))
    return {p.name: docs for p, docs in zip(paths, deploy_tools.load_yaml(paths), strict=True)}


@pytest.fixture(scope="session")
def cluster_runtime(kserve_manifests: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    (runtime,) = kserve_manifests["cluster-serving-runtime.yaml"]
    return runtime


@pytest.fixture(scope="session")
def adapter_rules(deploy_tools: DeployTools) -> list[dict[str, Any]]:
    """The Prometheus adapter's custom-metric rules the chart's autoscaler relies on."""
    ((values,),) = deploy_tools.load_yaml([ADAPTER_VALUES])
    rules: list[dict[str, Any]] = values["rules"]["custom"]
    return rules
