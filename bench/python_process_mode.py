"""Python models: in-process vs process mode vs the real Triton's Python backend (stub
processes), on an identity model and a CPU-bound pure-Python model at 1 and 2 instances.

    python -m bench.python_process_mode [--out DIR] [--concurrency 4] [--interval-ms 3000]
        [--rounds 3]

Both servers load one repository (Triton ignores the ``EXECUTION_MODE`` parameter: its
Python models always run in stub processes) and run side by side; each round measures
every model on each server in turn (perf_analyzer over HTTP), and a row's ratio to Triton's
is the median of the rounds' ratios, so load that comes and goes on a shared machine hits
both alike.
"""

from __future__ import annotations

import argparse
import contextlib
import re
import statistics
import subprocess
import tempfile
from pathlib import Path

from bench.servers import OURS, TRITON, run_server
from bench.toolbox import discover

IDENTITY = """
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor(
            "OUTPUT0", pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy())])
            for r in requests]
"""

CPU_BOUND = """
import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        out = []
        for r in requests:
            total = 0
            for i in range(200_000):  # pure Python: holds the GIL throughout
                total += i * i % 7
            x = pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy()
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", x + total % 2)]))
        return out
"""

CONFIG = """
name: "{name}"
backend: "python"
max_batch_size: 0
input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ 16 ] }} ]
output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 16 ] }} ]
instance_group [ {{ kind: KIND_CPU count: {count} }} ]
parameters {{ key: "EXECUTION_MODE" value {{ string_value: "{mode}" }} }}
"""

# name -> (source, instances, mode on our server)
MODELS = {
    "identity_in": (IDENTITY, 1, "in_process"),
    "identity_proc": (IDENTITY, 1, "process"),
    "cpu1_in": (CPU_BOUND, 1, "in_process"),
    "cpu2_in": (CPU_BOUND, 2, "in_process"),
    "cpu1_proc": (CPU_BOUND, 1, "process"),
    "cpu2_proc": (CPU_BOUND, 2, "process"),
}
TRITON_MODELS = ("identity_proc", "cpu1_proc", "cpu2_proc")  # all stub processes there


def write_repository(root: Path) -> None:
    for name, (source, count, mode) in MODELS.items():
        (root / name / "1").mkdir(parents=True)
        (root / name / "config.pbtxt").write_text(CONFIG.format(name=name, count=count, mode=mode))
        (root / name / "1" / "model.py").write_text(source)


def throughput(perf: Path, url: str, model: str, concurrency: int, interval_ms: int) -> float:
    command = [
        str(perf), "-m", model, "-u", url, "-i", "http",
        "--concurrency-range", str(concurrency), "--measurement-interval", str(interval_ms),
        "--stability-percentage", "999", "--max-trials", "3",
    ]  # fmt: skip
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    found = re.search(r"Throughput: ([0-9.]+) infer/sec", result.stdout)
    if found is None:
        raise RuntimeError(f"perf_analyzer failed for {model}:\n{result.stdout}{result.stderr}")
    return float(found.group(1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--interval-ms", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    tools = discover((OURS, TRITON))
    perf = tools.perf_analyzer.path
    if perf is None:
        raise SystemExit(tools.perf_analyzer.reason)
    work = Path(tempfile.mkdtemp(prefix="process-mode-bench-"))
    out = args.out or work
    out.mkdir(parents=True, exist_ok=True)
    repository = work / "repository"
    write_repository(repository)
    keys = [OURS] + ([TRITON] if tools.real_triton_start.path is not None else [])
    served = {OURS: tuple(MODELS), TRITON: TRITON_MODELS}
    runs: dict[tuple[str, str], list[float]] = {}
    with contextlib.ExitStack() as stack:
        # Both servers up at once, measured in turns: load that comes and goes on a shared
        # machine hits both alike within a round.
        servers = {
            key: stack.enter_context(
                run_server(key, repository, tools, out, "process-mode", served[key])
            )
            for key in keys
        }
        for round_index in range(args.rounds):
            for model in MODELS:
                for key in keys:
                    if model not in served[key]:
                        continue
                    value = throughput(
                        perf, servers[key].http_url, model, args.concurrency, args.interval_ms
                    )
                    runs.setdefault((key, model), []).append(value)
                    print(f"round {round_index + 1} {key} {model}: {value:.1f} infer/s", flush=True)
    lines = ["| model | server | mode | infer/s (median) | vs Triton |", "|---|---|---|---|---|"]
    for (key, model), values in runs.items():
        triton = runs.get((TRITON, model.replace("_in", "_proc")))
        # The median of the per-round ratios (each round's figures side by side).
        ratio = (
            f"{statistics.median(v / t for v, t in zip(values, triton, strict=True)):.2f}x"
            if triton
            else "-"
        )
        mode = "stub process" if key == TRITON else MODELS[model][2]
        lines.append(f"| {model} | {key} | {mode} | {statistics.median(values):.1f} | {ratio} |")
    table = "\n".join(lines)
    (out / "python_process_mode.md").write_text(table + "\n")
    print(table)


if __name__ == "__main__":
    main()
