"""Triton's perf_analyzer drives pytriton-core's identity_fp32 without errors.

perf_analyzer reads the model's metadata and config, sends requests (HTTP binary tensors,
gRPC ModelInfer, or ModelStreamInfer with ``--streaming``) at concurrency 1 and 8, and
snapshots the statistics extension around each window; anything it cannot parse or that
fails makes it exit non-zero. Install it with tools/install-perf-analyzer.sh (or point
$PERF_ANALYZER at one).

This checks that the run completes, not how fast: the stability threshold is loose on
purpose (``-s 1000``), since windows on a shared 2-core machine swing widely. bench/ measures.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from harness import ServerHandle, find_perf_analyzer

pytestmark = pytest.mark.perf_analyzer

SUMMARY_LINE = re.compile(r"Concurrency: (\d+), throughput: ([0-9.]+) infer/sec")

PROTOCOLS = {
    "http": ("-i", "http"),
    "grpc": ("-i", "grpc"),
    "grpc-streaming": ("-i", "grpc", "--streaming"),
}


@pytest.fixture(scope="module")
def perf_analyzer() -> Path:
    path = find_perf_analyzer()
    if path is None:
        pytest.skip(
            "perf_analyzer not found ($PERF_ANALYZER, .cache/perf-analyzer, "
            "$REAL_TRITON_HOME/bin): run tools/install-perf-analyzer.sh"
        )
    return path


@pytest.mark.parametrize("protocol", list(PROTOCOLS))
def test_perf_analyzer_identity_fp32(
    perf_analyzer: Path, examples_server: ServerHandle, protocol: str
) -> None:
    url = examples_server.http_url if protocol == "http" else examples_server.grpc_url
    command = [
        str(perf_analyzer),
        *("-m", "identity_fp32", "-u", url, "--shape", "INPUT0:16"),
        *PROTOCOLS[protocol],
        *("--measurement-mode", "count_windows", "--measurement-request-count", "200"),
        *("--concurrency-range", "1:8:7", "-s", "1000", "-r", "10"),
    ]
    result = subprocess.run(command, capture_output=True, text=True, timeout=300, check=False)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert not re.search(r"error|fail", output, re.IGNORECASE), output
    throughput = {int(c): float(t) for c, t in SUMMARY_LINE.findall(output)}
    assert set(throughput) == {1, 8}, output
    assert all(value > 0 for value in throughput.values()), output
    # The server side of the report comes from the statistics extension.
    assert "Successful request count" in output, output
