"""Process mode alone: context switches and CPU per request in the server and its worker.

    python -m bench.process_mode_switches [--windows 3] [--interval-ms 2000]

Serves only the identity model of ``bench.python_process_mode`` in process mode (one
instance) on this server, loads it with perf_analyzer over HTTP at concurrency 4 and, per
window, prints throughput and, from ``/proc`` (every thread's voluntary and involuntary
context switches, user + system CPU time), the server's and the worker's figures per
request the server's statistics counted. Run it with each build's interpreter in turn to
compare builds: the switches show how often a side slept between requests.

``--strace`` adds one window under ``strace -c -f`` attached to the server and its worker
(every thread): the system calls per request, by name, of both processes together (strace
slows them down, so that window's throughput is not comparable; the counts are).
"""

from __future__ import annotations

import argparse
import re
import signal
import subprocess
import tempfile
import time
from pathlib import Path

from bench import procstats
from bench.python_process_mode import CONFIG, IDENTITY, throughput
from bench.servers import OURS, RunningServer, run_server
from bench.toolbox import discover

MODEL = "identity_proc"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--windows", type=int, default=3)
    parser.add_argument("--interval-ms", type=int, default=2000)
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
    with run_server(OURS, work / "repository", tools, work, "switches", (MODEL,)) as server:
        throughput(perf, server.http_url, MODEL, 4, 1000)  # warm-up
        for window in range(args.windows):
            server_pid, *workers = procstats.process_tree(server.process.pid)
            pids = [server_pid, *workers]
            counted = server.counts(MODEL)
            before = [(procstats.context_switches(p), procstats.cpu_seconds(p)) for p in pids]
            value = throughput(perf, server.http_url, MODEL, 4, args.interval_ms)
            after = [(procstats.context_switches(p), procstats.cpu_seconds(p)) for p in pids]
            now = server.counts(MODEL)
            assert counted is not None and now is not None
            requests = now.requests - counted.requests
            shown = [
                f"{(a[0] - b[0]) / requests:.2f} switches {(a[1] - b[1]) * 1e6 / requests:.0f} µs"
                for a, b in zip(after, before, strict=True)
            ]
            print(
                f"window {window + 1}: {value:.0f} infer/s, {requests} requests; "
                f"server {shown[0]}; worker {', '.join(shown[1:])}",
                flush=True,
            )
        if args.strace:
            _strace_window(server, perf, args.interval_ms)


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
        value = throughput(perf, server.http_url, MODEL, 4, interval_ms)
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
