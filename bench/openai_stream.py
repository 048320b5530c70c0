"""Streamed chunks per second and time to the first chunk through the OpenAI front end
(docs/openai.md), at concurrency 1 and 8, beside /generate_stream of the same model on the
same server: what OpenAI's chunk format and its checks cost over Triton's generate extension.

    python -m bench.openai_stream
    python -m bench.openai_stream --seconds 3 --concurrency 1,8

One run, one machine, one server (pytriton-core; Triton has no OpenAI API in its server).
The model is the bundled tiny_llm, told to ignore the end of its text so that each request
streams exactly TOKENS one-character chunks; the client is a plain HTTP/1.1 reader of
server-sent events (one keep-alive connection per client thread, as bench.generate_stream)
that counts every ``data:`` event but ``[DONE]``: a chat stream has the role's chunk, the
TOKENS text chunks and the closing chunk with the finish reason; a completion stream the
TOKENS chunks and the closing one; /generate_stream one event per token. Chunks per second
are counted over every request of the window; first chunk is the median time from sending
the request to its first event.
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
from pathlib import Path

from bench.generate_stream import Cell, measure, progress, table_rows
from bench.shm_compare import ROOT, _free_ports, serve, write_results

MODEL = "tiny_llm"
TOKENS = 100
PROMPT = "The"
# The model's request parameters: TOKENS characters, past every end of line.
PARAMETERS = {"max_tokens": TOKENS, "ignore_eos": True}

# label -> (path, body, events per request)
ENDPOINTS: dict[str, tuple[str, dict[str, object], int]] = {
    "chat": (
        "/v1/chat/completions",
        {
            "model": MODEL,
            "messages": [{"role": "user", "content": PROMPT}],
            "max_tokens": TOKENS,
            "stream": True,
            "parameters": {"ignore_eos": True},
        },
        TOKENS + 2,
    ),
    "completions": (
        "/v1/completions",
        {
            "model": MODEL,
            "prompt": PROMPT,
            "max_tokens": TOKENS,
            "stream": True,
            "parameters": {"ignore_eos": True},
        },
        TOKENS + 1,
    ),
    "generate_stream": (
        f"/v2/models/{MODEL}/generate_stream",
        {"text_input": PROMPT, "stream": True, "parameters": PARAMETERS},
        TOKENS,
    ),
}


def run(concurrencies: list[int], seconds: float, out: Path) -> list[Cell]:
    out.mkdir(parents=True, exist_ok=True)
    repository = Path(tempfile.mkdtemp(prefix="openai-stream-"))
    shutil.copytree(ROOT / "examples" / "openai_models" / MODEL, repository / MODEL)
    (openai_port,) = _free_ports(1)
    flags = ("--allow-openai=true", f"--openai-port={openai_port}")
    cells: list[Cell] = []
    try:
        with serve("ours", repository, out, flags, ready_model=MODEL) as (http_port, _):
            for label, (path, body, events) in ENDPOINTS.items():
                port = http_port if path.startswith("/v2/") else openai_port
                for concurrency in concurrencies:
                    cell = measure(
                        label,
                        port,
                        concurrency,
                        seconds,
                        path=path,
                        body=json.dumps(body).encode(),
                        expected_events=events,
                    )
                    print(progress(cell, "chunk"), flush=True)
                    cells.append(cell)
    finally:
        shutil.rmtree(repository, ignore_errors=True)
    return cells


def report(cells: list[Cell]) -> str:
    lines = [
        f"# OpenAI streams of {MODEL}, {TOKENS} tokens per request, one run",
        "",
        "| endpoint | concurrency | requests | chunks/s | first chunk p50 (ms) | "
        "request p50 (ms) |",
        "|---|---|---|---|---|---|",
    ]
    return "\n".join([*lines, *table_rows(cells)]) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.openai_stream", description=__doc__)
    parser.add_argument("--concurrency", default="1,8", help="comma list (default 1,8)")
    parser.add_argument("--seconds", type=float, default=5.0, help="per cell")
    parser.add_argument("--out", type=Path, default=ROOT / ".cache" / "bench-results" / "openai")
    args = parser.parse_args(argv)
    cells = run([int(n) for n in args.concurrency.split(",")], args.seconds, args.out)
    write_results(args.out, "openai_stream", report(cells), cells)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
