"""A two-model pipeline served as an ensemble and as BLS, pytriton-core and the real Triton.

    python -m bench.pipelines                      # both servers, concurrency 1 and 8
    python -m bench.pipelines --servers ours --concurrency 1,4,16 --out /tmp/pipelines

The pipeline is two Python-backend models, ``pre`` (``Y = 2 X``) and ``post``
(``Y = X + 1``), FP32 ``[16]``; ``pipe_ensemble`` chains them as an ensemble,
``pipe_bls`` as one Python model that calls them in turn with ``InferenceRequest.exec()``.
Both servers serve the same repository at the same time (idle while the other is measured),
and perf_analyzer (HTTP, binary tensors) measures each (server, model, concurrency) cell in
rounds: every cell once per round, so background load hits them alike; a figure is the
median of the rounds. The report gives the four figures per concurrency and the ratios:
BLS / ensemble per server, and ours / Triton per model.

Self-contained (standard library + perf_analyzer), like bench.shm_compare, whose server
launcher it uses.
"""

from __future__ import annotations

import argparse
import http.client
import json
import re
import shutil
import statistics
import subprocess
import tempfile
from contextlib import ExitStack
from dataclasses import asdict, dataclass
from pathlib import Path

from bench.clients.perf_analyzer import PerfAnalyzerRun, load_arguments
from bench.procstats import PROC, sample_tree
from bench.shm_compare import (
    LOOPBACK,
    ROOT,
    chosen_servers,
    find_perf_analyzer,
    serve,
)

ELEMENTS = 16
MODELS = ("pipe_ensemble", "pipe_bls")
SUMMARY = re.compile(r"Concurrency: (\d+), throughput: ([0-9.]+) infer/sec, latency (\d+) usec")

STEP = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            y = (x {op}).astype(np.float32)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", y)]))
        return responses
"""

BLS = """
import triton_python_backend_utils as pb_utils


def call(model, tensor):
    response = pb_utils.InferenceRequest(
        model_name=model, requested_output_names=["OUTPUT0"], inputs=[tensor]
    ).exec()
    if response.has_error():
        raise pb_utils.TritonModelException(response.error().message())
    output = pb_utils.get_output_tensor_by_name(response, "OUTPUT0")
    return pb_utils.Tensor("INPUT0", output.as_numpy())


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "INPUT0")
            y = call("post", call("pre", x))
            responses.append(
                pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", y.as_numpy())])
            )
        return responses
"""

IO = f"""
input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ {ELEMENTS} ] }} ]
output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ {ELEMENTS} ] }} ]
"""

ENSEMBLE = f"""
name: "pipe_ensemble"
platform: "ensemble"
{IO}
ensemble_scheduling {{
  step [
    {{ model_name: "pre" model_version: -1
      input_map {{ key: "INPUT0" value: "INPUT0" }} output_map {{ key: "OUTPUT0" value: "mid" }} }},
    {{ model_name: "post" model_version: -1
      input_map {{ key: "INPUT0" value: "mid" }} output_map {{ key: "OUTPUT0" value: "OUTPUT0" }} }}
  ]
}}
"""


def write_repository(root: Path) -> Path:
    """pre, post, pipe_ensemble and pipe_bls, one CPU instance each."""
    sources = {"pre": STEP.format(op="* 2"), "post": STEP.format(op="+ 1"), "pipe_bls": BLS}
    for name, source in sources.items():
        (root / name / "1").mkdir(parents=True)
        (root / name / "1" / "model.py").write_text(source)
        (root / name / "config.pbtxt").write_text(
            f'name: "{name}"\nbackend: "python"\n{IO}\n'
            "instance_group [ { count: 1 kind: KIND_CPU } ]\n"
        )
    (root / "pipe_ensemble" / "1").mkdir(parents=True)
    (root / "pipe_ensemble" / "config.pbtxt").write_text(ENSEMBLE)
    return root


@dataclass(frozen=True)
class Cell:
    server: str
    model: str
    concurrency: int
    throughput: float  # infer/s, median of the rounds
    latency_us: int  # client average, median of the rounds
    cpu_us: float  # server CPU per request (its whole process tree), median of the rounds
    rounds: list[float]  # each round's infer/s


def _server_pid(http_port: int) -> int:
    """The server process listening on ``http_port`` (found by its command line)."""
    flag = f"--http-port={http_port}".encode()
    for entry in PROC.iterdir():
        if entry.name.isdigit():
            try:
                arguments = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if flag in arguments and b"bash" not in arguments[0]:
                return int(entry.name)
    raise RuntimeError(f"no server process with {flag.decode()}")


def _successes(http_port: int, model: str) -> int:
    """The model's successful requests so far (the statistics extension)."""
    connection = http.client.HTTPConnection(LOOPBACK, http_port, timeout=30)
    try:
        connection.request("GET", f"/v2/models/{model}/stats")
        document = json.loads(connection.getresponse().read())
    finally:
        connection.close()
    return int(document["model_stats"][0]["inference_stats"]["success"]["count"])


def _measure(
    perf_analyzer: Path, port: int, model: str, concurrency: int, window_ms: int, log: Path
) -> tuple[float, int]:
    load = PerfAnalyzerRun(
        f"{LOOPBACK}:{port}", "http", ELEMENTS, concurrency, window_ms, model=model
    )
    # No stability retries: rounds, interleaved, take the noise instead.
    command = [str(perf_analyzer), *load_arguments(load, trials=6)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=600, check=False)
    with log.open("a") as out:
        out.write(" ".join(command) + "\n\n" + result.stdout + result.stderr + "\n")
    found = SUMMARY.findall(result.stdout)
    if not found:
        raise RuntimeError(f"perf_analyzer failed ({result.returncode}); see {log}")
    _, throughput, latency = found[-1]
    return float(throughput), int(latency)


def run(
    servers: list[str], concurrencies: list[int], rounds: int, window_ms: int, out: Path
) -> list[Cell]:
    perf_analyzer = find_perf_analyzer()
    if perf_analyzer is None:
        raise SystemExit("perf_analyzer not found: run tools/install-perf-analyzer.sh")
    out.mkdir(parents=True, exist_ok=True)
    repository = write_repository(Path(tempfile.mkdtemp(prefix="pipelines-")))
    measured: dict[tuple[str, str, int], list[tuple[float, int, float]]] = {}
    try:
        with ExitStack() as stack:
            ports = {
                server: stack.enter_context(serve(server, repository, out, ready_model="pipe_bls"))[
                    0
                ]
                for server in servers
            }
            pids = {server: _server_pid(port) for server, port in ports.items()}
            for number in range(rounds):
                for concurrency in concurrencies:
                    for server in servers:
                        for model in MODELS:
                            log = out / f"{server}-{model}-c{concurrency}.log"
                            cpu_before = sample_tree(pids[server]).cpu_s
                            done_before = _successes(ports[server], model)
                            throughput, latency = _measure(
                                perf_analyzer, ports[server], model, concurrency, window_ms, log
                            )
                            served = _successes(ports[server], model) - done_before
                            cpu = sample_tree(pids[server]).cpu_s - cpu_before
                            cpu_us = cpu / max(served, 1) * 1e6
                            key = (server, model, concurrency)
                            measured.setdefault(key, []).append((throughput, latency, cpu_us))
                            print(
                                f"round {number + 1}: {server:6} {model:13} c={concurrency}: "
                                f"{throughput:8.1f} infer/s {latency:7d} us {cpu_us:6.0f} us CPU",
                                flush=True,
                            )
    finally:
        shutil.rmtree(repository, ignore_errors=True)
    return [
        Cell(
            server,
            model,
            concurrency,
            statistics.median(t for t, _, _ in values),
            int(statistics.median(latency for _, latency, _ in values)),
            statistics.median(cpu for _, _, cpu in values),
            [t for t, _, _ in values],
        )
        for (server, model, concurrency), values in measured.items()
    ]


def report(cells: list[Cell], rounds: int, window_ms: int) -> str:
    by = {(c.server, c.model, c.concurrency): c for c in cells}
    servers = [s for s in ("ours", "triton") if any(c.server == s for c in cells)]
    names = {"ours": "pytriton-core", "triton": "Triton 2.51"}
    lines = [
        f"# Two Python models as an ensemble and as BLS (FP32 [{ELEMENTS}]), one run",
        "",
        f"perf_analyzer over HTTP (binary tensors), {rounds} interleaved rounds of "
        f"3 x {window_ms} ms windows per cell; figures are the medians of the rounds.",
        "",
        "| concurrency | server | ensemble infer/s | BLS infer/s | ensemble latency (us) "
        "| BLS latency (us) | ensemble CPU (us/req) | BLS CPU (us/req) | BLS / ensemble |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for concurrency in sorted({c.concurrency for c in cells}):
        for server in servers:
            ens = by.get((server, "pipe_ensemble", concurrency))
            bls = by.get((server, "pipe_bls", concurrency))
            if ens is None or bls is None:
                continue
            lines.append(
                f"| {concurrency} | {names[server]} | {ens.throughput:,.0f} | "
                f"{bls.throughput:,.0f} | {ens.latency_us} | {bls.latency_us} | "
                f"{ens.cpu_us:.0f} | {bls.cpu_us:.0f} | {bls.throughput / ens.throughput:.2f} |"
            )
    if len(servers) == 2:
        lines += [
            "",
            "| concurrency | ours / Triton infer/s, ensemble | ours / Triton infer/s, BLS "
            "| Triton / ours CPU per request, ensemble | Triton / ours CPU per request, BLS |",
            "|---|---|---|---|---|",
        ]
        for concurrency in sorted({c.concurrency for c in cells}):
            speed, cost = [], []
            for model in MODELS:
                ours = by.get(("ours", model, concurrency))
                theirs = by.get(("triton", model, concurrency))
                if ours is None or theirs is None:
                    speed.append("-")
                    cost.append("-")
                    continue
                speed.append(f"{ours.throughput / theirs.throughput:.2f}")
                cost.append(f"{theirs.cpu_us / ours.cpu_us:.2f}")
            lines.append(f"| {concurrency} | {speed[0]} | {speed[1]} | {cost[0]} | {cost[1]} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.pipelines", description=__doc__)
    parser.add_argument("--servers", default="ours,triton", help="ours,triton (comma list)")
    parser.add_argument("--concurrency", default="1,8", help="comma list (default 1,8)")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds per cell")
    parser.add_argument("--window-ms", type=int, default=2000, help="perf_analyzer -p")
    parser.add_argument("--out", type=Path, default=ROOT / ".cache" / "bench-results" / "pipelines")
    args = parser.parse_args(argv)
    servers = chosen_servers(args.servers)
    concurrencies = [int(n) for n in args.concurrency.split(",")]
    cells = run(servers, concurrencies, args.rounds, args.window_ms, args.out)
    text = report(cells, args.rounds, args.window_ms)
    (args.out / "pipelines.md").write_text(text)
    (args.out / "pipelines.json").write_text(json.dumps([asdict(c) for c in cells], indent=2))
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
