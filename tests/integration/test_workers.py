"""``--workers 2``: two server processes behind the same ports are one server to the real
``tritonclient``: statistics and ``/metrics`` count every request whichever worker
answered it, readiness waits for both, a killed worker loses only what it had in flight
and is started again, and SIGTERM drains both.

The model answers with the pid of the process that ran it, so the tests see that both
workers serve (the kernel spreads connections over the SO_REUSEPORT listeners).
"""

from __future__ import annotations

import json
import os
import signal
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from harness import ServerHandle, run_pytriton_server
from prometheus_client.parser import text_string_to_metric_families
from streaming_models import write_tokens
from tritonclient.utils import InferenceServerException
from workers_common import WAIT_S, answering_pid, metrics_page
from workers_common import wait_ready as _wait_ready
from workers_common import wait_restarted as _wait_restarted
from workers_common import worker_pids as _worker_pids

MODEL = "whoami"
STREAMING = "tokens"  # decoupled: "count" responses, then an empty final one

_CONFIG = """
name: "whoami"
backend: "python"
max_batch_size: 0
input [ { name: "DELAY_S", data_type: TYPE_FP32, dims: [ 1 ] } ]
output [ { name: "PID", data_type: TYPE_INT64, dims: [ 1 ] } ]
instance_group [ { count: 1, kind: KIND_CPU } ]
"""

_MODEL_PY = """
import os
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            delay = float(pb_utils.get_input_tensor_by_name(request, "DELAY_S").as_numpy()[0])
            time.sleep(delay)
            pid = np.array([os.getpid()], dtype=np.int64)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("PID", pid)]))
        return responses
"""


def _write_repository(root: Path) -> Path:
    model = root / MODEL
    (model / "1").mkdir(parents=True)
    (model / "config.pbtxt").write_text(textwrap.dedent(_CONFIG))
    (model / "1" / "model.py").write_text(_MODEL_PY)
    return root


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerHandle]:
    repository = _write_repository(tmp_path_factory.mktemp("workers"))
    write_tokens(repository, STREAMING)
    with run_pytriton_server(
        repository, "--workers=2", "--allow-client-shm=true", metrics=True
    ) as h:
        yield h


def _http_infer(url: str, delay_s: float = 0.0) -> int:
    return answering_pid(url, MODEL, "DELAY_S", delay_s)


def _grpc_infer(url: str) -> int:
    client = grpcclient.InferenceServerClient(url)
    try:
        data = grpcclient.InferInput("DELAY_S", [1], "FP32")
        data.set_data_from_numpy(np.array([0.0], dtype=np.float32))
        return int(client.infer(MODEL, [data]).as_numpy("PID")[0])
    finally:
        client.close()


def _success_count(url: str) -> int:
    client = httpclient.InferenceServerClient(url)
    try:
        stats = client.get_inference_statistics(MODEL)["model_stats"][0]
        count: int = stats["inference_stats"]["success"]["count"]
        assert stats["inference_count"] == count
        return count
    finally:
        client.close()


def _metric(
    handle: ServerHandle, family: str, model: str = MODEL, sample: str | None = None
) -> float:
    """``model``'s value of ``family`` (of its ``sample``, as ``_count`` of a histogram)."""
    text = metrics_page(handle)
    for parsed in text_string_to_metric_families(text):
        for found in parsed.samples if parsed.name == family else ():
            wanted = sample is None or found.name == family + sample
            if found.labels.get("model") == model and wanted:
                return float(found.value)
    raise AssertionError(f"{family} not on the metrics page")


def test_statistics_and_metrics_count_every_request(server: ServerHandle) -> None:
    before = _success_count(server.http_url)
    pids = {_http_infer(server.http_url) for _ in range(24)}
    pids |= {_grpc_infer(server.grpc_url) for _ in range(16)}
    assert pids == set(_worker_pids(server).values()), "both workers should have answered"
    # Each statistics request reaches either worker; each reports the sum.
    for _ in range(6):
        assert _success_count(server.http_url) == before + 40
    client = grpcclient.InferenceServerClient(server.grpc_url)
    stats = client.get_inference_statistics(MODEL, as_json=True)["model_stats"][0]
    client.close()
    assert int(stats["inference_stats"]["success"]["count"]) == before + 40
    assert int(stats["execution_count"]) == before + 40
    for _ in range(4):
        assert _metric(server, "nv_inference_request_success") == before + 40
        assert _metric(server, "nv_inference_count") == before + 40


def _stream_two_tokens(url: str) -> None:
    """One request to the decoupled model on a gRPC stream of its own; until its end."""
    ended = threading.Event()
    errors: list[object] = []

    def on_response(result: object, error: object) -> None:
        if error is not None:
            errors.append(error)
            ended.set()
        elif (
            result is not None
            and result.get_response()
            .parameters[  # type: ignore[attr-defined]
                "triton_final_response"
            ]
            .bool_param
        ):
            ended.set()

    client = grpcclient.InferenceServerClient(url)
    client.start_stream(on_response)
    text = grpcclient.InferInput("text_input", [1], "BYTES")
    text.set_data_from_numpy(np.array([b"t"], np.object_))
    count = grpcclient.InferInput("count", [1], "INT32")
    count.set_data_from_numpy(np.array([2], np.int32))
    client.async_stream_infer(STREAMING, [text, count], enable_empty_final_response=True)
    assert ended.wait(WAIT_S) and not errors, errors
    client.stop_stream()
    client.close()


def test_response_stats_and_histograms_are_sums(server: ServerHandle) -> None:
    requests = 16  # each on a connection of its own: the kernel spreads them over both
    for _ in range(requests):
        _stream_two_tokens(server.grpc_url)
    for _ in range(6):
        reader = _fresh_http(server.http_url)
        (stats,) = reader.get_inference_statistics(STREAMING)["model_stats"]
        reader.close()
        by_index = {i: r["success"]["count"] for i, r in stats["response_stats"].items()}
        assert by_index == {"0": requests, "1": requests, "2": 0}, stats["response_stats"]
        assert stats["response_stats"]["2"]["empty_response"]["count"] == requests
        first = "nv_inference_first_response_histogram_ms"
        assert _metric(server, first, STREAMING, "_count") == requests
    # The latency histograms (on by default) of the other model are sums too.
    successes = _success_count(server.http_url)
    family = "nv_inference_request_duration_histogram_us"
    assert _metric(server, family, MODEL, "_count") == successes


def _fresh_http(url: str) -> httpclient.InferenceServerClient:
    return httpclient.InferenceServerClient(url)


def test_log_and_trace_settings_changed_through_one_worker_hold_for_all(
    server: ServerHandle,
) -> None:
    client = _fresh_http(server.http_url)
    client.update_log_settings({"log_verbose_level": 2})
    client.update_trace_settings(settings={"trace_rate": "7"})
    client.close()
    for _ in range(12):  # each on a new connection, so both workers answer some
        reader = _fresh_http(server.http_url)
        assert reader.get_log_settings()["log_verbose_level"] == 2
        assert reader.get_trace_settings()["trace_rate"] == "7"
        reader.close()
    grpc = grpcclient.InferenceServerClient(server.grpc_url)
    grpc.update_log_settings({"log_verbose_level": 0})
    grpc.close()
    for _ in range(8):
        reader = _fresh_http(server.http_url)
        assert reader.get_log_settings()["log_verbose_level"] == 0
        reader.close()


def test_a_region_registered_on_one_connection_serves_requests_on_all(
    server: ServerHandle,
) -> None:
    import tritonclient.utils.shared_memory as shm

    key = f"/workers_test_{os.getpid()}"
    handle = shm.create_shared_memory_region("workers_in", key, 4)
    try:
        shm.set_shared_memory_region(handle, [np.array([0.0], dtype=np.float32)])
        client = _fresh_http(server.http_url)
        client.register_system_shared_memory("workers_in", key, 4)
        client.close()
        pids = set()
        for _ in range(24):
            other = _fresh_http(server.http_url)
            assert [r["name"] for r in other.get_system_shared_memory_status()] == ["workers_in"]
            data = httpclient.InferInput("DELAY_S", [1], "FP32")
            data.set_shared_memory("workers_in", 4)
            pids.add(int(other.infer(MODEL, [data]).as_numpy("PID")[0]))
            other.close()
        assert pids == set(_worker_pids(server).values())
        client = _fresh_http(server.http_url)
        client.unregister_system_shared_memory("workers_in")
        client.close()
        for _ in range(8):
            other = _fresh_http(server.http_url)
            assert other.get_system_shared_memory_status() == []
            other.close()
    finally:
        shm.destroy_shared_memory_region(handle)


def test_a_killed_worker_loses_only_its_requests_and_comes_back(server: ServerHandle) -> None:
    pids = _worker_pids(server)
    victim = pids[0]
    counted = _success_count(server.http_url)
    setter = _fresh_http(server.http_url)
    setter.update_trace_settings(settings={"trace_rate": "9"})
    setter.close()
    # Slow requests on their own connections: those the victim runs are lost with it,
    # the others complete.
    results: list[int | str] = []

    def slow() -> None:
        try:
            results.append(_http_infer(server.http_url, delay_s=1.5))
        except Exception as exc:
            results.append(type(exc).__name__)

    threads = [threading.Thread(target=slow) for _ in range(12)]
    for thread in threads:
        thread.start()
    time.sleep(0.75)
    os.kill(victim, signal.SIGKILL)
    for thread in threads:
        thread.join(WAIT_S)
    survivors = [r for r in results if isinstance(r, int)]
    lost = [r for r in results if not isinstance(r, int)]
    assert len(results) == 12
    assert victim not in survivors, results
    assert survivors, "the surviving worker's requests should have completed"
    # The parent starts worker 0 again; the server is ready once it serves.
    deadline = time.monotonic() + WAIT_S
    while _worker_pids(server)[0] == victim and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _worker_pids(server)[0] != victim, "the parent did not start the worker again"
    _wait_ready(server.http_url, True)
    # What the dead worker completed still counts; what it lost does not.
    assert _success_count(server.http_url) == counted + len(survivors)
    served = {_http_infer(server.http_url) for _ in range(24)}
    assert served == set(_worker_pids(server).values())
    assert all(isinstance(r, str) for r in lost)
    for _ in range(12):  # the new worker took the others' settings
        reader = _fresh_http(server.http_url)
        assert reader.get_trace_settings()["trace_rate"] == "9"
        reader.close()


def test_sigterm_drains_every_worker(tmp_path: Path) -> None:
    repository = _write_repository(tmp_path / "repository")
    with run_pytriton_server(repository, "--workers=2", check_exit=False) as handle:
        pids = _worker_pids(handle)
        results: list[int] = []
        in_flight = threading.Thread(
            target=lambda: results.append(_http_infer(handle.http_url, delay_s=1.0))
        )
        in_flight.start()
        time.sleep(0.3)
        handle.process.send_signal(signal.SIGTERM)
        in_flight.join(WAIT_S)
        assert handle.process.wait(WAIT_S) == 0, handle.log()
    assert results and results[0] in pids.values(), "the request in flight was not finished"
    for pid in pids.values():
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


@pytest.fixture(scope="module")
def explicit_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerHandle]:
    repository = _write_repository(tmp_path_factory.mktemp("explicit"))
    with run_pytriton_server(repository, "--workers=2", "--model-control-mode=explicit") as h:
        yield h


def _served_by(url: str, connections: int = 24) -> set[int | str]:
    """What ``connections`` requests, each on its own connection, got: the pid of the worker
    that answered, or the error."""
    answers: set[int | str] = set()
    for _ in range(connections):
        try:
            answers.add(_http_infer(url))
        except InferenceServerException as exc:
            answers.add(str(exc.status()))
    return answers


def test_a_model_loaded_or_unloaded_through_one_connection_is_so_for_all(
    explicit_server: ServerHandle,
) -> None:
    url = explicit_server.http_url
    pids = set(_worker_pids(explicit_server).values())
    assert _served_by(url, 8) == {"404"}  # not loaded anywhere
    client = httpclient.InferenceServerClient(url)
    client.load_model(MODEL)
    assert _served_by(url) == pids  # every worker serves it, on every connection
    grpc = grpcclient.InferenceServerClient(explicit_server.grpc_url)
    grpc.unload_model(MODEL)
    grpc.close()
    unloaded = _served_by(url, 12)
    assert len(unloaded) == 1 and unloaded & {"400", "404"}, unloaded  # no worker serves it
    for _ in range(8):  # each index request reaches either worker
        fresh = httpclient.InferenceServerClient(url)
        (entry,) = fresh.get_model_repository_index()
        fresh.close()
        assert entry["name"] == MODEL and entry["state"] == "UNAVAILABLE"
    client.load_model(MODEL)
    client.close()


def test_a_restarted_worker_serves_the_models_loaded_before(
    explicit_server: ServerHandle,
) -> None:
    url = explicit_server.http_url
    client = httpclient.InferenceServerClient(url)
    client.load_model(MODEL)
    client.close()
    victim = _worker_pids(explicit_server)[1]
    os.kill(victim, signal.SIGKILL)
    _wait_restarted(explicit_server, 1, victim)
    assert _served_by(url) == set(_worker_pids(explicit_server).values())


def _wait_gone(pid: int) -> None:
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.01)
    raise AssertionError(f"process {pid} still there")


_NEGATED_PY = _MODEL_PY.replace("[os.getpid()]", "[-os.getpid()]")  # a file: override
_CONFIG_JSON = json.dumps(
    {
        "name": MODEL,
        "backend": "python",
        "max_batch_size": 0,
        "input": [{"name": "DELAY_S", "data_type": "TYPE_FP32", "dims": [1]}],
        "output": [{"name": "PID", "data_type": "TYPE_INT64", "dims": [1]}],
        "instance_group": [{"count": 1, "kind": "KIND_CPU"}],
    }
)


def test_a_reload_while_a_worker_is_down_counts_from_the_reload_and_reaches_it(
    explicit_server: ServerHandle,
) -> None:
    url = explicit_server.http_url
    client = httpclient.InferenceServerClient(url)
    client.load_model(MODEL)
    client.update_trace_settings(MODEL, {"trace_rate": "3"})
    pids = set(_worker_pids(explicit_server).values())
    assert _served_by(url) == pids  # both have counts of this load
    victim = _worker_pids(explicit_server)[1]
    os.kill(victim, signal.SIGKILL)
    _wait_gone(victim)  # a connection queued at its listener as it died would be reset
    # While worker 1 is down (or starting), the model is unloaded and loaded again from
    # other files, through whichever worker a connection reaches.
    client.close()
    client = httpclient.InferenceServerClient(url)
    client.unload_model(MODEL)
    client.load_model(MODEL, config=_CONFIG_JSON, files={"file:1/model.py": _NEGATED_PY.encode()})
    client.close()
    _wait_restarted(explicit_server, 1, victim)
    pids = set(_worker_pids(explicit_server).values())
    answers = _served_by(url)
    # Both workers serve the override's code, the restarted one too.
    assert answers == {-pid for pid in pids}, answers
    # Only the requests since the reload count, whichever worker reads (the dead worker's
    # counts of the earlier load are not added to this one).
    for _ in range(6):
        assert _success_count(url) == 24
    for _ in range(6):
        reader = _fresh_http(url)
        assert reader.get_trace_settings(MODEL)["trace_rate"] == "3"
        reader.close()


def test_workers_of_a_killed_parent_stop(tmp_path: Path) -> None:
    repository = _write_repository(tmp_path / "repository")
    with run_pytriton_server(repository, "--workers=2", check_exit=False) as handle:
        pids = _worker_pids(handle)
        handle.process.kill()  # the parent cannot drain them: they see it gone
        handle.process.wait(WAIT_S)
        deadline = time.monotonic() + WAIT_S
        alive = set(pids.values())
        while alive and time.monotonic() < deadline:
            for pid in list(alive):
                try:
                    os.kill(pid, 0)
                except ProcessLookupError:
                    alive.discard(pid)
            time.sleep(0.1)
        assert not alive, handle.log()
