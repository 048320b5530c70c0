"""Served vs raw throughput of each CPU framework backend (onnxruntime, pytorch, openvino).

    python bench/backends.py                 # all three, 20 s of load each
    python bench/backends.py --backends onnxruntime --requests 2000

For each backend the same MLP (built here, FP32, 256 -> 1024 -> 256) is served by
pytriton-core with dynamic batching on, and perf_analyzer (tools/install-perf-analyzer.sh)
drives it over HTTP at concurrency 16 with batch-1 requests. The statistics extension then
says which batch sizes the server formed during the run. "Raw" is the framework itself in a
plain loop in this process (no server, no sockets) at each of those batch sizes; the raw
time for the same batches gives the raw throughput to compare with. The ratio served/raw is
the share of the framework's own speed the server delivers.
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "integration"))

import framework_models as fm  # noqa: E402
from harness import find_perf_analyzer, run_pytriton_server  # noqa: E402

SIZE = fm.MlpSize(in_features=256, hidden=1024, out_features=256)
CONCURRENCY = 16
MAX_BATCH_SIZE = 16
THROUGHPUT = re.compile(r"Concurrency: (\d+), throughput: ([0-9.]+) infer/sec")
WINDOW = re.compile(r"Pass \[\d+\] throughput: ([0-9.]+) infer/sec")

# backend -> (model name, input, output)
MODELS = {
    "onnxruntime": ("onnx_mlp", "X", "Y"),
    "pytorch": ("torch_mlp", "INPUT__0", "OUTPUT__0"),
    "openvino": ("openvino_mlp", "X", "Y"),
}
MODELS_INPUT = {name: input_name for name, input_name, _ in MODELS.values()}
BATCHING = f"""
max_batch_size: {MAX_BATCH_SIZE}
dynamic_batching {{ }}
instance_group [ {{ count: 1, kind: KIND_CPU }} ]
"""
# Each framework's own name for its intra-op thread count (model config parameter).
THREAD_PARAMETER = {
    "onnxruntime": "intra_op_thread_count",
    "pytorch": "INTRA_OP_THREAD_COUNT",
    "openvino": "INFERENCE_NUM_THREADS",
}


def _config(backend: str, threads: int, extra: str = "") -> str:
    parameter = THREAD_PARAMETER[backend]
    threads_line = (
        f'parameters {{ key: "{parameter}" value: {{ string_value: "{threads}" }} }}\n'
        if threads
        else ""
    )
    return BATCHING + extra + threads_line


@dataclass(frozen=True)
class Result:
    backend: str
    served: float  # inferences/s through the server
    raw: float  # inferences/s of the framework on the same batches
    batches: dict[int, int]  # batch size -> executions during the run
    raw_by_size: dict[int, float]  # batch size -> raw inferences/s

    @property
    def ratio(self) -> float:
        return self.served / self.raw if self.raw else float("nan")


def build_repository(root: Path, backends: list[str], threads: int) -> Path:
    onnx_file = fm.write_onnx_mlp(root / "source" / "model.onnx", SIZE)
    repository = root / "repository"
    if "onnxruntime" in backends:
        target = repository / "onnx_mlp"
        (target / "1").mkdir(parents=True)
        (target / "1" / "model.onnx").write_bytes(onnx_file.read_bytes())
        (target / "config.pbtxt").write_text(_config("onnxruntime", threads))
    if "pytorch" in backends:
        fm.write_torch_mlp(repository / "torch_mlp" / "1" / "model.pt", SIZE)
        io = textwrap.dedent(
            f"""
            backend: "pytorch"
            input [ {{ name: "INPUT__0" data_type: TYPE_FP32 dims: [ {SIZE.in_features} ] }} ]
            output [ {{ name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ {SIZE.out_features} ] }} ]
            """
        )
        (repository / "torch_mlp" / "config.pbtxt").write_text(_config("pytorch", threads, io))
    if "openvino" in backends:
        fm.write_openvino_mlp(onnx_file, repository / "openvino_mlp" / "1" / "model.xml")
        (repository / "openvino_mlp" / "config.pbtxt").write_text(_config("openvino", threads))
    return repository


def raw_runner(backend: str, repository: Path, threads: int) -> Callable[[np.ndarray], Any]:
    """The framework's own call on a batch, with the options the served model has."""
    if backend == "onnxruntime":
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        session = ort.InferenceSession(str(repository / "onnx_mlp" / "1" / "model.onnx"), options)
        return lambda x: session.run(["Y"], {"X": x})
    if backend == "pytorch":
        import torch

        if threads:
            torch.set_num_threads(threads)
        module = torch.jit.load(str(repository / "torch_mlp" / "1" / "model.pt"))
        module.eval()

        def run(x: np.ndarray) -> Any:
            with torch.inference_mode():
                return module(torch.from_numpy(x)).numpy()

        return run
    import openvino as ov

    properties = {"INFERENCE_NUM_THREADS": str(threads)} if threads else {}
    compiled = ov.Core().compile_model(
        str(repository / "openvino_mlp" / "1" / "model.xml"), "CPU", properties
    )
    request = compiled.create_infer_request()
    return lambda x: request.infer({"X": x}, share_inputs=True, share_outputs=False)


def raw_throughputs(
    run: Callable[[np.ndarray], Any], sizes: list[int], seconds: float, rounds: int = 5
) -> dict[int, float]:
    """Inferences/s of ``run`` in a loop, per batch size: the best of ``rounds`` windows.

    Rounds go over every size in turn, so a burst of other work on the machine spoils one
    window of several sizes rather than every window of one; the best window is the one
    least disturbed (so served/raw errs low).
    """
    rng = np.random.default_rng(0)
    batches = {n: rng.standard_normal((n, SIZE.in_features), np.float32) for n in sizes}
    for x in batches.values():
        for _ in range(20):
            run(x)
    rates: dict[int, list[float]] = {n: [] for n in sizes}
    for _ in range(rounds):
        for n, x in batches.items():
            calls, start = 0, time.perf_counter()
            while (elapsed := time.perf_counter() - start) < seconds / rounds:
                run(x)
                calls += 1
            rates[n].append(calls * n / elapsed)
    return {n: max(r) for n, r in rates.items()}


def batch_counts(http_url: str, model: str) -> dict[int, int]:
    import tritonclient.http as httpclient

    client = httpclient.InferenceServerClient(http_url)
    stats = client.get_inference_statistics(model)["model_stats"][0]
    client.close()
    return {
        int(e["batch_size"]): int(e["compute_infer"]["count"]) for e in stats.get("batch_stats", [])
    }


def served_throughput(perf_analyzer: Path, http_url: str, model: str, requests: int) -> float:
    command = [
        str(perf_analyzer),
        "-m",
        model,
        "-i",
        "http",
        "-u",
        http_url,
        "--shape",
        f"{MODELS_INPUT[model]}:{SIZE.in_features}",
        "--concurrency-range",
        str(CONCURRENCY),
        "--measurement-mode",
        "count_windows",
        "--measurement-request-count",
        str(requests),
        "-r",
        "4",
        "-v",
    ]
    result = subprocess.run(command, capture_output=True, text=True, timeout=900, check=False)
    found = THROUGHPUT.findall(result.stdout)
    if result.returncode == 2 and not found:
        # Windows that never agreed (a shared 2-core machine is noisy): their mean is still
        # the throughput of the whole run.
        found = [("", str(statistics.mean(float(t) for t in WINDOW.findall(result.stdout))))]
    if result.returncode not in (0, 2) or not found:
        raise RuntimeError(
            f"perf_analyzer failed ({result.returncode}):\n{result.stdout}{result.stderr}"
        )
    return float(found[-1][1])


def measure(
    backend: str, repository: Path, perf_analyzer: Path, requests: int, threads: int
) -> Result:
    model = MODELS[backend][0]
    with run_pytriton_server(repository, timeout=180) as server:
        before = batch_counts(server.http_url, model)
        served = served_throughput(perf_analyzer, server.http_url, model, requests)
        after = batch_counts(server.http_url, model)
    batches = {size: after[size] - before.get(size, 0) for size in after}
    batches = {size: count for size, count in sorted(batches.items()) if count}
    run = raw_runner(backend, repository, threads)
    raw_by_size = raw_throughputs(run, list(batches), seconds=2.0)
    rows = sum(size * count for size, count in batches.items())
    raw_seconds = sum(size * count / raw_by_size[size] for size, count in batches.items())
    return Result(backend, served, rows / raw_seconds if raw_seconds else 0.0, batches, raw_by_size)


def print_table(results: list[Result], threads: int) -> None:
    print()
    print(
        f"MLP {SIZE.in_features}->{SIZE.hidden}->{SIZE.out_features} FP32, HTTP, "
        f"concurrency {CONCURRENCY}, dynamic batching (max_batch_size {MAX_BATCH_SIZE}), "
        f"intra-op threads: {threads or 'framework default'}"
    )
    print(
        f"{'backend':<12} {'served inf/s':>13} {'raw inf/s':>11} {'served/raw':>11}  "
        "mean batch  batches formed (size:count)"
    )
    for r in results:
        executions = sum(r.batches.values())
        mean = sum(s * c for s, c in r.batches.items()) / executions if executions else 0.0
        formed = " ".join(f"{s}:{c}" for s, c in r.batches.items())
        print(
            f"{r.backend:<12} {r.served:>13.0f} {r.raw:>11.0f} {r.ratio:>11.2f}  "
            f"{mean:>10.1f}  {formed}"
        )
    print()
    print("raw inf/s by batch size:")
    for r in results:
        print(f"  {r.backend:<12} " + " ".join(f"{s}:{v:.0f}" for s, v in r.raw_by_size.items()))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backends", nargs="+", choices=list(MODELS), default=list(MODELS))
    parser.add_argument(
        "--requests", type=int, default=3000, help="requests per perf_analyzer window"
    )
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="the framework's intra-op threads, served and raw alike (0: its default, all "
        "cores); 1 leaves the other core of a 2-core machine to the server and the client",
    )
    args = parser.parse_args()
    perf_analyzer = find_perf_analyzer()
    if perf_analyzer is None:
        print("perf_analyzer not found: run tools/install-perf-analyzer.sh", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="bench-backends-") as tmp:
        repository = build_repository(Path(tmp), args.backends, args.threads)
        results = [
            measure(b, repository, perf_analyzer, args.requests, args.threads)
            for b in args.backends
        ]
    print_table(results, args.threads)
    return 0


if __name__ == "__main__":
    sys.exit(main())
