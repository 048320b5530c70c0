"""The bundled pipeline example (examples/pipeline), run as its docs say: build the ONNX
classifier, serve the repository, send JPEGs with the example's client.

The client makes a JPEG of one colour and sends it as a raw binary request
(``Inference-Header-Content-Length: 0``); the pipeline (Python pre-processing -> ONNX
classifier -> Python top-k with labels) must name that colour, as an ensemble and as BLS.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Iterator

import pytest
from harness import REPO_ROOT, ServerHandle, run_pytriton_server

EXAMPLE = REPO_ROOT / "examples" / "pipeline"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerHandle]:
    repository = tmp_path_factory.mktemp("pipeline") / "model_repository"
    shutil.copytree(
        EXAMPLE / "model_repository",
        repository,
        ignore=shutil.ignore_patterns("model.onnx", "__pycache__"),
    )
    build = [sys.executable, str(EXAMPLE / "build.py"), "--repository", str(repository)]
    subprocess.run(build, check=True, capture_output=True, timeout=120)
    with run_pytriton_server(repository) as handle:
        yield handle


@pytest.mark.parametrize("model", ["pipeline_ensemble", "pipeline_bls"])
@pytest.mark.parametrize("colour", ["red", "blue", "white", "orange"])
def test_the_pipeline_names_the_colour_of_a_jpeg(
    server: ServerHandle, model: str, colour: str
) -> None:
    client = [
        sys.executable,
        str(EXAMPLE / "client.py"),
        "--url",
        server.http_url,
        "--model",
        model,
        "--colour",
        colour,
    ]
    answer = subprocess.run(client, check=True, capture_output=True, text=True, timeout=120)
    lines = answer.stdout.splitlines()
    assert len(lines) == 3  # the top 3
    label, score = lines[0].split()
    assert label == colour
    assert 0.5 < float(score) <= 1.0
