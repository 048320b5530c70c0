"""4 MiB FP32 tensors through system shared memory vs binary HTTP vs gRPC, ours and Triton's.

    python -m bench.shm_compare                       # both servers, every mode
    python -m bench.shm_compare --servers ours --out /tmp/shm

One run, one machine, one server at a time (so that they do not compete for the CPUs): each
server serves identity_fp32 (examples/model_repository) and perf_analyzer sends 1x1048576
FP32 tensors (4 MiB in, 4 MiB out) in four modes: HTTP with the binary tensor extension,
gRPC raw contents, and both with ``--shared-memory system`` (inputs and outputs in POSIX
shared memory; only tensor names cross the socket). The report gives throughput and latency
per cell and two kinds of ratio: shared memory vs the same protocol without it (per server),
and pytriton-core vs the real Triton (per mode). Ours runs with ``--allow-client-shm=true``;
the real Triton here is 2.51, which allows client shared memory by default.

Self-contained (standard library + perf_analyzer) so that the bench/ package can fold it in.
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from bench.clients.perf_analyzer import PerfAnalyzerRun, load_arguments

ROOT = Path(__file__).resolve().parents[1]
MODEL = "identity_fp32"
ELEMENTS = 1 << 20  # 4 MiB of FP32
LOOPBACK = "127.0.0.1"
REAL_TRITON_START = ROOT.parent / "shared" / "tools" / "real-triton" / "start.sh"
MODES = {  # name -> (protocol, shared memory)
    "http-binary": ("http", "none"),
    "grpc": ("grpc", "none"),
    "http-shm": ("http", "system"),
    "grpc-shm": ("grpc", "system"),
}
SUMMARY = re.compile(r"Concurrency: (\d+), throughput: ([0-9.]+) infer/sec, latency (\d+) usec")


@dataclass(frozen=True)
class Cell:
    server: str
    mode: str
    concurrency: int
    throughput: float  # infer/s
    latency_us: int  # client average
    mib_per_s: float  # tensor bytes moved each way


def _real_triton_home() -> Path:
    return Path(os.environ.get("REAL_TRITON_HOME", "~/.cache/real-triton")).expanduser()


def find_perf_analyzer() -> Path | None:
    for candidate in (
        os.environ.get("PERF_ANALYZER"),
        ROOT / ".cache" / "perf-analyzer" / "bin" / "perf_analyzer",
        _real_triton_home() / "bin" / "perf_analyzer",
    ):
        if candidate and Path(candidate).is_file() and os.access(candidate, os.X_OK):
            return Path(candidate)
    return None


def _free_ports(count: int) -> list[int]:
    with contextlib.ExitStack() as stack:
        sockets = [stack.enter_context(socket.socket()) for _ in range(count)]
        for sock in sockets:
            sock.bind((LOOPBACK, 0))
        return [sock.getsockname()[1] for sock in sockets]


def _ready(http_port: int, model: str) -> bool:
    connection = http.client.HTTPConnection(LOOPBACK, http_port, timeout=2)
    try:
        connection.request("GET", f"/v2/models/{model}/ready")
        return connection.getresponse().status == 200
    except OSError:
        return False
    finally:
        connection.close()


@contextlib.contextmanager
def serve(
    server: str,
    repository: Path,
    log_dir: Path,
    extra_flags: tuple[str, ...] = (),
    ready_model: str = MODEL,
) -> Iterator[tuple[int, int]]:
    """Run ``server`` ("ours" or "triton") until the block ends; yields (http, grpc) ports.
    The repository must hold ``ready_model`` (readiness is asked of it)."""
    http_port, grpc_port, metrics_port = _free_ports(3)
    if server == "ours":
        command = [
            sys.executable,
            "-m",
            "pytriton_core",
            f"--model-repository={repository}",
            f"--http-address={LOOPBACK}",
            f"--grpc-address={LOOPBACK}",
            f"--http-port={http_port}",
            f"--grpc-port={grpc_port}",
            "--allow-metrics=false",
            "--allow-client-shm=true",
            *extra_flags,
        ]
    else:
        command = [
            "bash",
            str(REAL_TRITON_START),
            f"--model-repository={repository}",
            f"--http-port={http_port}",
            f"--grpc-port={grpc_port}",
            f"--metrics-port={metrics_port}",
            "--allow-metrics=false",
            "--exit-timeout-secs=3",
        ]
    log_path = log_dir / f"{server}.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            command, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT, start_new_session=True
        )
    try:
        deadline = time.monotonic() + 120
        while not _ready(http_port, ready_model):
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{server} did not start; see {log_path}")
            time.sleep(0.2)
        yield http_port, grpc_port
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()


def measure(
    perf_analyzer: Path, url: str, mode: str, concurrency: int, window_ms: int, log: Path
) -> tuple[float, int]:
    """(throughput, latency); windows that never agree within 30% get one more try without
    a stability bound (large tensors on a shared 2-core machine swing a lot: noise, not an
    error; perf_analyzer then averages its last three windows all the same)."""
    for stability in ("30", "10000"):
        result = _perf_analyzer(perf_analyzer, url, mode, concurrency, window_ms, stability)
        log.write_text(" ".join(result.args) + "\n\n" + result.stdout + result.stderr)
        found = SUMMARY.findall(result.stdout)
        if found:
            _, throughput, latency = found[-1]
            return float(throughput), int(latency)
    raise RuntimeError(f"perf_analyzer failed ({result.returncode}); see {log}")


def _perf_analyzer(
    perf_analyzer: Path, url: str, mode: str, concurrency: int, window_ms: int, stability: str
) -> subprocess.CompletedProcess[str]:
    protocol, shared_memory = MODES[mode]
    load = PerfAnalyzerRun(
        url, protocol, ELEMENTS, concurrency, window_ms, shared_memory=shared_memory, model=MODEL
    )
    command = [str(perf_analyzer), *load_arguments(load, trials=6, stability_pct=stability)]
    return subprocess.run(command, capture_output=True, text=True, timeout=600, check=False)


def run(servers: list[str], concurrencies: list[int], window_ms: int, out: Path) -> list[Cell]:
    perf_analyzer = find_perf_analyzer()
    if perf_analyzer is None:
        raise SystemExit("perf_analyzer not found: run tools/install-perf-analyzer.sh")
    out.mkdir(parents=True, exist_ok=True)
    repository = Path(tempfile.mkdtemp(prefix="shm-compare-"))
    shutil.copytree(
        ROOT / "examples" / "model_repository" / MODEL,
        repository / MODEL,
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    cells: list[Cell] = []
    try:
        for server in servers:
            with serve(server, repository, out) as (http_port, grpc_port):
                for mode, (protocol, _) in MODES.items():
                    port = http_port if protocol == "http" else grpc_port
                    for concurrency in concurrencies:
                        log = out / f"{server}-{mode}-c{concurrency}.log"
                        throughput, latency = measure(
                            perf_analyzer, f"{LOOPBACK}:{port}", mode, concurrency, window_ms, log
                        )
                        cell = Cell(
                            server,
                            mode,
                            concurrency,
                            throughput,
                            latency,
                            throughput * ELEMENTS * 4 / (1 << 20),
                        )
                        print(
                            f"{server:6} {mode:11} c={concurrency}: {throughput:8.1f} infer/s "
                            f"{latency:7d} us  {cell.mib_per_s:8.0f} MiB/s",
                            flush=True,
                        )
                        cells.append(cell)
    finally:
        shutil.rmtree(repository, ignore_errors=True)
    return cells


def report(cells: list[Cell]) -> str:
    by = {(c.server, c.mode, c.concurrency): c for c in cells}
    servers = sorted({c.server for c in cells}, key=["ours", "triton"].index)
    concurrencies = sorted({c.concurrency for c in cells})
    lines = [
        f"# 4 MiB FP32 identity ({MODEL}, 1x{ELEMENTS}), perf_analyzer, one run",
        "",
        "| server | mode | concurrency | infer/s | latency (us) | MiB/s each way |",
        "|---|---|---|---|---|---|",
    ]
    for c in cells:
        lines.append(
            f"| {c.server} | {c.mode} | {c.concurrency} | {c.throughput:.1f} | "
            f"{c.latency_us} | {c.mib_per_s:.0f} |"
        )
    lines += ["", "## Shared memory vs the same protocol without it (throughput ratio)", ""]
    lines += [
        "| server | concurrency | http-shm / http-binary | grpc-shm / grpc |",
        "|---|---|---|---|",
    ]
    for server in servers:
        for n in concurrencies:
            ratios = []
            for shm, plain in (("http-shm", "http-binary"), ("grpc-shm", "grpc")):
                a, b = by.get((server, shm, n)), by.get((server, plain, n))
                ratios.append(f"{a.throughput / b.throughput:.2f}" if a and b else "-")
            lines.append(f"| {server} | {n} | {ratios[0]} | {ratios[1]} |")
    if len(servers) == 2:
        lines += ["", "## pytriton-core / real Triton (throughput ratio)", ""]
        lines += ["| mode | " + " | ".join(f"c={n}" for n in concurrencies) + " |"]
        lines += ["|---|" + "---|" * len(concurrencies)]
        for mode in MODES:
            row = []
            for n in concurrencies:
                ours, theirs = by.get(("ours", mode, n)), by.get(("triton", mode, n))
                row.append(f"{ours.throughput / theirs.throughput:.2f}" if ours and theirs else "-")
            lines.append(f"| {mode} | " + " | ".join(row) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.shm_compare", description=__doc__)
    parser.add_argument("--servers", default="ours,triton", help="ours,triton (comma list)")
    parser.add_argument("--concurrency", default="1,4", help="comma list (default 1,4)")
    parser.add_argument("--window-ms", type=int, default=3000, help="perf_analyzer -p")
    parser.add_argument("--out", type=Path, default=ROOT / ".cache" / "bench-results" / "shm")
    args = parser.parse_args(argv)
    servers = chosen_servers(args.servers)
    cells = run(servers, [int(n) for n in args.concurrency.split(",")], args.window_ms, args.out)
    write_results(args.out, "shm_compare", report(cells), cells)
    return 0


def chosen_servers(listed: str) -> list[str]:
    """The servers of a ``--servers`` list, without the real Triton when its tool is missing."""
    servers = [s for s in listed.split(",") if s]
    if "triton" in servers and not REAL_TRITON_START.is_file():
        print(f"real Triton tool missing ({REAL_TRITON_START}): ours only", file=sys.stderr)
        servers.remove("triton")
    return servers


def write_results(out: Path, stem: str, text: str, cells: Sequence[Any]) -> None:
    """The report as ``<stem>.md``, the cells (dataclasses) as ``<stem>.json``; print it."""
    (out / f"{stem}.md").write_text(text)
    (out / f"{stem}.json").write_text(json.dumps([asdict(c) for c in cells], indent=2))
    print(text)


if __name__ == "__main__":
    raise SystemExit(main())
