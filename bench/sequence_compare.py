"""Sequence models through the sequence batcher, ours and Triton's, with perf_analyzer.

    python -m bench.sequence_compare                  # both servers, both models
    python -m bench.sequence_compare --servers ours --out /tmp/seq

One run, one machine: both servers run at once (an idle one costs next to nothing) and the
measurements alternate between them, cell by cell, ``--rounds`` times, so that load coming
and going on a shared machine hits both alike; a cell's figure is the median of its rounds.
Each server serves the same two Python models of examples/sequence_models (with
``max_sequence_idle_microseconds`` raised to a minute, see ``_long_idle``):

* ``simple_sequence``: the direct strategy, one instance, 8 slots; OUTPUT = (INPUT + START)
  * READY, so every execution is one batch of the slots that have a request;
* ``simple_dyna_sequence``: the oldest strategy (1024 candidate sequences, 10 ms delay), two
  instances, START/END/READY/CORRID controls.

perf_analyzer sends sequences of 10 requests (``--sequence-length 10``, IDs from
``--sequence-id-range``), ``concurrency`` sequences at a time, over HTTP and gRPC. The
report gives throughput and latency per cell and the ratio pytriton-core / real Triton.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import re
import shutil
import statistics
import subprocess
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

from bench.shm_compare import (
    ROOT,
    SUMMARY,
    chosen_servers,
    find_perf_analyzer,
    serve,
)

MODELS = ("simple_sequence", "simple_dyna_sequence")
PROTOCOLS = ("http", "grpc")
SEQUENCE_LENGTH = 10
LOOPBACK = "127.0.0.1"


@dataclass(frozen=True)
class Cell:
    server: str
    model: str
    protocol: str
    concurrency: int
    throughput: float  # infer/s, the median of the rounds
    latency_us: int  # client average, the median of the rounds
    rounds: tuple[float, ...] = ()  # each round's throughput, in order


def measure(
    perf_analyzer: Path,
    url: str,
    model: str,
    protocol: str,
    concurrency: int,
    window_ms: int,
    log: Path,
) -> tuple[float, int]:
    """(throughput, latency); windows that never agree within 30% get one more try without
    a stability bound (noise on a shared machine, not an error)."""
    for stability in ("30", "10000"):
        command = [
            str(perf_analyzer),
            *("-m", model, "-i", protocol, "-u", url),
            *("--sequence-length", str(SEQUENCE_LENGTH), "--sequence-id-range", "1:1000000"),
            *("--concurrency-range", f"{concurrency}:{concurrency}"),
            *("-p", str(window_ms), "-r", "6", "-s", stability),
        ]
        result = subprocess.run(command, capture_output=True, text=True, timeout=600, check=False)
        log.write_text(" ".join(command) + "\n\n" + result.stdout + result.stderr)
        found = SUMMARY.findall(result.stdout)
        if found and result.returncode == 0:
            _, throughput, latency = found[-1]
            return float(throughput), int(latency)
    raise RuntimeError(f"perf_analyzer failed ({result.returncode}); see {log}")


IDLE_US = 60_000_000


def _long_idle(config: Path) -> None:
    """A minute of idleness before a sequence is released: on a loaded machine a client can
    stall for more than the default second between two requests of a sequence (the real
    Triton then fails the sequence's next request), which says nothing about the batcher."""
    text = config.read_text()
    if "max_sequence_idle_microseconds" in text:
        text = re.sub(
            r"max_sequence_idle_microseconds: \d+",
            f"max_sequence_idle_microseconds: {IDLE_US}",
            text,
        )
    else:
        text = text.replace(
            "sequence_batching {",
            f"sequence_batching {{\n  max_sequence_idle_microseconds: {IDLE_US}",
            1,
        )
    config.write_text(text)


def run(
    servers: list[str], concurrencies: list[int], window_ms: int, rounds: int, out: Path
) -> list[Cell]:
    perf_analyzer = find_perf_analyzer()
    if perf_analyzer is None:
        raise SystemExit("perf_analyzer not found: run tools/install-perf-analyzer.sh")
    out.mkdir(parents=True, exist_ok=True)
    repository = Path(tempfile.mkdtemp(prefix="sequence-compare-"))
    for model in MODELS:
        shutil.copytree(
            ROOT / "examples" / "sequence_models" / model,
            repository / model,
            ignore=shutil.ignore_patterns("__pycache__"),
        )
        _long_idle(repository / model / "config.pbtxt")
    cells: list[Cell] = []
    try:
        with contextlib.ExitStack() as stack:
            ports = {
                server: stack.enter_context(serve(server, repository, out, ready_model=MODELS[0]))
                for server in servers
            }
            for model in MODELS:
                for index, protocol in enumerate(PROTOCOLS):
                    for concurrency in concurrencies:
                        runs: dict[str, list[tuple[float, int]]] = {s: [] for s in servers}
                        for round_ in range(rounds):
                            for server in servers:
                                log = (
                                    out / f"{server}-{model}-{protocol}-c{concurrency}-{round_}.log"
                                )
                                url = f"{LOOPBACK}:{ports[server][index]}"
                                runs[server].append(
                                    measure(
                                        perf_analyzer,
                                        url,
                                        model,
                                        protocol,
                                        concurrency,
                                        window_ms,
                                        log,
                                    )
                                )
                        for server in servers:
                            throughput = statistics.median(t for t, _ in runs[server])
                            latency = int(statistics.median(lat for _, lat in runs[server]))
                            each = tuple(t for t, _ in runs[server])
                            cells.append(
                                Cell(
                                    server, model, protocol, concurrency, throughput, latency, each
                                )
                            )
                            print(
                                f"{server:6} {model:20} {protocol:4} c={concurrency}: "
                                f"{throughput:8.1f} infer/s {latency:7d} us",
                                flush=True,
                            )
    finally:
        shutil.rmtree(repository, ignore_errors=True)
    return cells


def round_ratio(ours: Cell, theirs: Cell) -> float:
    """The median of the per-round ratios: round i of ours ran right before round i of the
    real Triton, so load that comes and goes cancels out of each ratio."""
    return statistics.median(a / b for a, b in zip(ours.rounds, theirs.rounds, strict=True))


def report(cells: list[Cell]) -> str:
    by = {(c.server, c.model, c.protocol, c.concurrency): c for c in cells}
    servers = sorted({c.server for c in cells}, key=["ours", "triton"].index)
    concurrencies = sorted({c.concurrency for c in cells})
    lines = [
        f"# Sequence models (Python backend), perf_analyzer --sequence-length {SEQUENCE_LENGTH},"
        " one run (each figure: the median of the rounds)",
        "",
        "| server | model | protocol | concurrent sequences | infer/s | latency (us) |",
        "|---|---|---|---|---|---|",
    ]
    lines += [
        f"| {c.server} | {c.model} | {c.protocol} | {c.concurrency} | {c.throughput:.1f} | "
        f"{c.latency_us} |"
        for c in cells
    ]
    if len(servers) == 2:
        lines += ["", "## pytriton-core / real Triton (throughput, median of per-round ratios)", ""]
        lines += ["| model | protocol | " + " | ".join(f"c={n}" for n in concurrencies) + " |"]
        lines += ["|---|---|" + "---|" * len(concurrencies)]
        for model in MODELS:
            for protocol in PROTOCOLS:
                row = []
                for n in concurrencies:
                    ours = by.get(("ours", model, protocol, n))
                    theirs = by.get(("triton", model, protocol, n))
                    ratio = round_ratio(ours, theirs) if ours and theirs else None
                    row.append("-" if ratio is None else f"{ratio:.2f}")
                lines.append(f"| {model} | {protocol} | " + " | ".join(row) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.sequence_compare", description=__doc__)
    parser.add_argument("--servers", default="ours,triton", help="ours,triton (comma list)")
    parser.add_argument("--concurrency", default="1,8", help="comma list (default 1,8)")
    parser.add_argument("--window-ms", type=int, default=2000, help="perf_analyzer -p")
    parser.add_argument("--rounds", type=int, default=5, help="measurements per cell and server")
    parser.add_argument("--out", type=Path, default=ROOT / ".cache" / "bench-results" / "sequence")
    args = parser.parse_args(argv)
    servers = chosen_servers(args.servers)
    concurrencies = [int(n) for n in args.concurrency.split(",")]
    cells = run(servers, concurrencies, args.window_ms, args.rounds, args.out)
    text = report(cells)
    (args.out / "sequence_compare.md").write_text(text)
    (args.out / "sequence_compare.json").write_text(
        json.dumps([asdict(c) for c in cells], indent=2)
    )
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
