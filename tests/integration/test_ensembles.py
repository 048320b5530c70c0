"""Ensembles end to end, through the real tritonclient (HTTP and gRPC).

One server in explicit model-control mode serves a repository this module writes; each test
loads the ensembles it needs (which brings their composing models). Scenarios: a 3-step
ensemble with a fan-out and a fan-in, batching in a composing model, request metadata
reaching the steps, a decoupled composing model, failures, cancellation between steps,
``max_inflight_requests``, invalid ensembles refused with Triton's messages, and unloading
composing models with and without ``unload_dependents``.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import Callable, Iterator
from http.client import HTTPConnection
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
import tritonclient.http.aio as aioclient
from harness import ServerHandle, run_pytriton_server
from pipeline_models import (
    ADD_SUB,
    ADD_SUB_CONFIG,
    META,
    META_CONFIG,
    REPEAT,
    REPEAT_CONFIG,
    UNARY,
    parameter,
    step,
    tensors,
    unary_config,
    write_ensemble,
    write_python,
)
from trace_files import CORE_STAMPS, read_traces, trace_stamps, traces_written
from tritonclient.utils import InferenceServerException

WAIT_S = 60.0  # the longest a test waits for something that must happen
X4 = "TYPE_FP32 [ 4 ]"


def _repository(root: Path) -> None:
    write_python(root, "double", UNARY, unary_config("double"))
    write_python(root, "square", UNARY, unary_config("square"))
    write_python(root, "add_sub", ADD_SUB, ADD_SUB_CONFIG)
    # X -> double -> twice, X -> square -> sq (fan-out); (twice, sq) -> add_sub (fan-in).
    write_ensemble(
        root,
        "fan",
        tensors("input", X=X4) + "\n" + tensors("output", SUM=X4, DIFF=X4),
        [
            step("double", {"X": "X"}, {"Y": "twice"}),
            step("square", {"X": "X"}, {"Y": "sq"}),
            step(
                "add_sub",
                {"INPUT0": "twice", "INPUT1": "sq"},
                {"OUTPUT0": "SUM", "OUTPUT1": "DIFF"},
            ),
        ],
    )
    write_python(
        root,
        "batch_double",
        UNARY,
        "max_batch_size: 8\n"
        + unary_config("double")
        + "\ndynamic_batching { preferred_batch_size: [ 4 ]"
        + " max_queue_delay_microseconds: 3000000 }",
    )
    write_ensemble(
        root,
        "batched",
        "max_batch_size: 8\n" + tensors("input", X=X4) + "\n" + tensors("output", Y=X4),
        [step("batch_double", {"X": "X"}, {"Y": "Y"})],
    )
    write_python(root, "meta", META, META_CONFIG)
    write_ensemble(
        root,
        "meta_ens",
        tensors("input", X=X4) + "\n" + tensors("output", META="TYPE_STRING [ 1 ]"),
        [
            step("meta", {"X": "X"}, {"META": "META", "Y": "unused_y"}),
            step("double", {"X": "unused_y"}, {"Y": "Y2"}),
        ],
        extra=tensors("output", Y2=X4),
    )
    write_python(root, "repeat", REPEAT, REPEAT_CONFIG)
    write_python(root, "lingering", REPEAT, REPEAT_CONFIG + parameter("linger_s", "0.3"))
    write_ensemble(
        root,
        "linger_ens",
        tensors("input", X=X4, COUNT="TYPE_INT32 [ 1 ]") + "\n" + tensors("output", Y=X4),
        [step("lingering", {"X": "X", "COUNT": "COUNT"}, {"Y": "Y"})],
    )
    write_ensemble(
        root,
        "stream",
        tensors("input", X=X4, COUNT="TYPE_INT32 [ 1 ]") + "\n" + tensors("output", Y=X4),
        [
            step("repeat", {"X": "X", "COUNT": "COUNT"}, {"Y": "piece"}),
            step("double", {"X": "piece"}, {"Y": "Y"}),
        ],
    )
    write_python(root, "failing", UNARY, unary_config(extra=parameter("fail", "yes")))
    write_ensemble(
        root,
        "fail_ens",
        tensors("input", X=X4) + "\n" + tensors("output", Y=X4),
        [step("double", {"X": "X"}, {"Y": "mid"}), step("failing", {"X": "mid"}, {"Y": "Y"})],
    )
    started = root / "slow_started"
    write_python(
        root,
        "slow",
        UNARY,
        unary_config(extra=parameter("delay_s", "1.5") + parameter("started_file", str(started))),
    )
    write_python(root, "after_slow", UNARY, unary_config())
    write_ensemble(
        root,
        "cancel_ens",
        tensors("input", X=X4) + "\n" + tensors("output", Y=X4),
        [step("slow", {"X": "X"}, {"Y": "mid"}), step("after_slow", {"X": "mid"}, {"Y": "Y"})],
    )
    write_python(
        root,
        "limited",
        UNARY,
        unary_config(
            extra=parameter("delay_s", "0.3") + "\ninstance_group [ { count: 4 kind: KIND_CPU } ]",
            outputs='{ name: "MAX_RUNNING" data_type: TYPE_INT32 dims: [ 1 ] }',
        ),
    )
    write_ensemble(
        root,
        "limited_ens",
        tensors("input", X=X4) + "\n" + tensors("output", Y=X4, MAX_RUNNING="TYPE_INT32 [ 1 ]"),
        [step("limited", {"X": "X"}, {"Y": "Y", "MAX_RUNNING": "MAX_RUNNING"})],
        extra="",
    )
    text = (root / "limited_ens" / "config.pbtxt").read_text()
    (root / "limited_ens" / "config.pbtxt").write_text(
        text.replace("ensemble_scheduling { ", "ensemble_scheduling { max_inflight_requests: 1 ")
    )
    for name in ("u_a", "u_b"):
        write_python(root, name, UNARY, unary_config())
    write_ensemble(
        root,
        "u_ens",
        tensors("input", X=X4) + "\n" + tensors("output", Y=X4),
        [step("u_a", {"X": "X"}, {"Y": "mid"}), step("u_b", {"X": "mid"}, {"Y": "Y"})],
    )
    one_step = tensors("input", X=X4) + "\n" + tensors("output", Y=X4)
    write_ensemble(root, "bad_input", one_step, [step("double", {"X": "X", "Z": "X"}, {"Y": "Y"})])
    write_ensemble(root, "bad_output", one_step, [step("double", {"X": "X"}, {"W": "Y"})])
    write_ensemble(
        root,
        "bad_type",
        tensors("input", X="TYPE_INT32 [ 4 ]") + "\n" + tensors("output", Y=X4),
        [step("double", {"X": "X"}, {"Y": "Y"})],
    )
    write_ensemble(root, "bad_model", one_step, [step("nowhere", {"X": "X"}, {"Y": "Y"})])
    write_ensemble(root, "bad_version", one_step, [step("double", {"X": "X"}, {"Y": "Y"}, 7)])
    write_ensemble(
        root,
        "bad_unused",
        tensors("input", X=X4, EXTRA=X4) + "\n" + tensors("output", Y=X4),
        [step("double", {"X": "X"}, {"Y": "Y"})],
    )


@pytest.fixture(scope="module")
def trace_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where the server writes traces, one file per trace; tracing is off until a test
    turns it on for a model."""
    return tmp_path_factory.mktemp("ensemble-traces") / "trace.json"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, trace_file: Path) -> Iterator[ServerHandle]:
    root = tmp_path_factory.mktemp("ensembles")
    _repository(root)
    tracing = [f"--trace-config=triton,file={trace_file}", "--trace-config=triton,log-frequency=1"]
    with run_pytriton_server(
        root, "--model-control-mode=explicit", *tracing, metrics=True
    ) as handle:
        yield handle


def _loaded(http: httpclient.InferenceServerClient, *names: str) -> None:
    for name in names:
        if not http.is_model_ready(name):
            http.load_model(name)


def _x(values: list[float] | None = None) -> np.ndarray:
    return np.array(values or [1.0, 2.0, 3.0, -4.0], np.float32)


def _input(module: Any, name: str, data: np.ndarray) -> Any:
    tensor = module.InferInput(
        name, list(data.shape), "FP32" if data.dtype == np.float32 else "INT32"
    )
    tensor.set_data_from_numpy(data)
    return tensor


def _stats(http: httpclient.InferenceServerClient, name: str) -> dict[str, Any]:
    (entry,) = http.get_inference_statistics(name)["model_stats"]
    return entry  # type: ignore[no-any-return]


def _eventually(check: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


# --------------------------------------------------------------------------- the data flow


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_fan_out_and_fan_in_give_exact_results(
    protocol: str, http: httpclient.InferenceServerClient, grpc: grpcclient.InferenceServerClient
) -> None:
    _loaded(http, "fan")
    # Loading the ensemble brought its composing models.
    assert all(http.is_model_ready(m) for m in ("double", "square", "add_sub"))
    x = _x()
    module: Any = httpclient if protocol == "http" else grpcclient
    client: Any = http if protocol == "http" else grpc
    result = client.infer("fan", [_input(module, "X", x)], request_id="r1")
    np.testing.assert_array_equal(result.as_numpy("SUM"), 2 * x + x * x)
    np.testing.assert_array_equal(result.as_numpy("DIFF"), 2 * x - x * x)
    only_diff = client.infer(
        "fan", [_input(module, "X", x)], outputs=[module.InferRequestedOutput("DIFF")]
    )
    assert only_diff.as_numpy("SUM") is None
    np.testing.assert_array_equal(only_diff.as_numpy("DIFF"), 2 * x - x * x)


def test_each_step_is_traced_as_a_child_of_the_ensembles_trace(
    http: httpclient.InferenceServerClient, trace_file: Path
) -> None:
    """Triton's shape: a trace per step, with parent_id and the core's stamps, written
    before the ensemble's own, which has the front end's stamps and no compute ones."""
    _loaded(http, "fan")
    start = traces_written(trace_file)
    http.update_trace_settings("fan", {"trace_level": ["TIMESTAMPS"], "trace_rate": "1"})
    try:
        http.infer("fan", [_input(httpclient, "X", _x())])
    finally:
        http.update_trace_settings("fan", {"trace_level": None, "trace_rate": None})
    entries = read_traces(trace_file, start, 4)
    headers = [e for e in entries if "model_name" in e]
    parent = headers[-1]
    assert parent == {"id": parent["id"], "model_name": "fan", "model_version": 1}
    steps = headers[:-1]
    assert sorted(h["model_name"] for h in steps) == ["add_sub", "double", "square"]
    for header in steps:
        assert header == {
            "id": header["id"],
            "model_name": header["model_name"],
            "model_version": 1,
            "parent_id": parent["id"],
        }
        assert trace_stamps(entries, header["id"]) == CORE_STAMPS
    # Ids in the order the steps were issued: the fan-out's two, then the fan-in.
    ids = {h["model_name"]: h["id"] for h in steps}
    assert parent["id"] < ids["double"] < ids["square"] < ids["add_sub"]
    assert trace_stamps(entries, parent["id"]) == [
        "HTTP_RECV_START",
        "HTTP_RECV_END",
        "REQUEST_START",
        "QUEUE_START",
        "INFER_RESPONSE_COMPLETE",
        "REQUEST_END",
        "HTTP_SEND_START",
        "HTTP_SEND_END",
    ]


def test_metadata_and_config_as_triton_returns_them(
    http: httpclient.InferenceServerClient, grpc: grpcclient.InferenceServerClient
) -> None:
    _loaded(http, "fan")
    metadata = http.get_model_metadata("fan")
    assert metadata == {
        "name": "fan",
        "versions": ["1"],
        "platform": "ensemble",
        "inputs": [{"name": "X", "datatype": "FP32", "shape": [4]}],
        "outputs": [
            {"name": "SUM", "datatype": "FP32", "shape": [4]},
            {"name": "DIFF", "datatype": "FP32", "shape": [4]},
        ],
    }
    assert grpc.get_model_metadata("fan", as_json=True)["platform"] == "ensemble"
    config = http.get_model_config("fan")
    assert (config["platform"], config["backend"], config["instance_group"]) == ("ensemble", "", [])
    assert config["model_transaction_policy"] == {"decoupled": False}
    steps = config["ensemble_scheduling"]["step"]
    assert [s["model_name"] for s in steps] == ["double", "square", "add_sub"]
    assert steps[2]["input_map"] == {"INPUT0": "twice", "INPUT1": "sq"}
    assert steps[0]["model_version"] == -1 and steps[0]["model_namespace"] == ""
    grpc_config = grpc.get_model_config("fan", as_json=True)["config"]
    assert grpc_config["platform"] == "ensemble"


def test_statistics_count_the_ensemble_and_each_composing_model(
    http: httpclient.InferenceServerClient,
) -> None:
    _loaded(http, "fan")
    names = ("fan", "double", "square", "add_sub")
    before = {name: _stats(http, name) for name in names}
    for _ in range(3):
        http.infer("fan", [_input(httpclient, "X", _x())])
    after = {name: _stats(http, name) for name in names}

    def delta(name: str, *path: str) -> int:
        a: Any = after[name]
        b: Any = before[name]
        for key in path:
            a, b = a[key], b[key]
        return int(a) - int(b)

    for name in names:
        assert delta(name, "inference_count") == 3
        assert delta(name, "execution_count") == 3
        assert delta(name, "inference_stats", "success", "count") == 3
    # The ensemble's compute time is its steps' compute time, summed, as in Triton.
    for part in ("compute_input", "compute_infer", "compute_output"):
        steps_ns = sum(delta(m, "inference_stats", part, "ns") for m in names[1:])
        assert delta("fan", "inference_stats", part, "ns") == steps_ns
    assert after["fan"]["batch_stats"][0]["batch_size"] == 1


def test_a_batching_composing_model_batches_ensemble_requests(server: ServerHandle) -> None:
    async def send() -> list[np.ndarray]:
        async with aioclient.InferenceServerClient(server.http_url) as client:
            if not await client.is_model_ready("batched"):
                await client.load_model("batched")
            batches = [np.full((1, 4), i, np.float32) for i in range(4)]
            results = await asyncio.gather(
                *(client.infer("batched", [_input(aioclient, "X", b)]) for b in batches)
            )
            return [r.as_numpy("Y") for r in results]

    outputs = asyncio.run(send())
    for i, output in enumerate(outputs):
        np.testing.assert_array_equal(output, np.full((1, 4), 2 * i, np.float32))
    with httpclient.InferenceServerClient(server.http_url) as http:
        composing = _stats(http, "batch_double")
        ensemble = _stats(http, "batched")
    # Four requests of the ensemble, one execution of its composing model.
    assert (composing["inference_count"], composing["execution_count"]) == (4, 1)
    assert [b["batch_size"] for b in composing["batch_stats"]] == [4]
    assert (ensemble["inference_count"], ensemble["execution_count"]) == (4, 4)


def test_request_id_parameters_and_sequence_settings_reach_the_steps(
    http: httpclient.InferenceServerClient,
) -> None:
    _loaded(http, "meta_ens")
    result = http.infer(
        "meta_ens",
        [_input(httpclient, "X", _x())],
        request_id="rid-7",
        sequence_id=42,
        sequence_start=True,
        timeout=5_000_000,
        parameters={"custom": "v", "n": 3},
    )
    seen = json.loads(result.as_numpy("META")[0])
    assert seen == {
        "id": "rid-7",
        "parameters": {"custom": "v", "n": 3},
        "correlation_id": 42,
        "flags": 1,
        "timeout": 5_000_000,
    }
    np.testing.assert_array_equal(result.as_numpy("Y2"), 2 * _x())
    # Like Triton, an ensemble's response reports the sequence settings of its outputs.
    assert result.get_response()["parameters"] == {
        "sequence_id": 42,
        "sequence_start": True,
        "sequence_end": False,
    }


# ---------------------------------------------------------------------- decoupled steps


def _stream(server: ServerHandle, model: str, count: int, request_id: str = "") -> list[Any]:
    """One streaming request of ``count`` responses; its responses, once the final came."""
    received: list[Any] = []
    client = grpcclient.InferenceServerClient(server.grpc_url)
    try:
        client.start_stream(callback=lambda result, error: received.append((result, error)))
        inputs = [
            _input(grpcclient, "X", _x()),
            _input(grpcclient, "COUNT", np.array([count], np.int32)),
        ]
        client.async_stream_infer(
            model, inputs, request_id=request_id, enable_empty_final_response=True
        )
        _eventually(
            lambda: any(
                r is not None and r.get_response().parameters["triton_final_response"].bool_param
                for r, _ in received
            ),
            "the final response",
        )
    finally:
        client.stop_stream()
        client.close()
    assert all(error is None for _, error in received)
    return [r for r, _ in received]


@pytest.mark.parametrize("count", [0, 1, 5])
def test_a_decoupled_step_makes_the_ensemble_stream(
    count: int, http: httpclient.InferenceServerClient, server: ServerHandle
) -> None:
    _loaded(http, "stream")
    assert http.get_model_config("stream")["model_transaction_policy"] == {"decoupled": True}
    x = _x()
    received = _stream(server, "stream", count, request_id="s")
    values = [r.as_numpy("Y") for r in received if r.as_numpy("Y") is not None]
    assert [v.tolist() for v in values] == [(2 * (x + i)).tolist() for i in range(count)]
    with pytest.raises(InferenceServerException, match="doesn't support models with decoupled"):
        http.infer(
            "stream",
            [
                _input(httpclient, "X", x),
                _input(httpclient, "COUNT", np.array([1], np.int32)),
            ],
        )


def test_a_step_answered_before_its_execute_returns_still_counts_its_compute(
    http: httpclient.InferenceServerClient, server: ServerHandle
) -> None:
    """The step sends its final response, then runs 0.3 s more: the ensemble's compute
    time (counted once that execution has ended) is still its step's."""
    _loaded(http, "linger_ens")
    before = {name: _stats(http, name) for name in ("linger_ens", "lingering")}
    _stream(server, "linger_ens", 2)

    def successes(name: str) -> int:
        return int(_stats(http, name)["inference_stats"]["success"]["count"])

    old = int(before["linger_ens"]["inference_stats"]["success"]["count"])
    _eventually(lambda: successes("linger_ens") == old + 1, "the ensemble's statistics")
    after = {name: _stats(http, name) for name in ("linger_ens", "lingering")}
    for part in ("compute_input", "compute_infer", "compute_output"):
        spent = {
            name: int(after[name]["inference_stats"][part]["ns"])
            - int(before[name]["inference_stats"][part]["ns"])
            for name in after
        }
        assert spent["linger_ens"] == spent["lingering"], part
    infer_ns = int(after["lingering"]["inference_stats"]["compute_infer"]["ns"]) - int(
        before["lingering"]["inference_stats"]["compute_infer"]["ns"]
    )
    assert infer_ns >= 300_000_000


# ------------------------------------------------------------------------------ failures


def _metric(server: ServerHandle, name: str, **labels: str) -> float | None:
    assert server.metrics_url is not None
    host, port = server.metrics_url.rsplit(":", 1)
    connection = HTTPConnection(host, int(port), timeout=30)
    try:
        connection.request("GET", "/metrics")
        text = connection.getresponse().read().decode()
    finally:
        connection.close()
    for line in text.splitlines():
        match = re.fullmatch(rf"{name}\{{(.*)\}} (\S+)", line)
        if match and all(f'{k}="{v}"' in match.group(1) for k, v in labels.items()):
            return float(match.group(2))
    return None


def test_a_failing_step_fails_the_ensemble_with_its_message(
    http: httpclient.InferenceServerClient, server: ServerHandle
) -> None:
    _loaded(http, "fail_ens")
    with pytest.raises(InferenceServerException) as caught:
        http.infer("fail_ens", [_input(httpclient, "X", _x())])
    assert caught.value.message() == "in ensemble 'fail_ens', the model refused"
    assert caught.value.status() == "400"  # the step's INVALID_ARG
    assert _stats(http, "fail_ens")["inference_stats"]["fail"]["count"] == 1
    _eventually(
        lambda: (
            _metric(server, "nv_inference_request_failure", model="fail_ens", reason="OTHER") == 1.0
        ),
        "the ensemble's failure counted with reason OTHER",
    )


def test_cancellation_is_checked_between_steps(
    http: httpclient.InferenceServerClient, server: ServerHandle
) -> None:
    _loaded(http, "cancel_ens")
    started = Path(_started_file(http))
    client = grpcclient.InferenceServerClient(server.grpc_url)
    try:
        call = client.async_infer(
            "cancel_ens", [_input(grpcclient, "X", _x())], callback=lambda result, error: None
        )
        _eventually(started.exists, "the first step to start")
        call.cancel()
        # The first step finishes; the second never starts, and the ensemble fails.
        _eventually(
            lambda: _stats(http, "cancel_ens")["inference_stats"]["fail"]["count"] == 1,
            "the cancelled ensemble request to end",
        )
    finally:
        client.close()
    assert _stats(http, "slow")["execution_count"] == 1
    assert _stats(http, "after_slow")["execution_count"] == 0


def _started_file(http: httpclient.InferenceServerClient) -> str:
    parameters = http.get_model_config("slow")["parameters"]
    return str(parameters["started_file"]["string_value"])


def test_max_inflight_requests_bounds_each_step(server: ServerHandle) -> None:
    async def send() -> list[int]:
        async with aioclient.InferenceServerClient(server.http_url) as client:
            if not await client.is_model_ready("limited_ens"):
                await client.load_model("limited_ens")
            results = await asyncio.gather(
                *(client.infer("limited_ens", [_input(aioclient, "X", _x())]) for _ in range(4))
            )
            return [int(r.as_numpy("MAX_RUNNING")[0]) for r in results]

    # The composing model has four instances, but the ensemble lets one request in at a time.
    assert asyncio.run(send()) == [1, 1, 1, 1]


# ------------------------------------------------------------------------ load and unload


@pytest.mark.parametrize(
    ("name", "message"),
    [
        (
            "bad_input",
            "in ensemble bad_input, ensemble tensor X is mapping to non-existing input Z in "
            "model double",
        ),
        (
            "bad_output",
            "in ensemble bad_output, ensemble tensor Y is mapped from non-existing output W in "
            "model double",
        ),
        (
            "bad_type",
            "in ensemble bad_type, ensemble tensor X: inconsistent data type: TYPE_INT32 is "
            "inferred from model bad_type while TYPE_FP32 is inferred from model double",
        ),
        (
            "bad_model",
            "ensemble bad_model contains models that are not available or ambiguous: nowhere",
        ),
        (
            "bad_version",
            "ensemble 'bad_version' depends on 'double' whose required version 7 is not loaded.",
        ),
    ],
)
def test_invalid_ensembles_fail_to_load_naming_the_step(
    name: str, message: str, http: httpclient.InferenceServerClient
) -> None:
    with pytest.raises(InferenceServerException) as caught:
        http.load_model(name)
    # Checked against the composing models once they are loaded, as Triton does.
    assert caught.value.message() == f"load failed for model '{name}': {message}\n"
    assert not http.is_model_ready(name)
    index = {e["name"]: e for e in http.get_model_repository_index()}
    assert "state" not in index[name]  # never loaded: the index lists its name only


def test_an_ensemble_the_config_alone_refuses_fails_its_poll(
    http: httpclient.InferenceServerClient, server: ServerHandle
) -> None:
    with pytest.raises(InferenceServerException) as caught:
        http.load_model("bad_unused")
    # As Triton: the poll step fails (the client's message), the detail goes to the log.
    assert caught.value.message() == (
        "failed to load 'bad_unused', failed to poll from model repository"
    )
    _eventually(
        lambda: "ensemble input 'EXTRA' for ensemble bad_unused' is not used" in server.log(),
        "the poll failure in the server log",
    )


def _state(http: httpclient.InferenceServerClient, name: str) -> tuple[str, str]:
    entry = {e["name"]: e for e in http.get_model_repository_index()}[name]
    return entry.get("state", ""), entry.get("reason", "")


def test_unloading_a_composing_model_makes_the_ensemble_unavailable(
    http: httpclient.InferenceServerClient,
) -> None:
    http.load_model("u_ens")
    assert http.is_model_ready("u_a") and http.is_model_ready("u_b")
    http.unload_model("u_a")
    assert not http.is_model_ready("u_ens")
    assert _state(http, "u_ens") == ("UNAVAILABLE", "unloaded")
    with pytest.raises(InferenceServerException) as caught:
        http.infer("u_ens", [_input(httpclient, "X", _x())])
    assert caught.value.message() == "Request for unknown model: 'u_ens' has no available versions"
    assert http.is_model_ready("u_b")  # the other composing model stays
    # Loading the ensemble again brings the composing model back.
    http.load_model("u_ens")
    assert http.is_model_ready("u_a") and http.is_model_ready("u_ens")
    result = http.infer("u_ens", [_input(httpclient, "X", _x())])
    np.testing.assert_array_equal(result.as_numpy("Y"), 4 * _x())


def test_unload_dependents_unloads_what_the_ensemble_brought(
    http: httpclient.InferenceServerClient,
) -> None:
    for name in ("u_ens", "u_a", "u_b"):
        if http.is_model_ready(name):
            http.unload_model(name)
    http.load_model("u_ens")
    http.unload_model("u_ens")  # without unload_dependents: the composing models stay
    assert http.is_model_ready("u_a") and http.is_model_ready("u_b")
    http.load_model("u_ens")
    http.unload_model("u_ens", unload_dependents=True)
    assert not any(http.is_model_ready(n) for n in ("u_ens", "u_a", "u_b"))
    # A composing model loaded by name stays loaded.
    http.load_model("u_b")
    http.load_model("u_ens")
    http.unload_model("u_ens", unload_dependents=True)
    assert http.is_model_ready("u_b") and not http.is_model_ready("u_a")
