"""Differential test of the generate extension: pytriton-core and the real Triton 2.51 answer
the same ``/generate`` and ``/generate_stream`` requests alike (status, Content-Type, the JSON
of the answer or of every event), for a decoupled model and one that is not.

Compared exactly except where Triton's answer is not its extension's doing: the ``params``
output (the model's ``request.parameters()`` text) is compared as the JSON it holds, since
the Python backends format that text differently. Not sent: bodies that fail to parse (the
JSON libraries word their errors differently).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from harness import ServerHandle, run_pytriton_server, run_real_triton
from streaming_models import write_echo, write_tokens

pytestmark = pytest.mark.real_triton

CASES: dict[str, tuple[str, Any]] = {
    "stream-3": ("tokens/generate_stream", {"text_input": "a", "count": 3}),
    "stream-0": ("tokens/generate_stream", {"text_input": "a", "count": 0}),
    "stream-100": ("tokens/generate_stream", {"text_input": "a", "count": 100}),
    "stream-id-final-with-last": (
        "tokens/generate_stream",
        {"text_input": "b", "count": 2, "id": "x1", "final_with_last": True},
    ),
    "stream-nested-parameters": (
        "tokens/generate_stream",
        {"text_input": "c", "parameters": {"count": 2, "delay_ms": 1}},
    ),
    "stream-error-first": (
        "tokens/generate_stream",
        {"text_input": "a", "count": 3, "fail_at": 0},
    ),
    "stream-error-later": (
        "tokens/generate_stream",
        {"text_input": "a", "count": 3, "fail_at": 2},
    ),
    "stream-versioned": ("tokens/versions/1/generate_stream", {"text_input": "v", "count": 1}),
    "generate-1": ("tokens/generate", {"text_input": "a", "count": 1}),
    "generate-0": ("tokens/generate", {"text_input": "a", "count": 0}),
    "generate-2": ("tokens/generate", {"text_input": "a", "count": 2}),
    "generate-error": ("tokens/generate", {"text_input": "a", "count": 1, "fail_at": 0}),
    "echo-mapping": (
        "echo/generate",
        {
            "id": "q",
            "text_input": "t",
            "ivec": [1, 2, 3],
            "fmat": [1.5, 2, 3, 4],
            "temperature": 0.25,
            "flag": True,
            "n": -3,
            "big": 2**64,
        },
    ),
    "echo-scalar-and-nested": (
        "echo/generate_stream",
        {"text_input": "t", "parameters": {"ivec": 7, "top_k": 3}},
    ),
    "echo-empty-array": ("echo/generate", {"text_input": "t", "ivec": []}),
    "echo-bad-shape": ("echo/generate", {"text_input": "t", "fmat": [1, 2, 3]}),
    "echo-two-strings": ("echo/generate_stream", {"text_input": ["a", "b"]}),
    "echo-number-for-bytes": ("echo/generate", {"text_input": 5}),
    "echo-string-for-int": ("echo/generate", {"text_input": "t", "ivec": ["x"]}),
    "echo-array-parameter": ("echo/generate", {"text_input": "t", "weird": [1]}),
    "echo-null-parameter": ("echo/generate", {"text_input": "t", "weird": None}),
    "echo-nested-object": ("echo/generate", {"text_input": "t", "parameters": {"p": {"a": 1}}}),
    "echo-parameters-not-object": ("echo/generate", {"text_input": "t", "parameters": [1]}),
    "echo-id-not-string": ("echo/generate", {"text_input": "t", "id": 3}),
    "echo-not-an-object": ("echo/generate", [1, 2]),
    "echo-unknown-version": ("echo/versions/5/generate", {"text_input": "t"}),
    "unknown-model": ("nope/generate_stream", {"text_input": "t"}),
}


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("generate-differential")
    write_tokens(root, "tokens")
    write_echo(root, "echo")
    return root


@pytest.fixture(scope="module")
def triton(repository: Path) -> Iterator[ServerHandle]:
    with run_real_triton(repository) as server:
        yield server


@pytest.fixture(scope="module")
def ours(triton: ServerHandle, repository: Path) -> Iterator[ServerHandle]:
    with run_pytriton_server(repository) as server:
        yield server


def answer(server: ServerHandle, path: str, body: Any) -> tuple[int, str, Any]:
    response = requests.post(f"http://{server.http_url}/v2/models/{path}", json=body, timeout=60)
    content_type = response.headers.get("Content-Type", "")
    if content_type.startswith("text/event-stream"):
        documents = [
            _canonical(json.loads(line[len(b"data: ") :]))
            for line in response.content.split(b"\n")
            if line.startswith(b"data: ")
        ]
        return response.status_code, content_type, documents
    return response.status_code, content_type, _canonical(response.json())


def _canonical(document: Any) -> Any:
    if isinstance(document, dict) and isinstance(document.get("params"), str):
        return {**document, "params": json.loads(document["params"])}
    return document


@pytest.mark.parametrize("case", list(CASES))
def test_generate_answers_as_triton(ours: ServerHandle, triton: ServerHandle, case: str) -> None:
    path, body = CASES[case]
    assert answer(ours, path, body) == answer(triton, path, body)
