"""``--workers 2 --model-control-mode=poll``: the parent keeps the poll's clock and every
worker polls as one change, so a model folder added to the repository becomes ready on
both workers, one removed is unavailable on both, and a broken one leaves the others
serving. Each check is made over many new connections, so that both workers answer it;
the models answer with their process's pid, which shows which worker ran a request.
"""

from __future__ import annotations

import os
import shutil
import signal
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import tritonclient.http as httpclient
from harness import ServerHandle, run_pytriton_server
from tritonclient.utils import InferenceServerException
from workers_common import PID_MODEL_CONFIG, WAIT_S, answering_pid, wait_restarted, worker_pids

CONNECTIONS = 16  # new connections per check: the kernel spreads them over both workers

_MODEL_PY = """
import os

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        pid = np.array([os.getpid()], dtype=np.int64)
        return [pb_utils.InferenceResponse([pb_utils.Tensor("PID", pid)]) for _ in requests]
"""


def _write_model(root: Path, name: str, config: str | None = None) -> None:
    folder = root / name
    (folder / "1").mkdir(parents=True)
    (folder / "1" / "model.py").write_text(_MODEL_PY)
    text = textwrap.dedent(PID_MODEL_CONFIG.format(name=name)) if config is None else config
    # The config last: a poll that sees the folder before it is complete finds no config
    # and fails it; the next poll loads it.
    (folder / "config.pbtxt").write_text(text)


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("workers-poll")
    _write_model(root, "base")
    return root


@pytest.fixture(scope="module")
def server(repository: Path) -> Iterator[ServerHandle]:
    with run_pytriton_server(
        repository,
        "--workers=2",
        "--model-control-mode=poll",
        "--repository-poll-secs=1",
    ) as handle:
        yield handle


def _model_ready(url: str, model: str) -> bool:
    """The readiness one new connection (either worker) gets."""
    client = httpclient.InferenceServerClient(url)
    try:
        return bool(client.is_model_ready(model))
    finally:
        client.close()


def _readiness_everywhere(url: str, model: str) -> set[bool]:
    return {_model_ready(url, model) for _ in range(CONNECTIONS)}


def _wait_model(url: str, model: str, ready: bool) -> None:
    """Until every one of many new connections sees ``model`` ``ready`` (while one poll
    loads it, a worker that has finished answers before the other has)."""
    deadline = time.monotonic() + WAIT_S
    while _readiness_everywhere(url, model) != {ready}:
        assert time.monotonic() < deadline, f"'{model}' never became {ready} on every worker"
        time.sleep(0.1)


def _pids_answering(url: str, model: str) -> set[int]:
    return {answering_pid(url, model, "IN", 0.0) for _ in range(CONNECTIONS)}


def _success_counts(url: str, model: str) -> set[int]:
    """The success count of ``model`` that each of many new connections reads."""
    counts = set()
    for _ in range(CONNECTIONS):
        client = httpclient.InferenceServerClient(url)
        try:
            (stats,) = client.get_inference_statistics(model)["model_stats"]
            counts.add(int(stats["inference_stats"]["success"]["count"]))
        finally:
            client.close()
    return counts


def test_a_model_folder_added_then_removed_is_served_then_gone_on_every_worker(
    server: ServerHandle, repository: Path
) -> None:
    _write_model(repository, "added")
    _wait_model(server.http_url, "added", True)
    client = httpclient.InferenceServerClient(server.http_url)
    try:
        assert client.is_server_ready()
    finally:
        client.close()
    assert _pids_answering(server.http_url, "added") == set(worker_pids(server).values())
    # Loaded by one poll on both workers: one load, so every worker sums both counts.
    assert _success_counts(server.http_url, "added") == {CONNECTIONS}

    shutil.rmtree(repository / "added")
    _wait_model(server.http_url, "added", False)
    for _ in range(4):
        with pytest.raises(InferenceServerException):
            answering_pid(server.http_url, "added", "IN", 0.0)


def test_a_broken_model_folder_leaves_the_others_serving(
    server: ServerHandle, repository: Path
) -> None:
    _write_model(repository, "broken", config='name: "broken"\nbackend: "python"\ninput [ {\n')
    _write_model(repository, "canary")  # loaded by a poll that also saw "broken"
    _wait_model(server.http_url, "canary", True)
    assert _readiness_everywhere(server.http_url, "broken") == {False}
    pids = set(worker_pids(server).values())
    assert _pids_answering(server.http_url, "base") == pids
    assert _pids_answering(server.http_url, "canary") == pids
    shutil.rmtree(repository / "broken")
    shutil.rmtree(repository / "canary")
    _wait_model(server.http_url, "canary", False)


def test_a_worker_started_again_serves_the_polled_models_as_the_same_load(
    server: ServerHandle, repository: Path
) -> None:
    _write_model(repository, "later")  # loaded by a poll: that change's load, on both
    _wait_model(server.http_url, "later", True)
    assert _pids_answering(server.http_url, "later") == set(worker_pids(server).values())
    victim = worker_pids(server)[1]
    os.kill(victim, signal.SIGKILL)
    wait_restarted(server, 1, victim)
    _wait_model(server.http_url, "later", True)
    assert _pids_answering(server.http_url, "later") == set(worker_pids(server).values())
    # The new worker loaded "later" at its start, then took the poll's load (its stamp)
    # from the others while joining: its counts and its predecessor's add up with the
    # other worker's, whichever worker is asked.
    assert _success_counts(server.http_url, "later") == {2 * CONNECTIONS}
    shutil.rmtree(repository / "later")
    _wait_model(server.http_url, "later", False)
