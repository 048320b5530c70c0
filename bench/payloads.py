"""The model under test, its repositories, and the KServe v2 request bodies every server gets.

The model is the bundled ``identity_fp32`` (FP32 ``[-1]``, max_batch_size 8, Python backend).
Two repositories are laid out from it: as shipped, and with ``dynamic_batching {}`` added. The
HTTP bodies are built once per scenario and sent byte for byte to every server.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bench.toolbox import REPO_ROOT

EXAMPLE_MODEL = REPO_ROOT / "examples" / "model_repository" / "identity_fp32"
MODEL_NAME = "identity_fp32"
INPUT_NAME = "INPUT0"
OUTPUT_NAME = "OUTPUT0"
DATATYPE = "FP32"
HEADER_LENGTH = "Inference-Header-Content-Length"


def prepare_repository(workdir: Path, *, dynamic_batching: bool) -> Path:
    """A model repository holding a fresh copy of identity_fp32 (with a dynamic batcher or not)."""
    repository = workdir / ("repo-dynamic-batching" if dynamic_batching else "repo-default")
    target = repository / MODEL_NAME
    if repository.exists():
        shutil.rmtree(repository)
    shutil.copytree(EXAMPLE_MODEL, target, ignore=shutil.ignore_patterns("__pycache__"))
    if dynamic_batching:
        config = target / "config.pbtxt"
        config.write_text(config.read_text().rstrip("\n") + "\n\ndynamic_batching {}\n")
    return repository


def input_array(elements: int) -> np.ndarray:
    """The request tensor, shape [1, elements]: values i % 4096 / 4, exact in FP32 and short in
    JSON, so the JSON scenarios measure number parsing rather than long decimal strings."""
    return ((np.arange(elements) % 4096) / 4).astype(np.float32).reshape(1, elements)


@dataclass(frozen=True)
class HttpBody:
    """A ready-to-send ``POST /v2/models/<model>/infer`` body."""

    body: bytes
    content_type: str
    header_length: int | None  # the JSON part's length when binary tensors follow it
    elements: int
    binary: bool

    @property
    def headers(self) -> dict[str, str]:
        headers = {"Content-Type": self.content_type}
        if self.header_length is not None:
            headers[HEADER_LENGTH] = str(self.header_length)
        return headers


def http_body(elements: int, *, binary: bool) -> HttpBody:
    """The same request for every server: binary tensors (binary_data_output) or all JSON."""
    array = input_array(elements)
    tensor: dict[str, object] = {
        "name": INPUT_NAME,
        "shape": list(array.shape),
        "datatype": DATATYPE,
    }
    if binary:
        tensor["parameters"] = {"binary_data_size": array.nbytes}
        header = {"inputs": [tensor], "parameters": {"binary_data_output": True}}
        head = json.dumps(header, separators=(",", ":")).encode()
        return HttpBody(
            head + array.tobytes(), "application/octet-stream", len(head), elements, True
        )
    tensor["data"] = array.ravel().tolist()
    request = {"inputs": [tensor], "parameters": {"binary_data_output": False}}
    body = json.dumps(request, separators=(",", ":")).encode()
    return HttpBody(body, "application/json", None, elements, False)


def check_http_response(
    payload: HttpBody, status: int, headers: Mapping[str, str], body: bytes
) -> str | None:
    """None when the response carries OUTPUT0 equal to the input; else what is wrong."""
    if status != 200:
        return f"HTTP {status}: {body[:300]!r}"
    lowered = {key.lower(): value for key, value in headers.items()}
    header_length = lowered.get(HEADER_LENGTH.lower())
    try:
        split = int(header_length) if header_length is not None else len(body)
        response = json.loads(body[:split])
        outputs = {output["name"]: output for output in response["outputs"]}
        output = outputs[OUTPUT_NAME]
        if output.get("datatype") != DATATYPE:
            return f"{OUTPUT_NAME} datatype is {output.get('datatype')!r}"
        size = (output.get("parameters") or {}).get("binary_data_size")
        if size is not None:
            data = np.frombuffer(body[split : split + int(size)], dtype=np.float32)
        else:
            data = np.asarray(output["data"], dtype=np.float32)
        expected = input_array(payload.elements)
        if list(output["shape"]) != list(expected.shape):
            return f"{OUTPUT_NAME} shape {output['shape']} != {list(expected.shape)}"
        if not np.array_equal(data.ravel(), expected.ravel()):
            return f"{OUTPUT_NAME} differs from {INPUT_NAME}"
    except (KeyError, TypeError, ValueError) as error:
        return f"malformed response ({type(error).__name__}: {error}): {body[:300]!r}"
    if payload.binary and size is None:
        return "binary_data_output was asked for, but the output came back as JSON"
    return None
