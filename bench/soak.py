"""Soak: pytriton-core under HTTP, gRPC, gRPC streaming and system shared-memory clients at
once, sampling the server's RSS, open descriptors, threads, shared-memory mappings, live
requests and pooled buffer bytes in use; after warm-up nothing may grow, and once the clients
stop nothing they caused may be left alive.

    .venv/bin/python -m bench.soak --seconds 60           # a minute (what CI runs, shorter)
    .venv/bin/python -m bench.soak --seconds 3600 --concurrency 4 --interval 60   # the hour

Every answer is checked to be exactly the request's values. The run fails (exit status 1)
on any wrong or failed answer, or when the end sample exceeds the sample taken after
warm-up by more than the slack (``--rss-slack-mib``, ``--fd-slack``, ``--thread-slack``,
``--mapping-slack``), or when, after the clients stopped, the server still holds a request,
a response, a view of a region or a pooled buffer (its ``--debug-live-objects`` census).
Samples are printed as they are taken, the verdict at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import numpy as np

from bench.procstats import sample_tree

IDENTITY_CONFIG = """
backend: "python"
max_batch_size: 0
input [ { name: "INPUT0", data_type: TYPE_FP32, dims: [ -1 ] } ]
output [ { name: "OUTPUT0", data_type: TYPE_FP32, dims: [ -1 ] } ]
instance_group [ { count: 2, kind: KIND_CPU } ]
"""
IDENTITY_MODEL = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        inputs = [pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy() for r in requests]
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", x)]) for x in inputs]
"""
MODEL = "identity"
ELEMENTS = 1024


@dataclass(frozen=True)
class Sample:
    at_s: float
    rss_mib: float
    fds: int
    threads: int
    shm_mappings: int
    live_requests: int  # the census's, at the moment of the sample (requests in flight)
    pooled_kib: float  # pooled buffer bytes handed out at that moment
    answers: int


# What the census must count zero of once no client is left.
_MUST_END_AT_ZERO = ("requests", "responses", "shm_region_views", "pooled_bytes_in_use")


def _free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    for sock in sockets:
        sock.bind(("127.0.0.1", 0))
    ports = [sock.getsockname()[1] for sock in sockets]
    for sock in sockets:
        sock.close()
    return ports


def _threads(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Threads:"):
            return int(line.split()[1])
    return 0


def _shm_mappings(pid: int) -> int:
    return sum("/dev/shm/" in line for line in Path(f"/proc/{pid}/maps").read_text().splitlines())


class Counter:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.answers = 0
        self.failures: list[str] = []

    def add(self, failure: str | None) -> None:
        with self._lock:
            if failure is None:
                self.answers += 1
            elif len(self.failures) < 20:
                self.failures.append(failure)


def _check(values: np.ndarray, answer: np.ndarray | None) -> str | None:
    if answer is None or answer.tolist() != values.tolist():
        return f"wrong answer: {answer!r:.200}"
    return None


def _http_client(url: str, stop: threading.Event, counter: Counter, seed: int) -> None:
    import tritonclient.http as httpclient

    with httpclient.InferenceServerClient(url, network_timeout=120) as client:
        serial = seed
        while not stop.is_set():
            serial += 1
            values = np.full(ELEMENTS, serial, dtype=np.float32)
            tensor = httpclient.InferInput("INPUT0", [ELEMENTS], "FP32")
            tensor.set_data_from_numpy(values, binary_data=serial % 2 == 0)
            try:
                counter.add(_check(values, client.infer(MODEL, [tensor]).as_numpy("OUTPUT0")))
            except Exception as exc:
                counter.add(f"http: {exc}")


def _grpc_client(url: str, stop: threading.Event, counter: Counter, seed: int) -> None:
    import tritonclient.grpc as grpcclient

    with grpcclient.InferenceServerClient(url) as client:
        serial = seed
        while not stop.is_set():
            serial += 1
            values = np.full(ELEMENTS, serial, dtype=np.float32)
            tensor = grpcclient.InferInput("INPUT0", [ELEMENTS], "FP32")
            tensor.set_data_from_numpy(values)
            try:
                counter.add(_check(values, client.infer(MODEL, [tensor]).as_numpy("OUTPUT0")))
            except Exception as exc:
                counter.add(f"grpc: {exc}")


def _deliver(answers: queue.Queue[object], result: object, error: object) -> None:
    answers.put(error or result)


def _stream_client(url: str, stop: threading.Event, counter: Counter, seed: int) -> None:
    """One stream per round of 50 requests, so streams open and close throughout."""
    import tritonclient.grpc as grpcclient

    with grpcclient.InferenceServerClient(url) as client:
        serial = seed
        while not stop.is_set():
            answers: queue.Queue[object] = queue.Queue()
            client.start_stream(callback=partial(_deliver, answers))
            try:
                for _ in range(50):
                    serial += 1
                    values = np.full(ELEMENTS, serial, dtype=np.float32)
                    tensor = grpcclient.InferInput("INPUT0", [ELEMENTS], "FP32")
                    tensor.set_data_from_numpy(values)
                    client.async_stream_infer(MODEL, [tensor])
                    answer = answers.get(timeout=120)
                    if isinstance(answer, Exception):
                        counter.add(f"stream: {answer}")
                    else:
                        counter.add(_check(values, answer.as_numpy("OUTPUT0")))  # type: ignore[attr-defined]
                    if stop.is_set():
                        break
            finally:
                client.stop_stream()


def _shm_client(url: str, stop: threading.Event, counter: Counter, seed: int) -> None:
    """Registers a fresh input and output region every 100 requests."""
    import tritonclient.http as httpclient
    import tritonclient.utils.shared_memory as shm

    size = ELEMENTS * 4
    with httpclient.InferenceServerClient(url, network_timeout=120) as client:
        serial = seed
        while not stop.is_set():
            tag = uuid.uuid4().hex[:12]
            handles = [
                shm.create_shared_memory_region(f"{kind}{tag}", f"/soak_{kind}{tag}", size)
                for kind in ("in", "out")
            ]
            client.register_system_shared_memory(f"in{tag}", f"/soak_in{tag}", size)
            client.register_system_shared_memory(f"out{tag}", f"/soak_out{tag}", size)
            try:
                for _ in range(100):
                    serial += 1
                    values = np.full(ELEMENTS, serial, dtype=np.float32)
                    shm.set_shared_memory_region(handles[0], [values])
                    tensor = httpclient.InferInput("INPUT0", [ELEMENTS], "FP32")
                    tensor.set_shared_memory(f"in{tag}", size)
                    output = httpclient.InferRequestedOutput("OUTPUT0")
                    output.set_shared_memory(f"out{tag}", size)
                    try:
                        client.infer(MODEL, [tensor], outputs=[output])
                        answer = shm.get_contents_as_numpy(handles[1], np.float32, [ELEMENTS])
                        counter.add(_check(values, answer))
                    except Exception as exc:
                        counter.add(f"shm: {exc}")
                    if stop.is_set():
                        break
            finally:
                client.unregister_system_shared_memory(f"in{tag}")
                client.unregister_system_shared_memory(f"out{tag}")
                for handle in handles:
                    shm.destroy_shared_memory_region(handle)


def _start_server(root: Path, http_port: int, grpc_port: int) -> subprocess.Popen[bytes]:
    command = [
        sys.executable,
        "-m",
        "pytriton_core",
        f"--model-repository={root}",
        f"--http-port={http_port}",
        f"--grpc-port={grpc_port}",
        "--allow-metrics=false",
        "--allow-client-shm=true",
        "--log-verbose=0",
        "--debug-live-objects=true",
    ]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the server exited: {process.stderr.read().decode()[-2000:]}")  # type: ignore[union-attr]
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{http_port}/v2/health/ready") as r:
                if r.status == 200:
                    return process
        except OSError:
            time.sleep(0.2)
    process.kill()
    raise RuntimeError("the server never became ready")


def _census(http_url: str) -> dict[str, int]:
    """The server's count of what requests left alive (``--debug-live-objects``)."""
    with urllib.request.urlopen(f"http://{http_url}/v2/debug/live_objects", timeout=120) as r:
        counts: dict[str, int] = json.loads(r.read())
    return counts


def _leftovers(http_url: str, settle_s: float = 30.0) -> dict[str, int]:
    """What the server still holds once no client is left (waiting ``settle_s`` at most)."""
    deadline = time.monotonic() + settle_s
    while True:
        counts = _census(http_url)
        left = {name: counts[name] for name in _MUST_END_AT_ZERO if counts[name]}
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.5)


def _sample(pid: int, http_url: str, started: float, counter: Counter) -> Sample:
    tree = sample_tree(pid)
    census = _census(http_url)
    return Sample(
        time.monotonic() - started,
        tree.rss_bytes / (1 << 20),
        len(os.listdir(f"/proc/{pid}/fd")),
        _threads(pid),
        _shm_mappings(pid),
        census["requests"],
        census["pooled_bytes_in_use"] / 1024,
        counter.answers,
    )


def _print(sample: Sample, label: str = "") -> None:
    print(
        f"{sample.at_s:>8.0f} {sample.rss_mib:>9.1f} {sample.fds:>5} {sample.threads:>7} "
        f"{sample.shm_mappings:>5} {sample.live_requests:>5} {sample.pooled_kib:>10.0f} "
        f"{sample.answers:>9}  {label}",
        flush=True,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=60.0, help="whole run (default 60)")
    parser.add_argument("--warmup", type=float, default=0.3, help="fraction (default 0.3)")
    parser.add_argument("--concurrency", type=int, default=2, help="clients of each kind")
    parser.add_argument("--interval", type=float, default=5.0, help="seconds between samples")
    parser.add_argument("--rss-slack-mib", type=float, default=32.0)
    parser.add_argument("--fd-slack", type=int, default=4)
    parser.add_argument("--thread-slack", type=int, default=4)
    parser.add_argument("--mapping-slack", type=int, default=4)
    args = parser.parse_args(argv)

    root = Path(tempfile.mkdtemp(prefix="pytriton-soak-"))
    (root / MODEL / "1").mkdir(parents=True)
    (root / MODEL / "config.pbtxt").write_text(IDENTITY_CONFIG)
    (root / MODEL / "1" / "model.py").write_text(IDENTITY_MODEL)
    http_port, grpc_port = _free_ports(2)
    server = _start_server(root, http_port, grpc_port)
    http_url, grpc_url = f"127.0.0.1:{http_port}", f"127.0.0.1:{grpc_port}"
    stop = threading.Event()
    counter = Counter()
    kinds: list[tuple[Callable[[str, threading.Event, Counter, int], None], str]] = [
        (_http_client, http_url),
        (_grpc_client, grpc_url),
        (_stream_client, grpc_url),
        (_shm_client, http_url),
    ]
    clients = [
        threading.Thread(target=run, args=(url, stop, counter, (k * 64 + i) << 20), daemon=True)
        for k, (run, url) in enumerate(kinds)
        for i in range(args.concurrency)
    ]
    started = time.monotonic()
    for client in clients:
        client.start()
    print(
        f"{'at_s':>8} {'rss_mib':>9} {'fds':>5} {'threads':>7} {'shm':>5} {'live':>5} "
        f"{'pooled_kib':>10} {'answers':>9}"
    )
    warm: Sample | None = None
    last = _sample(server.pid, http_url, started, counter)
    _print(last, "start")
    left: dict[str, int] = {}
    try:
        while last.at_s < args.seconds:
            time.sleep(min(args.interval, max(args.seconds - last.at_s, 0.1)))
            last = _sample(server.pid, http_url, started, counter)
            label = ""
            if warm is None and last.at_s >= args.seconds * args.warmup:
                warm, label = last, "after warm-up"
            _print(last, label)
    finally:
        stop.set()
        for client in clients:
            client.join(timeout=120)
        left = _leftovers(http_url)
        server.terminate()
        server.wait(timeout=120)
    assert warm is not None
    problems = list(counter.failures)
    if left:
        problems.append(f"left alive after the clients stopped: {left}")
    for name, grown, slack in (
        ("RSS (MiB)", last.rss_mib - warm.rss_mib, args.rss_slack_mib),
        ("descriptors", last.fds - warm.fds, args.fd_slack),
        ("threads", last.threads - warm.threads, args.thread_slack),
        ("shm mappings", last.shm_mappings - warm.shm_mappings, args.mapping_slack),
    ):
        if grown > slack:
            problems.append(f"{name} grew by {grown:g} after warm-up (slack {slack:g})")
    rate = (last.answers - warm.answers) / max(last.at_s - warm.at_s, 1e-9)
    print(f"answers after warm-up: {last.answers - warm.answers} ({rate:.0f}/s)")
    if not left:
        print("after the clients stopped: no request, response, region view or pooled buffer left")
    print("FAILED:\n  " + "\n  ".join(problems) if problems else "flat: ok")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
