"""Triton's perf_analyzer drives pytriton-core's identity_fp32 over gRPC, unary and streaming.

The same run as test_perf_analyzer.py's over HTTP: metadata and config first, then
ModelInfer (or ModelStreamInfer with ``--streaming``) at concurrency 1 and 8, with
ModelStatistics snapshots around each window; anything it cannot parse or that fails makes it
exit non-zero.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from harness import ServerHandle
from test_perf_analyzer import SUMMARY_LINE, UNSTABLE, perf_analyzer

pytestmark = pytest.mark.perf_analyzer

__all__ = ["perf_analyzer"]  # the fixture, shared with the HTTP test


def run_perf_analyzer(
    perf_analyzer: Path, url: str, streaming: bool
) -> subprocess.CompletedProcess[str]:
    command = [
        str(perf_analyzer),
        *("-m", "identity_fp32", "-i", "grpc", "-u", url, "--shape", "INPUT0:16"),
        *("--measurement-mode", "count_windows", "--measurement-request-count", "200"),
        *("--concurrency-range", "1:8:7", "-s", "50", "-r", "10"),
    ]
    if streaming:
        command.append("--streaming")
    return subprocess.run(command, capture_output=True, text=True, timeout=300, check=False)


@pytest.mark.parametrize("streaming", [False, True], ids=["unary", "streaming"])
def test_perf_analyzer_grpc_identity_fp32(
    perf_analyzer: Path, examples_server: ServerHandle, streaming: bool
) -> None:
    for _ in range(3):
        result = run_perf_analyzer(perf_analyzer, examples_server.grpc_url, streaming)
        if UNSTABLE not in result.stdout:
            break
        # Noise on a shared 2-core machine, not an error of the server: another go.
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert not re.search(r"error|fail", output, re.IGNORECASE), output
    throughput = {int(c): float(t) for c, t in SUMMARY_LINE.findall(output)}
    assert set(throughput) == {1, 8}, output
    assert all(value > 0 for value in throughput.values()), output
    assert "Successful request count" in output, output
