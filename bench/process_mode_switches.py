"""Process mode alone: context switches and CPU per request in the server and its worker.

    python -m bench.process_mode_switches [--windows 3] [--interval-ms 2000]

Serves only the identity model of ``bench.python_process_mode`` in process mode (one
instance) on this server, loads it with perf_analyzer over HTTP at concurrency 4 and, per
window, prints throughput and, from ``/proc`` (every thread's voluntary and involuntary
context switches, user + system CPU time), the server's and the worker's figures per
request the server's statistics counted. Run it with each build's interpreter in turn to
compare builds: the switches show how often a side slept between requests.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from bench import procstats
from bench.python_process_mode import CONFIG, IDENTITY, throughput
from bench.servers import OURS, run_server
from bench.toolbox import discover

MODEL = "identity_proc"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--windows", type=int, default=3)
    parser.add_argument("--interval-ms", type=int, default=2000)
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


if __name__ == "__main__":
    main()
