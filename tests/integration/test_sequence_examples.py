"""examples/sequence_models with the clients that document them.

Triton's own sequence client examples run unchanged against it. They live in Triton's client
repository (``src/python/examples``), which this project does not carry: set
``TRITON_CLIENT_REPO`` to a clone (a work tree, or a bare git directory) to run them; those
tests are skipped otherwise (test_sequence_batching.py checks the same behaviour with the
project's own client code). The client example of docs/sequence-batching.md always runs.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from harness import REPO_ROOT, ServerHandle, run_pytriton_server
from triton_client_examples import require_client_repo, write_example

EXAMPLES = {
    "simple_http_sequence_sync_infer_client.py": "http",
    "simple_grpc_sequence_sync_infer_client.py": "grpc",
    "simple_grpc_sequence_stream_infer_client.py": "grpc",
    "simple_grpc_aio_sequence_stream_infer_client.py": "grpc",
}


@pytest.fixture(scope="module")
def server() -> Iterator[ServerHandle]:
    with run_pytriton_server(REPO_ROOT / "examples" / "sequence_models") as handle:
        yield handle


def test_the_documented_client_example(
    server: ServerHandle, capsys: pytest.CaptureFixture[str]
) -> None:
    text = (REPO_ROOT / "docs" / "sequence-batching.md").read_text()
    example = re.findall(r"```python\n(.*?)```", text, re.S)[0]
    example = example.replace('"localhost:8000"', f'"{server.http_url}"')
    exec(compile(example, "docs/sequence-batching.md", "exec"), {"__name__": "__doc_example__"})
    printed = capsys.readouterr().out.split()
    assert printed == ["[[11]]", "[[18]]", "[[23]]", "[[26]]"]


def test_the_documented_stream_example_of_a_decoupled_state_model(
    server: ServerHandle, capsys: pytest.CaptureFixture[str]
) -> None:
    text = (REPO_ROOT / "docs" / "sequence-batching.md").read_text()
    (example,) = [e for e in re.findall(r"```python\n(.*?)```", text, re.S) if "start_stream" in e]
    example = example.replace('"localhost:8001"', f'"{server.grpc_url}"')
    exec(compile(example, "docs/sequence-batching.md", "exec"), {"__name__": "__doc_example__"})
    printed = capsys.readouterr().out.split()
    assert printed == ["[[11]]", "[[18]]", "[[23]]", "[[26]]"]


@pytest.mark.parametrize("dyna", [False, True], ids=["simple", "dyna"])
@pytest.mark.parametrize("example", list(EXAMPLES))
def test_triton_sequence_example(
    server: ServerHandle, example: str, dyna: bool, tmp_path: Path
) -> None:
    require_client_repo()
    script = write_example(example, tmp_path)
    url = server.http_url if EXAMPLES[example] == "http" else server.grpc_url
    command = [sys.executable, str(script), "-u", url, *(["-d"] if dyna else [])]
    result = subprocess.run(
        command, capture_output=True, text=True, timeout=120, cwd=tmp_path, check=False
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert "PASS" in output, output
