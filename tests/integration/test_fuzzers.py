"""Every fuzzer of tools/fuzz runs for a few seconds from its seed corpus without a crash,
a hang (an input past 30 s) or running out of memory (3 GiB); a longer run is
``python tools/fuzz/run.py --seconds 600``.

Only the fuzzers' own code and the project modules each target names as what it fuzzes
get coverage counters here (``instrument="subject"``): instrumenting every loaded library
took most of a minute per target on CI's two cores; the long run does that instead."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("atheris")

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tools" / "fuzz"))
import run as fuzz_run  # noqa: E402


@pytest.mark.parametrize("target", fuzz_run.TARGETS)
def test_fuzzer_runs_clean(target: str, tmp_path: Path) -> None:
    assert (REPO / "tools" / "fuzz" / "corpus" / target).is_dir(), "each fuzzer has seeds"
    outcome = fuzz_run.run_target(target, 3, tmp_path, [], instrument="subject")
    assert outcome.returncode == 0, outcome.output[-6000:]
    assert outcome.executions > 0
