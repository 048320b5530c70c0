"""Process mode alone: context switches and CPU per request in the server and its worker.

    python -m bench.process_mode_switches [--windows 3] [--interval-ms 2000]
        [--before DIR] [--strace]

Serves only the identity model of ``bench.python_process_mode`` in process mode (one
instance) on this server, loads it with perf_analyzer over HTTP at concurrency 4 and, per
window, prints throughput and, from ``/proc`` (every thread's voluntary and involuntary
context switches, user + system CPU time), the server's and the worker's figures per
request the server's statistics counted: the switches show how often a side slept between
requests.

``--before DIR`` compares two builds: a second server imports pytriton_core from ``DIR``
(a copy of an older build's installed package folder's parent, put first on its
``PYTHONPATH``), both serve at once, and the windows alternate between them (the order
alternating each round), so load that comes and goes on a shared machine hits both alike;
a summary gives each build's medians.

``--strace`` adds one window under ``strace -c -f`` attached to the server and its worker
(every thread): the system calls per request, by name, of both processes together (strace
slows them down, so that window's throughput is not comparable; the counts are).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import signal
import statistics
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from bench import procstats
from bench.python_process_mode import CONFIG, IDENTITY, throughput
from bench.servers import OURS, RunningServer, run_server
from bench.toolbox import Toolbox, discover

MODEL = "identity_proc"
# perf_analyzer's output of the latest window (``throughput`` keeps it for a failure's report).
_PA_LOG = Path(tempfile.gettempdir()) / "process-mode-switches-perf_analyzer.log"

# One window of one build: infer/s, then per request: server switches, server µs, worker
# switches, worker µs.
Window = tuple[float, float, float, float, float]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--windows", type=int, default=3)
    parser.add_argument("--interval-ms", type=int, default=2000)
    parser.add_argument("--before", help="an older build's package folder, served beside")
    parser.add_argument("--strace", action="store_true", help="one more window under strace -c")
    args = parser.parse_args()
    tools = discover((OURS,))
    perf = tools.perf_analyzer.path
    if perf is None:
        raise SystemExit(tools.perf_analyzer.reason)
    work = Path(tempfile.mkdtemp(prefix="process-mode-switches-"))
    model_dir = work / "repository" / MODEL
    (model_dir / "1").mkdir(parents=True)
    (model_dir / "config.pbtxt").write_text(CONFIG.format(name=MODEL, count=1, mode="process"))
    (model_dir / "1" / "model.py").write_text(IDENTITY)
    builds = {"this": None} if args.before is None else {"before": args.before, "this": None}
    with contextlib.ExitStack() as stack:
        servers = {
            name: stack.enter_context(_serve(tools, work, name, python_path))
            for name, python_path in builds.items()
        }
        for server in servers.values():
            throughput(perf, server.http_url, MODEL, 4, 1000, _PA_LOG)  # warm-up
        windows: dict[str, list[Window]] = {name: [] for name in servers}
        for window in range(args.windows):
            order = list(servers) if window % 2 == 0 else list(reversed(servers))
            for name in order:
                figures = _window(servers[name], perf, args.interval_ms)
                windows[name].append(figures)
                print(
                    f"window {window + 1}, {name}: {figures[0]:.0f} infer/s; server "
                    f"{figures[1]:.2f} switches {figures[2]:.0f} µs; worker {figures[3]:.2f} "
                    f"switches {figures[4]:.0f} µs (per request)",
                    flush=True,
                )
        if len(servers) > 1:
            for name, rows in windows.items():
                medians = [statistics.median(column) for column in zip(*rows, strict=True)]
                print(
                    f"median, {name}: {medians[0]:.0f} infer/s; server {medians[1]:.2f} "
                    f"switches {medians[2]:.0f} µs; worker {medians[3]:.2f} switches "
                    f"{medians[4]:.0f} µs"
                )
        if args.strace:
            for name, server in servers.items():
                print(f"{name}: ", end="")
                _strace_window(server, perf, args.interval_ms)


@contextlib.contextmanager
def _serve(
    tools: Toolbox, work: Path, name: str, python_path: str | None
) -> Iterator[RunningServer]:
    """A server of the build whose package ``python_path`` holds (None: this one's)."""
    saved = os.environ.get("PYTHONPATH")
    if python_path is not None:
        os.environ["PYTHONPATH"] = python_path
    try:
        with run_server(OURS, work / "repository", tools, work, name, (MODEL,)) as server:
            if saved is None:
                os.environ.pop("PYTHONPATH", None)
            else:
                os.environ["PYTHONPATH"] = saved
            yield server
    finally:
        if saved is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = saved


def _window(server: RunningServer, perf: Path, interval_ms: int) -> Window:
    """One perf_analyzer window on ``server``, with its figures per request."""
    server_pid, *workers = procstats.process_tree(server.process.pid)
    pids = [server_pid, *workers]
    counted = server.counts(MODEL)
    before = [(procstats.context_switches(p), procstats.cpu_seconds(p)) for p in pids]
    value = throughput(perf, server.http_url, MODEL, 4, interval_ms, _PA_LOG)
    after = [(procstats.context_switches(p), procstats.cpu_seconds(p)) for p in pids]
    now = server.counts(MODEL)
    assert counted is not None and now is not None
    requests = now.requests - counted.requests
    switches = [(a[0] - b[0]) / requests for a, b in zip(after, before, strict=True)]
    micros = [(a[1] - b[1]) * 1e6 / requests for a, b in zip(after, before, strict=True)]
    return (value, switches[0], micros[0], sum(switches[1:]), sum(micros[1:]))


def _strace_window(server: RunningServer, perf: Path, interval_ms: int) -> None:
    """One window with ``strace -c -f`` attached to the server and its workers: system
    calls per request the server's statistics counted."""
    pids = procstats.process_tree(server.process.pid)
    with tempfile.NamedTemporaryFile(prefix="strace-", suffix=".txt") as out:
        command = ["strace", "-c", "-f", "-o", out.name]
        for pid in pids:
            command += ["-p", str(pid)]
        tracer = subprocess.Popen(command, stderr=subprocess.DEVNULL)
        time.sleep(1.0)  # attached to every thread before the window starts
        counted = server.counts(MODEL)
        value = throughput(perf, server.http_url, MODEL, 4, interval_ms, _PA_LOG)
        now = server.counts(MODEL)
        tracer.send_signal(signal.SIGINT)
        tracer.wait(60)
        table = Path(out.name).read_text()
    assert counted is not None and now is not None
    requests = now.requests - counted.requests
    calls = {}
    for line in table.splitlines():
        # "% time  seconds  usecs/call  calls  [errors]  syscall": the calls and the name.
        fields = line.split()
        if (
            len(fields) >= 5
            and fields[-1] != "total"
            and re.fullmatch(r"[0-9.]+", fields[0])
            and fields[3].isdigit()
        ):
            calls[fields[-1]] = int(fields[3])
    total = sum(calls.values())
    shown = ", ".join(
        f"{name} {count / requests:.2f}"
        for name, count in sorted(calls.items(), key=lambda item: -item[1])
        if count / requests >= 0.01
    )
    print(
        f"strace window ({value:.0f} infer/s under strace, {requests} requests): "
        f"{total / requests:.2f} system calls per request: {shown}",
        flush=True,
    )


if __name__ == "__main__":
    main()
