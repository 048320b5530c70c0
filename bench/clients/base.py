"""What every client returns, and the one way clients run a tool."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable, Sequence
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
    command: Sequence[str],
    *,
    timeout_s: float,
    log_path: Path,
    env: dict[str, str] | None = None,
    on_start: Callable[[subprocess.Popen[str]], str | None] | None = None,
) -> str:
    """Run ``command`` (bounded by ``timeout_s``), keep its output in ``log_path``, return it.

    ``on_start``, when given, is called with the started process (its output not read yet, so
    it must return soon); the line it returns, if any, goes into the log after the command."""
    started = time.monotonic()
    note = ""
    with subprocess.Popen(
        list(command),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        errors="replace",
        env=env,
    ) as process:
        try:
            if on_start is not None:
                note = on_start(process) or ""
            remaining = max(timeout_s - (time.monotonic() - started), 0.0)
            stdout, stderr = process.communicate(timeout=remaining)
        except subprocess.TimeoutExpired:
            process.kill()
            stdout, stderr = process.communicate()
            output = _text(stdout) + _text(stderr)
            log_path.write_text(
                f"$ {' '.join(command)}\n{_note(note)}{output}\n[timed out after {timeout_s} s]\n"
            )
            raise ClientError(
                f"{Path(command[0]).name} timed out after {timeout_s:.0f} s"
            ) from None
        except BaseException:
            process.kill()
            raise
    output, returncode = stdout + stderr, process.returncode
    log_path.write_text(f"$ {' '.join(command)}\n{_note(note)}{output}\n[exit {returncode}]\n")
    if returncode != 0:
        raise ClientError(f"{Path(command[0]).name} exited with {returncode}: {tail(output)}")
    return output


def _note(note: str) -> str:
    return f"[{note}]\n" if note else ""


def tail(text: str, lines: int = 6) -> str:
    kept = [line for line in text.strip().splitlines() if line.strip()][-lines:]
    return " | ".join(kept)


def _text(value: str | bytes | None) -> str:
    if value is None:
        return ""
    return value.decode(errors="replace") if isinstance(value, bytes) else value
