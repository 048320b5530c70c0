"""Where the bench's tools live, and which of them are usable right now.

Install locations (all under the repo's ``.cache/``, which git ignores) are defined here once;
``bench.environment`` installs into them, everything else only looks. A missing tool is not an
error: the rows that need it are skipped, with the reason in the table.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

# This project, the real Triton, the Python peer, and the floor (bench/peers/floor_server.py:
# the same requests answered at no cost: bare httptools and grpc.aio on uvloop).
SERVER_KEYS = ("ours", "triton", "kserve", "floor")
REPO_ROOT = Path(__file__).resolve().parents[1]
CACHE = REPO_ROOT / ".cache"
BENCH_VENV = CACHE / "bench-venv"
PEERS_DIR = CACHE / "bench-peers"
PROJECT_PERF_ANALYZER = CACHE / "perf-analyzer" / "bin" / "perf_analyzer"
PERF_ANALYZER_INSTALLER = REPO_ROOT / "tools" / "install-perf-analyzer.sh"
# The shared tools sit beside the project checkout (../shared/tools/real-triton).
REAL_TRITON_TOOL = REPO_ROOT.parent / "shared" / "tools" / "real-triton"
KSERVE_PEER_SCRIPT = Path(__file__).resolve().parent / "peers" / "kserve_identity.py"
KSERVE_REQUIREMENT = "kserve==0.21.0"
FLOOR_SCRIPT = Path(__file__).resolve().parent / "peers" / "floor_server.py"


def real_triton_home() -> Path:
    """Where ../shared/tools/real-triton/setup.sh installs Triton (``$REAL_TRITON_HOME``)."""
    return Path(os.environ.get("REAL_TRITON_HOME", "~/.cache/real-triton")).expanduser()


def peer_python(peer: str) -> Path:
    return PEERS_DIR / peer / "bin" / "python"


@dataclass(frozen=True)
class Found:
    """A tool's path, or why there is none."""

    path: Path | None
    reason: str = ""


@dataclass(frozen=True)
class Toolbox:
    perf_analyzer: Found
    wrk: Found
    real_triton_start: Found  # start.sh, with Triton installed
    kserve_python: Found  # the peer venv's interpreter, with kserve importable


def _executable(path: str | Path | None) -> Path | None:
    if path and os.access(path, os.X_OK) and Path(path).is_file():
        return Path(path)
    return None


def find_perf_analyzer() -> Found:
    """``$PERF_ANALYZER``, then the project's copy, then the real-Triton tool's."""
    for candidate in (
        os.environ.get("PERF_ANALYZER"),
        PROJECT_PERF_ANALYZER,
        real_triton_home() / "bin" / "perf_analyzer",
    ):
        path = _executable(candidate)
        if path is not None:
            return Found(path)
    return Found(None, f"perf_analyzer not installed (run {PERF_ANALYZER_INSTALLER.name})")


def find_wrk() -> Found:
    path = _executable(os.environ.get("WRK") or shutil.which("wrk"))
    return Found(path) if path else Found(None, "wrk not installed (apt-get install wrk)")


def find_real_triton() -> Found:
    start = REAL_TRITON_TOOL / "start.sh"
    if not start.is_file():
        return Found(None, f"the real-Triton tool is not at {REAL_TRITON_TOOL}")
    if not (real_triton_home() / "dist" / "bin" / "tritonserver").is_file():
        return Found(None, f"the real Triton is not installed: run {REAL_TRITON_TOOL}/setup.sh")
    return Found(start)


def find_kserve() -> Found:
    python = _executable(peer_python("kserve"))
    if python is None:
        return Found(
            None,
            f"the KServe peer venv is missing ({PEERS_DIR / 'kserve'}); "
            "run the bench without --no-install",
        )
    probe = subprocess.run(
        [str(python), "-c", "import kserve"], capture_output=True, text=True, timeout=120
    )
    if probe.returncode != 0:
        return Found(None, f"kserve does not import in {python}: {probe.stderr.strip()[-200:]}")
    return Found(python)


def discover(servers: tuple[str, ...] = SERVER_KEYS) -> Toolbox:
    """The tools a run of ``servers`` needs (the others are reported as not looked for)."""
    not_selected = Found(None, "not selected (--servers)")
    return Toolbox(
        perf_analyzer=find_perf_analyzer(),
        wrk=find_wrk(),
        real_triton_start=find_real_triton() if "triton" in servers else not_selected,
        kserve_python=find_kserve() if "kserve" in servers else not_selected,
    )
