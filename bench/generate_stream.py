"""Tokens per second through ``/generate_stream``: a decoupled Python model that streams 100
small responses per request, pytriton-core and the real Triton side by side.

    python -m bench.generate_stream                      # both servers
    python -m bench.generate_stream --servers ours --seconds 5

One run, one machine, one server at a time (they do not compete for the CPUs). The model
(written by this bench) answers each request with ``TOKENS`` responses of one short string
each, as an LLM streams its tokens, and FINAL on its own. The client is a plain HTTP/1.1
reader of server-sent events (one keep-alive connection per client thread) that counts the
``data:`` events of each request; it reports tokens per second over every request of the
window, and the median time to the first token. The ratio is pytriton-core's tokens/s
divided by Triton's at the same concurrency (above 1: faster).

Self-contained (standard library; servers started as bench.shm_compare starts them).
"""

from __future__ import annotations

import argparse
import http.client
import json
import shutil
import statistics
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from bench.shm_compare import LOOPBACK, ROOT, chosen_servers, serve, write_results

MODEL = "tokens"
TOKENS = 100

MODEL_SOURCE = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            sender = request.get_response_sender()
            count = int(pb_utils.get_input_tensor_by_name(request, "count").as_numpy()[0])
            for index in range(count):
                token = np.array([b"tok%d" % index], np.object_)
                sender.send(pb_utils.InferenceResponse([pb_utils.Tensor("text_output", token)]))
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
"""

MODEL_CONFIG = f"""
name: "{MODEL}"
backend: "python"
max_batch_size: 0
model_transaction_policy {{ decoupled: true }}
input [
  {{ name: "text_input" data_type: TYPE_STRING dims: [ 1 ] }},
  {{ name: "count" data_type: TYPE_INT32 dims: [ 1 ] }}
]
output [ {{ name: "text_output" data_type: TYPE_STRING dims: [ 1 ] }} ]
instance_group [ {{ count: 1 kind: KIND_CPU }} ]
"""


@dataclass(frozen=True)
class Cell:
    server: str
    concurrency: int
    requests: int
    tokens_per_s: float
    first_token_ms_p50: float
    request_ms_p50: float


def write_repository(root: Path) -> None:
    (root / MODEL / "1").mkdir(parents=True)
    (root / MODEL / "config.pbtxt").write_text(MODEL_CONFIG)
    (root / MODEL / "1" / "model.py").write_text(MODEL_SOURCE)


def stream_once(connection: http.client.HTTPConnection, body: bytes) -> tuple[int, float, float]:
    """(events, seconds to the first, seconds to the end) of one /generate_stream request."""
    started = time.perf_counter()
    connection.request(
        "POST",
        f"/v2/models/{MODEL}/generate_stream",
        body,
        {"Content-Type": "application/json", "Accept": "text/event-stream"},
    )
    response = connection.getresponse()
    if response.status != 200:
        raise RuntimeError(f"generate_stream answered {response.status}: {response.read()!r}")
    events, first = 0, 0.0
    while line := response.readline():
        if line.startswith(b"data: "):
            if b'"error"' in line:
                raise RuntimeError(f"error event: {line!r}")
            events += 1
            if events == 1:
                first = time.perf_counter() - started
    return events, first, time.perf_counter() - started


def measure(server: str, http_port: int, concurrency: int, seconds: float) -> Cell:
    body = json.dumps({"text_input": "go", "count": TOKENS}).encode()
    firsts: list[float] = []
    totals: list[float] = []
    tokens = [0]
    lock = threading.Lock()
    deadline = time.perf_counter() + seconds

    def client() -> None:
        connection = http.client.HTTPConnection(LOOPBACK, http_port, timeout=60)
        try:
            while time.perf_counter() < deadline:
                events, first, total = stream_once(connection, body)
                if events != TOKENS:
                    raise RuntimeError(f"{events} events, expected {TOKENS}")
                with lock:
                    tokens[0] += events
                    firsts.append(first)
                    totals.append(total)
        finally:
            connection.close()

    stream_once(http.client.HTTPConnection(LOOPBACK, http_port, timeout=60), body)  # warm up
    started = time.perf_counter()
    threads = [threading.Thread(target=client) for _ in range(concurrency)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - started
    return Cell(
        server,
        concurrency,
        len(totals),
        tokens[0] / elapsed,
        statistics.median(firsts) * 1000,
        statistics.median(totals) * 1000,
    )


def run(servers: list[str], concurrencies: list[int], seconds: float, out: Path) -> list[Cell]:
    out.mkdir(parents=True, exist_ok=True)
    repository = Path(tempfile.mkdtemp(prefix="generate-stream-"))
    write_repository(repository)
    cells: list[Cell] = []
    try:
        for server in servers:
            with serve(server, repository, out, ready_model=MODEL) as (http_port, _):
                for concurrency in concurrencies:
                    cell = measure(server, http_port, concurrency, seconds)
                    print(
                        f"{server:6} c={concurrency}: {cell.tokens_per_s:9.0f} tokens/s, "
                        f"first token {cell.first_token_ms_p50:6.2f} ms, "
                        f"request {cell.request_ms_p50:7.2f} ms ({cell.requests} requests)",
                        flush=True,
                    )
                    cells.append(cell)
    finally:
        shutil.rmtree(repository, ignore_errors=True)
    return cells


def report(cells: list[Cell]) -> str:
    lines = [
        f"# /generate_stream, {TOKENS} responses per request (decoupled Python model), one run",
        "",
        "| server | concurrency | requests | tokens/s | first token p50 (ms) | request p50 (ms) |",
        "|---|---|---|---|---|---|",
    ]
    lines += [
        f"| {c.server} | {c.concurrency} | {c.requests} | {c.tokens_per_s:.0f} | "
        f"{c.first_token_ms_p50:.2f} | {c.request_ms_p50:.2f} |"
        for c in cells
    ]
    by = {(c.server, c.concurrency): c for c in cells}
    ratios = [
        f"| {n} | {by['ours', n].tokens_per_s / by['triton', n].tokens_per_s:.2f} |"
        for n in sorted({c.concurrency for c in cells})
        if ("ours", n) in by and ("triton", n) in by
    ]
    if ratios:
        lines += ["", "## pytriton-core / real Triton (tokens/s)", "", "| concurrency | ratio |"]
        lines += ["|---|---|", *ratios]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.generate_stream", description=__doc__)
    parser.add_argument("--servers", default="ours,triton", help="ours,triton (comma list)")
    parser.add_argument("--concurrency", default="1,4", help="comma list (default 1,4)")
    parser.add_argument("--seconds", type=float, default=5.0, help="per cell")
    parser.add_argument(
        "--out", type=Path, default=ROOT / ".cache" / "bench-results" / "generate-stream"
    )
    args = parser.parse_args(argv)
    servers = chosen_servers(args.servers)
    cells = run(servers, [int(n) for n in args.concurrency.split(",")], args.seconds, args.out)
    write_results(args.out, "generate_stream", report(cells), cells)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
