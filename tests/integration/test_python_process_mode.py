"""Python models in process mode (EXECUTION_MODE: "process"), through the real tritonclient:
answers, crash isolation and restart, decoupled streams, per-model environments."""

from __future__ import annotations

import subprocess
import sys
import time
import urllib.request
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from harness import ServerHandle, run_pytriton_server, write_python_model
from process_mode_models import IDENTITY
from prometheus_client.parser import text_string_to_metric_families
from tritonclient.utils import InferenceServerException

from bench import procstats

IDENTITY_CONFIG = """
name: "{name}"
backend: "python"
max_batch_size: 8
input [ {{ name: "IN" data_type: TYPE_FP32 dims: [ -1 ] }},
        {{ name: "TEXT" data_type: TYPE_STRING dims: [ -1 ] }} ]
output [ {{ name: "OUT" data_type: TYPE_FP32 dims: [ -1 ] }},
         {{ name: "TEXT_OUT" data_type: TYPE_STRING dims: [ -1 ] }} ]
parameters {{ key: "EXECUTION_MODE" value {{ string_value: "process" }} }}
"""

# What CRASHY does is picked by its input: 1 exits, 2 segfaults, 3 hangs, 4 leaks;
# 5 answers, then the whole process freezes (SIGSTOP) while idle.
CRASHY = """
import ctypes, os, signal, threading, time
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def initialize(self, args):
        self.hoard = []
    def execute(self, requests):
        out = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            what = int(x.reshape(-1)[0])
            if what == 1:
                os._exit(1)
            if what == 2:
                ctypes.string_at(0)
            if what == 3:
                time.sleep(600)
            if what == 4:
                while True:
                    self.hoard.append(b"x" * (16 << 20))
                    time.sleep(0.01)
            if what == 5:
                freeze = lambda: (time.sleep(0.3), os.kill(os.getpid(), signal.SIGSTOP))
                threading.Thread(target=freeze, daemon=True).start()
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", x + 1)]))
        return out
"""

CRASHY_CONFIG = """
name: "crashy"
backend: "python"
max_batch_size: 0
input [ { name: "IN" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 1 ] } ]
parameters { key: "EXECUTION_MODE" value { string_value: "process" } }
parameters { key: "PROCESS_EXECUTE_TIMEOUT_SECONDS" value { string_value: "3" } }
parameters { key: "PROCESS_MEMORY_LIMIT_BYTES" value { string_value: "400000000" } }
"""

STREAM = """
import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            n = int(pb_utils.get_input_tensor_by_name(request, "N").as_numpy()[0])
            sender = request.get_response_sender()
            for i in range(n):
                sender.send(pb_utils.InferenceResponse(
                    [pb_utils.Tensor("OUT", np.array([i], dtype=np.int32))]))
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
"""

STREAM_CONFIG = """
name: "stream"
backend: "python"
max_batch_size: 0
model_transaction_policy { decoupled: true }
input [ { name: "N" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
parameters { key: "EXECUTION_MODE" value { string_value: "process" } }
"""

# Custom metrics from two worker processes (two instances): the server sums their series.
METRICS = """
import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def initialize(self, args):
        labels = {"model": args["model_name"]}
        self.requests = pb_utils.MetricFamily(
            "proc_requests", "Requests executed", pb_utils.MetricFamily.COUNTER
        ).Metric(labels)
        self.last = pb_utils.MetricFamily(
            "proc_last_size", "Size of the last input", pb_utils.MetricFamily.GAUGE
        ).Metric(labels)
        self.sizes = pb_utils.MetricFamily(
            "proc_sizes", "Input sizes", pb_utils.MetricFamily.HISTOGRAM
        ).Metric(labels, buckets=[1.0, 4.0])

    def execute(self, requests):
        out = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            self.requests.increment(1)
            self.last.set(x.size)
            self.sizes.observe(x.size)
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", x)]))
        return out
"""

METRICS_CONFIG = """
name: "metrics"
backend: "python"
max_batch_size: 0
input [ { name: "IN" data_type: TYPE_FP32 dims: [ -1 ] } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ -1 ] } ]
instance_group [ { count: 2 kind: KIND_CPU } ]
parameters { key: "EXECUTION_MODE" value { string_value: "process" } }
"""

VERSIONED = """
import numpy as np
import confpkg
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        version = np.array([confpkg.VERSION.encode()], dtype=np.object_)
        return [pb_utils.InferenceResponse([pb_utils.Tensor("VERSION", version)])
                for _ in requests]
"""

VERSIONED_CONFIG = """
name: "{name}"
backend: "python"
max_batch_size: 0
input [ {{ name: "IN" data_type: TYPE_FP32 dims: [ 1 ] }} ]
output [ {{ name: "VERSION" data_type: TYPE_STRING dims: [ 1 ] }} ]
parameters {{ key: "EXECUTION_ENV_PATH" value {{ string_value: "$$TRITON_MODEL_DIRECTORY/env" }} }}
"""


# Its config comes from auto_complete_config, which imports a package only its own
# environment has: the hook runs in a process with the model's interpreter, as in Triton.
COMPLETED = (
    VERSIONED
    + """
    @staticmethod
    def auto_complete_config(config):
        import confpkg
        config.add_input({"name": "IN", "data_type": "TYPE_FP32", "dims": [1]})
        config.add_output({"name": "VERSION", "data_type": "TYPE_STRING", "dims": [1]})
        config.set_max_batch_size(0)
        return config
"""
)

COMPLETED_CONFIG = """
name: "completed"
backend: "python"
parameters { key: "EXECUTION_ENV_PATH" value { string_value: "$$TRITON_MODEL_DIRECTORY/env" } }
"""


def _wheel(folder: Path, version: str) -> Path:
    """A pure-Python wheel of ``confpkg`` at ``version``, made by hand (no build, no index)."""
    dist = f"confpkg-{version}.dist-info"
    files = {
        "confpkg/__init__.py": f"VERSION = {version!r}\n",
        f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: confpkg\nVersion: {version}\n",
        f"{dist}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
        "Tag: py3-none-any\n",
    }
    path = folder / f"confpkg-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as wheel:
        for name, text in files.items():
            wheel.writestr(name, text)
        wheel.writestr(f"{dist}/RECORD", "".join(f"{name},,\n" for name in [*files, dist]))
    return path


def _env_with_package(env: Path, version: str) -> None:
    """A virtual environment whose only package is ``confpkg`` at ``version``."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env)], check=True)
    site = next(env.glob("lib/python*/site-packages"))
    (site / "confpkg").mkdir()
    (site / "confpkg" / "__init__.py").write_text(f"VERSION = {version!r}\n")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerHandle]:
    root = tmp_path_factory.mktemp("process_mode")
    write_python_model(root, "identity", IDENTITY_CONFIG.format(name="identity"), IDENTITY)
    in_process = IDENTITY_CONFIG.format(name="identity_in").replace('"process"', '"in_process"')
    write_python_model(root, "identity_in", in_process, IDENTITY)
    write_python_model(root, "crashy", CRASHY_CONFIG, CRASHY)
    write_python_model(root, "stream", STREAM_CONFIG, STREAM)
    write_python_model(root, "metrics", METRICS_CONFIG, METRICS)
    for name, version in (("pkg_one", "1.0"), ("pkg_two", "2.0")):
        model_dir = write_python_model(root, name, VERSIONED_CONFIG.format(name=name), VERSIONED)
        _env_with_package(model_dir / "env", version)
    # A requirements.txt: installed once into a cached environment of the server's Python.
    model_dir = write_python_model(
        root,
        "pkg_req",
        VERSIONED_CONFIG.format(name="pkg_req").replace("/env", "/requirements.txt"),
        VERSIONED,
    )
    (model_dir / "requirements.txt").write_text(f"./{_wheel(model_dir, '4.0').name}\n")
    model_dir = write_python_model(root, "completed", COMPLETED_CONFIG, COMPLETED)
    _env_with_package(model_dir / "env", "3.0")
    cache = f"--backend-config=python,execution-env-cache-dir={root / 'env-cache'}"
    with run_pytriton_server(root, cache, metrics=True) as handle:
        yield handle


def _identity(client: httpclient.InferenceServerClient, model: str) -> None:
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    text = np.array([[b"a", b"bc"], [b"", b"d"]], dtype=np.object_)
    inputs = [
        httpclient.InferInput("IN", [2, 3], "FP32"),
        httpclient.InferInput("TEXT", [2, 2], "BYTES"),
    ]
    inputs[0].set_data_from_numpy(x, binary_data=True)
    inputs[1].set_data_from_numpy(text, binary_data=True)
    result = client.infer(model, inputs)
    np.testing.assert_array_equal(result.as_numpy("OUT"), x * 2)
    expected = np.array([[b"a!", b"bc!"], [b"!", b"d!"]], dtype=np.object_)
    np.testing.assert_array_equal(result.as_numpy("TEXT_OUT"), expected)


def test_identity_answers_from_worker_process(server: ServerHandle) -> None:
    client = httpclient.InferenceServerClient(server.http_url)
    for _ in range(3):
        _identity(client, "identity")
    big = np.random.default_rng(0).random((8, 300_000), dtype=np.float32)  # grows the arenas
    inputs = [
        httpclient.InferInput("IN", list(big.shape), "FP32"),
        httpclient.InferInput("TEXT", [8, 1], "BYTES"),
    ]
    inputs[0].set_data_from_numpy(big, binary_data=True)
    inputs[1].set_data_from_numpy(np.full((8, 1), b"x", dtype=np.object_), binary_data=True)
    np.testing.assert_array_equal(client.infer("identity", inputs).as_numpy("OUT"), big * 2)
    _identity(client, "identity")
    stats = client.get_inference_statistics("identity")["model_stats"][0]
    assert int(stats["inference_stats"]["success"]["count"]) >= 5


def test_concurrent_requests_each_get_their_own_answer(server: ServerHandle) -> None:
    """Requests queued on the loop while the worker executes (the loop hands them out one
    by one as answers come back): each answer is its own request's, and all are counted."""
    client = httpclient.InferenceServerClient(server.http_url, concurrency=8)
    before = client.get_inference_statistics("identity")["model_stats"][0]
    pending = []
    for index in range(40):
        x = np.full((1, 3), index, dtype=np.float32)
        inputs = [
            httpclient.InferInput("IN", [1, 3], "FP32"),
            httpclient.InferInput("TEXT", [1, 1], "BYTES"),
        ]
        inputs[0].set_data_from_numpy(x, binary_data=True)
        inputs[1].set_data_from_numpy(np.array([[str(index).encode()]], dtype=np.object_))
        pending.append((index, client.async_infer("identity", inputs)))
    for index, call in pending:
        result = call.get_result()
        np.testing.assert_array_equal(result.as_numpy("OUT"), np.full((1, 3), 2 * index))
        assert result.as_numpy("TEXT_OUT").tolist() == [[f"{index}!".encode()]]
    after = client.get_inference_statistics("identity")["model_stats"][0]
    done = int(after["inference_stats"]["success"]["count"])
    assert done - int(before["inference_stats"]["success"]["count"]) == 40
    client.close()


def _crashy(client: httpclient.InferenceServerClient, what: float) -> np.ndarray:
    inputs = [httpclient.InferInput("IN", [1], "FP32")]
    inputs[0].set_data_from_numpy(np.array([what], dtype=np.float32))
    out: np.ndarray = client.infer("crashy", inputs).as_numpy("OUT")
    return out


def _wait_ready(client: httpclient.InferenceServerClient, model: str) -> None:
    deadline = time.monotonic() + 120
    while not client.is_model_ready(model):
        assert time.monotonic() < deadline, f"{model} did not come back"
        time.sleep(0.1)


@pytest.mark.parametrize(
    ("what", "words"),
    [
        (1.0, "exit code 1"),
        (2.0, "SIGSEGV"),
        (3.0, "PROCESS_EXECUTE_TIMEOUT_SECONDS=3"),
        (4.0, "PROCESS_MEMORY_LIMIT_BYTES=400000000"),
    ],
    ids=["os_exit", "segfault", "hang", "leak"],
)
def test_worker_failure_is_isolated_and_restarted(
    server: ServerHandle, what: float, words: str
) -> None:
    client = httpclient.InferenceServerClient(server.http_url, network_timeout=120)
    _wait_ready(client, "crashy")
    np.testing.assert_array_equal(_crashy(client, 10.0), [11.0])
    with pytest.raises(InferenceServerException) as failed:
        _crashy(client, what)
    message = str(failed.value)
    assert "crashy" in message and "worker process died" in message and words in message
    assert not client.is_model_ready("crashy")
    assert client.is_server_live()
    _identity(client, "identity")  # the other models never notice
    _identity(client, "identity_in")
    _wait_ready(client, "crashy")
    np.testing.assert_array_equal(_crashy(client, 41.0), [42.0])


def test_decoupled_stream_from_worker(server: ServerHandle) -> None:
    received: list[object] = []
    client = grpcclient.InferenceServerClient(server.grpc_url)
    client.start_stream(callback=lambda result, error: received.append(error or result))
    inputs = [grpcclient.InferInput("N", [1], "INT32")]
    inputs[0].set_data_from_numpy(np.array([4], dtype=np.int32))
    client.async_stream_infer("stream", inputs)
    client.stop_stream()  # waits for the stream to end
    values = [int(r.as_numpy("OUT")[0]) for r in received]  # type: ignore[attr-defined]
    assert values == [0, 1, 2, 3]


def test_each_model_gets_its_own_environment(server: ServerHandle) -> None:
    client = httpclient.InferenceServerClient(server.http_url)
    inputs = [httpclient.InferInput("IN", [1], "FP32")]
    inputs[0].set_data_from_numpy(np.array([0], dtype=np.float32))
    for model, version in (("pkg_one", b"1.0"), ("pkg_two", b"2.0"), ("pkg_req", b"4.0")):
        assert client.infer(model, inputs).as_numpy("VERSION")[0] == version


def test_a_frozen_idle_worker_is_detected_and_restarted(server: ServerHandle) -> None:
    client = httpclient.InferenceServerClient(server.http_url, network_timeout=120)
    _wait_ready(client, "crashy")
    np.testing.assert_array_equal(_crashy(client, 5.0), [6.0])  # then it freezes
    deadline = time.monotonic() + 60
    while client.is_model_ready("crashy"):
        assert time.monotonic() < deadline, "the frozen worker was never noticed"
        time.sleep(0.05)
    _identity(client, "identity")
    _wait_ready(client, "crashy")
    np.testing.assert_array_equal(_crashy(client, 41.0), [42.0])
    assert "no heartbeat for PROCESS_HEARTBEAT_TIMEOUT_SECONDS=1 s" in server.log()


def _scrape(server: ServerHandle) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    """sample name -> labels -> value, from the server's /metrics page."""
    assert server.metrics_url is not None
    with urllib.request.urlopen(f"http://{server.metrics_url}/metrics", timeout=30) as page:
        text = page.read().decode()
    samples: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = tuple(sorted(sample.labels.items()))
            samples.setdefault(sample.name, {})[labels] = sample.value
    return samples


def test_custom_metrics_of_worker_processes_reach_metrics(server: ServerHandle) -> None:
    client = httpclient.InferenceServerClient(server.http_url)
    sizes = [1, 3, 10, 2]
    results: list[Any] = []
    for size in sizes:  # in flight together: both instances (worker processes) execute
        inputs = [httpclient.InferInput("IN", [size], "FP32")]
        inputs[0].set_data_from_numpy(np.ones(size, np.float32))
        results.append(client.async_infer("metrics", inputs))
    for result in results:
        result.get_result()
    samples = _scrape(server)
    model = (("model", "metrics"),)
    assert samples["proc_requests_total"][model] == 4
    assert samples["proc_last_size"][model] in sizes
    assert samples["proc_sizes_count"][model] == 4
    assert samples["proc_sizes_sum"][model] == sum(sizes)
    buckets = {dict(labels)["le"]: v for labels, v in samples["proc_sizes_bucket"].items()}
    assert buckets == {"1": 1, "4": 3, "+Inf": 4}
    stats = client.get_inference_statistics("metrics")["model_stats"][0]
    assert int(stats["execution_count"]) == 4


def test_auto_complete_config_runs_in_the_models_environment(server: ServerHandle) -> None:
    client = httpclient.InferenceServerClient(server.http_url)
    config = client.get_model_config("completed")
    assert [i["name"] for i in config["input"]] == ["IN"]
    inputs = [httpclient.InferInput("IN", [1], "FP32")]
    inputs[0].set_data_from_numpy(np.array([0], dtype=np.float32))
    assert client.infer("completed", inputs).as_numpy("VERSION")[0] == b"3.0"


POLLED_CONFIG = """
name: "polled"
backend: "python"
max_batch_size: 0
input [ { name: "IN" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 4 ] } ]
parameters { key: "EXECUTION_MODE" value { string_value: "process" } }
"""
POLLED_MODEL = """
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor(
            "OUT", pb_utils.get_input_tensor_by_name(r, "IN").as_numpy() + 1)]) for r in requests]
"""


def _sleeps(pid: int) -> int:
    """How often a process's main thread has gone to sleep so far."""
    status = Path(f"/proc/{pid}/task/{pid}/status").read_text()
    return int(status.split("voluntary_ctxt_switches:")[1].split()[0])


def _worker_pid(server: ServerHandle) -> int:
    server_pid = server.process.pid
    (worker,) = [pid for pid in procstats.process_tree(server_pid) if pid != server_pid]
    return worker


def _sleeps_per_request(
    server: ServerHandle, requests: int, pids: list[int] | None = None
) -> float:
    """The sleeps per lone request of the server's loop, or of processes ``pids`` (their
    main threads together)."""
    values = np.arange(4, dtype=np.float32)
    with httpclient.InferenceServerClient(server.http_url) as client:
        tensor = httpclient.InferInput("IN", [4], "FP32")
        tensor.set_data_from_numpy(values)
        for _ in range(20):  # the connection and the worker warm
            client.infer("polled", [tensor])
        watched = [server.process.pid] if pids is None else pids
        before = sum(_sleeps(pid) for pid in watched)
        for _ in range(requests):
            result = client.infer("polled", [tensor]).as_numpy("OUT")
            assert result is not None and result.tolist() == (values + 1).tolist()
        return (sum(_sleeps(pid) for pid in watched) - before) / requests


def test_the_loop_polls_while_a_worker_process_answers(tmp_path: Path) -> None:
    # A lone request in process mode: the loop sends the bundle to the worker and, without
    # the busy poll, sleeps until the answer, then again until the next request (two sleeps
    # per request). Polling (here with a window longer than either wait) it sleeps in
    # neither; the answers are the same (loop_polling.py, frontends/busy_poll.py).
    write_python_model(tmp_path, "polled", POLLED_CONFIG, POLLED_MODEL)
    figures = {}
    for window in ("0", "5000"):
        with run_pytriton_server(tmp_path, f"--busy-poll-us={window}") as handle:
            figures[window] = _sleeps_per_request(handle, 200)
    print("loop sleeps per request, by --busy-poll-us:", figures)
    assert figures["0"] > 0.9, figures  # the premise: one or two sleeps per request without it
    assert figures["5000"] < 0.3, figures


def test_a_worker_polls_for_its_next_bundle(tmp_path: Path) -> None:
    # A lone client's next request comes a little after the answer: a worker that sleeps
    # once it has answered is woken for each (a sleep per request); one that polls for
    # PROCESS_POLL_MICROSECONDS (here longer than the client's turn) sleeps for none, and
    # yields its core between looks (counted as preemptions, not sleeps).
    figures = {}
    for window in ("0", "5000"):
        config = POLLED_CONFIG.replace(
            'value { string_value: "process" } }',
            'value { string_value: "process" } }\nparameters { key: "PROCESS_POLL_MICROSECONDS" '
            f'value {{ string_value: "{window}" }} }}',
        )
        write_python_model(tmp_path / window, "polled", config, POLLED_MODEL)
        with run_pytriton_server(tmp_path / window) as handle:
            figures[window] = _sleeps_per_request(handle, 200, [_worker_pid(handle)])
    print("worker sleeps per request, by PROCESS_POLL_MICROSECONDS:", figures)
    assert figures["0"] > 0.9, figures
    assert figures["5000"] < 0.3, figures


HELD_MODEL = """
import time
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        values = [pb_utils.get_input_tensor_by_name(r, "IN").as_numpy() for r in requests]
        if values[0][0] < 0:  # a request that stays in flight a while
            time.sleep(4)
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUT", v + 1)]) for v in values]
"""


def test_a_worker_polls_only_while_its_bundle_is_all_the_model_has_in_flight(
    tmp_path: Path,
) -> None:
    # Polling pays for a lone client; with other requests of the model in flight the next
    # bundle comes after their answers, and the worker's looks would take the cores the
    # client and the loop need (c4: 10,581 against 11,880/s without polling). Two
    # instances: one holds a request for a while, and the other's lone requests meanwhile
    # are not alone in the model, so its worker sleeps between them; before and after, it
    # polls (a window longer than the client's turn: no sleeps).
    config = POLLED_CONFIG.replace(
        'value { string_value: "process" } }',
        'value { string_value: "process" } }\nparameters { key: "PROCESS_POLL_MICROSECONDS" '
        'value { string_value: "5000" } }\ninstance_group [ { count: 2, kind: KIND_CPU } ]',
    )
    write_python_model(tmp_path, "polled", config, HELD_MODEL)
    with run_pytriton_server(tmp_path) as handle:
        server_pid = handle.process.pid
        workers = [pid for pid in procstats.process_tree(server_pid) if pid != server_pid]
        assert len(workers) == 2

        alone = _sleeps_per_request(handle, 100, workers)
        with httpclient.InferenceServerClient(handle.http_url, concurrency=2) as client:
            held = httpclient.InferInput("IN", [4], "FP32")
            held.set_data_from_numpy(np.full(4, -1.0, np.float32))
            pending = client.async_infer("polled", [held])
            time.sleep(0.5)  # the held request is executing on one instance
            beside = _sleeps_per_request(handle, 100, workers)
            assert pending.get_result().as_numpy("OUT").tolist() == [0.0] * 4
    print("worker sleeps per request, alone / beside a held request:", alone, beside)
    assert alone < 0.3, (alone, beside)
    assert beside > 0.9, (alone, beside)


def test_a_poll_window_that_is_not_a_number_fails_the_load(tmp_path: Path) -> None:
    config = POLLED_CONFIG.replace(
        'value { string_value: "process" } }',
        'value { string_value: "process" } }\n'
        'parameters { key: "PROCESS_POLL_MICROSECONDS" value { string_value: "-5" } }',
    )
    write_python_model(tmp_path, "polled", config, POLLED_MODEL)
    flags = ("--exit-on-error=false", "--strict-readiness=false")
    with run_pytriton_server(tmp_path, *flags) as handle:
        with httpclient.InferenceServerClient(handle.http_url) as client:
            assert not client.is_model_ready("polled")
            index = client.get_model_repository_index()
    (entry,) = [e for e in index if e["name"] == "polled"]
    assert "PROCESS_POLL_MICROSECONDS must be a number >= 0" in entry["reason"], entry
