"""Python models: in-process vs process mode vs the real Triton's Python backend (stub
processes), on an identity model and a CPU-bound pure-Python model at 1 and 2 instances.

    python -m bench.python_process_mode [--out DIR] [--concurrency 4] [--interval-ms 3000]
        [--rounds 3] [--models identity_in identity_proc ...]

Both servers load one repository (Triton ignores the ``EXECUTION_MODE`` parameter: its
Python models always run in stub processes) and run side by side; each round measures
every model on each server in turn (perf_analyzer over HTTP), and a row's ratio to Triton's
is the median of the rounds' ratios, so load that comes and goes on a shared machine hits
both alike.

Each measurement also reads, from ``/proc``, the CPU time the server process and its child
processes (the worker processes of process mode; Triton's stubs) spent over it, per request
the server's statistics counted: the table gives the medians.
"""

from __future__ import annotations

import argparse
import contextlib
import re
import statistics
import tempfile
from pathlib import Path

from bench import procstats
from bench.clients.perf_analyzer import run_perf_analyzer
from bench.servers import OURS, TRITON, RunningServer, run_server
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


_TRIALS = 3  # perf_analyzer's windows per measurement (it reports their average)


def throughput(
    perf: Path, url: str, model: str, concurrency: int, interval_ms: int, log: Path
) -> float:
    command = [
        str(perf), "-m", model, "-u", url, "-i", "http",
        "--concurrency-range", str(concurrency), "--measurement-interval", str(interval_ms),
        "--stability-percentage", "999", "--max-trials", str(_TRIALS),
    ]  # fmt: skip
    # As the main bench runs it (its main thread raised: ``run_perf_analyzer``).
    output = run_perf_analyzer(
        command, concurrency=concurrency, trials=_TRIALS, window_ms=interval_ms, log_path=log
    )
    found = re.search(r"Throughput: ([0-9.]+) infer/sec", output)
    if found is None:
        raise RuntimeError(f"perf_analyzer reported no throughput for {model}:\n{output}")
    return float(found.group(1))


def cpu_split(server: RunningServer) -> tuple[float, float]:
    """CPU seconds so far of the server process and of its descendants (model processes)."""
    tree = procstats.process_tree(server.process.pid)
    return procstats.cpu_seconds(tree[0]), sum(procstats.cpu_seconds(pid) for pid in tree[1:])


def measure(
    server: RunningServer, perf: Path, model: str, concurrency: int, interval_ms: int, log: Path
) -> tuple[float, tuple[float, float] | None]:
    """Throughput, and CPU µs per request in the server and in its model processes (None
    where the server counts no requests)."""
    counted = server.counts(model)
    cpu = cpu_split(server)
    value = throughput(perf, server.http_url, model, concurrency, interval_ms, log)
    after = server.counts(model)
    spent = cpu_split(server)
    if counted is None or after is None or after.requests <= counted.requests:
        return value, None
    requests = after.requests - counted.requests
    per_request = tuple((b - a) * 1e6 / requests for a, b in zip(cpu, spent, strict=True))
    return value, (per_request[0], per_request[1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--interval-ms", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--models", nargs="+", choices=tuple(MODELS), default=tuple(MODELS), help="a subset"
    )
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
    chosen = tuple(args.models)
    served = {OURS: chosen, TRITON: tuple(m for m in TRITON_MODELS if m in chosen)}
    runs: dict[tuple[str, str], list[float]] = {}
    cpu: dict[tuple[str, str], list[tuple[float, float]]] = {}
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
            for model in chosen:
                for key in keys:
                    if model not in served[key]:
                        continue
                    log = out / f"perf_analyzer-{key}-{model}-{round_index + 1}.log"
                    value, per_request = measure(
                        servers[key], perf, model, args.concurrency, args.interval_ms, log
                    )
                    runs.setdefault((key, model), []).append(value)
                    shown = ""
                    if per_request is not None:
                        cpu.setdefault((key, model), []).append(per_request)
                        shown = f", CPU µs/request {per_request[0]:.0f} + {per_request[1]:.0f}"
                    print(
                        f"round {round_index + 1} {key} {model}: {value:.1f} infer/s{shown}",
                        flush=True,
                    )
    lines = [
        "| model | server | mode | infer/s (median) | vs Triton "
        "| server CPU µs/req | model processes CPU µs/req |",
        "|---|---|---|---|---|---|---|",
    ]
    for (key, model), values in runs.items():
        triton = runs.get((TRITON, model.replace("_in", "_proc")))
        # The median of the per-round ratios (each round's figures side by side).
        ratio = (
            f"{statistics.median(v / t for v, t in zip(values, triton, strict=True)):.2f}x"
            if triton
            else "-"
        )
        mode = "stub process" if key == TRITON else MODELS[model][2]
        spent = cpu.get((key, model))
        usage = (
            f"{statistics.median(s for s, _ in spent):.0f} | "
            f"{statistics.median(c for _, c in spent):.0f}"
            if spent
            else "- | -"
        )
        median = statistics.median(values)
        lines.append(f"| {model} | {key} | {mode} | {median:.1f} | {ratio} | {usage} |")
    table = "\n".join(lines)
    (out / "python_process_mode.md").write_text(table + "\n")
    print(table)


if __name__ == "__main__":
    main()
