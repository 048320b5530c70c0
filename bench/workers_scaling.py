"""``--workers N``: throughput of 1, 2, ... server processes behind one port, in one run.

    python -m bench.workers_scaling                          # 1 and 2 workers
    python -m bench.workers_scaling --workers 1,2,4,8 --concurrency 16,64

Each count serves identity_fp32 (examples/model_repository; a Python model, one instance
per worker) on one HTTP port; perf_analyzer sends 1x16 FP32 requests over the HTTP binary
path at each concurrency, one count at a time. The report gives throughput, latency, the
ratio to one worker, and where the CPU went: the server's processes (parent and workers)
and perf_analyzer's, as a share of the machine's cores. On a machine with few cores the
load generator takes a large share of them, which caps what more workers can add: the
report says what it left.
"""

from __future__ import annotations

import argparse
import http.client
import os
import resource
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from bench import procstats
from bench.clients.perf_analyzer import PerfAnalyzerRun, load_arguments
from bench.shm_compare import LOOPBACK, ROOT, SUMMARY, find_perf_analyzer, serve, write_results

MODEL = "identity_fp32"
ELEMENTS = 16


@dataclass(frozen=True)
class Cell:
    workers: int
    concurrency: int
    throughput: float  # infer/s
    latency_us: int  # client average
    server_cores: float  # CPU seconds per second used by the server's processes
    client_cores: float  # ... by perf_analyzer


def _server_ready(http_port: int) -> bool:
    """Every worker serving (the server's readiness waits for all of them)."""
    connection = http.client.HTTPConnection(LOOPBACK, http_port, timeout=2)
    try:
        connection.request("GET", "/v2/health/ready")
        return connection.getresponse().status == 200
    except OSError:
        return False
    finally:
        connection.close()


def _measure(
    perf_analyzer: Path, http_port: int, server_pid: int, concurrency: int, window_ms: int
) -> tuple[float, int, float, float]:
    """(infer/s, latency us, server cores, perf_analyzer cores) at one concurrency."""
    load = PerfAnalyzerRun(
        f"{LOOPBACK}:{http_port}", "http", ELEMENTS, concurrency, window_ms, model=MODEL
    )
    # One run on a shared machine: average the last windows, as they come.
    command = [str(perf_analyzer), *load_arguments(load, trials=6)]
    server_before = procstats.sample_tree(server_pid).cpu_s
    client_before = _waited_children_cpu_s()
    started = time.monotonic()
    result = subprocess.run(command, capture_output=True, text=True, timeout=600, check=False)
    elapsed = time.monotonic() - started
    server_cores = (procstats.sample_tree(server_pid).cpu_s - server_before) / elapsed
    client_cores = (_waited_children_cpu_s() - client_before) / elapsed
    found = SUMMARY.findall(result.stdout)
    if not found:
        tail = (result.stdout + result.stderr)[-2000:]
        raise RuntimeError(f"perf_analyzer failed ({result.returncode}):\n{tail}")
    _, throughput, latency = found[-1]
    return float(throughput), int(latency), server_cores, client_cores


def _waited_children_cpu_s() -> float:
    """CPU seconds of the child processes waited for so far (perf_analyzer runs)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run(workers: list[int], concurrencies: list[int], window_ms: int, out: Path) -> list[Cell]:
    perf_analyzer = find_perf_analyzer()
    if perf_analyzer is None:
        raise SystemExit("perf_analyzer not found: run tools/install-perf-analyzer.sh")
    repository = ROOT / "examples" / "model_repository"
    cells = []
    for count in workers:
        with (
            tempfile.TemporaryDirectory() as logs,
            serve("ours", repository, Path(logs), (f"--workers={count}",)) as (http_port, _),
        ):
            deadline = time.monotonic() + 120
            while not _server_ready(http_port):
                if time.monotonic() > deadline:
                    raise SystemExit(f"--workers {count}: not ready after 120 s")
                time.sleep(0.1)
            server_pid = _listening_parent(http_port)
            for concurrency in concurrencies:
                throughput, latency, server_cores, client_cores = _measure(
                    perf_analyzer, http_port, server_pid, concurrency, window_ms
                )
                cell = Cell(
                    count,
                    concurrency,
                    throughput,
                    latency,
                    round(server_cores, 2),
                    round(client_cores, 2),
                )
                print(cell, file=sys.stderr)
                cells.append(cell)
    out.mkdir(parents=True, exist_ok=True)
    write_results(out, "workers", report(cells), cells)
    return cells


def _listening_parent(http_port: int) -> int:
    """The pid of the ``--workers`` parent serving ``http_port`` (the bench's child)."""
    for pid in procstats.process_tree(os.getpid()):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        flags = [arg.decode(errors="replace") for arg in cmdline]
        if f"--http-port={http_port}" in flags and not any(
            flag.startswith("--worker-index") for flag in flags
        ):
            return pid
    raise RuntimeError("the server's parent process was not found")


def report(cells: list[Cell]) -> str:
    cores = len(os.sched_getaffinity(0))
    base = {
        c.concurrency: c.throughput for c in cells if c.workers == min(x.workers for x in cells)
    }
    lines = [
        f"# --workers scaling: {MODEL} (Python model), HTTP binary 1x{ELEMENTS} FP32, "
        f"perf_analyzer, one run on {cores} cores",
        "",
        "| workers | concurrency | infer/s | vs fewest workers | latency (us) | server cores "
        "| perf_analyzer cores |",
        "|---|---|---|---|---|---|---|",
    ]
    for c in cells:
        ratio = c.throughput / base[c.concurrency] if base.get(c.concurrency) else float("nan")
        lines.append(
            f"| {c.workers} | {c.concurrency} | {c.throughput:.0f} | {ratio:.2f}x | "
            f"{c.latency_us} | {c.server_cores:.2f} | {c.client_cores:.2f} |"
        )
    lines += [
        "",
        "Server and perf_analyzer cores: CPU seconds per second of each during the "
        f"measurement, out of the {cores} cores; what perf_analyzer takes is not left for "
        "the workers.",
    ]
    return "\n".join(lines) + "\n"


def _counts(text: str) -> list[int]:
    return [int(part) for part in text.split(",") if part.strip()]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=_counts, default=[1, 2], help="comma list (1,2)")
    parser.add_argument("--concurrency", type=_counts, default=[8], help="comma list (8)")
    parser.add_argument("--window-ms", type=int, default=3000, help="perf_analyzer -p")
    parser.add_argument("--out", type=Path, default=ROOT / ".cache" / "bench-results" / "workers")
    args = parser.parse_args(argv)
    run(args.workers, args.concurrency, args.window_ms, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
