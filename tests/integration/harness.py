"""Helpers for integration tests: start pytriton-core or the real Triton on free loopback ports.

    with run_pytriton_server(EXAMPLES_REPOSITORY) as server:
        client = tritonclient.http.InferenceServerClient(server.http_url)

Both servers run as child processes in their own session, with stdout and stderr captured in a
log file; a server that fails to become ready, crashes or exits uncleanly raises
:class:`ServerError` carrying that log.
"""

from __future__ import annotations

import contextlib
import functools
import http.client
import os
import re
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
EXAMPLES_REPOSITORY = REPO_ROOT / "examples" / "model_repository"
TEST_MODELS_REPOSITORY = Path(__file__).resolve().parent / "models"
# The shared tools sit beside the project checkout (see ../shared/README.md).
REAL_TRITON_TOOL = REPO_ROOT.parent / "shared" / "tools" / "real-triton"
PERF_ANALYZER_INSTALLER = REPO_ROOT / "tools" / "install-perf-analyzer.sh"
PROJECT_PERF_ANALYZER = REPO_ROOT / ".cache" / "perf-analyzer" / "bin" / "perf_analyzer"

READY_TIMEOUT_S = 180.0  # a wait, not a limit: loaded machines start the real Triton slowly
STOP_TIMEOUT_S = 10.0
READY_PATH = "/v2/health/ready"
LOOPBACK = "127.0.0.1"


class ServerError(RuntimeError):
    """A server under test did not start, or did not stop cleanly; the message holds its log."""


@dataclass(frozen=True)
class ServerHandle:
    """A running server: its process, ``host:port`` URLs (as tritonclient takes them) and log."""

    name: str
    process: subprocess.Popen[bytes]
    http_url: str
    grpc_url: str
    metrics_url: str | None  # None when metrics are off
    log_path: Path

    def log(self) -> str:
        """Everything the server wrote to stdout and stderr so far."""
        return self.log_path.read_text(errors="replace")


def free_ports(count: int) -> list[int]:
    """``count`` distinct TCP ports free on the loopback interface right now."""
    with contextlib.ExitStack() as stack:
        sockets = [stack.enter_context(socket.socket()) for _ in range(count)]
        for sock in sockets:  # all bound at once, so the kernel hands out distinct ports
            sock.bind((LOOPBACK, 0))
        return [sock.getsockname()[1] for sock in sockets]


def free_port() -> int:
    """A TCP port free on the loopback interface right now."""
    return free_ports(1)[0]


def real_triton_home() -> Path:
    """Where ../shared/tools/real-triton/setup.sh installs Triton (``$REAL_TRITON_HOME``)."""
    return Path(os.environ.get("REAL_TRITON_HOME", "~/.cache/real-triton")).expanduser()


def find_perf_analyzer() -> Path | None:
    """A runnable perf_analyzer: ``$PERF_ANALYZER``, then the project's copy
    (tools/install-perf-analyzer.sh), then the real-Triton tool's; None if there is none."""
    candidates = [
        os.environ.get("PERF_ANALYZER"),
        PROJECT_PERF_ANALYZER,
        real_triton_home() / "bin" / "perf_analyzer",
    ]
    for candidate in candidates:
        if candidate and os.access(candidate, os.X_OK) and Path(candidate).is_file():
            return Path(candidate)
    return None


@functools.cache
def pytriton_cli_flags() -> frozenset[str]:
    """The long options ``python -m pytriton_core --help`` lists."""
    result = subprocess.run(
        [sys.executable, "-m", "pytriton_core", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if result.returncode != 0:
        raise ServerError(
            f"`{sys.executable} -m pytriton_core --help` exited with {result.returncode}:\n"
            f"{result.stdout}{result.stderr}"
        )
    return frozenset(re.findall(r"--[a-z][a-z0-9-]*", result.stdout))


def _repository_flags(model_repository: Path | Sequence[Path]) -> list[str]:
    repositories = [model_repository] if isinstance(model_repository, Path) else model_repository
    return [f"--model-repository={Path(path).resolve()}" for path in repositories]


@contextlib.contextmanager
def run_pytriton_server(
    model_repository: Path | Sequence[Path],
    *extra_flags: str,
    env: Mapping[str, str] | None = None,
    metrics: bool = False,
    timeout: float = READY_TIMEOUT_S,
    check_exit: bool = True,
    ready_path: str = READY_PATH,
    http_port: int | None = None,
    https: ssl.SSLContext | None = None,
    grpc_port: int | None = None,
) -> Iterator[ServerHandle]:
    """Run ``python -m pytriton_core`` on free loopback ports until the block ends.

    Metrics are off unless ``metrics``; ``extra_flags`` are appended to the command line and
    ``env`` is added to this process's environment. ``check_exit=False`` lets the server
    exit with any status (a test that checks the status itself); the block starts once
    ``ready_path`` answers 200 (``/v2/health/live`` for a server that will not be ready).
    ``http_port`` is a given HTTP port instead of a free one (servers sharing a port), and
    ``grpc_port`` a given gRPC port (clients that only know the default ports);
    ``https`` the client context to reach the server with when it serves HTTPS.
    """
    free_http_port, free_grpc_port, metrics_port = free_ports(3)
    http_port = free_http_port if http_port is None else http_port
    grpc_port = free_grpc_port if grpc_port is None else grpc_port
    supported = pytriton_cli_flags()
    command = [
        sys.executable,
        "-m",
        "pytriton_core",
        *_repository_flags(model_repository),
        f"--http-port={http_port}",
        f"--grpc-port={grpc_port}",
    ]
    for flag in ("--http-address", "--grpc-address", "--metrics-address"):
        if flag in supported and (metrics or flag != "--metrics-address"):
            command.append(f"{flag}={LOOPBACK}")
    if "--debug-live-objects" in supported:  # the leak check's census (leaks.py)
        command.append("--debug-live-objects=true")
    if metrics:
        command.append(f"--metrics-port={metrics_port}")
    else:
        command.append("--allow-metrics=false")
    command.extend(extra_flags)
    with _run_server(
        "pytriton-core",
        command,
        env=env,
        http_port=http_port,
        grpc_port=grpc_port,
        metrics_port=metrics_port if metrics else None,
        timeout=timeout,
        check_exit=check_exit,
        ready_path=ready_path,
        https=https,
    ) as handle:
        yield handle


def batch_counts(client: Any, model: str) -> dict[int, int]:
    """``model``'s executions so far by batch size (the statistics' ``batch_stats``), from a
    tritonclient HTTP client."""
    stats = client.get_inference_statistics(model)["model_stats"][0]
    return {
        int(entry["batch_size"]): int(entry["compute_infer"]["count"])
        for entry in stats.get("batch_stats", [])
    }


def require_real_triton() -> Path:
    """The real Triton's start.sh; skips the calling test when the tool or install is missing."""
    start = REAL_TRITON_TOOL / "start.sh"
    if not start.is_file():
        pytest.skip(f"the real-Triton tool is not at {REAL_TRITON_TOOL}")
    home = real_triton_home()
    if not (home / "dist" / "bin" / "tritonserver").is_file():
        pytest.skip(
            f"the real Triton is not installed under {home} ($REAL_TRITON_HOME): "
            f"run {REAL_TRITON_TOOL / 'setup.sh'}"
        )
    return start


@contextlib.contextmanager
def run_real_triton(
    model_repository: Path | Sequence[Path],
    *extra_flags: str,
    env: Mapping[str, str] | None = None,
    metrics: bool = False,
    timeout: float = READY_TIMEOUT_S,
    ready_path: str = READY_PATH,
) -> Iterator[ServerHandle]:
    """Run the real Triton (../shared/tools/real-triton/start.sh) on free loopback ports.

    Skips the calling test when the tool or the Triton install is missing. Same options as
    :func:`run_pytriton_server`.
    """
    start = require_real_triton()
    http_port, grpc_port, metrics_port = free_ports(3)
    command = [
        "bash",
        str(start),
        *_repository_flags(model_repository),
        f"--http-port={http_port}",
        f"--grpc-port={grpc_port}",
        # Triton binds its metrics port even with metrics off: give it a free one.
        f"--metrics-port={metrics_port}",
        # On SIGTERM Triton waits up to this long for open client connections (idle keep-alive
        # ones included) before it exits; its default of 30 s outlasts STOP_TIMEOUT_S.
        "--exit-timeout-secs=3",
    ]
    if not metrics:
        command.append("--allow-metrics=false")
    command.extend(extra_flags)
    with _run_server(
        "real Triton",
        command,
        env=env,
        http_port=http_port,
        grpc_port=grpc_port,
        metrics_port=metrics_port if metrics else None,
        timeout=timeout,
        # Triton exits with 1 ("Exit timeout expired") when a client still holds an idle
        # keep-alive connection; that says nothing about the behaviour under test.
        check_exit=False,
        ready_path=ready_path,
    ) as handle:
        yield handle


@contextlib.contextmanager
def _run_server(
    name: str,
    command: list[str],
    *,
    env: Mapping[str, str] | None,
    http_port: int,
    grpc_port: int,
    metrics_port: int | None,
    timeout: float,
    check_exit: bool = True,
    ready_path: str = READY_PATH,
    https: ssl.SSLContext | None = None,
) -> Iterator[ServerHandle]:
    log_dir = Path(tempfile.mkdtemp(prefix="pytriton-it-"))
    log_path = log_dir / "server.log"
    with log_path.open("wb") as log_file:
        process = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            env={**os.environ, **env} if env is not None else None,
            cwd=REPO_ROOT,
            # Its own process group, so stopping it also stops what it spawned (Triton's
            # Python-backend stubs, model worker processes).
            start_new_session=True,
        )
    handle = ServerHandle(
        name=name,
        process=process,
        http_url=f"{LOOPBACK}:{http_port}",
        grpc_url=f"{LOOPBACK}:{grpc_port}",
        metrics_url=f"{LOOPBACK}:{metrics_port}" if metrics_port is not None else None,
        log_path=log_path,
    )
    try:
        _wait_until_ready(handle, timeout, ready_path, https)
    except ServerError:
        _stop(process)  # the error carries the log
        raise
    except BaseException:
        _stop(process)
        _print_log(handle)
        raise
    try:
        yield handle
    except BaseException:
        _stop(process)
        _print_log(handle)
        raise
    returncode = _stop(process)
    if check_exit and returncode not in (0, -signal.SIGTERM):
        raise ServerError(f"{name} exited with {returncode} when stopped:\n{handle.log()}")
    shutil.rmtree(log_dir, ignore_errors=True)


def _wait_until_ready(
    handle: ServerHandle,
    timeout: float,
    path: str = READY_PATH,
    https: ssl.SSLContext | None = None,
) -> None:
    deadline = time.monotonic() + timeout
    while True:
        if handle.process.poll() is not None:
            raise ServerError(
                f"{handle.name} exited with {handle.process.returncode} before it was ready:\n"
                f"{handle.log()}"
            )
        if _http_status(handle.http_url, path, https) == 200:
            return
        if time.monotonic() > deadline:
            raise ServerError(
                f"{handle.name} was not ready after {timeout:.0f} s "
                f"(GET http://{handle.http_url}{path}):\n{handle.log()}"
            )
        time.sleep(0.1)


def _http_status(url: str, path: str, https: ssl.SSLContext | None = None) -> int | None:
    host, port = url.rsplit(":", 1)
    connection = (
        http.client.HTTPConnection(host, int(port), timeout=2)
        if https is None
        else http.client.HTTPSConnection(host, int(port), timeout=2, context=https)
    )
    try:
        connection.request("GET", path)
        return connection.getresponse().status
    except OSError:
        return None
    finally:
        connection.close()


def _stop(process: subprocess.Popen[bytes]) -> int:
    """SIGTERM the server, SIGKILL its whole process group after STOP_TIMEOUT_S."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            print(
                f"server pid {process.pid} ignored SIGTERM for {STOP_TIMEOUT_S:.0f} s: SIGKILL",
                file=sys.stderr,
            )
            # Still running, so its pid (= the group id of its own session) is not reused yet.
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
    return process.wait()


def _print_log(handle: ServerHandle) -> None:
    print(f"----- {handle.name} log ({handle.log_path}) -----\n{handle.log()}", file=sys.stderr)


# ------------------------------------------------------------------ small helpers


def http_exchange(
    server: ServerHandle,
    method: str,
    path: str,
    body: bytes = b"",
    headers: Mapping[str, str] | None = None,
) -> tuple[int, str | None, bytes]:
    """One request on a fresh connection, the path sent as given (no client-side quoting):
    (status, Content-Type, body)."""
    host, port = server.http_url.rsplit(":", 1)
    connection = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        connection.request(method, path, body=body, headers=dict(headers or {}))
        response = connection.getresponse()
        return response.status, response.getheader("Content-Type"), response.read()
    finally:
        connection.close()


def write_python_model(root: Path, name: str, config: str, source: str) -> Path:
    """``<root>/<name>/config.pbtxt`` and ``<root>/<name>/1/model.py``."""
    (root / name / "1").mkdir(parents=True)
    (root / name / "config.pbtxt").write_text(config)
    (root / name / "1" / "model.py").write_text(source)
    return root / name


def memory_kib(pid: int, field: str = "VmRSS") -> int:
    """A /proc/<pid>/status memory figure in KiB: VmRSS now, VmHWM the peak so far."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise ServerError(f"no {field} for process {pid}")


# Datatype -> a test array for the dtype_* identity models; every value survives the round
# trip exactly.
DTYPE_CASES: dict[str, np.ndarray] = {
    "BOOL": np.array([[True, False, True]]),
    "UINT8": np.array([[0, 1, 255]], np.uint8),
    "UINT16": np.array([[0, 1, 65535]], np.uint16),
    "UINT32": np.array([[0, 1, 2**32 - 1]], np.uint32),
    "UINT64": np.array([[0, 1, 2**64 - 1]], np.uint64),
    "INT8": np.array([[-128, 0, 127]], np.int8),
    "INT16": np.array([[-32768, 0, 32767]], np.int16),
    "INT32": np.array([[-(2**31), 0, 2**31 - 1]], np.int32),
    "INT64": np.array([[-(2**63), 0, 2**63 - 1]], np.int64),
    "FP16": np.array([[-1.5, 0.0, 65504.0]], np.float16),
    "FP32": np.array([[-1.5, 0.0, 3.4028235e38]], np.float32),
    "FP64": np.array([[-1.5, 0.0, 1e308]], np.float64),
    "BF16": np.array([[-1.5, 0.0, 256.0]], ml_dtypes.bfloat16),
    "BYTES": np.array([[b"", b"\x00\xffbinary", "snow \u2603".encode()]], np.object_),
}


# ------------------------------------------------------------------ CUDA shared memory

# What the server logs (--log-verbose=1) for each device -> host copy of a tensor.
HOST_COPY_LOG = "device tensor copied to the host"

# A Python model whose inputs in CUDA shared memory arrive as GPU tensors.
PYTHON_GPU_INPUTS_CONFIG = """
backend: "python"
max_batch_size: 0
input [ { name: "INPUT0", data_type: TYPE_FP32, dims: [ -1 ] } ]
output [ { name: "OUTPUT0", data_type: TYPE_FP32, dims: [ -1 ] } ]
parameters: { key: "FORCE_CPU_ONLY_INPUT_TENSORS" value: { string_value: "no" } }
"""


def cuda_shm_regions(connection: Any) -> list[dict[str, Any]]:
    """The CUDA shared-memory status as a list of {name, device_id, byte_size}, from a
    tritonclient HTTP or gRPC client (gRPC answers a JSON map keyed by name)."""
    if type(connection).__module__.startswith("tritonclient.http"):
        return list(connection.get_cuda_shared_memory_status())
    answer = connection.get_cuda_shared_memory_status(as_json=True)
    return [
        {
            "name": r["name"],
            "device_id": int(r.get("device_id", 0)),
            "byte_size": int(r["byte_size"]),
        }
        for _, r in sorted(answer.get("regions", {}).items())
    ]


def wire_bytes(array: np.ndarray) -> bytes:
    """The binary form of a tensor (spec §0.3), as it lies in shared memory."""
    if array.dtype == np.object_:
        from tritonclient.utils import serialize_byte_tensor

        return bytes(serialize_byte_tensor(array).item())
    return np.ascontiguousarray(array).tobytes()


def cuda_shm_round_trip(
    mod: Any, connection: Any, model: str, datatype: str, array: np.ndarray, inp: Any, out: Any
) -> None:
    """Register the client device buffers ``inp`` (holding ``array``'s binary form) and
    ``out`` (objects with ``raw_handle`` and ``read``), infer ``model`` with INPUT0 and
    OUTPUT0 in them, check the output's bytes and the status, and unregister one, then all."""
    nbytes = len(wire_bytes(array))
    connection.register_cuda_shared_memory("cuda_in", inp.raw_handle, 0, nbytes)
    connection.register_cuda_shared_memory("cuda_out", out.raw_handle, 0, nbytes)
    assert cuda_shm_regions(connection) == [
        {"name": "cuda_in", "device_id": 0, "byte_size": nbytes},
        {"name": "cuda_out", "device_id": 0, "byte_size": nbytes},
    ]
    tensor = mod.InferInput("INPUT0", list(array.shape), datatype)
    tensor.set_shared_memory("cuda_in", nbytes)
    output = mod.InferRequestedOutput("OUTPUT0")
    output.set_shared_memory("cuda_out", nbytes)
    answer = connection.infer(model, [tensor], outputs=[output])
    assert answer.get_output("OUTPUT0") is not None
    assert out.read(nbytes) == wire_bytes(array)
    connection.unregister_cuda_shared_memory("cuda_in")
    assert [r["name"] for r in cuda_shm_regions(connection)] == ["cuda_out"]
    connection.unregister_cuda_shared_memory()
    assert cuda_shm_regions(connection) == []
