"""Tensor bytes copied and server CPU per request, for each large-tensor path.

    .venv/bin/python tools/copy_count/measure.py [--requests 400] [--elements 16384 262144]

Starts the server on identity_fp32 (examples/model_repository) with ``memcount.so``
preloaded (built here with cc on first use), sends sequential requests with the real
tritonclient over HTTP binary, gRPC raw contents, and system shared memory (HTTP and gRPC),
and prints per request: the bytes its memcpy/memmove calls of 4 KiB or more moved, as a
multiple of the tensor's size, and the CPU time and minor page faults of the server's
process tree. The kernel's
own socket copies are not counted; every user-space copy of tensor data is.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
import tritonclient.utils.shared_memory as shm

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
MODEL = "identity_fp32"


def _shim(workdir: Path) -> Path:
    library = workdir / "memcount.so"
    subprocess.run(
        ["cc", "-O2", "-shared", "-fPIC", "-o", str(library), str(HERE / "memcount.c"), "-ldl"],
        check=True,
    )
    return library


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class _Server:
    def __init__(self, workdir: Path) -> None:
        self.out = workdir / "counts"
        self.http_port, self.grpc_port = _free_port(), _free_port()
        env = dict(os.environ, LD_PRELOAD=str(_shim(workdir)), MEMCOUNT_OUT=str(self.out))
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "pytriton_core",
                f"--model-repository={ROOT / 'examples' / 'model_repository'}",
                f"--http-port={self.http_port}",
                f"--grpc-port={self.grpc_port}",
                "--allow-metrics=false",
                "--allow-client-shm=true",
                f"--load-model={MODEL}",
                "--model-control-mode=explicit",
            ],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=(workdir / "server.log").open("w"),
        )

    def usage(self) -> tuple[float, int]:
        """CPU seconds and minor page faults of the server's process tree so far."""
        children = subprocess.run(
            ["pgrep", "-P", str(self.process.pid)], capture_output=True, text=True
        ).stdout.split()
        ticks = faults = 0
        for pid in [self.process.pid, *map(int, children)]:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            faults += int(fields[7])  # minflt
            ticks += int(fields[11]) + int(fields[12])  # utime + stime
        return ticks / os.sysconf("SC_CLK_TCK"), faults

    def copied(self) -> tuple[int, int]:
        """The (bytes, calls) counted since the last call; resets them."""
        self.out.write_text("")
        self.process.send_signal(signal.SIGUSR2)
        for _ in range(100):
            text = self.out.read_text().split()
            if text:
                return int(text[0]), int(text[1])
            time.sleep(0.01)
        raise RuntimeError("the shim did not answer SIGUSR2")


def _measure(
    server: _Server, label: str, call: Callable[[], None], requests: int, tensor_bytes: int
) -> None:
    for _ in range(10):
        call()
    server.copied()
    cpu, faults = server.usage()
    for _ in range(requests):
        call()
    cpu_after, faults_after = server.usage()
    cpu, faults = cpu_after - cpu, faults_after - faults
    copied, calls = server.copied()
    print(
        f"{label:9s} {tensor_bytes >> 10:5d} KiB  copied {copied / requests / tensor_bytes:4.2f}x "
        f"the tensor in {calls / requests:5.1f} calls; server CPU "
        f"{1e6 * cpu / requests:6.0f} us and {faults / requests:5.1f} page faults per request",
        flush=True,
    )


def _shm_call(
    client: httpclient.InferenceServerClient | grpcclient.InferenceServerClient,
    module: Any,
    data: np.ndarray,
    key: str,
) -> tuple[Callable[[], None], Callable[[], None]]:
    size = data.nbytes
    regions = [shm.create_shared_memory_region(f"{key}{k}", f"/{key}{k}", size) for k in "io"]
    shm.set_shared_memory_region(regions[0], [data])
    for k in "io":
        client.register_system_shared_memory(f"{key}{k}", f"/{key}{k}", size)
    infer_input = module.InferInput("INPUT0", list(data.shape), "FP32")
    infer_input.set_shared_memory(f"{key}i", size)
    output = module.InferRequestedOutput("OUTPUT0")
    output.set_shared_memory(f"{key}o", size)

    def call() -> None:
        client.infer(MODEL, [infer_input], outputs=[output])

    def close() -> None:
        out = shm.get_contents_as_numpy(regions[1], np.float32, list(data.shape))
        assert np.array_equal(out, data), "the output region does not hold the input"
        for k in "io":
            client.unregister_system_shared_memory(f"{key}{k}")
        for region in regions:
            shm.destroy_shared_memory_region(region)

    return call, close


def _measure_size(
    server: _Server,
    http: httpclient.InferenceServerClient,
    grpc: grpcclient.InferenceServerClient,
    elements: int,
    requests: int,
) -> None:
    data = ((np.arange(elements) % 4096) / 4).astype(np.float32).reshape(1, elements)
    http_input = httpclient.InferInput("INPUT0", list(data.shape), "FP32")
    http_input.set_data_from_numpy(data, binary_data=True)
    http_output = httpclient.InferRequestedOutput("OUTPUT0", binary_data=True)
    grpc_input = grpcclient.InferInput("INPUT0", list(data.shape), "FP32")
    grpc_input.set_data_from_numpy(data)

    def http_call() -> None:
        result = http.infer(MODEL, [http_input], outputs=[http_output])
        assert np.array_equal(result.as_numpy("OUTPUT0"), data)

    def grpc_call() -> None:
        result = grpc.infer(MODEL, [grpc_input])
        assert np.array_equal(result.as_numpy("OUTPUT0"), data)

    _measure(server, "http-bin", http_call, requests, data.nbytes)
    _measure(server, "grpc", grpc_call, requests, data.nbytes)
    for label, client, module in (
        ("http-shm", http, httpclient),
        ("grpc-shm", grpc, grpcclient),
    ):
        call, close = _shm_call(client, module, data, f"cc{label[0]}{elements}")
        try:
            _measure(server, label, call, requests, data.nbytes)
        finally:
            close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=400)
    parser.add_argument("--elements", type=int, nargs="+", default=[16 << 10, 256 << 10])
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="copy-count-"))
    server = _Server(workdir)
    try:
        http = httpclient.InferenceServerClient(f"127.0.0.1:{server.http_port}")
        grpc = grpcclient.InferenceServerClient(f"127.0.0.1:{server.grpc_port}")
        for _ in range(600):
            try:
                if http.is_model_ready(MODEL):
                    break
            except Exception:  # not listening yet
                pass
            time.sleep(0.1)
        for elements in args.elements:
            _measure_size(server, http, grpc, elements, args.requests)
    finally:
        server.process.terminate()
        server.process.wait()
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
