"""What the deploy tests share: where docker/ and deploy/ live, the tools' venv and its bridge.

The linters and validators (hadolint, checkov, kubernetes-validate, Helm's Go SDK) live in a
venv of their own, .cache/deploy-venv, that tools/install-deploy-tools.sh fills from
pyproject.toml's ``deploy`` extra; the tests run them as programs, and reach the SDK, PyYAML
and jsonschema through deploy_bridge.py, so this environment needs none of them.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

REPO_ROOT = Path(__file__).resolve().parents[2]
DOCKER_DIR = REPO_ROOT / "docker"
DOCKERFILES = (DOCKER_DIR / "Dockerfile", DOCKER_DIR / "Dockerfile.gpu")
CHART = REPO_ROOT / "deploy" / "helm" / "pytriton-core"
# The chart's worked examples; "default" is the chart's own values.yaml alone.
CHART_EXAMPLES = {
    path.name.removesuffix("-values.yaml"): path for path in sorted(CHART.glob("ci/*-values.yaml"))
}
EXAMPLE_NAMES = ("default", *CHART_EXAMPLES)
KSERVE_DIR = REPO_ROOT / "deploy" / "kserve"
ADAPTER_VALUES = REPO_ROOT / "deploy" / "prometheus-adapter" / "values.yaml"
# KServe's CRDs, shared data beside the checkout (../shared/data/kserve-crds/README.md).
KSERVE_CRDS = REPO_ROOT.parent / "shared" / "data" / "kserve-crds"
CACHE_DIR = REPO_ROOT / ".cache" / "deploy"
VENV = Path(os.environ.get("PYTRITON_DEPLOY_VENV", REPO_ROOT / ".cache" / "deploy-venv"))
INSTALLER = REPO_ROOT / "tools" / "install-deploy-tools.sh"
BRIDGE = Path(__file__).resolve().parent / "deploy_bridge.py"

# Kubernetes versions the chart is linted and validated for: its kubeVersion floor's
# neighbourhood, a middle one and a recent one (kubernetes-validate knows 1.25 to 1.37).
KUBE_VERSIONS = ("1.28.0", "1.31.0", "1.34.0")
RELEASE = "demo"
NAMESPACE = "models"


def project_version() -> str:
    """The server's version (pyproject.toml's, as installed)."""
    return importlib.metadata.version("pytriton-core")


def install_tools(*flags: str) -> subprocess.CompletedProcess[str]:
    """Run tools/install-deploy-tools.sh (idempotent; quick when everything is there)."""
    return subprocess.run(
        ["bash", str(INSTALLER), *flags],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
        env={**os.environ, "PYTRITON_DEPLOY_VENV": str(VENV)},
    )


@dataclass(frozen=True)
class DeployTools:
    """The installed tools: programs in the venv and the JSON bridge to the rest."""

    venv: Path

    def program(self, name: str) -> Path:
        return self.venv / "bin" / name

    def run(
        self, name: str, *args: str | Path, timeout: float = 300
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(self.program(name)), *map(str, args)],
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def bridge(self, job: dict[str, Any]) -> dict[str, Any]:
        """Answer one deploy_bridge.py job (see its docstring)."""
        result = subprocess.run(
            [str(self.program("python")), str(BRIDGE)],
            input=json.dumps(job),
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        if result.returncode != 0:
            raise RuntimeError(f"deploy_bridge.py failed ({result.returncode}):\n{result.stderr}")
        answer: dict[str, Any] = json.loads(result.stdout)
        return answer

    def load_yaml(self, paths: Iterable[Path]) -> list[list[Any]]:
        """The YAML documents of each file."""
        loaded: list[list[Any]] = self.bridge({"load": [str(p) for p in paths]})["load"]
        return loaded


@dataclass(frozen=True)
class Rendering:
    """The chart rendered with one example's values."""

    example: str
    values: dict[str, Any]
    templates: dict[str, str]
    objects: list[dict[str, Any]]

    def all(self, kind: str) -> list[dict[str, Any]]:
        return [obj for obj in self.objects if obj["kind"] == kind]

    def one(self, kind: str) -> dict[str, Any]:
        found = self.all(kind)
        assert len(found) == 1, f"{self.example}: expected one {kind}, rendered {len(found)}"
        return found[0]

    @property
    def pod_spec(self) -> dict[str, Any]:
        spec: dict[str, Any] = self.one("Deployment")["spec"]["template"]["spec"]
        return spec

    @property
    def server(self) -> dict[str, Any]:
        """The server container."""
        (container,) = [c for c in self.pod_spec["containers"] if c["name"] == "server"]
        return container


def flag_values(args: Iterable[str], flag: str) -> list[str]:
    """The values a command line gives ``flag`` (``--flag=value`` form)."""
    prefix = flag + "="
    return [arg.removeprefix(prefix) for arg in args if arg.startswith(prefix)]


def flag_value(args: Iterable[str], flag: str) -> str:
    values = flag_values(args, flag)
    assert len(values) == 1, f"expected one {flag}=..., found {values}"
    return values[0]


def without_flags(args: Iterable[str], *flags: str) -> list[str]:
    """``args`` less every ``--flag=value`` of the given flags."""
    return [arg for arg in args if arg.split("=", 1)[0] not in flags]


def container_port(container: dict[str, Any], name: str) -> int:
    """The containerPort of the container's port called ``name``."""
    (port,) = [p["containerPort"] for p in container.get("ports", []) if p["name"] == name]
    return int(port)


def add_sub_roundtrip(http_url: str, grpc_url: str) -> None:
    """One HTTP and one gRPC inference with tritonclient on the examples' add_sub."""
    a = np.arange(4, dtype=np.float32)
    b = np.full(4, 0.5, dtype=np.float32)
    for module, url in ((httpclient, http_url), (grpcclient, grpc_url)):
        client: Any = module.InferenceServerClient(url)
        inputs = [
            module.InferInput("INPUT0", [4], "FP32"),
            module.InferInput("INPUT1", [4], "FP32"),
        ]
        inputs[0].set_data_from_numpy(a)
        inputs[1].set_data_from_numpy(b)
        result = client.infer("add_sub", inputs)
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
        np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)
        client.close()
