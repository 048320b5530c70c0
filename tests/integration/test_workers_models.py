"""``--workers 2`` with models that do more than answer: custom metric families
(``pb_utils.MetricFamily``) summed on every scrape, a model that hangs in ``execute`` or
``initialize`` (the change fails naming the hung worker, which is killed and started again,
and the server serves on), and a model that loads another from its ``initialize`` (BLS)
while the parent holds the order of changes for its own load.

One server for the module, explicit model control, with a short change timeout so that a
hung worker is found in seconds.
"""

from __future__ import annotations

import re
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from harness import ServerHandle, run_pytriton_server
from prometheus_client.parser import text_string_to_metric_families
from tritonclient.utils import InferenceServerException
from workers_common import (
    PID_MODEL_CONFIG,
    WAIT_S,
    answering_pid,
    metrics_page,
    wait_restarted,
    worker_pids,
)

CHANGE_TIMEOUT_S = 4.0

# Counts its requests three ways: a counter, a gauge moved up per request (each worker's
# share of a server-wide quantity) and a histogram of the input.
_METERED_PY = """
import os

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        labels = {"model": "metered"}
        self.requests = pb_utils.MetricFamily(
            "m17_requests_total", "requests seen", pb_utils.MetricFamily.COUNTER
        ).Metric(labels=labels)
        self.queued = pb_utils.MetricFamily(
            "m17_queued", "requests counted up", pb_utils.MetricFamily.GAUGE
        ).Metric(labels=labels)
        self.sizes = pb_utils.MetricFamily(
            "m17_sizes", "inputs seen", pb_utils.MetricFamily.HISTOGRAM
        ).Metric(labels=labels, buckets=[1.0, 2.0])

    def execute(self, requests):
        responses = []
        for request in requests:
            value = float(pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()[0])
            self.requests.increment(1)
            self.queued.increment(1)
            self.sizes.observe(value)
            pid = np.array([os.getpid()], dtype=np.int64)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("PID", pid)]))
        return responses
"""

# Hangs in execute once told to (IN > 0), after writing the pid of the worker it hangs in.
_HANGS_PY = """
import os
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.mark = os.path.join(args["model_repository"], "hung-pid")

    def execute(self, requests):
        for request in requests:
            if float(pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()[0]) > 0:
                with open(self.mark, "w") as mark:
                    mark.write(str(os.getpid()))
                time.sleep(3600)
        pid = np.array([os.getpid()], dtype=np.int64)
        return [pb_utils.InferenceResponse([pb_utils.Tensor("PID", pid)]) for _ in requests]
"""

_HANGS_IN_INITIALIZE_PY = """
import time


class TritonPythonModel:
    def initialize(self, args):
        time.sleep(3600)

    def execute(self, requests):
        raise NotImplementedError
"""

# Loads "metered" from its initialize (BLS), and answers with metered's answer.
_LOADER_PY = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        pb_utils.load_model("metered")

    def execute(self, requests):
        responses = []
        for request in requests:
            inner = pb_utils.InferenceRequest(
                model_name="metered",
                requested_output_names=["PID"],
                inputs=[pb_utils.get_input_tensor_by_name(request, "IN")],
            ).exec()
            if inner.has_error():
                raise pb_utils.TritonModelException(inner.error().message())
            pid = pb_utils.get_output_tensor_by_name(inner, "PID")
            responses.append(pb_utils.InferenceResponse([pid]))
        return responses
"""

_MODELS = {
    "metered": _METERED_PY,
    "hangs": _HANGS_PY,
    "hangs_in_initialize": _HANGS_IN_INITIALIZE_PY,
    "loader": _LOADER_PY,
}


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("workers-models")
    for name, code in _MODELS.items():
        (root / name / "1").mkdir(parents=True)
        (root / name / "config.pbtxt").write_text(
            textwrap.dedent(PID_MODEL_CONFIG.format(name=name))
        )
        (root / name / "1" / "model.py").write_text(code)
    return root


@pytest.fixture(scope="module")
def server(repository: Path) -> Iterator[ServerHandle]:
    with run_pytriton_server(
        repository,
        "--workers=2",
        "--model-control-mode=explicit",
        f"--worker-change-timeout-secs={CHANGE_TIMEOUT_S}",
        metrics=True,
    ) as handle:
        yield handle


def _infer(url: str, model: str, value: float = 0.0) -> int:
    return answering_pid(url, model, "IN", value)


def _scrape(handle: ServerHandle) -> dict[str, dict[str, float]]:
    """family -> sample name (with its ``le``) -> value, for the ``metered`` label set."""
    text = metrics_page(handle)
    found: dict[str, dict[str, float]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.labels.get("model") == "metered" and family.name.startswith("m17_"):
                key = sample.name + (
                    f"{{le={sample.labels['le']}}}" if "le" in sample.labels else ""
                )
                found.setdefault(family.name, {})[key] = float(sample.value)
    return found


def _load(handle: ServerHandle, model: str) -> None:
    client = grpcclient.InferenceServerClient(handle.grpc_url)
    try:
        client.load_model(model)
    finally:
        client.close()


def _unload(handle: ServerHandle, model: str) -> None:
    client = httpclient.InferenceServerClient(handle.http_url, network_timeout=WAIT_S)
    try:
        client.unload_model(model)
    finally:
        client.close()


def test_custom_metric_families_are_summed_over_the_workers(server: ServerHandle) -> None:
    _load(server, "metered")
    pids = {_infer(server.http_url, "metered", value) for value in [0.5, 1.5, 3.0] * 8}
    assert pids == set(worker_pids(server).values()), "both workers should have answered"
    expected = {
        "m17_requests": {"m17_requests_total": 24.0},  # the parser drops _total
        "m17_queued": {"m17_queued": 24.0},
        "m17_sizes": {
            "m17_sizes_count": 24.0,
            "m17_sizes_sum": 8 * 5.0,
            "m17_sizes_bucket{le=1}": 8.0,
            "m17_sizes_bucket{le=2}": 16.0,
            "m17_sizes_bucket{le=+Inf}": 24.0,
        },
    }
    # The scraping worker's own families are as of now, the other's as of its last second.
    deadline = time.monotonic() + WAIT_S
    while _scrape(server) != expected and time.monotonic() < deadline:
        time.sleep(0.2)
    for _ in range(6):  # each scrape reaches either worker: each shows the sums
        assert _scrape(server) == expected


def test_a_worker_hung_in_execute_fails_the_unload_by_name_and_is_restarted(
    server: ServerHandle, repository: Path
) -> None:
    _load(server, "hangs")
    mark = repository / "hangs" / "hung-pid"
    mark.unlink(missing_ok=True)

    def hang() -> None:
        try:
            _infer(server.http_url, "hangs", 1.0)
        except Exception:  # lost with the hung worker, as it should be
            return

    stuck = threading.Thread(target=hang, daemon=True)
    stuck.start()
    deadline = time.monotonic() + WAIT_S
    while not mark.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    hung_pid = int(mark.read_text())
    (hung_index,) = [i for i, pid in worker_pids(server).items() if pid == hung_pid]
    # Its unload waits for the hung request: the change times out naming that worker (or,
    # if this connection reached the hung worker itself, it closes when the worker is killed).
    try:
        _unload(server, "hangs")
    except InferenceServerException as exc:
        assert f"worker {hung_index} (pid {hung_pid})" in str(exc), exc
        assert "hung" in str(exc)
    wait_restarted(server, hung_index, hung_pid)
    assert f"worker {hung_index} (pid {hung_pid}) is hung: killed" in server.log()
    stuck.join(WAIT_S)
    # The server recovered: changes go through, every worker serves what it should.
    _load(server, "metered")
    assert {_infer(server.http_url, "metered") for _ in range(16)} == set(
        worker_pids(server).values()
    )
    client = httpclient.InferenceServerClient(server.http_url)
    states = {m["name"]: m.get("state") for m in client.get_model_repository_index()}
    client.close()
    assert states["hangs"] != "READY"


def test_a_load_hung_in_initialize_fails_naming_the_workers_and_they_restart(
    server: ServerHandle,
) -> None:
    before = worker_pids(server)
    with pytest.raises(InferenceServerException, match="hung") as caught:
        client = httpclient.InferenceServerClient(server.http_url, network_timeout=WAIT_S)
        try:
            client.load_model("hangs_in_initialize")
        finally:
            client.close()
    assert re.search(r"worker \d \(pid \d+\)", str(caught.value)), caught.value
    for index, pid in before.items():  # it hangs in every worker: each is killed
        wait_restarted(server, index, pid)
        assert f"worker {index} (pid {pid}) is hung: killed" in server.log()
    _load(server, "metered")
    assert _infer(server.http_url, "metered") in set(worker_pids(server).values())


def test_a_model_that_loads_a_model_in_initialize_loads_on_every_worker(
    server: ServerHandle,
) -> None:
    _unload(server, "metered")
    finished = threading.Event()

    def load() -> None:
        _load(server, "loader")
        finished.set()

    threading.Thread(target=load, daemon=True).start()
    assert finished.wait(WAIT_S), "the load of a model that loads a model never returned"
    pids = set(worker_pids(server).values())
    assert {_infer(server.http_url, "loader") for _ in range(16)} == pids
    assert {_infer(server.http_url, "metered") for _ in range(16)} == pids
