"""Model loading on this server: parallel loads (--model-load-thread-count), retries
(--model-load-retry-count), POLL mode version by version, SO_REUSEPORT, and a long
tritonserver command line from Triton's Helm charts and docs."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient
from control_models import FP32_IO_CONFIG
from harness import free_port, run_pytriton_server
from ops_models import write_model

# initialize() sleeps, and writes when it started and ended (monotonic ns) beside the model.
SLOW_INITIALIZE = """
import json
import os
import time

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        started = time.monotonic_ns()
        time.sleep(0.5)
        path = os.path.join(os.path.dirname(args["model_repository"]), "spans")
        with open(path, "a") as spans:
            spans.write(json.dumps([started, time.monotonic_ns()]) + "\\n")

    def execute(self, requests):
        return [pb_utils.InferenceResponse([]) for _ in requests]
"""


def _write_slow_models(root: Path, count: int) -> None:
    for i in range(count):
        model_dir = root / f"slow_{i:02d}"
        (model_dir / "1").mkdir(parents=True)
        (model_dir / "config.pbtxt").write_text(FP32_IO_CONFIG)
        (model_dir / "1" / "model.py").write_text(SLOW_INITIALIZE)


def _most_at_once(spans_file: Path) -> int:
    """The largest number of initialize() calls that were running at the same moment."""
    events = []
    for line in spans_file.read_text().splitlines():
        started, ended = json.loads(line)
        events += [(started, 1), (ended, -1)]
    running = most = 0
    for _, step in sorted(events):
        running += step
        most = max(most, running)
    return most


@pytest.mark.parametrize(("threads", "expected_at_once"), [(None, 4), ("1", 1)])
def test_models_load_in_parallel(
    tmp_path: Path, threads: str | None, expected_at_once: int
) -> None:
    """20 models that each take 0.5 s to initialize: four at once by default (tritonserver's
    default --model-load-thread-count), so the server is ready in about 2.5 s."""
    _write_slow_models(tmp_path, 20)
    flags = [] if threads is None else [f"--model-load-thread-count={threads}"]
    started = time.monotonic()
    with run_pytriton_server(tmp_path, *flags) as server:
        ready_after = time.monotonic() - started
        with httpclient.InferenceServerClient(server.http_url) as client:
            assert len(client.get_model_repository_index()) == 20
    assert _most_at_once(tmp_path / "spans") == expected_at_once
    if threads is None:
        assert ready_after < 10


# initialize() fails until it has been called ``FAILURES`` times (counted in a file).
FLAKY_INITIALIZE = """
import os
import triton_python_backend_utils as pb_utils

FAILURES = 2


class TritonPythonModel:
    def initialize(self, args):
        path = os.path.join(os.path.dirname(args["model_repository"]), "attempts")
        with open(path, "a") as attempts:
            attempts.write("x")
        with open(path) as attempts:
            if len(attempts.read()) <= FAILURES:
                raise RuntimeError("not yet")

    def execute(self, requests):
        return [pb_utils.InferenceResponse([]) for _ in requests]
"""


@pytest.mark.parametrize(("retries", "loads"), [("2", True), ("1", False)])
def test_a_failing_load_is_retried(tmp_path: Path, retries: str, loads: bool) -> None:
    model_dir = tmp_path / "flaky"
    (model_dir / "1").mkdir(parents=True)
    (model_dir / "config.pbtxt").write_text(FP32_IO_CONFIG)
    (model_dir / "1" / "model.py").write_text(FLAKY_INITIALIZE)
    flags = (f"--model-load-retry-count={retries}", "--exit-on-error=false")
    with run_pytriton_server(tmp_path, *flags, ready_path="/v2/health/live") as server:
        with httpclient.InferenceServerClient(server.http_url) as client:
            assert client.is_model_ready("flaky") is loads
    assert len((tmp_path / "attempts").read_text()) == int(retries) + 1


# --------------------------------------------------------------------------- POLL mode


def wait_for(condition: Callable[[], bool], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.1)


def _states(client: httpclient.InferenceServerClient) -> dict[str, str]:
    return {
        entry.get("version", ""): entry.get("state", "")
        for entry in client.get_model_repository_index()
        if entry["name"] == "versions"
    }


def _infer(client: httpclient.InferenceServerClient, version: str) -> float:
    tensor = httpclient.InferInput("INPUT0", [1], "FP32")
    tensor.set_data_from_numpy(np.zeros(1, np.float32))
    return float(client.infer("versions", [tensor], model_version=version).as_numpy("OUTPUT0")[0])


def test_poll_mode_changes_only_the_versions_that_changed(tmp_path: Path) -> None:
    """A version folder added, changed or removed loads, reloads or unloads that version
    alone; version 1 keeps serving throughout and is never initialized again."""
    repository = tmp_path / "models"
    marker = tmp_path / "finalized"
    model_dir = write_model(
        repository,
        "versions",
        versions=(1, 2, 3),
        parameters={"finalize_marker": str(marker)},
        extra="version_policy: { all { } }\n",
    )
    flags = ("--model-control-mode=poll", "--repository-poll-secs=1")
    with (
        run_pytriton_server(repository, *flags) as server,
        httpclient.InferenceServerClient(server.http_url) as client,
    ):
        failures: list[str] = []
        stop = threading.Event()

        def keep_sending() -> None:
            with httpclient.InferenceServerClient(server.http_url) as sender:
                while not stop.is_set():
                    try:
                        assert _infer(sender, "1") == 1.0
                    except Exception as exc:
                        failures.append(str(exc))

        sender = threading.Thread(target=keep_sending, daemon=True)
        sender.start()
        assert _states(client) == {"1": "READY", "2": "READY", "3": "READY"}
        assert _infer(client, "") == 3.0  # the latest (the server remembers what it found)
        # Added: version 4 loads, nothing else is touched.
        write_model(tmp_path / "stage", "versions", versions=(4,))
        (tmp_path / "stage" / "versions" / "4").rename(model_dir / "4")
        wait_for(lambda: _states(client).get("4") == "READY")
        wait_for(lambda: _infer(client, "") == 4.0)  # never, if the 3 found before stayed
        # Changed: version 2 answers with its new code; 1 and 3 are not finalized.
        source = (model_dir / "2" / "model.py").read_text()
        (model_dir / "2" / "model.py").write_text(
            source.replace("np.float32(self.version)", "np.float32(self.version * 10)")
        )
        wait_for(lambda: _infer(client, "2") == 20.0)
        # Removed: version 3 unloads.
        for path in sorted((model_dir / "3").rglob("*"), reverse=True):
            path.unlink() if path.is_file() else path.rmdir()
        (model_dir / "3").rmdir()
        wait_for(lambda: _states(client).get("3") == "UNAVAILABLE")
        stop.set()
        sender.join(timeout=30)
        assert failures == []
        assert _infer(client, "1") == 1.0
        assert marker.read_text() == "finalized 2\nfinalized 3\n"


# --------------------------------------------------------------------------- ports


def test_two_servers_share_the_http_port_with_reuse(tmp_path: Path) -> None:
    write_model(tmp_path, "shared")
    port = free_port()
    with (
        run_pytriton_server(tmp_path, "--reuse-http-port=true", http_port=port),
        run_pytriton_server(tmp_path, "--reuse-http-port=true", http_port=port),
        httpclient.InferenceServerClient(f"127.0.0.1:{port}") as client,
    ):
        assert client.is_server_ready()
    with run_pytriton_server(tmp_path, http_port=port):
        # Without the flag a second server cannot bind it (the harness would see the first
        # one ready on that port, so this one runs without it).
        second = subprocess.run(
            [
                sys.executable,
                "-m",
                "pytriton_core",
                f"--model-repository={tmp_path}",
                "--http-address=127.0.0.1",
                f"--http-port={port}",
                "--allow-grpc=false",
                "--allow-metrics=false",
            ],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    assert second.returncode == 1
    assert f"Socket '127.0.0.1:{port}' already in use" in second.stderr


# --------------------------------------------------------------------------- command lines

# The flags of Triton's Helm charts (deploy/*/templates/deployment.yaml: --model-store,
# --strict-model-config, --log-verbose, --allow-gpu-metrics, --model-control-mode,
# --repository-poll-secs) and of its docs and Model Analyzer launches, all at once; each
# sets what it says, or is noted at startup (the C++ server's pools and folders).
HELM_AND_DOCS_FLAGS = (
    "--strict-model-config=false",
    "--log-verbose=1",
    "--allow-gpu-metrics=false",
    "--model-control-mode=poll",
    "--repository-poll-secs=5",
    "--exit-on-error=true",
    "--strict-readiness=true",
    "--exit-timeout-secs=30",
    "--http-thread-count=16",
    "--grpc-infer-thread-count=4",
    "--grpc-infer-allocation-pool-size=16",
    "--grpc-max-response-pool-size=8",
    "--reuse-http-port=true",
    "--reuse-grpc-port=true",
    "--http-header-forward-pattern=^x-request-.*",
    "--grpc-header-forward-pattern=^x-request-.*",
    "--model-load-thread-count=8",
    "--model-load-retry-count=1",
    "--model-namespacing=false",
    "--backend-directory=/opt/tritonserver/backends",
    "--repoagent-directory=/opt/tritonserver/repoagents",
    "--backend-config=python,shm-default-byte-size=16777216",
    "--backend-config=default-max-batch-size=8",
    "--rate-limit=off",
    "--response-cache-byte-size=0",
    "--pinned-memory-pool-byte-size=268435456",
    "--cuda-memory-pool-byte-size=0:67108864",
    "--cuda-virtual-address-size=0:1073741824",
    "--min-supported-compute-capability=6.0",
    "--buffer-manager-thread-count=0",
    "--enable-peer-access=true",
    "--allow-sagemaker=false",
    "--allow-vertex-ai=false",
    "--metrics-interval-ms=2000",
    "--log-format=default",
    "--id=triton",
)


def test_a_long_tritonserver_command_line_starts(tmp_path: Path) -> None:
    write_model(tmp_path, "served")
    with (
        run_pytriton_server(tmp_path, *HELM_AND_DOCS_FLAGS, "--model-store", str(tmp_path)) as s,
        httpclient.InferenceServerClient(s.http_url) as client,
    ):
        assert client.is_model_ready("served")
        log = s.log()
    for flag in (
        "--http-thread-count=16",
        "--backend-directory=/opt/tritonserver/backends",
        "--backend-config=python,shm-default-byte-size=16777216",
    ):
        assert f"{flag}: " in log  # what the flag means here, said once
        assert log.count(f"{flag}: ") == 1


def test_a_duplicate_not_asked_for_does_not_stop_an_explicit_start(tmp_path: Path) -> None:
    """EXPLICIT mode polls only the --load-model models, as Triton does: a name found in
    two repositories fails the start only when it is asked for."""
    first, second = tmp_path / "first", tmp_path / "second"
    for root in (first, second):
        write_model(root, "twice")
    write_model(first, "once")
    flags = ("--model-control-mode=explicit", "--load-model=once")
    with (
        run_pytriton_server([first, second], *flags) as server,
        httpclient.InferenceServerClient(server.http_url) as client,
    ):
        assert client.is_model_ready("once")
        index = {e["name"]: e for e in client.get_model_repository_index()}
        assert index["twice"]["reason"] == "model appears in two or more repositories"
