"""What every client returns, and the one way clients run a tool."""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path


class ClientError(RuntimeError):
    """A load generator failed; the message ends with the tail of its output."""


@dataclass(frozen=True)
class Window:
    """One measurement window, as the client saw it (server-side fields filled in by the runner)."""

    throughput: float  # inferences (= requests: every request here has batch size 1) per second
    p50_us: float
    p90_us: float
    p95_us: float
    p99_us: float
    mean_us: float | None
    duration_s: float
    requests: int | None  # completed in the window, when the client says
    errors: int = 0  # failed or non-200 responses
    cpu_s: float | None = None  # server process tree CPU time over the window
    server_requests: int | None = None  # the server's own count (statistics extension)
    server_executions: int | None = None  # model executions (batches) in that count


def run_tool(
    command: Sequence[str], *, timeout_s: float, log_path: Path, env: dict[str, str] | None = None
) -> str:
    """Run ``command`` (bounded by ``timeout_s``), keep its output in ``log_path``, return it."""
    try:
        completed = subprocess.run(
            list(command),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            errors="replace",
            timeout=timeout_s,
            env=env,
            check=False,
        )
        output, returncode = completed.stdout + completed.stderr, completed.returncode
    except subprocess.TimeoutExpired as expired:
        output = _text(expired.stdout) + _text(expired.stderr)
        log_path.write_text(f"$ {' '.join(command)}\n{output}\n[timed out after {timeout_s} s]\n")
        raise ClientError(f"{Path(command[0]).name} timed out after {timeout_s:.0f} s") from None
    log_path.write_text(f"$ {' '.join(command)}\n{output}\n[exit {returncode}]\n")
    if returncode != 0:
        raise ClientError(f"{Path(command[0]).name} exited with {returncode}: {tail(output)}")
    return output


def tail(text: str, lines: int = 6) -> str:
    kept = [line for line in text.strip().splitlines() if line.strip()][-lines:]
    return " | ".join(kept)


def _text(value: str | bytes | None) -> str:
    if value is None:
        return ""
    return value.decode(errors="replace") if isinstance(value, bytes) else value
