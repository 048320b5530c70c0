"""``--gc-threshold``: the server sets Python's generation-0 collection threshold once it
serves (10,000 by default, Python's own 700 with 0); a server inside another process
(``pytriton_core.Server``) leaves that process's collector as it found it.

A Python model runs in the server's interpreter, so it reports the threshold it sees.
"""

from __future__ import annotations

import gc
import socket
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient
from harness import run_pytriton_server

from pytriton_core import Server

MODEL = """
import gc

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        threshold = pb_utils.Tensor("THRESHOLD", np.array([gc.get_threshold()[0]], np.int64))
        return [pb_utils.InferenceResponse([threshold]) for _ in requests]
"""

CONFIG = """
name: "gc_threshold"
backend: "python"
max_batch_size: 0
input [ { name: "IN" data_type: TYPE_INT64 dims: [ 1 ] } ]
output [ { name: "THRESHOLD" data_type: TYPE_INT64 dims: [ 1 ] } ]
"""


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("gc-threshold")
    (root / "gc_threshold" / "1").mkdir(parents=True)
    (root / "gc_threshold" / "config.pbtxt").write_text(CONFIG)
    (root / "gc_threshold" / "1" / "model.py").write_text(MODEL)
    return root


def _threshold(url: str) -> int:
    with httpclient.InferenceServerClient(url) as client:
        tensor = httpclient.InferInput("IN", [1], "INT64")
        tensor.set_data_from_numpy(np.zeros(1, dtype=np.int64))
        return int(client.infer("gc_threshold", [tensor]).as_numpy("THRESHOLD")[0])


@pytest.mark.parametrize(
    ("flags", "expected"),
    [((), 10_000), (("--gc-threshold", "0"), 700), (("--gc-threshold", "2500"), 2500)],
)
def test_the_server_sets_its_threshold(
    repository: Path, flags: tuple[str, ...], expected: int
) -> None:
    with run_pytriton_server(repository, *flags) as server:
        assert _threshold(server.http_url) == expected


def test_an_in_process_server_leaves_its_hosts_collector_alone(repository: Path) -> None:
    before = gc.get_threshold()
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with Server(model_repository=repository, allow_http=True, http_port=port):
        assert _threshold(f"127.0.0.1:{port}") == before[0]
    assert gc.get_threshold() == before
