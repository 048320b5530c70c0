"""The soak command (bench/soak.py) for a short run: HTTP, gRPC, gRPC streaming and system
shared-memory clients at once, every answer exact, and after warm-up the server's RSS,
descriptors, threads and shared-memory mappings within the command's slack, and once the
clients stop, no request, response, region view or pooled buffer left in the server (it
exits 1 otherwise). The hour-long run is ``python -m bench.soak --seconds 3600``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_a_short_soak_is_flat() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "bench.soak", "--seconds", "40", "--interval", "4"],
        capture_output=True,
        text=True,
        timeout=900,
        cwd=REPO,
    )
    print(result.stdout)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    assert "flat: ok" in result.stdout
    assert "after warm-up" in result.stdout
    assert "after the clients stopped: no request, response" in result.stdout
