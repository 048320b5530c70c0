"""Triton's perf_analyzer: runs it once per window and reads its CSV report (``-f file.csv``).

One perf_analyzer run takes ``max_trials`` measurements of ``window_ms`` each (``-s 10000``:
any spread counts as stable, so it always stops after them) and reports their average; the runner
repeats the run and takes the median, so a figure is the median of runs, each of which averages
perf_analyzer's own windows. perf_analyzer runs in its default synchronous mode, one thread per
concurrent request, sending binary tensors over HTTP, gRPC, or system shared memory.

Its main thread runs at a raised priority (nice ``MAIN_THREAD_NICE``, that thread alone; Linux
nice values are per thread), the same for every server: see ``prioritize_main_thread``.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import os
import re
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from bench.clients.base import ClientError, Window, run_tool
from bench.payloads import INPUT_NAME, MODEL_NAME

# perf_analyzer's stability check (max/min of the last 3 windows within this %) would make it
# retry, or fail, on a busy machine: the bench takes the median over runs instead.
STABILITY_PCT = 10000

# Between two windows perf_analyzer's main thread copies every request record the worker threads
# collected and erases the window's ones from a vector one at a time, which costs (records) x
# (records that came in while it copied); the workers keep sending meanwhile. With a fast server
# on a small machine the ``concurrency`` workers are nearly always runnable, so at the default
# priority the main thread gets about 1/(concurrency + 1) of the client's CPU: its bookkeeping
# outlasts the window, the next window holds more records, and from c64 on a 2-core machine it
# never ends (it spins in InferenceProfiler::ValidLatencyMeasurement, its memory grows by GBs,
# the workers' responses lie unread in their sockets). Raised above its own workers, the main
# thread does the same work in milliseconds; the load the workers generate is unchanged.
MAIN_THREAD_NICE = -20
# The workers are started right after the model's metadata is read: wait that long at most.
THREADS_WAIT_S = 10.0
THREADS_STABLE_S = 0.1

# The CSV's latency components; perf_analyzer's average latency is their sum.
_COMPONENTS = (
    "Client Send",
    "Network+Server Send/Recv",
    "Server Queue",
    "Server Compute Input",
    "Server Compute Infer",
    "Server Compute Output",
    "Client Recv",
)


@dataclass(frozen=True)
class PerfAnalyzerRun:
    """One perf_analyzer invocation's target and load."""

    url: str  # host:port
    protocol: str  # "http" or "grpc"
    elements: int
    concurrency: int
    window_ms: int  # -p: one of perf_analyzer's measurement windows
    shared_memory: str = "none"  # "none" or "system"
    model: str = MODEL_NAME
    input_name: str = INPUT_NAME  # its one input, [elements] per request
    batch_size: int = 1  # -b: rows per request, for models with a batch dimension
    # --input-data: a JSON file of the tensors to send (None: perf_analyzer's random bytes)
    input_data: Path | None = None


class PerfAnalyzer:
    name = "perf_analyzer"

    def __init__(self, path: Path, *, max_trials: int = 3) -> None:
        self.path = path
        self.max_trials = max_trials
        self.version = _version(path)

    def settings(self, run: PerfAnalyzerRun) -> str:
        shm = f" --shared-memory {run.shared_memory}" if run.shared_memory != "none" else ""
        return (
            f"perf_analyzer {self.version} -i {run.protocol} sync{shm} "
            f"-p {run.window_ms} -r {self.max_trials} -s {STABILITY_PCT}"
        )

    def command(self, run: PerfAnalyzerRun, csv_path: Path) -> list[str]:
        return [
            str(self.path),
            *load_arguments(run, trials=self.max_trials),
            "-f",
            str(csv_path),
        ]

    def measure(self, run: PerfAnalyzerRun, workdir: Path, label: str) -> Window:
        """One perf_analyzer run (``max_trials`` windows, averaged by perf_analyzer)."""
        csv_path = workdir / f"{label}.csv"
        csv_path.unlink(missing_ok=True)
        run_perf_analyzer(
            self.command(run, csv_path),
            concurrency=run.concurrency,
            trials=self.max_trials,
            window_ms=run.window_ms,
            log_path=workdir / f"{label}.log",
        )
        if not csv_path.is_file():
            raise ClientError(f"perf_analyzer wrote no CSV report ({csv_path})")
        window = parse_csv(csv_path.read_text())
        return dataclasses.replace(window, duration_s=self.max_trials * run.window_ms / 1000)


def load_arguments(
    run: PerfAnalyzerRun, *, trials: int, stability_pct: int | str = STABILITY_PCT
) -> list[str]:
    """perf_analyzer's arguments for ``run``: the model, the endpoint, the request and the
    load (``trials`` windows, ``-s stability_pct``), without a report file."""
    arguments = [
        "-m",
        run.model,
        "-i",
        run.protocol,
        "-u",
        run.url,
        "--shape",
        f"{run.input_name}:{run.elements}",
        "--concurrency-range",
        f"{run.concurrency}:{run.concurrency}",
        "-p",
        str(run.window_ms),
        "-r",
        str(trials),
        "-s",
        str(stability_pct),
    ]
    if run.batch_size != 1:
        arguments += ["-b", str(run.batch_size)]
    if run.input_data is not None:
        arguments += ["--input-data", str(run.input_data)]
    if run.shared_memory != "none":
        # The output's shape is variable ([-1]): perf_analyzer needs its region size.
        arguments += [
            "--shared-memory",
            run.shared_memory,
            "--output-shared-memory-size",
            str(run.elements * 4),
        ]
    return arguments


def parse_csv(text: str) -> Window:
    """The single concurrency row of perf_analyzer's ``-f`` report."""
    rows = list(csv.DictReader(io.StringIO(text)))
    if len(rows) != 1:
        raise ClientError(f"expected one row in perf_analyzer's CSV report, got {len(rows)}")
    row = rows[0]
    try:
        mean = sum(float(row[column]) for column in _COMPONENTS if row.get(column))
        return Window(
            throughput=float(row["Inferences/Second"]),
            p50_us=float(row["p50 latency"]),
            p90_us=float(row["p90 latency"]),
            p95_us=float(row["p95 latency"]),
            p99_us=float(row["p99 latency"]),
            mean_us=mean or None,
            duration_s=0.0,
            requests=None,
        )
    except (KeyError, ValueError) as error:
        raise ClientError(
            f"unexpected perf_analyzer CSV report ({error}): {text[:300]!r}"
        ) from None


def run_perf_analyzer(
    command: list[str], *, concurrency: int, trials: int, window_ms: int, log_path: Path
) -> str:
    """``run_tool`` for a perf_analyzer command: bounded by its trials plus warm-up
    (generously, for slow large-tensor requests), its main thread raised above its workers
    (``prioritize_main_thread``). Its output."""
    return run_tool(
        command,
        timeout_s=60 + 4 * trials * window_ms / 1000,
        log_path=log_path,
        on_start=lambda process: prioritize_main_thread(process, concurrency),
    )


def prioritize_main_thread(process: subprocess.Popen[str], concurrency: int) -> str | None:
    """Once perf_analyzer's ``concurrency`` worker threads are running (its thread count at least
    ``concurrency + 1`` and steady), raise its main thread alone to ``MAIN_THREAD_NICE``; threads
    it starts afterwards would inherit that. Says what it did, for the window's log."""
    tasks = Path(f"/proc/{process.pid}/task")
    deadline = time.monotonic() + THREADS_WAIT_S
    count, steady_since = -1, time.monotonic()
    while process.poll() is None:
        try:
            now_count = len(os.listdir(tasks))
        except OSError:
            return "main thread at default priority: no /proc task list"
        now = time.monotonic()
        if now_count != count:
            count, steady_since = now_count, now
        elif count > concurrency and now - steady_since >= THREADS_STABLE_S:
            break
        if now > deadline:
            return f"main thread at default priority: {count} threads after {THREADS_WAIT_S:.0f} s"
        time.sleep(0.01)
    else:
        return None  # it has exited already
    try:
        os.setpriority(os.PRIO_PROCESS, process.pid, MAIN_THREAD_NICE)
    except OSError as error:  # raising a priority needs CAP_SYS_NICE (or RLIMIT_NICE)
        return f"main thread at default priority: {error}"
    return f"main thread at nice {MAIN_THREAD_NICE}, its {count - 1} other threads unchanged"


def _version(path: Path) -> str:
    try:
        result = subprocess.run(
            [str(path), "--version"], capture_output=True, text=True, timeout=30, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return "?"
    match = re.search(r"Version\s+(\S+)", result.stdout + result.stderr)
    return match.group(1) if match else "?"
