"""The response cache's effect: a cacheable model at concurrency 8, 90% repeated requests,
cache on vs off, ours and the real Triton.

    python -m bench.cache_compare                    # both servers, cache on and off
    python -m bench.cache_compare --servers ours --out /tmp/cache

One run, one machine, one server at a time. The model (``cached``, Python) costs 2 ms per
execution (a sleep: what a hit saves) and has ``response_cache { enable: true }``; the
servers run with ``--cache-config local,size=65536`` (on) or without it (off). perf_analyzer
cycles through an input file of 20000 requests: 90% of them pick one of 8 hot inputs, 10%
are inputs seen once per pass. The cache holds a few hundred entries, so the hot ones stay
and each once-seen input has been evicted by the time the file comes round again: a steady
90% hit ratio, which the report checks from the statistics (hits / lookups). The real Triton
needs its local cache library (docs/response-cache.md says how to build it); without it its
cache-on row is skipped with the reason.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import subprocess
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from bench.servers import free_ports, http_get
from bench.toolbox import REAL_TRITON_TOOL, REPO_ROOT, find_perf_analyzer, real_triton_home

MODEL = "cached"
CACHE_SIZE = 65536
HOT_INPUTS = 8
REQUESTS_PER_PASS = 20000
REPEATED_FRACTION = 0.9
ELEMENTS = 16
SUMMARY = re.compile(r"Concurrency: (\d+), throughput: ([0-9.]+) infer/sec, latency (\d+) usec")

MODEL_SOURCE = """
import time
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        time.sleep(0.002)  # the cost a cache hit saves
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", x * 2)]))
        return responses
"""

CONFIG = f"""
name: "{MODEL}"
backend: "python"
max_batch_size: 0
input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ {ELEMENTS} ] }} ]
output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ {ELEMENTS} ] }} ]
instance_group [ {{ kind: KIND_CPU count: 1 }} ]
response_cache {{ enable: true }}
"""


@dataclass(frozen=True)
class Row:
    server: str
    cache: str  # "on" | "off"
    throughput: float | None  # infer/s
    latency_us: int | None  # client average
    hit_ratio: float | None  # hits / (hits + misses) during the run, from the statistics
    note: str = ""


def write_repository(root: Path) -> Path:
    folder = root / "models" / MODEL
    (folder / "1").mkdir(parents=True)
    (folder / "1" / "model.py").write_text(MODEL_SOURCE)
    (folder / "config.pbtxt").write_text(CONFIG)
    return root / "models"


def write_inputs(path: Path, seed: int = 7) -> None:
    """perf_analyzer's input file: 90% of the entries one of the hot inputs, 10% unique."""
    rng = random.Random(seed)
    entries = []
    for index in range(REQUESTS_PER_PASS):
        if rng.random() < REPEATED_FRACTION:
            value = float(rng.randrange(HOT_INPUTS))
        else:
            value = 1000.0 + index  # seen once per pass of the file
        entries.append({"INPUT0": {"content": [value] * ELEMENTS, "shape": [ELEMENTS]}})
    path.write_text(json.dumps({"data": entries}))


def _command(server: str, repository: Path, ports: list[int], cache: bool) -> list[str]:
    flags = [
        f"--model-repository={repository}",
        f"--http-port={ports[0]}",
        f"--grpc-port={ports[1]}",
        f"--metrics-port={ports[2]}",
        "--allow-metrics=false",
        *([f"--cache-config=local,size={CACHE_SIZE}"] if cache else []),
    ]
    if server == "ours":
        python = REPO_ROOT / ".venv" / "bin" / "python"
        address = ["--http-address=127.0.0.1", "--grpc-address=127.0.0.1"]
        return [str(python), "-m", "pytriton_core", *flags, *address]
    return ["bash", str(REAL_TRITON_TOOL / "start.sh"), *flags]


def _wait_ready(port: int, process: subprocess.Popen[bytes], timeout_s: float = 180) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the server exited with {process.returncode}")
        if http_get(f"127.0.0.1:{port}", f"/v2/models/{MODEL}/ready")[0] == 200:
            return
        time.sleep(0.2)
    raise RuntimeError("the server did not become ready")


def _cache_counts(port: int) -> tuple[int, int]:
    status, body = http_get(f"127.0.0.1:{port}", f"/v2/models/{MODEL}/stats")
    if status != 200:
        return 0, 0
    stats = json.loads(body)["model_stats"][0]["inference_stats"]
    return int(stats["cache_hit"]["count"]), int(stats["cache_miss"]["count"])


def measure(
    server: str, cache: bool, repository: Path, inputs: Path, perf_analyzer: Path, log: Path
) -> Row:
    ports = free_ports(3)
    with log.open("wb") as out:
        process = subprocess.Popen(
            _command(server, repository, ports, cache),
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        _wait_ready(ports[0], process)
        before = _cache_counts(ports[0])
        result = subprocess.run(
            [
                str(perf_analyzer),
                "-m",
                MODEL,
                "-i",
                "http",
                "-u",
                f"127.0.0.1:{ports[0]}",
                "--input-data",
                str(inputs),
                "--concurrency-range",
                "8",
                "-p",
                "3000",
                "-s",
                "30",
                "-r",
                "10",
            ],
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        after = _cache_counts(ports[0])
    finally:
        process.terminate()
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
    found = SUMMARY.search(result.stdout)
    if found is None:
        note = (result.stdout + result.stderr).strip().splitlines()[-1:]
        return Row(server, "on" if cache else "off", None, None, None, " ".join(note))
    hits, misses = after[0] - before[0], after[1] - before[1]
    ratio = hits / (hits + misses) if hits + misses else None
    return Row(server, "on" if cache else "off", float(found.group(2)), int(found.group(3)), ratio)


def report(rows: list[Row]) -> str:
    lines = [
        "| server | cache | infer/s | latency µs | hit ratio | on/off |",
        "|---|---|---|---|---|---|",
    ]
    off = {r.server: r.throughput for r in rows if r.cache == "off"}
    for row in rows:
        base = off.get(row.server)
        speedup = (
            f"{row.throughput / base:.1f}x" if row.cache == "on" and row.throughput and base else ""
        )
        lines.append(
            f"| {row.server} | {row.cache} | {row.throughput or '-'} | {row.latency_us or '-'} "
            f"| {'' if row.hit_ratio is None else f'{row.hit_ratio:.2f}'} | {speedup} "
            f"{row.note} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--servers", nargs="+", default=["ours", "triton"])
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    perf_analyzer = find_perf_analyzer().path
    if perf_analyzer is None:
        print("no perf_analyzer (tools/install-perf-analyzer.sh)")
        return 2
    out = args.out or Path(tempfile.mkdtemp(prefix="cache-compare-"))
    out.mkdir(parents=True, exist_ok=True)
    repository = write_repository(out)
    inputs = out / "inputs.json"
    write_inputs(inputs)
    local_cache = real_triton_home() / "dist" / "caches" / "local" / "libtritoncache_local.so"
    rows = []
    for server in args.servers:
        for cache in (False, True):
            if server == "triton" and not (REAL_TRITON_TOOL / "start.sh").is_file():
                rows.append(Row(server, "on" if cache else "off", None, None, None, "no Triton"))
                continue
            if server == "triton" and cache and not local_cache.is_file():
                rows.append(Row(server, "on", None, None, None, "no local cache library"))
                continue
            log = out / f"{server}-{'on' if cache else 'off'}.log"
            rows.append(measure(server, cache, repository, inputs, perf_analyzer, log))
    table = report(rows)
    (out / "results.json").write_text(json.dumps([asdict(r) for r in rows], indent=2))
    (out / "results.md").write_text(table + "\n")
    print(table)
    print(f"results and logs: {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
