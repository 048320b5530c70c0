"""wrk (Debian's ``wrk`` package) as the common HTTP load generator.

One thread, ``concurrency`` keep-alive connections, each with one request in flight (a closed
loop, like perf_analyzer's concurrency); every request is the same prebuilt body, POSTed by
``wrk_report.lua``, which prints the window's counts and latency percentiles as JSON.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from bench.clients.base import ClientError, Window, run_tool
from bench.clients.http_target import HttpTarget

LUA_SCRIPT = Path(__file__).with_name("wrk_report.lua")
_MARKER = "BENCH_WRK "


class Wrk:
    name = "wrk"

    def __init__(self, path: Path) -> None:
        self.path = path
        self.version = _version(path)

    def settings(self, seconds: int) -> str:
        return f"wrk {self.version} -t1 -d{seconds}s, 1 request in flight per connection"

    def measure(self, target: HttpTarget, concurrency: int, seconds: int, log_path: Path) -> Window:
        payload = target.payload
        command = [
            str(self.path),
            "-t1",
            f"-c{concurrency}",
            f"-d{seconds}s",
            f"--timeout={max(10, 4 * seconds)}s",
            "-s",
            str(LUA_SCRIPT),
            target.url,
            "--",
            str(target.body_file),
            str(payload.header_length) if payload.header_length is not None else "-",
            payload.content_type,
        ]
        output = run_tool(command, timeout_s=seconds + 60, log_path=log_path)
        return parse_report(output)


def parse_report(output: str) -> Window:
    lines = [line for line in output.splitlines() if line.startswith(_MARKER)]
    if not lines:
        raise ClientError(f"wrk printed no report line: {output[-300:]!r}")
    report = json.loads(lines[-1][len(_MARKER) :])
    duration_s = report["duration_us"] / 1e6
    errors = sum(report[key] for key in ("connect", "read", "write", "status", "timeout"))
    requests = int(report["requests"])
    return Window(
        throughput=(requests - report["status"]) / duration_s if duration_s else 0.0,
        p50_us=float(report["p50_us"]),
        p90_us=float(report["p90_us"]),
        p95_us=float(report["p95_us"]),
        p99_us=float(report["p99_us"]),
        mean_us=float(report["mean_us"]),
        duration_s=duration_s,
        requests=requests,
        errors=errors,
    )


def _version(path: Path) -> str:
    try:
        result = subprocess.run(
            [str(path), "--version"], capture_output=True, text=True, timeout=30, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return "?"
    words = (result.stdout + result.stderr).split()
    # "wrk debian/4.1.0-3+b2 [epoll] ..." -> "4.1.0-3+b2"
    return words[1].rsplit("/", 1)[-1] if len(words) > 1 else "?"
