"""``--workers N``: the flag, what it refuses, and a worker's command line.

The parent runs ``Supervisor``; each worker is this same command line run again with
``--worker-index`` and ``--worker-board`` (internal, hidden from ``--help``) and both
ports shared (``--reuse-http-port``, ``--reuse-grpc-port``).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from pytriton_core.options import ServerOptions
from pytriton_core.workers.sequencer import DEFAULT_CHANGE_TIMEOUT_S
from pytriton_core.workers.supervisor import available_cores

_INTERNAL = ("--worker-index", "--worker-board")


def _workers(text: str) -> int:
    if text == "auto":
        return available_cores()
    try:
        count = int(text)
    except ValueError:
        count = 0
    if count < 1:
        raise argparse.ArgumentTypeError(f"expected a count >= 1 or 'auto', got '{text}'")
    return count


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not value > 0:
        raise argparse.ArgumentTypeError(f"expected seconds > 0, got '{text}'")
    return value


def add_worker_arguments(parser: argparse.ArgumentParser) -> None:
    add = parser.add_argument
    add(
        "--workers",
        type=_workers,
        default=1,
        metavar="N|auto",
        help="server processes sharing the HTTP, gRPC and metrics ports (auto: one per "
        "core available); statistics and metrics are summed over them",
    )
    add(
        "--worker-change-timeout-secs",
        type=_seconds,
        default=None,
        metavar="SECONDS",
        help="with --workers N: how long a model load or unload may take on one worker "
        f"(default {DEFAULT_CHANGE_TIMEOUT_S:g}); a worker that has not answered by then is "
        "hung: the change fails naming it, and the worker is killed and started again",
    )
    add("--worker-index", type=int, default=None, help=argparse.SUPPRESS)
    add("--worker-board", type=Path, default=None, help=argparse.SUPPRESS)


def refusals(options: ServerOptions) -> list[str]:
    """What ``--workers N`` (N > 1) cannot do yet, each naming the flag to change."""
    if options.workers <= 1:
        return []
    found = []
    for name, port in (("--http-port", options.http_port), ("--grpc-port", options.grpc_port)):
        if port == 0:
            found.append(f"{name}=0: the workers need one known port to share")
    return found


def worker_command(argv: Sequence[str], index: int, board: Path) -> list[str]:
    """Worker ``index``'s command line: the parent's, with the ports shared."""
    return [
        sys.executable,
        "-m",
        "pytriton_core",
        *argv,
        "--reuse-http-port=true",
        "--reuse-grpc-port=true",
        f"--worker-index={index}",
        f"--worker-board={board}",
    ]
