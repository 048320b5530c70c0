"""The servers under test: start each on free loopback ports, probe what it can do, stop it.

Every server serves the same model repository (bench.payloads). Each runs in its own session
(process group), with its output in a log file under the run's folder; its CPU time and memory
are read from /proc over its whole process tree (bench.procstats).
"""

from __future__ import annotations

import contextlib
import functools
import http.client
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

from bench import procstats
from bench.payloads import MODEL_NAME
from bench.toolbox import FLOOR_SCRIPT, KSERVE_PEER_SCRIPT, SERVER_KEYS, Toolbox

LOOPBACK = "127.0.0.1"
READY_TIMEOUT_S = 180.0  # KServe's imports alone take ~10 s on a busy 2-core machine
STOP_TIMEOUT_S = 15.0

OURS, TRITON, KSERVE, FLOOR = SERVER_KEYS
LABELS = {OURS: "pytriton-core", TRITON: "Triton", KSERVE: "KServe", FLOOR: "floor"}
KSERVE_NO_BATCHER = "KServe's ModelServer has no server-side dynamic batcher"


class ServerStartError(RuntimeError):
    """A server did not become ready; the message ends with its log's tail."""


@dataclass(frozen=True)
class Capabilities:
    """What a running server supports; each value is None (yes) or the reason it does not."""

    grpc: str | None
    system_shared_memory: str | None
    perf_analyzer: str | None  # perf_analyzer needs model metadata + the model configuration API
    dynamic_batching: str | None
    statistics: bool  # the statistics extension: the server's own request/execution counts


@dataclass(frozen=True)
class ModelCounts:
    """One model's statistics so far: successful requests, executions, executions by batch
    size, and the time its executions took (``compute_infer``, summed over batch sizes)."""

    requests: int
    executions: int
    batches: dict[int, int]
    compute_infer_ns: int = 0

    def since(self, before: ModelCounts) -> ModelCounts:
        batches = {
            size: count - before.batches.get(size, 0) for size, count in self.batches.items()
        }
        return ModelCounts(
            self.requests - before.requests,
            self.executions - before.executions,
            {size: count for size, count in batches.items() if count},
            self.compute_infer_ns - before.compute_infer_ns,
        )


@dataclass
class RunningServer:
    key: str
    version: str
    process: subprocess.Popen[bytes]
    http_port: int
    grpc_port: int
    log_path: Path
    started_s: float  # seconds from launch to ready
    capabilities: Capabilities = field(init=False)

    @property
    def label(self) -> str:
        return LABELS[self.key]

    @property
    def http_url(self) -> str:
        return f"{LOOPBACK}:{self.http_port}"

    @property
    def grpc_url(self) -> str:
        return f"{LOOPBACK}:{self.grpc_port}"

    def alive(self) -> bool:
        return self.process.poll() is None

    def sample(self) -> procstats.TreeSample:
        return procstats.sample_tree(self.process.pid)

    def counts(self, model: str = MODEL_NAME) -> ModelCounts | None:
        """``model``'s counts so far, from the statistics extension."""
        if not self.capabilities.statistics:
            return None
        status, body = http_get(self.http_url, f"/v2/models/{model}/stats")
        if status != 200:
            return None
        try:
            stats = json.loads(body)["model_stats"][0]
            batch_stats = stats.get("batch_stats") or []
            return ModelCounts(
                requests=int(stats["inference_stats"]["success"]["count"]),
                executions=int(stats["execution_count"]),
                batches={
                    int(entry["batch_size"]): int(entry["compute_infer"]["count"])
                    for entry in batch_stats
                },
                compute_infer_ns=sum(int(entry["compute_infer"]["ns"]) for entry in batch_stats),
            )
        except (KeyError, IndexError, TypeError, ValueError):
            return None

    def log_tail(self, lines: int = 15) -> str:
        text = self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
        return "\n".join(text.splitlines()[-lines:])


def free_ports(count: int) -> list[int]:
    """``count`` distinct TCP ports free on the loopback interface right now."""
    with contextlib.ExitStack() as stack:
        sockets = [stack.enter_context(socket.socket()) for _ in range(count)]
        for sock in sockets:  # all bound at once, so the kernel hands out distinct ports
            sock.bind((LOOPBACK, 0))
        return [sock.getsockname()[1] for sock in sockets]


def http_get(url: str, path: str, timeout: float = 5.0) -> tuple[int | None, bytes]:
    host, port = url.rsplit(":", 1)
    connection = http.client.HTTPConnection(host, int(port), timeout=timeout)
    try:
        connection.request("GET", path)
        response = connection.getresponse()
        return response.status, response.read()
    except OSError:
        return None, b""
    finally:
        connection.close()


def unavailable_reason(key: str, tools: Toolbox) -> str | None:
    """Why server ``key`` cannot run on this machine, or None."""
    if key == TRITON:
        return tools.real_triton_start.reason or None
    if key == KSERVE:
        return tools.kserve_python.reason or None
    return None


@functools.cache
def _our_cli_flags() -> frozenset[str]:
    result = subprocess.run(
        [sys.executable, "-m", "pytriton_core", "--help"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    return frozenset(re.findall(r"--[a-z][a-z0-9-]*", result.stdout))


def ours_has_grpc() -> bool:
    """gRPC landed when the CLI has tritonserver's gRPC TLS flag (the front end's last piece)."""
    return "--grpc-use-ssl" in _our_cli_flags()


def _ours_command(repository: Path, http_port: int, grpc_port: int, workers: int = 1) -> list[str]:
    flags = _our_cli_flags()
    command = [
        sys.executable,
        "-m",
        "pytriton_core",
        f"--model-repository={repository}",
        f"--http-port={http_port}",
        f"--grpc-port={grpc_port}",
        "--allow-metrics=false",
    ]
    for flag in ("--http-address", "--grpc-address"):
        if flag in flags:
            command.append(f"{flag}={LOOPBACK}")
    if not ours_has_grpc():
        command.append("--allow-grpc=false")
    if "--allow-client-shm" in flags:
        # Off by default, as in Triton 2.73; the Triton 2.51 under test allows it.
        command.append("--allow-client-shm=true")
    if workers > 1:  # processes sharing the ports (docs/architecture.md)
        command.append(f"--workers={workers}")
    return command


def _triton_command(start: Path, repository: Path, http_port: int, grpc_port: int) -> list[str]:
    (metrics_port,) = free_ports(1)  # Triton binds its metrics port even with metrics off
    return [
        "bash",
        str(start),
        f"--model-repository={repository}",
        f"--http-port={http_port}",
        f"--grpc-port={grpc_port}",
        f"--metrics-port={metrics_port}",
        "--allow-metrics=false",
        # Triton waits this long for open (idle keep-alive) client connections when stopped.
        "--exit-timeout-secs=3",
    ]


def _floor_command(http_port: int, grpc_port: int) -> list[str]:
    return [
        sys.executable,
        str(FLOOR_SCRIPT),
        f"--http-port={http_port}",
        f"--grpc-port={grpc_port}",
    ]


def _kserve_command(python: Path, http_port: int) -> list[str]:
    return [str(python), str(KSERVE_PEER_SCRIPT), f"--http-port={http_port}"]


def _version(key: str, server: RunningServer, tools: Toolbox) -> str:
    if key == OURS:
        try:
            return metadata.version("pytriton-core")
        except metadata.PackageNotFoundError:
            return "?"
    if key == FLOOR:
        return "—"
    if key == TRITON:
        status, body = http_get(server.http_url, "/v2")
        with contextlib.suppress(ValueError, KeyError, TypeError):
            return str(json.loads(body)["version"]) if status == 200 else "?"
        return "?"
    python = tools.kserve_python.path
    result = subprocess.run(
        [str(python), "-c", "from importlib import metadata; print(metadata.version('kserve'))"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return result.stdout.strip() or "?"


def _extensions(server: RunningServer) -> set[str]:
    status, body = http_get(server.http_url, "/v2")
    with contextlib.suppress(ValueError, KeyError, TypeError):
        return set(json.loads(body)["extensions"]) if status == 200 else set()
    return set()


def _capabilities(key: str, server: RunningServer) -> Capabilities:
    extensions = _extensions(server)
    shm = (
        None
        if "system_shared_memory" in extensions
        else (f"{LABELS[key]} does not implement the system shared-memory extension yet")
    )
    statistics = "statistics" in extensions
    if key == KSERVE:
        return Capabilities(
            grpc="the KServe peer's gRPC lacks the model-configuration RPC perf_analyzer needs",
            system_shared_memory="KServe has no shared-memory extension",
            perf_analyzer="KServe has no model-configuration endpoint, which perf_analyzer needs",
            dynamic_batching=KSERVE_NO_BATCHER,
            statistics=statistics,
        )
    if key == FLOOR:
        return Capabilities(
            grpc=None,
            system_shared_memory="the floor answers over the socket only",
            perf_analyzer=None,
            dynamic_batching=None,  # it batches nothing: the same fixed answers
            statistics=False,
        )
    grpc = None
    if key == OURS and not ours_has_grpc():
        grpc = "pytriton-core has no gRPC front end yet"
    return Capabilities(
        grpc=grpc,
        system_shared_memory=shm,
        perf_analyzer=None,
        dynamic_batching=None,
        statistics=statistics,
    )


@contextlib.contextmanager
def run_server(
    key: str,
    repository: Path,
    tools: Toolbox,
    log_dir: Path,
    tag: str,
    models: tuple[str, ...] = (MODEL_NAME,),
    ours_workers: int = 1,
) -> Iterator[RunningServer]:
    """Start server ``key`` on ``repository``; stop it (its whole process group) at the end.

    It is ready when it and each of ``models`` say so; pytriton-core runs ``ours_workers``
    worker processes."""
    http_port, grpc_port = free_ports(2)
    if key == OURS:
        command = _ours_command(repository, http_port, grpc_port, ours_workers)
    elif key == TRITON:
        assert tools.real_triton_start.path is not None
        command = _triton_command(tools.real_triton_start.path, repository, http_port, grpc_port)
    elif key == FLOOR:
        command = _floor_command(http_port, grpc_port)
    else:
        assert tools.kserve_python.path is not None
        command = _kserve_command(tools.kserve_python.path, http_port)
    log_path = log_dir / f"server-{key}-{tag}.log"
    launched = time.monotonic()
    with log_path.open("wb") as log_file:
        log_file.write(f"$ {' '.join(command)}\n".encode())
        log_file.flush()
        process = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            cwd=log_dir,
            start_new_session=True,  # its own group: stopping it stops its children too
        )
    server = RunningServer(key, "?", process, http_port, grpc_port, log_path, 0.0)
    try:
        _wait_until_ready(server, models)
        server.started_s = time.monotonic() - launched
        server.version = _version(key, server, tools)
        server.capabilities = _capabilities(key, server)
        yield server
    finally:
        stop(server.process)


def _wait_until_ready(server: RunningServer, models: tuple[str, ...]) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while True:
        if server.process.poll() is not None:
            raise ServerStartError(
                f"{server.label} exited with {server.process.returncode} before it was ready:\n"
                f"{server.log_tail()}"
            )
        ready = http_get(server.http_url, "/v2/health/ready", timeout=2)[0] == 200
        if ready and all(
            http_get(server.http_url, f"/v2/models/{model}/ready")[0] == 200 for model in models
        ):
            return
        if time.monotonic() > deadline:
            raise ServerStartError(
                f"{server.label} was not ready after {READY_TIMEOUT_S:.0f} s:\n{server.log_tail()}"
            )
        time.sleep(0.2)


def stop(process: subprocess.Popen[bytes]) -> int:
    """SIGTERM the server, SIGKILL its whole process group after STOP_TIMEOUT_S."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            # Still running, so its pid (= its session's group id) has not been reused.
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
    returncode = process.wait()
    # Children that outlived their parent (a Triton Python stub, say) share its group.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)
    return returncode
