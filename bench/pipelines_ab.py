"""Two builds of pytriton-core on bench.pipelines' pipeline, per request: server CPU and
context switches (``perf stat`` on the server process), one HTTP client.

    python -m bench.pipelines_ab --before /tmp/base/src [--rounds 4] [--requests 2000]

``--before`` is a source tree with its compiled modules built in place (``python setup.py
build_ext --inplace`` in a checkout of the older commit); the "after" build is the one
installed in this interpreter. Both servers serve the same repository at once; each round
measures every (model, build) pair in turn, the two builds' order alternating, so the
other load on the machine hits them alike; a figure is the median of the rounds. Context
switches count thread hand-offs, which wall-clock figures on a shared machine blur.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import numpy as np
import tritonclient.http as httpclient

from bench.pipelines import ELEMENTS, MODELS, _server_pid, write_repository
from bench.shm_compare import LOOPBACK, serve

WARM_UP = 300  # requests before each measurement (the inline rule needs 8 short ones)


@contextmanager
def _python_path(path: str | None) -> Iterator[None]:
    """The server started in the block imports pytriton_core from ``path`` (None: this
    interpreter's)."""
    saved = os.environ.get("PYTHONPATH")
    if path is None:
        os.environ.pop("PYTHONPATH", None)
    else:
        os.environ["PYTHONPATH"] = path
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = saved


def _perf_stat(pid: int, out: Path) -> subprocess.Popen[bytes]:
    events = "context-switches,task-clock"
    return subprocess.Popen(["perf", "stat", "-x,", "-e", events, "-p", str(pid), "-o", str(out)])


def _read_perf(out: Path) -> dict[str, float]:
    values = {}
    for line in out.read_text().splitlines():
        fields = line.split(",")
        if len(fields) > 3 and fields[0].replace(".", "").isdigit():
            values[fields[2]] = float(fields[0])
    return values


def run(
    before: str, rounds: int, requests: int
) -> dict[tuple[str, str], list[tuple[float, float]]]:
    """(model, build) -> per round (server CPU µs, context switches) per request."""
    work = Path(tempfile.mkdtemp(prefix="pipelines-ab-"))
    repository = write_repository(work / "models")
    measured: dict[tuple[str, str], list[tuple[float, float]]] = {}
    with ExitStack() as stack:
        clients, pids = {}, {}
        for build, path in (("after", None), ("before", before)):
            (work / build).mkdir()
            with _python_path(path):
                port = stack.enter_context(
                    serve("ours", repository, work / build, ready_model="pipe_bls")
                )[0]
            clients[build] = httpclient.InferenceServerClient(f"{LOOPBACK}:{port}")
            pids[build] = _server_pid(port)
        x = httpclient.InferInput("INPUT0", [ELEMENTS], "FP32")
        x.set_data_from_numpy(np.zeros(ELEMENTS, np.float32))
        for number in range(rounds):
            for model in MODELS:
                builds = ("before", "after") if number % 2 == 0 else ("after", "before")
                for build in builds:
                    client = clients[build]
                    for _ in range(WARM_UP):
                        client.infer(model, [x])
                    out = work / "perf.txt"
                    perf = _perf_stat(pids[build], out)
                    time.sleep(0.3)  # perf attached
                    for _ in range(requests):
                        client.infer(model, [x])
                    perf.send_signal(signal.SIGINT)
                    perf.wait()
                    values = _read_perf(out)
                    cpu_us = values["task-clock"] * 1000 / requests  # task-clock is in ms
                    switches = values["context-switches"] / requests
                    measured.setdefault((model, build), []).append((cpu_us, switches))
                    print(
                        f"round {number + 1}: {model:13} {build:6}: server CPU {cpu_us:6.1f} "
                        f"us/request, {switches:5.2f} context switches/request",
                        flush=True,
                    )
    return measured


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.pipelines_ab", description=__doc__)
    parser.add_argument("--before", required=True, help="PYTHONPATH of the older build")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--requests", type=int, default=2000, help="per measurement")
    args = parser.parse_args(argv)
    measured = run(args.before, args.rounds, args.requests)
    print("\n| model | build | server CPU µs/request | context switches/request |")
    print("|---|---|---|---|")
    for (model, build), values in sorted(measured.items()):
        cpu = statistics.median(c for c, _ in values)
        switches = statistics.median(s for _, s in values)
        print(f"| {model} | {build} | {cpu:.0f} | {switches:.2f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
