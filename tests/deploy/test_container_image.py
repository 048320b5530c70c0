"""docker/Dockerfile built and run without a Docker daemon: podman, offline (container_build.py).

The image is built from wheels made on this host (WHEELS=prebuilt) on a debootstrapped Debian
base, then run as a container: it must start as a non-root user, answer the health check,
serve one HTTP and one gRPC inference to tritonclient on this host, start the way KServe's
Triton runtime starts it, and stop cleanly on SIGTERM within the grace period.

CI builds it without the framework extras (the bundled examples are Python models) to keep
the build short; PYTRITON_IMAGE_EXTRAS=onnxruntime,torch,openvino builds what the published
image carries. Skips with the reason where podman cannot be installed or run.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import tempfile
import time
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from container_build import (
    RUN_LIMITS,
    ContainerToolError,
    Podman,
    build_cpu_image,
    ensure_base_tarball,
    podman_available,
)
from deploy_support import add_sub_roundtrip, flag_value, install_tools, project_version
from harness import EXAMPLES_REPOSITORY, free_ports

IMAGE = "localhost/pytriton-core:deploy-test"
EXTRAS = os.environ.get("PYTRITON_IMAGE_EXTRAS", "")
# `podman stop`'s grace period, as a pod's terminationGracePeriodSeconds: SIGTERM, then KILL.
STOP_GRACE_S = 15
READY_TIMEOUT_S = 90


@pytest.fixture(scope="module")
def podman() -> Iterator[Podman]:
    installed = install_tools("--podman")
    if installed.returncode != 0:
        pytest.skip(f"podman could not be installed: {installed.stderr.strip()[-500:]}")
    reason = podman_available()
    if reason:
        pytest.skip(f"podman cannot build images here: {reason}")
    try:
        ensure_base_tarball()
    except ContainerToolError as exc:
        pytest.skip(f"no Debian base image could be made with debootstrap: {exc}")
    tool = Podman(Path(tempfile.mkdtemp(prefix="pytriton-podman-")))
    try:
        yield tool
    finally:
        tool.run_result("rm", "--all", "--force", "--time", "0")
        tool.remove_storage()


@pytest.fixture(scope="module")
def image(podman: Podman) -> str:
    started = time.monotonic()
    build_cpu_image(podman, IMAGE, EXTRAS)
    print(f"built {IMAGE} (extras: {EXTRAS or 'none'}) in {time.monotonic() - started:.0f} s")
    return IMAGE


def _http_status(port: int, path: str) -> int | None:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
    try:
        connection.request("GET", path)
        return connection.getresponse().status
    except OSError:
        return None
    finally:
        connection.close()


@contextlib.contextmanager
def running_container(
    podman: Podman, image: str, ports: Sequence[int], args: Sequence[str], env: dict[str, str]
) -> Iterator[tuple[str, dict[int, int]]]:
    """The image running detached with examples/model_repository mounted read-only at
    /models and /mnt/models, and ``ports`` published on free loopback ports; yields its
    name and {container port: host port}. Removed at the end; its log printed on failure."""
    name = f"pytriton-test-{uuid.uuid4().hex[:8]}"
    published = dict(zip(ports, free_ports(len(ports)), strict=True))
    command = ["run", "--detach", "--name", name, *RUN_LIMITS]
    for inside, outside in published.items():
        command += ["--publish", f"127.0.0.1:{outside}:{inside}"]
    for mount in ("/models", "/mnt/models"):
        command += ["--volume", f"{EXAMPLES_REPOSITORY}:{mount}:ro"]
    for key, value in env.items():
        command += ["--env", f"{key}={value}"]
    podman(*command, image, *args)
    try:
        yield name, published
    except BaseException:
        print(podman.run_result("logs", name).stderr[-6000:])
        raise
    finally:
        podman.run_result("rm", "--force", "--time", "0", name)


def _wait_ready(podman: Podman, name: str, http_port: int) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while _http_status(http_port, "/v2/health/ready") != 200:
        state = podman("inspect", name, "--format", "{{.State.Status}}").strip()
        if state != "running":
            pytest.fail(f"the container is {state}:\n{podman.run_result('logs', name).stderr}")
        if time.monotonic() > deadline:
            pytest.fail(
                f"not ready after {READY_TIMEOUT_S} s:\n{podman.run_result('logs', name).stderr}"
            )
        time.sleep(0.5)


def test_image_metadata(podman: Podman, image: str) -> None:
    (inspected,) = json.loads(podman("image", "inspect", image))
    config: dict[str, Any] = inspected["Config"]
    assert config["User"] == "1000:1000"
    assert set(config["ExposedPorts"]) == {"8000/tcp", "8001/tcp", "8002/tcp"}
    assert config["Entrypoint"] == ["pytriton-entrypoint"]
    assert config["Cmd"] == ["--model-repository=/models"]
    assert config["StopSignal"] == "SIGTERM"
    # Kept only in the docker format (podman build --format docker), where podman shows it
    # beside the config.
    healthcheck = inspected.get("Healthcheck") or config.get("Healthcheck")
    assert "PYTRITON_HEALTH_URL" in " ".join(healthcheck["Test"])
    assert config["Labels"]["org.opencontainers.image.version"] == project_version()
    print(f"image size: {inspected['Size'] / 1e6:.0f} MB")


def test_container_serves_and_stops_on_sigterm(podman: Podman, image: str) -> None:
    with running_container(podman, image, (8000, 8001, 8002), (), {}) as (name, ports):
        _wait_ready(podman, name, ports[8000])
        # Not root; the server itself is PID 1 (it gets the SIGTERM); no compilers shipped;
        # nothing in /models but the mount; `tritonserver` is the server.
        assert podman("exec", name, "id", "-u").strip() == "1000"
        pid1 = podman("exec", name, "cat", "/proc/1/cmdline").split("\0")
        assert pid1[1].endswith("/pytriton-server"), f"the server is PID 1: {pid1}"
        probe = "command -v gcc cc g++ || echo no-compiler; ls -A /models"
        assert podman("exec", name, "sh", "-c", probe).split() == [
            "no-compiler",
            *sorted(p.name for p in EXAMPLES_REPOSITORY.iterdir()),
        ]
        help_text = podman("exec", name, "tritonserver", "--help")
        assert "--model-store" in help_text and "--model-control-mode" in help_text
        add_sub_roundtrip(f"127.0.0.1:{ports[8000]}", f"127.0.0.1:{ports[8001]}")
        healthcheck = podman.run_result("healthcheck", "run", name)
        assert healthcheck.returncode == 0, healthcheck.stdout + healthcheck.stderr

        started = time.monotonic()
        podman("stop", "--time", str(STOP_GRACE_S), name, timeout=STOP_GRACE_S + 30)
        stopped_in = time.monotonic() - started
        state = json.loads(podman("inspect", name, "--format", "{{json .State}}"))
        logs = podman.run_result("logs", name).stderr
        assert stopped_in < STOP_GRACE_S, f"SIGTERM ignored: stopped after {stopped_in:.1f} s"
        assert state["ExitCode"] == 0, f"exit code {state['ExitCode']}:\n{logs}"
        assert "signal received: stopping" in logs


def test_container_starts_as_kserve_starts_triton(
    podman: Podman, image: str, cluster_runtime: dict[str, Any]
) -> None:
    """The ClusterServingRuntime's container, as KServe runs it: `tritonserver` and its
    flags as the arguments, the model store at /mnt/models, KServe's ports, the runtime's
    environment; explicit model control as KServe's defaulter adds it."""
    (container,) = cluster_runtime["spec"]["containers"]
    args = [*container["args"], "--model-control-mode=explicit", "--load-model=add_sub"]
    assert args[0] == "tritonserver"
    http_port = int(flag_value(args, "--http-port"))
    grpc_port = int(flag_value(args, "--grpc-port"))
    env = {item["name"]: item["value"] for item in container.get("env", [])}
    with running_container(podman, image, (http_port, grpc_port), args, env) as (name, ports):
        _wait_ready(podman, name, ports[http_port])
        add_sub_roundtrip(f"127.0.0.1:{ports[http_port]}", f"127.0.0.1:{ports[grpc_port]}")
        for probe in ("readinessProbe", "livenessProbe"):
            path = container[probe]["httpGet"]["path"]
            assert _http_status(ports[http_port], path) == 200, (probe, path)
        healthcheck = podman.run_result("healthcheck", "run", name)
        assert healthcheck.returncode == 0, "PYTRITON_HEALTH_URL follows the runtime's port"
