"""docker/: the Dockerfiles linted (hadolint, checkov), their contract checked, the entry point run.

Building and running the CPU image is test_container_image.py's job; these checks need no
container tooling and run everywhere.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from deploy_support import DOCKER_DIR, DOCKERFILES, REPO_ROOT, DeployTools

ENTRYPOINT = DOCKER_DIR / "entrypoint.sh"


@dataclass
class Stage:
    """One build stage: its FROM line's image and name, and its instructions."""

    image: str
    name: str | None
    instructions: list[tuple[str, str]] = field(default_factory=list)

    def all(self, keyword: str) -> list[str]:
        return [args for kw, args in self.instructions if kw == keyword]

    def last(self, keyword: str) -> str:
        found = self.all(keyword)
        assert found, f"stage {self.name}: no {keyword}"
        return found[-1]


def parse_dockerfile(path: Path) -> tuple[dict[str, str], list[Stage]]:
    """The global ARG defaults and the stages of a Dockerfile (continuations joined)."""
    text = re.sub(r"\\\n", " ", path.read_text())
    global_args: dict[str, str] = {}
    stages: list[Stage] = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        keyword, _, args = line.partition(" ")
        keyword, args = keyword.upper(), args.strip()
        if keyword == "FROM":
            image, _, name = args.partition(" AS ")
            stages.append(Stage(image.strip(), name.strip() or None))
        elif not stages and keyword == "ARG":
            key, _, default = args.partition("=")
            global_args[key] = default
        else:
            stages[-1].instructions.append((keyword, args))
    return global_args, stages


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_hadolint(deploy_tools: DeployTools, dockerfile: Path) -> None:
    result = deploy_tools.run("hadolint", "--no-color", "--failure-threshold", "style", dockerfile)
    assert result.returncode == 0, result.stdout + result.stderr


def test_checkov_dockerfiles(deploy_tools: DeployTools) -> None:
    result = deploy_tools.run(
        "checkov",
        *("-d", DOCKER_DIR, "--framework", "dockerfile", "--skip-download"),
        *("--compact", "--quiet", "--output", "json"),
    )
    assert result.returncode == 0, result.stdout[-5000:] + result.stderr[-2000:]
    report = json.loads(result.stdout)
    reports = report if isinstance(report, list) else [report]
    assert sum(r["summary"]["passed"] for r in reports) > 0, "checkov checked nothing"


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_image_contract(dockerfile: Path) -> None:
    """What docs/deploy.md, the chart and the KServe runtime rely on from either image."""
    global_args, stages = parse_dockerfile(dockerfile)
    # CI passes a local base; the default is a real, tagged image.
    assert stages[0].image == "${BASE_IMAGE}"
    assert re.fullmatch(r"[\w./-]+:[\w.-]+", global_args["BASE_IMAGE"]), global_args
    assert global_args["WHEELS"] == "source"
    names = {stage.name for stage in stages}
    assert {"wheels-source", "wheels-prebuilt"} <= names

    runtime = stages[-1]
    assert runtime.name == "runtime"
    assert runtime.last("USER") == "1000:1000"
    assert runtime.last("EXPOSE").split() == ["8000", "8001", "8002"]
    assert json.loads(runtime.last("ENTRYPOINT")) == ["pytriton-entrypoint"]
    assert json.loads(runtime.last("CMD")) == ["--model-repository=/models"]
    assert runtime.last("STOPSIGNAL") == "SIGTERM"
    healthcheck = runtime.last("HEALTHCHECK")
    assert "PYTRITON_HEALTH_URL" in healthcheck
    env = " ".join(runtime.all("ENV"))
    assert "PYTRITON_HEALTH_URL=http://127.0.0.1:8000/v2/health/ready" in env

    # Compilers stay in the wheel-building stage; the image gets a finished venv.
    for stage in stages:
        if stage.name != "wheels-source":
            assert not any(
                re.search(r"\b(gcc|g\+\+|build-essential)\b", run) for run in stage.all("RUN")
            ), stage.name
    assert any("--from=venv /opt/pytriton" in copy for copy in runtime.all("COPY"))
    # The venv is installed from wheels alone, offline, with the tritonserver alias.
    (venv,) = [stage for stage in stages if stage.name == "venv"]
    install = " ".join(venv.all("RUN"))
    assert "--no-index" in install
    assert "ln -s pytriton-server /opt/pytriton/bin/tritonserver" in install
    # No model is baked in: nothing is copied to /models.
    for stage in stages:
        assert not any("/models" in copy for copy in stage.all("COPY")), stage.name


def test_cpu_and_gpu_images_agree() -> None:
    """The GPU image is the CPU image on another base with another extra: same user, ports,
    entry point and health check."""
    _, cpu = parse_dockerfile(DOCKERFILES[0])
    _, gpu = parse_dockerfile(DOCKERFILES[1])
    for keyword in ("USER", "EXPOSE", "ENTRYPOINT", "CMD", "STOPSIGNAL", "WORKDIR"):
        assert cpu[-1].all(keyword) == gpu[-1].all(keyword), keyword
    assert "EXTRAS=gpu" in gpu[-2].all("ARG")


def _run_entrypoint(tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> str:
    """docker/entrypoint.sh with stand-ins for pytriton-server and tritonserver on PATH."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for name in ("pytriton-server", "tritonserver"):
        stub = bin_dir / name
        stub.write_text(f'#!/bin/sh\necho "{name} $*"\n')
        stub.chmod(0o755)
    result = subprocess.run(
        ["sh", str(ENTRYPOINT), *args],
        capture_output=True,
        text=True,
        timeout=10,
        check=True,
        env={**os.environ, **(env or {}), "PATH": f"{bin_dir}:{os.environ['PATH']}"},
    )
    return result.stdout.strip()


def test_entrypoint_dispatch(tmp_path: Path) -> None:
    """Flags go to pytriton-server; a command (KServe's `tritonserver ...`) runs as given."""
    assert _run_entrypoint(tmp_path, "--model-repository=/models") == (
        "pytriton-server --model-repository=/models"
    )
    assert _run_entrypoint(tmp_path, "tritonserver", "--model-store=/mnt/models") == (
        "tritonserver --model-store=/mnt/models"
    )
    assert _run_entrypoint(tmp_path, "echo", "hello") == "hello"
    assert os.access(ENTRYPOINT, os.X_OK), "the image copies entrypoint.sh with its mode"


def test_entrypoint_puts_the_repository_api_behind_a_key(tmp_path: Path) -> None:
    """With PYTRITON_REPOSITORY_API_KEY the server started gets both restriction flags (a
    key with spaces stays one argument); without it, none (the default command keeps the
    API off: --model-control-mode=none refuses load and unload)."""
    env = {"PYTRITON_REPOSITORY_API_KEY": "s3 cret", "PYTRITON_REPOSITORY_API_HEADER": "x-key"}
    expected = (
        "pytriton-server --model-repository=/models "
        "--http-restricted-api=model-repository:x-key=s3 cret "
        "--grpc-restricted-protocol=model-repository:x-key=s3 cret"
    )
    assert _run_entrypoint(tmp_path, "--model-repository=/models", env=env) == expected
    assert _run_entrypoint(tmp_path, "tritonserver", "--a", env=env).startswith(
        "tritonserver --a --http-restricted-api=model-repository:x-key=s3 cret"
    )
    assert _run_entrypoint(tmp_path, "echo", "hello", env=env) == "hello"
    cmd = json.loads(parse_dockerfile(DOCKERFILES[0])[1][-1].last("CMD"))
    assert not any("model-control-mode" in argument for argument in cmd)


def test_dockerignore_sends_only_the_sources() -> None:
    """The build context is a whitelist: the sources the wheel stage copies, nothing else."""
    lines = [
        line.strip()
        for line in (REPO_ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert lines[0] == "*", "everything is excluded first"
    allowed = {line[1:].rstrip("/") for line in lines if line.startswith("!")}
    _, stages = parse_dockerfile(DOCKERFILES[0])
    copied = set()
    for stage in stages:
        for copy in stage.all("COPY"):
            if "--from=" not in copy:
                copied.update(p.rstrip("/") for p in copy.split()[:-1])
    # Every source the Dockerfile copies from the context is let through.
    assert copied <= allowed, copied - allowed
