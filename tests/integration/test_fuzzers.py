"""Every fuzzer of tools/fuzz runs for a few seconds from its seed corpus without a crash,
a hang (an input past 30 s) or running out of memory (3 GiB); a longer run is
``python tools/fuzz/run.py --seconds 600``."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tools" / "fuzz"))
import run as fuzz_run  # noqa: E402

pytest.importorskip("atheris")


@pytest.mark.parametrize("target", fuzz_run.TARGETS)
def test_fuzzer_runs_clean(target: str, tmp_path: Path) -> None:
    assert (REPO / "tools" / "fuzz" / "corpus" / target).is_dir(), "each fuzzer has seeds"
    outcome = fuzz_run.run_target(target, 3, tmp_path, [])
    assert outcome.returncode == 0, outcome.output[-6000:]
    assert outcome.executions > 0
