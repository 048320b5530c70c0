"""Triton's perf_analyzer drives identity_fp32 through system shared memory, HTTP and gRPC.

``--shared-memory system`` makes perf_analyzer create POSIX shared-memory regions, register
them through the shared-memory extension, and send every request with its input and output
in them (``--output-shared-memory-size`` sizes the output region: identity_fp32's output has
a variable dim). The server runs with ``--allow-client-shm=true``, which current Triton
(2.73) requires too. Install perf_analyzer with tools/install-perf-analyzer.sh (or point
$PERF_ANALYZER at one).
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import tritonclient.http as httpclient
from harness import EXAMPLES_REPOSITORY, ServerHandle, find_perf_analyzer, run_pytriton_server

pytestmark = pytest.mark.perf_analyzer

UNSTABLE = "Failed to obtain stable measurement"
SUMMARY_LINE = re.compile(r"Concurrency: (\d+), throughput: ([0-9.]+) infer/sec")


@pytest.fixture(scope="module")
def perf_analyzer() -> Path:
    path = find_perf_analyzer()
    if path is None:
        pytest.skip(
            "perf_analyzer not found ($PERF_ANALYZER, .cache/perf-analyzer, "
            "$REAL_TRITON_HOME/bin): run tools/install-perf-analyzer.sh"
        )
    return path


@pytest.fixture(scope="module")
def server() -> Iterator[ServerHandle]:
    with run_pytriton_server(EXAMPLES_REPOSITORY, "--allow-client-shm=true") as handle:
        yield handle


def _run(perf_analyzer: Path, protocol: str, url: str) -> subprocess.CompletedProcess[str]:
    command = [
        str(perf_analyzer),
        "-m",
        "identity_fp32",
        "-i",
        protocol,
        "-u",
        url,
        "--shape",
        "INPUT0:16",
        "--shared-memory",
        "system",
        "--output-shared-memory-size",
        "64",  # 16 FP32 values
        "--measurement-mode",
        "count_windows",
        "--measurement-request-count",
        "200",
        "--concurrency-range",
        "1:8:7",
        # What is under test is that every request goes through shared memory without an
        # error, not how steady a shared 2-core machine is: windows may differ by 2x.
        "-s",
        "100",
        "-r",
        "10",
    ]
    return subprocess.run(command, capture_output=True, text=True, timeout=300, check=False)


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_perf_analyzer_system_shared_memory(
    perf_analyzer: Path, server: ServerHandle, protocol: str
) -> None:
    url = server.http_url if protocol == "http" else server.grpc_url
    result = _run(perf_analyzer, protocol, url)
    if UNSTABLE in result.stdout:
        result = _run(perf_analyzer, protocol, url)  # one more go: that is noise, not an error
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert not re.search(r"error|fail", output, re.IGNORECASE), output
    throughput = {int(c): float(t) for c, t in SUMMARY_LINE.findall(output)}
    assert set(throughput) == {1, 8}, output
    assert all(value > 0 for value in throughput.values()), output
    # perf_analyzer unregistered its regions when done.
    assert httpclient.InferenceServerClient(server.http_url).get_system_shared_memory_status() == []
