"""Triton's perf_analyzer drives pytriton-core's identity_fp32, and a decoupled model over a
gRPC stream, without errors.

perf_analyzer reads the model's metadata and config, sends requests (HTTP binary tensors,
gRPC ModelInfer, or ModelStreamInfer with ``--streaming``) at concurrency 1 and 8, and
snapshots the statistics extension around each window; anything it cannot parse or that
fails makes it exit non-zero. Install it with tools/install-perf-analyzer.sh (or point
$PERF_ANALYZER at one).

This checks that the run completes, not how fast: the stability threshold is loose on
purpose (``-s 1000``), since windows on a shared 2-core machine swing widely. bench/ measures.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
from harness import ServerHandle, find_perf_analyzer, run_pytriton_server
from streaming_models import write_tokens

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


def run_clean(command: list[str]) -> str:
    """perf_analyzer's output, once it exited 0 without reporting an error."""
    result = subprocess.run(command, capture_output=True, text=True, timeout=300, check=False)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert not re.search(r"error|fail", output, re.IGNORECASE), output
    return output


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
    output = run_clean(command)
    throughput = {int(c): float(t) for c, t in SUMMARY_LINE.findall(output)}
    assert set(throughput) == {1, 8}, output
    assert all(value > 0 for value in throughput.values()), output
    # The server side of the report comes from the statistics extension.
    assert "Successful request count" in output, output


RESPONSE_LINE = re.compile(r"Response Throughput: ([0-9.]+) infer/sec")


def test_perf_analyzer_streams_a_decoupled_model(perf_analyzer: Path, tmp_path: Path) -> None:
    """``--streaming`` over gRPC against a decoupled model that sends 5 responses a request:
    perf_analyzer counts them (its response throughput is 5x the request throughput)."""
    write_tokens(tmp_path / "repository", "tokens")
    data = tmp_path / "data.json"
    data.write_text(json.dumps({"data": [{"text_input": ["hello"], "count": [5]}]}))
    with run_pytriton_server(tmp_path / "repository") as server:
        command = [
            str(perf_analyzer),
            *("-m", "tokens", "-u", server.grpc_url, "-i", "grpc", "--streaming"),
            *("--input-data", str(data)),
            *("--measurement-mode", "count_windows", "--measurement-request-count", "100"),
            *("--concurrency-range", "1:4:3", "-s", "1000", "-r", "10"),
        ]
        output = run_clean(command)
    requests = [float(t) for _, t in SUMMARY_LINE.findall(output)]
    responses = [float(t) for t in RESPONSE_LINE.findall(output)]
    assert len(requests) == len(responses) == 2, output
    for per_request, per_response in zip(requests, responses, strict=True):
        assert 4 < per_response / per_request < 6, output
