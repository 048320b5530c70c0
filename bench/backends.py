"""Served vs raw throughput of each CPU framework backend (onnxruntime, pytorch, openvino).

    python bench/backends.py                 # all three
    python bench/backends.py --backends onnxruntime --threads 0 --window-ms 5000

A thin command over the bench's own pieces, for what ``python -m bench`` does not cover: the
OpenVINO backend, another intra-op thread count, longer windows, other concurrencies
(``--concurrency 1 16``), and where a served request's time goes (the breakdown table).
``python -m bench`` has the ONNX and TorchScript rows in its default preset (``--scenarios
mlp`` runs only them), measured the same way: the MLP of bench.frameworks served by
pytriton-core alone with dynamic batching on, perf_analyzer over HTTP with batch-1 requests
of standard normal numbers (``--input-data``, bench/frameworks.py: not its random bytes) (the
median of ``--windows`` runs), and raw = the framework in a plain loop in this process at
the batch sizes the server formed (its statistics, ``batch_stats``), weighted as the server
ran them.

The breakdown, per request, over the measured windows: the server's CPU (its process tree,
from /proc), the framework's own run as the server timed it (``compute_infer`` of
``batch_stats``, divided by the rows: wall time on the instance's thread, so under load it
includes the time that thread waited for a core), the same batches' raw run in this process,
and the round trip a client saw.
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

CONCURRENCY = (16,)
RAW_SECONDS_PER_BATCH_SIZE = 2.0


@dataclass(frozen=True)
class Served:
    """What the measured windows did in the server."""

    throughput: float  # inferences/s through the server, median of the runs
    batches: dict[int, int]  # batch size -> executions
    cpu_s: float  # the server's CPU time (its process tree)
    compute_infer_ns: int  # the framework's runs, as the server timed them
    requests: int

    def per_request_us(self, value_s: float) -> float:
        return value_s * 1e6 / self.requests if self.requests else float("nan")


@dataclass(frozen=True)
class Result:
    backend: str
    concurrency: int
    served: Served
    raw: frameworks.RawMix  # the framework on the same batches

    @property
    def ratio(self) -> float:
        raw = self.raw.inf_per_s
        return self.served.throughput / raw if raw else float("nan")

    @property
    def cpu_us(self) -> float:
        """The server's CPU per request."""
        return self.served.per_request_us(self.served.cpu_s)

    @property
    def framework_us(self) -> float:
        """The framework's run per request, as the server timed it (wall time)."""
        return self.served.per_request_us(self.served.compute_infer_ns / 1e9)

    @property
    def raw_us(self) -> float:
        """The framework's run per request on the same batches, raw."""
        raw = self.raw.inf_per_s
        return 1e6 / raw if raw else float("nan")


def measure(
    backend: str, repository: Path, analyzer: PerfAnalyzer, args: argparse.Namespace, logs: Path
) -> list[Result]:
    """``backend``'s model at each of ``args.concurrency``, one server for all."""
    model = frameworks.MODELS[backend]
    tools = toolbox.discover((OURS,))
    runs: list[tuple[int, Served]] = []
    with run_server(OURS, repository, tools, logs, backend, (model.name,)) as server:
        for concurrency in args.concurrency:
            run = PerfAnalyzerRun(
                url=server.http_url,
                protocol="http",
                elements=MLP_IN_FEATURES,
                concurrency=concurrency,
                window_ms=args.window_ms,
                model=model.name,
                input_name=model.input,
                input_data=frameworks.input_data_path(repository, backend),
            )
            tag = f"{backend}-c{concurrency}"
            runs.append(
                (concurrency, served_throughput(analyzer, server, run, logs, tag, args.windows))
            )
    mixes = frameworks.raw_mixes(
        backend,
        repository,
        [served.batches for _, served in runs],
        seconds_per_size=RAW_SECONDS_PER_BATCH_SIZE,
        threads=args.threads,
    )
    return [
        Result(backend, concurrency, served, mix)
        for (concurrency, served), mix in zip(runs, mixes, strict=True)
    ]


def served_throughput(
    analyzer: PerfAnalyzer,
    server: RunningServer,
    run: PerfAnalyzerRun,
    logs: Path,
    tag: str,
    windows: int,
) -> Served:
    """perf_analyzer's throughput on ``run`` (the median of ``windows`` runs after one to
    warm up, as the bench's framework rows), and what the server did meanwhile."""
    analyzer.measure(run, logs, f"{tag}-warmup")
    before = server.counts(run.model)
    cpu_before = server.sample().cpu_s
    rates = [
        analyzer.measure(run, logs, f"{tag}-w{index + 1}").throughput for index in range(windows)
    ]
    cpu_s = server.sample().cpu_s - cpu_before
    after = server.counts(run.model)
    if before is None or after is None:
        raise RuntimeError("the server's statistics extension did not answer")
    counts = after.since(before)
    return Served(
        throughput=statistics.median(rates),
        batches={size: count for size, count in counts.batches.items() if count},
        cpu_s=cpu_s,
        compute_infer_ns=counts.compute_infer_ns,
        requests=counts.requests,
    )


def print_table(results: list[Result], args: argparse.Namespace) -> None:
    print()
    print(
        f"MLP {MLP_IN_FEATURES}->{MLP_HIDDEN}->{MLP_OUT_FEATURES} FP32, HTTP, "
        f"dynamic batching (max_batch_size {frameworks.MAX_BATCH_SIZE}), "
        f"intra-op threads: {args.threads or 'framework default'}"
    )
    print(
        f"{'backend':<12} {'conc':>4} {'served inf/s':>13} {'raw inf/s':>11} {'served/raw':>11}  "
        "mean batch  batches formed (size:count)"
    )
    for r in results:
        print(
            f"{r.backend:<12} {r.concurrency:>4} {r.served.throughput:>13.0f} "
            f"{r.raw.inf_per_s or 0:>11.0f} {r.ratio:>11.2f}  "
            f"{r.raw.average_batch or 0:>10.1f}  {r.raw.formed()}"
        )
    print()
    print("per request, µs (server CPU from /proc; framework = compute_infer, wall time):")
    print(
        f"{'backend':<12} {'conc':>4} {'server CPU':>11} {'framework':>10} {'raw':>8} "
        f"{'round trip':>11}"
    )
    for r in results:
        print(
            f"{r.backend:<12} {r.concurrency:>4} {r.cpu_us:>11.0f} {r.framework_us:>10.0f} "
            f"{r.raw_us:>8.0f} "
            f"{r.concurrency * 1e6 / r.served.throughput:>11.0f}"
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
        "--concurrency", type=int, nargs="+", default=list(CONCURRENCY), help="perf_analyzer's"
    )
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
        results = [
            result
            for backend in args.backends
            for result in measure(backend, repository, analyzer, args, Path(tmp))
        ]
    print_table(results, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
