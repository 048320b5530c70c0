"""memory/allocator.py: glibc's thresholds set for tensor-sized blocks, unless the operator
set malloc tunables."""

from __future__ import annotations

import subprocess
import sys

import pytest

from pytriton_core.memory import allocator

_PROBE = (
    "from pytriton_core.memory.allocator import keep_freed_tensor_memory as keep; print(keep())"
)


def _probe(env: dict[str, str]) -> str:
    result = subprocess.run(
        [sys.executable, "-c", _PROBE], capture_output=True, text=True, env=env, check=True
    )
    return result.stdout.strip()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc only")
def test_thresholds_are_set_in_a_glibc_process() -> None:
    assert _probe({}) == "True"


def test_an_operators_malloc_tunables_are_left_alone() -> None:
    assert _probe({"GLIBC_TUNABLES": "glibc.malloc.trim_threshold=1048576"}) == "False"


def test_other_tunables_do_not_count_as_a_malloc_choice(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GLIBC_TUNABLES", "glibc.pthread.rseq=0")
    assert allocator.keep_freed_tensor_memory() is sys.platform.startswith("linux")
