"""4 MiB tensors into and out of a GPU model: CUDA shared memory vs system shm vs the socket.

    python -m bench.cuda_shm                  # on a machine with an NVIDIA GPU
    python -m bench.cuda_shm --seconds 3 --out /tmp/cuda-shm

Ours only (the real Triton here is a CPU build). The model is ONNX on onnxruntime's CUDA
provider, ``Y = X * 2`` over 1x1048576 FP32 (4 MiB each way), so the time measured is moving
tensors, not computing. One client (tritonclient, concurrency 1) loops for ``--seconds`` per
mode: HTTP binary, gRPC, HTTP with system shared memory, and HTTP and gRPC with CUDA shared
memory (the client's device buffers, opened by the server through their IPC handles: the
GPU model reads and writes them in place). The report gives inf/s, MiB/s each way and the
ratio to HTTP binary. Needs cupy and onnxruntime-gpu (tools/gpu-checks.sh installs them and
runs this); without a GPU it says so and exits 0. ``--kind cpu`` runs the model on the CPU and
leaves out the CUDA modes: the bench checking itself on a machine without a GPU (its test).
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from bench.shm_compare import MODEL as READY_MODEL
from bench.shm_compare import ROOT, serve

MODEL = "scale_gpu"
ELEMENTS = 1 << 20
MODES = ("http-binary", "grpc", "http-system-shm", "http-cuda-shm", "grpc-cuda-shm")


@dataclass(frozen=True)
class Row:
    mode: str
    inferences: int
    seconds: float

    @property
    def throughput(self) -> float:
        return self.inferences / self.seconds

    @property
    def mib_per_s(self) -> float:
        return self.throughput * ELEMENTS * 4 / (1 << 20)


def gpu_missing() -> str | None:
    """Why this bench cannot run here, or None."""
    if shutil.which("nvidia-smi") is None:
        return "no nvidia-smi: no NVIDIA GPU here"
    if subprocess.run(["nvidia-smi", "-L"], capture_output=True, check=False).returncode:
        return "nvidia-smi lists no GPU"
    try:
        import cupy
        import onnxruntime as ort

        cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    if "CUDAExecutionProvider" not in ort.get_available_providers():
        return "onnxruntime has no CUDAExecutionProvider (pip install onnxruntime-gpu)"
    return None


def write_repository(path: Path, kind: str) -> Path:
    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Mul", ["X", "two"], ["Y"])],
        "scale",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, [1, ELEMENTS])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [1, ELEMENTS])],
        [helper.make_tensor("two", TensorProto.FLOAT, [], [2.0])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    (path / MODEL / "1").mkdir(parents=True)
    onnx.save(model, str(path / MODEL / "1" / "model.onnx"))
    (path / MODEL / "config.pbtxt").write_text(
        'backend: "onnxruntime"\nmax_batch_size: 0\n'
        f'input [ {{ name: "X", data_type: TYPE_FP32, dims: [ 1, {ELEMENTS} ] }} ]\n'
        f'output [ {{ name: "Y", data_type: TYPE_FP32, dims: [ 1, {ELEMENTS} ] }} ]\n'
        f"instance_group [ {{ kind: KIND_{kind.upper()}, count: 1 }} ]\n"
    )
    shutil.copytree(ROOT / "examples" / "model_repository" / READY_MODEL, path / READY_MODEL)
    return path


class CudaBuffer:
    """A client device buffer of its own allocation, with its IPC handle."""

    def __init__(self, nbytes: int) -> None:
        import cupy

        self.memory = cupy.cuda.MemoryPointer(cupy.cuda.Memory(nbytes), 0)
        self.raw_handle = bytes(cupy.cuda.runtime.ipcGetMemHandle(self.memory.ptr))

    def write(self, host: np.ndarray) -> None:
        self.memory.copy_from_host(host.ctypes.data, host.nbytes)

    def read(self, nbytes: int) -> np.ndarray:
        host = np.empty(nbytes // 4, np.float32)
        self.memory.copy_to_host(host.ctypes.data, nbytes)
        return host


def _loop(seconds: float, once: Callable[[], None]) -> tuple[int, float]:
    once()  # warm-up (and a correctness check inside ``once``)
    count, start = 0, time.perf_counter()
    while (elapsed := time.perf_counter() - start) < seconds:
        once()
        count += 1
    return count, elapsed


def run_mode(mode: str, http_port: int, grpc_port: int, seconds: float) -> Row:
    import base64

    import tritonclient.grpc as grpcclient
    import tritonclient.http as httpclient
    import tritonclient.utils.shared_memory as sysshm

    protocol = "grpc" if mode.startswith("grpc") else "http"
    mod: Any = grpcclient if protocol == "grpc" else httpclient
    url = f"127.0.0.1:{grpc_port if protocol == 'grpc' else http_port}"
    client = mod.InferenceServerClient(url)
    x = np.random.default_rng(0).standard_normal((1, ELEMENTS)).astype(np.float32)
    nbytes = x.nbytes
    tensor = mod.InferInput("X", [1, ELEMENTS], "FP32")
    output = mod.InferRequestedOutput("Y")  # binary on HTTP by default
    check: Callable[[Any], np.ndarray]
    cleanup: list[Callable[[], None]] = []
    if mode.endswith("cuda-shm"):
        inp, out = CudaBuffer(nbytes), CudaBuffer(nbytes)
        inp.write(x)
        for name, buffer in (("in", inp), ("out", out)):
            # Both clients take the handle base64-encoded (gRPC's decodes it again).
            raw = base64.b64encode(buffer.raw_handle)
            client.register_cuda_shared_memory(f"bench_{name}", raw, 0, nbytes)
        tensor.set_shared_memory("bench_in", nbytes)
        output.set_shared_memory("bench_out", nbytes)
        cleanup.append(client.unregister_cuda_shared_memory)
        check = lambda _answer: out.read(nbytes)  # noqa: E731 - one line per mode
    elif mode.endswith("system-shm"):
        handles = [
            sysshm.create_shared_memory_region(f"bench_{n}", f"/bench_{n}", nbytes)
            for n in ("in", "out")
        ]
        sysshm.set_shared_memory_region(handles[0], [x])
        for n in ("in", "out"):
            client.register_system_shared_memory(f"bench_{n}", f"/bench_{n}", nbytes)
        tensor.set_shared_memory("bench_in", nbytes)
        output.set_shared_memory("bench_out", nbytes)
        cleanup.append(client.unregister_system_shared_memory)
        cleanup.extend(lambda h=h: sysshm.destroy_shared_memory_region(h) for h in handles)
        check = lambda _answer: sysshm.get_contents_as_numpy(  # noqa: E731
            handles[1], np.float32, [ELEMENTS]
        )
    else:
        check = lambda answer: answer.as_numpy("Y")  # noqa: E731

    def once() -> None:
        if not mode.endswith("shm"):
            tensor.set_data_from_numpy(x)
        answer = client.infer(MODEL, [tensor], outputs=[output])
        if first[0]:
            got = np.asarray(check(answer)).reshape(-1)
            if not np.array_equal(got, x.reshape(-1) * 2):
                raise RuntimeError(f"{mode}: wrong output")
            first[0] = False

    first = [True]
    try:
        count, elapsed = _loop(seconds, once)
    finally:
        for undo in cleanup:
            undo()
        client.close()
    return Row(mode, count, elapsed)


def report(rows: list[Row], kind: str) -> str:
    base = next((r.throughput for r in rows if r.mode == "http-binary"), 0.0)
    lines = [
        f"4 MiB FP32 in and out of `{MODEL}` (onnxruntime, KIND_{kind.upper()}), concurrency 1",
        "",
        "| mode | inf/s | MiB/s each way | vs http-binary |",
        "|---|---|---|---|",
    ]
    for row in rows:
        ratio = f"{row.throughput / base:.2f}x" if base else "-"
        lines.append(f"| {row.mode} | {row.throughput:,.1f} | {row.mib_per_s:,.0f} | {ratio} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.cuda_shm", description=__doc__)
    parser.add_argument("--seconds", type=float, default=5.0, help="per mode (default 5)")
    parser.add_argument("--out", type=Path, default=ROOT / ".cache" / "bench-results" / "cuda")
    parser.add_argument(
        "--kind", choices=("gpu", "cpu"), default="gpu", help="where the model runs"
    )
    args = parser.parse_args(argv)
    modes = MODES
    if args.kind == "gpu":
        reason = gpu_missing()
        if reason is not None:
            print(f"bench.cuda_shm: skipped: {reason}")
            return 0
    else:
        modes = tuple(m for m in MODES if "cuda" not in m)
    args.out.mkdir(parents=True, exist_ok=True)
    repository = write_repository(Path(tempfile.mkdtemp(prefix="cuda-shm-bench-")), args.kind)
    rows = []
    with serve("ours", repository, args.out) as (http_port, grpc_port):
        for mode in modes:
            rows.append(run_mode(mode, http_port, grpc_port, args.seconds))
            print(f"{mode}: {rows[-1].throughput:,.1f} inf/s", flush=True)
    text = report(rows, args.kind)
    (args.out / "cuda_shm.md").write_text(text)
    (args.out / "cuda_shm.json").write_text(
        json.dumps([asdict(r) | {"throughput": r.throughput} for r in rows], indent=2)
    )
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
