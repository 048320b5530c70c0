"""Served vs raw throughput of each CPU framework backend (onnxruntime, pytorch, openvino).

    python bench/backends.py                 # all three
    python bench/backends.py --backends onnxruntime --threads 0 --window-ms 5000

A thin command over the bench's own pieces, for what ``python -m bench`` does not cover: the
OpenVINO backend, another intra-op thread count, longer windows. ``python -m bench`` has the
ONNX and TorchScript rows in its default preset (``--scenarios mlp`` runs only them), measured
the same way: the MLP of bench.frameworks served by pytriton-core alone with dynamic batching
on, perf_analyzer over HTTP at concurrency 16 with batch-1 requests (the median of
``--windows`` runs), and raw = the framework in a plain loop in this process at the batch sizes
the server formed (its statistics, ``batch_stats``), weighted as the server ran them.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

if __package__ in (None, ""):  # run as a script: the checkout's root holds the bench package
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import frameworks, toolbox
from bench.clients.perf_analyzer import PerfAnalyzer, PerfAnalyzerRun
from bench.scenarios import MLP_HIDDEN, MLP_IN_FEATURES, MLP_OUT_FEATURES
from bench.servers import OURS, RunningServer, run_server

CONCURRENCY = 16
RAW_SECONDS_PER_BATCH_SIZE = 2.0


@dataclass(frozen=True)
class Result:
    backend: str
    served: float  # inferences/s through the server, median of the runs
    raw: frameworks.RawMix  # the framework on the same batches

    @property
    def ratio(self) -> float:
        raw = self.raw.inf_per_s
        return self.served / raw if raw else float("nan")


def measure(
    backend: str, repository: Path, analyzer: PerfAnalyzer, args: argparse.Namespace, logs: Path
) -> Result:
    model = frameworks.MODELS[backend]
    tools = toolbox.discover((OURS,))
    with run_server(OURS, repository, tools, logs, backend, (model.name,)) as server:
        run = PerfAnalyzerRun(
            url=server.http_url,
            protocol="http",
            elements=MLP_IN_FEATURES,
            concurrency=CONCURRENCY,
            window_ms=args.window_ms,
            model=model.name,
            input_name=model.input,
        )
        served, batches = served_throughput(analyzer, server, run, logs, backend, args.windows)
    (mix,) = frameworks.raw_mixes(
        backend,
        repository,
        [batches],
        seconds_per_size=RAW_SECONDS_PER_BATCH_SIZE,
        threads=args.threads,
    )
    return Result(backend, served, mix)


def served_throughput(
    analyzer: PerfAnalyzer,
    server: RunningServer,
    run: PerfAnalyzerRun,
    logs: Path,
    tag: str,
    windows: int,
) -> tuple[float, dict[int, int]]:
    """perf_analyzer's throughput on ``run`` (the median of ``windows`` runs after one to
    warm up, as the bench's framework rows), and the batches the server formed meanwhile
    (size -> executions)."""
    analyzer.measure(run, logs, f"{tag}-warmup")
    before = server.counts(run.model)
    rates = [
        analyzer.measure(run, logs, f"{tag}-w{index + 1}").throughput for index in range(windows)
    ]
    after = server.counts(run.model)
    if before is None or after is None:
        raise RuntimeError("the server's statistics extension did not answer")
    batches = {size: count for size, count in after.since(before).batches.items() if count}
    return statistics.median(rates), batches


def print_table(results: list[Result], args: argparse.Namespace) -> None:
    print()
    print(
        f"MLP {MLP_IN_FEATURES}->{MLP_HIDDEN}->{MLP_OUT_FEATURES} FP32, HTTP, "
        f"concurrency {CONCURRENCY}, dynamic batching (max_batch_size "
        f"{frameworks.MAX_BATCH_SIZE}), intra-op threads: {args.threads or 'framework default'}"
    )
    print(
        f"{'backend':<12} {'served inf/s':>13} {'raw inf/s':>11} {'served/raw':>11}  "
        "mean batch  batches formed (size:count)"
    )
    for r in results:
        print(
            f"{r.backend:<12} {r.served:>13.0f} {r.raw.inf_per_s or 0:>11.0f} {r.ratio:>11.2f}  "
            f"{r.raw.average_batch or 0:>10.1f}  {r.raw.formed()}"
        )
    print()
    print("raw inf/s by batch size:")
    for r in results:
        rates = " ".join(f"{s}:{v:.0f}" for s, v in r.raw.raw_by_size.items())
        print(f"  {r.backend:<12} {rates}")


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    choices = list(frameworks.MODELS)
    parser.add_argument("--backends", nargs="+", choices=choices, default=choices)
    parser.add_argument(
        "--window-ms", type=int, default=2000, help="perf_analyzer's -p (3 per run)"
    )
    parser.add_argument("--windows", type=int, default=3, help="perf_analyzer runs, median taken")
    parser.add_argument(
        "--threads",
        type=int,
        default=frameworks.THREADS,
        help="the framework's intra-op threads, served and raw alike (0: its default, all "
        "cores); 1 leaves the other core of a 2-core machine to the server and the client",
    )
    args = parser.parse_args()
    found = toolbox.find_perf_analyzer()
    if found.path is None:
        print(found.reason, file=sys.stderr)
        return 2
    missing = {b: frameworks.missing(b) for b in args.backends}
    if any(missing.values()):
        print("; ".join(f"{b}: {m}" for b, m in missing.items() if m), file=sys.stderr)
        return 2
    analyzer = PerfAnalyzer(found.path)
    with tempfile.TemporaryDirectory(prefix="bench-backends-") as tmp:
        repository = frameworks.build_repository(Path(tmp) / "models", args.backends, args.threads)
        results = [measure(b, repository, analyzer, args, Path(tmp)) for b in args.backends]
    print_table(results, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
