"""The request path's fast paths answer byte for byte as the general path does.

Two copies of one Python model serve side by side: ``fast_a`` as shipped (a lone request
runs on the event loop once its executions have shown they are short) and ``fast_b`` with
``EXECUTE_ON_EVENT_LOOP: no`` (every execution in the instance's thread, the general
path). The same raw HTTP requests, across datatypes, shapes, binary and JSON tensors,
requested outputs and errors, must get the same bytes back from both (the model names are
of equal length and swapped before comparing). ``batched`` and ``listed`` compute the same
outputs through ``BATCHED_EXECUTE: yes`` (one stacked request per batch) and the list API.
"""

from __future__ import annotations

import http.client
import json
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import pytest
import tritonclient.http as httpclient
from harness import ServerError as HarnessError
from harness import ServerHandle, run_pytriton_server

T = TypeVar("T")
WARMUP = 12  # more than the executions a model shows before it may run on the loop

IO_MODEL = """
import threading

import numpy as np
import triton_python_backend_utils as pb_utils


def value(request, name):
    return pb_utils.get_input_tensor_by_name(request, name).as_numpy()


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            values = value(request, "F32")
            if values.size and values.flat[0] < 0:
                error = pb_utils.TritonError("negative input", pb_utils.TritonError.INVALID_ARG)
                responses.append(pb_utils.InferenceResponse(error=error))
                continue
            where = threading.current_thread().name.encode()
            outputs = [
                pb_utils.Tensor("O_F32", values * 2),
                pb_utils.Tensor("O_I64", value(request, "I64") + 1),
                pb_utils.Tensor("O_STR", value(request, "STR")),
                pb_utils.Tensor("O_BOOL", ~value(request, "BOOL")),
                pb_utils.Tensor("O_U8", value(request, "U8")),
                pb_utils.Tensor("WHERE", np.array([[where]] * len(values), dtype=object)),
            ]
            half = pb_utils.get_input_tensor_by_name(request, "F16")  # optional: not in JSON
            if half is not None:
                outputs.append(pb_utils.Tensor("O_F16", half.as_numpy()))
            parameters = {"rows": len(values)}
            responses.append(
                pb_utils.InferenceResponse(output_tensors=outputs, parameters=parameters)
            )
        return responses
"""


def io_config(name: str, extra: str = "") -> str:
    inputs = [("F32", "FP32"), ("I64", "INT64"), ("STR", "STRING"), ("BOOL", "BOOL")]
    inputs += [("U8", "UINT8"), ("F16", "FP16")]
    outputs = [(f"O_{n}", t) for n, t in inputs] + [("WHERE", "STRING")]

    def tensors(entries: list[tuple[str, str]]) -> str:
        dims = {"WHERE": "[ 1 ]"}
        optional = {"F16": ", optional: true"}
        return ",\n".join(
            f'{{ name: "{n}", data_type: TYPE_{t}, dims: {dims.get(n, "[ -1 ]")}'
            f"{optional.get(n, '')} }}"
            for n, t in entries
        )

    return textwrap.dedent(f"""
        name: "{name}"
        backend: "python"
        max_batch_size: 8
        input [ {tensors(inputs)} ]
        output [ {tensors(outputs)} ]
        {extra}
        """)


SCALE_MODEL = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.stacked = "BATCHED" in args["model_name"].upper()

    def execute(self, requests):
        if self.stacked:
            assert len(requests) == 1, len(requests)
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "X").as_numpy()
            if (x == 13).any():
                error = pb_utils.TritonError("unlucky row", pb_utils.TritonError.INVALID_ARG)
                responses.append(pb_utils.InferenceResponse(error=error))
                continue
            outputs = [
                pb_utils.Tensor("Y", (x * 3 + 1).astype(np.float32)),
                pb_utils.Tensor("ROWSUM", x.sum(axis=1, keepdims=True).astype(np.float32)),
            ]
            responses.append(pb_utils.InferenceResponse(output_tensors=outputs))
        return responses
"""


def scale_config(name: str, extra: str = "") -> str:
    return textwrap.dedent(f"""
        name: "{name}"
        backend: "python"
        max_batch_size: 16
        input [ {{ name: "X", data_type: TYPE_FP32, dims: [ 4 ] }} ]
        output [ {{ name: "Y", data_type: TYPE_FP32, dims: [ 4 ] }},
                 {{ name: "ROWSUM", data_type: TYPE_FP32, dims: [ 1 ] }} ]
        dynamic_batching {{ max_queue_delay_microseconds: 2000 }}
        {extra}
        """)


def write_model(root: Path, name: str, config: str, code: str) -> None:
    (root / name / "1").mkdir(parents=True)
    (root / name / "config.pbtxt").write_text(config)
    (root / name / "1" / "model.py").write_text(textwrap.dedent(code))


# A default-mode model that answers through its response sender (made only when a model
# asks for it) and reports whether its request was cancelled.
SENDER_MODEL = """
import threading

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "F32").as_numpy()
            sender = request.get_response_sender()
            where = threading.current_thread().name.encode()
            outputs = [
                pb_utils.Tensor("O_F32", x * 2),
                pb_utils.Tensor("WHERE", np.array([[where]] * len(x), dtype=object)),
            ]
            parameters = {"cancelled": request.is_cancelled(), "same": sender.is_cancelled()}
            sender.send(
                pb_utils.InferenceResponse(output_tensors=outputs, parameters=parameters),
                flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL,
            )
        return None
"""


def sender_config(name: str, extra: str = "") -> str:
    return textwrap.dedent(f"""
        name: "{name}"
        backend: "python"
        max_batch_size: 8
        input [ {{ name: "F32", data_type: TYPE_FP32, dims: [ -1 ] }} ]
        output [ {{ name: "O_F32", data_type: TYPE_FP32, dims: [ -1 ] }},
                 {{ name: "WHERE", data_type: TYPE_STRING, dims: [ 1 ] }} ]
        {extra}
        """)


# A model that counts its executions in a context variable of its own: it sees one context,
# its instance's, wherever an execution runs (the loop or the instance's thread).
CONTEXT_MODEL = """
import contextvars
import threading

import numpy as np
import triton_python_backend_utils as pb_utils

EXECUTIONS = contextvars.ContextVar("executions", default=0)


class TritonPythonModel:
    def execute(self, requests):
        seen = EXECUTIONS.get()
        EXECUTIONS.set(seen + 1)
        where = threading.current_thread().name.encode()
        return [
            pb_utils.InferenceResponse([
                pb_utils.Tensor("SEEN", np.array([seen], dtype=np.int64)),
                pb_utils.Tensor("WHERE", np.array([where], dtype=object)),
            ])
            for _ in requests
        ]
"""

CONTEXT_CONFIG = """
name: "context"
backend: "python"
max_batch_size: 0
input [ { name: "F32", data_type: TYPE_FP32, dims: [ -1 ] } ]
output [ { name: "SEEN", data_type: TYPE_INT64, dims: [ 1 ] },
         { name: "WHERE", data_type: TYPE_STRING, dims: [ 1 ] } ]
"""


THREAD_ONLY = 'parameters: { key: "EXECUTE_ON_EVENT_LOOP" value: { string_value: "no" } }'
BATCHED = 'parameters: { key: "BATCHED_EXECUTE" value: { string_value: "yes" } }'


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerHandle]:
    root = tmp_path_factory.mktemp("fast-paths")
    write_model(root, "fast_a", io_config("fast_a"), IO_MODEL)
    write_model(root, "fast_b", io_config("fast_b", THREAD_ONLY), IO_MODEL)
    write_model(root, "batched", scale_config("batched", BATCHED), SCALE_MODEL)
    write_model(root, "listed", scale_config("listed"), SCALE_MODEL)
    write_model(root, "stats_a", io_config("stats_a"), IO_MODEL)
    write_model(root, "stats_b", io_config("stats_b", THREAD_ONLY), IO_MODEL)
    write_model(root, "sends_a", sender_config("sends_a"), SENDER_MODEL)
    write_model(root, "sends_b", sender_config("sends_b", THREAD_ONLY), SENDER_MODEL)
    write_model(root, "context", CONTEXT_CONFIG, CONTEXT_MODEL)
    with run_pytriton_server(root) as handle:
        yield handle


def post(url: str, path: str, body: bytes, headers: dict[str, str]) -> tuple[int, bytes, bytes]:
    """(status, the response head less its Date-free fixed lines, body) of one request."""
    host, port = url.rsplit(":", 1)
    connection = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        connection.request("POST", path, body=body, headers=headers)
        response = connection.getresponse()
        head = "".join(f"{k.lower()}: {v}\n" for k, v in sorted(response.getheaders()))
        return response.status, head.encode(), response.read()
    finally:
        connection.close()


def binary_request(
    arrays: dict[str, np.ndarray], outputs: list[dict[str, Any]] | None, binary_out: bool
) -> tuple[bytes, dict[str, str]]:
    inputs, blobs = [], []
    for name, array in arrays.items():
        datatype = "BYTES" if array.dtype == object else np_to_wire(array.dtype)
        if array.dtype == object:
            blob = b"".join(len(v).to_bytes(4, "little") + v for v in array.flat)
        else:
            blob = array.tobytes()
        inputs.append(
            {
                "name": name,
                "shape": list(array.shape),
                "datatype": datatype,
                "parameters": {"binary_data_size": len(blob)},
            }
        )
        blobs.append(blob)
    document: dict[str, Any] = {
        "id": "r-1",
        "inputs": inputs,
        "parameters": {"binary_data_output": binary_out},
    }
    if outputs is not None:
        document["outputs"] = outputs
    head = json.dumps(document).encode()
    headers = {
        "Inference-Header-Content-Length": str(len(head)),
        "Content-Type": "application/octet-stream",
    }
    return head + b"".join(blobs), headers


def json_request(arrays: dict[str, np.ndarray], outputs: list[dict[str, Any]] | None) -> bytes:
    inputs = []
    for name, array in arrays.items():
        datatype = "BYTES" if array.dtype == object else np_to_wire(array.dtype)
        data = [v.decode() for v in array.flat] if array.dtype == object else array.ravel().tolist()
        inputs.append(
            {"name": name, "shape": list(array.shape), "datatype": datatype, "data": data}
        )
    document: dict[str, Any] = {"inputs": inputs}
    if outputs is not None:
        document["outputs"] = outputs
    return json.dumps(document).encode()


def np_to_wire(dtype: np.dtype[Any]) -> str:
    return {
        np.dtype(np.float32): "FP32",
        np.dtype(np.int64): "INT64",
        np.dtype(np.bool_): "BOOL",
        np.dtype(np.uint8): "UINT8",
        np.dtype(np.float16): "FP16",
    }[np.dtype(dtype)]


def io_inputs(rows: int, width: int, first: float = 0.5) -> dict[str, np.ndarray]:
    count = rows * width
    f32 = (np.arange(count, dtype=np.float32) + first).reshape(rows, width)
    return {
        "F32": f32,
        "I64": np.arange(count, dtype=np.int64).reshape(rows, width) - 3,
        "STR": np.array([f"s{i}\u00e9".encode() for i in range(count)], dtype=object).reshape(
            rows, width
        ),
        "BOOL": (np.arange(count) % 3 == 0).reshape(rows, width),
        "U8": (np.arange(count) % 256).astype(np.uint8).reshape(rows, width),
        "F16": np.linspace(-2, 2, count, dtype=np.float16).reshape(rows, width),
    }


ALL_BUT_WHERE = [{"name": n} for n in ("O_F32", "O_I64", "O_STR", "O_BOOL", "O_U8", "O_F16")]
CASES: dict[str, tuple[dict[str, np.ndarray], str, list[dict[str, Any]] | None, bool]] = {
    "binary-1x16": (io_inputs(1, 16), "binary", ALL_BUT_WHERE, True),
    "binary-3x5-some-outputs": (
        io_inputs(3, 5),
        "binary",
        [{"name": "O_I64"}, {"name": "O_STR", "parameters": {"binary_data": True}}],
        False,
    ),
    "binary-empty": (io_inputs(2, 0), "binary", ALL_BUT_WHERE, True),
    "binary-error": (io_inputs(1, 4, first=-1.0), "binary", ALL_BUT_WHERE, True),
    "binary-bad-output": (io_inputs(1, 4), "binary", [{"name": "NOPE"}], True),
    "json-2x3": (
        io_inputs(2, 3),
        "json",
        [{"name": n["name"]} for n in ALL_BUT_WHERE if n["name"] != "O_F16"],
        False,
    ),
    "json-error": (io_inputs(1, 2, first=-5.0), "json", [{"name": "O_F32"}], False),
}


def send(server: ServerHandle, model: str, case: str) -> tuple[int, bytes, bytes]:
    arrays, kind, outputs, binary_out = CASES[case]
    path = f"/v2/models/{model}/infer"
    if kind == "binary":
        body, headers = binary_request(arrays, outputs, binary_out)
    else:
        arrays = {k: v for k, v in arrays.items() if k != "F16"}  # JSON has no FP16
        if outputs is not None:
            outputs = [o for o in outputs if o["name"] != "O_F16"]
        body, headers = json_request(arrays, outputs), {"Content-Type": "application/json"}
    return post(server.http_url, path, body, headers)


def where(server: ServerHandle, model: str) -> str:
    """The thread ``model`` executed a request on (``MainThread``: inline, on the loop)."""
    inputs = io_inputs(1, 2)
    if model.startswith("sends_"):
        inputs = {"F32": inputs["F32"]}
    body, headers = binary_request(
        inputs, [{"name": "WHERE", "parameters": {"binary_data": True}}], True
    )
    status, head, answer = post(server.http_url, f"/v2/models/{model}/infer", body, headers)
    assert status == 200, answer
    lines = dict(line.split(": ", 1) for line in head.decode().splitlines())
    split = int(lines["inference-header-content-length"])
    return answer[split + 4 :].decode()  # one BYTES element: its length, then itself


def until_inline(server: ServerHandle, model: str, attempt: Callable[[], T]) -> T:
    """``attempt()`` again until a check right after it runs on the loop, which means the
    attempt's requests ran there too: one execution over the inline budget (a busy machine)
    sends the next ones to the thread for a while. Up to 60 s, then the test fails."""
    deadline = time.monotonic() + 60
    while True:
        result = attempt()
        if where(server, model) == "MainThread":
            return result
        if time.monotonic() > deadline:
            pytest.fail(f"{model} never kept its executions on the loop")


def test_a_lone_request_runs_on_the_loop_once_executions_are_short(server: ServerHandle) -> None:
    seen = {where(server, "fast_a") for _ in range(WARMUP * 3)}
    assert "MainThread" in seen
    # The general path, for the comparisons below: always the instance's thread.
    for _ in range(WARMUP):
        assert where(server, "fast_b").startswith("instance-")


@pytest.mark.parametrize("case", sorted(CASES))
def test_responses_match_the_general_path_byte_for_byte(server: ServerHandle, case: str) -> None:
    for _ in range(WARMUP):
        where(server, "fast_a")
    fast = until_inline(server, "fast_a", lambda: send(server, "fast_a", case))
    general = send(server, "fast_b", case)
    assert fast[0] == general[0]
    assert fast[1].replace(b"fast_a", b"fast_b") == general[1]
    assert fast[2].replace(b"fast_a", b"fast_b") == general[2]
    if case.endswith("error"):
        assert fast[0] == 400 and b"negative input" in fast[2]


def test_a_default_mode_sender_answers_as_on_the_general_path(server: ServerHandle) -> None:
    """A response sent through the sender (made when the model first asks for it) gets the
    same bytes inline as in the instance's thread; the request reads as not cancelled."""
    body, headers = binary_request({"F32": io_inputs(2, 3)["F32"]}, [{"name": "O_F32"}], False)
    for _ in range(WARMUP):
        where(server, "sends_a")
    fast = until_inline(
        server, "sends_a", lambda: post(server.http_url, "/v2/models/sends_a/infer", body, headers)
    )
    general = post(server.http_url, "/v2/models/sends_b/infer", body, headers)
    assert fast[0] == general[0] == 200, fast
    assert fast[1].replace(b"sends_a", b"sends_b") == general[1]
    assert fast[2].replace(b"sends_a", b"sends_b") == general[2]
    answer = json.loads(fast[2])  # (outputs as JSON)
    assert answer["parameters"] == {"cancelled": False, "same": False}
    assert answer["outputs"][0]["data"] == (io_inputs(2, 3)["F32"] * 2).ravel().tolist()


def test_a_model_sees_its_instances_context_on_the_loop_and_on_its_thread(
    server: ServerHandle,
) -> None:
    """What the model sets in a context variable during one execution it reads in the next,
    whether the two ran on the instance's thread (the first ones) or on the loop."""
    seen: list[int] = []
    places: set[str] = set()
    deadline = time.monotonic() + 60
    with httpclient.InferenceServerClient(server.http_url) as client:
        while len(seen) < WARMUP or "MainThread" not in places:
            assert time.monotonic() < deadline, f"never on the loop: {places}"
            data = httpclient.InferInput("F32", [1], "FP32")
            data.set_data_from_numpy(np.zeros(1, np.float32))
            result = client.infer("context", [data])
            seen.append(int(result.as_numpy("SEEN")[0]))
            places.add(result.as_numpy("WHERE")[0].decode().split("-")[0])
    assert places == {"instance", "MainThread"}
    assert seen == list(range(len(seen)))


def counts(server: ServerHandle, model: str) -> dict[str, Any]:
    """Every count of ``model``'s statistics (the durations differ from run to run)."""
    with httpclient.InferenceServerClient(server.http_url) as client:
        stats = client.get_inference_statistics(model)["model_stats"][0]
    return {
        "inference_count": stats["inference_count"],
        "execution_count": stats["execution_count"],
        "inference_stats": {k: v["count"] for k, v in stats["inference_stats"].items()},
        "batch_stats": sorted(
            (b["batch_size"], {k: v["count"] for k, v in b.items() if k != "batch_size"})
            for b in stats["batch_stats"]
        ),
    }


def test_statistics_match_the_general_path(server: ServerHandle) -> None:
    """The same requests (answers, model errors, refused requests) counted alike inline and
    in the instance's thread."""
    for _ in range(WARMUP):
        for model in ("stats_a", "stats_b"):
            where(server, model)
    rounds = 0

    def one_round() -> None:
        nonlocal rounds
        rounds += 1
        for case in sorted(CASES):
            for model in ("stats_a", "stats_b"):
                send(server, model, case)
        assert where(server, "stats_b").startswith("instance-")

    until_inline(server, "stats_a", one_round)
    fast, general = counts(server, "stats_a"), counts(server, "stats_b")
    assert fast == general
    # (every case but the refused output name counted: a success or a model's error)
    assert fast["inference_stats"]["success"] == WARMUP + rounds * len(CASES)


def scale_inputs(index: int) -> np.ndarray:
    rows = 1 + index % 3
    return (np.arange(rows * 4, dtype=np.float32).reshape(rows, 4) + 100 * index).astype(np.float32)


def infer_scale(server: ServerHandle, model: str, x: np.ndarray) -> dict[str, np.ndarray] | str:
    with httpclient.InferenceServerClient(server.http_url) as client:
        tensor = httpclient.InferInput("X", list(x.shape), "FP32")
        tensor.set_data_from_numpy(x)
        try:
            result = client.infer(model, [tensor])
        except Exception as error:  # an error answer: its message
            return str(error)
        return {"Y": result.as_numpy("Y"), "ROWSUM": result.as_numpy("ROWSUM")}


def test_batched_execute_answers_each_request_with_its_own_rows(server: ServerHandle) -> None:
    results: dict[tuple[str, int], Any] = {}

    def worker(model: str, index: int) -> None:
        results[(model, index)] = infer_scale(server, model, scale_inputs(index))

    threads = [
        threading.Thread(target=worker, args=(m, i))
        for m in ("batched", "listed")
        for i in range(24)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    for index in range(24):
        x = scale_inputs(index)
        for model in ("batched", "listed"):
            answer = results[(model, index)]
            assert isinstance(answer, dict), answer
            np.testing.assert_array_equal(answer["Y"], x * 3 + 1)
            np.testing.assert_array_equal(answer["ROWSUM"], x.sum(axis=1, keepdims=True))


def test_batched_execute_error_fails_the_request_with_the_models_message(
    server: ServerHandle,
) -> None:
    bad = np.full((2, 4), 13, dtype=np.float32)
    for model in ("batched", "listed"):
        answer = infer_scale(server, model, bad)
        assert isinstance(answer, str) and "unlucky row" in answer, answer


def test_batched_execute_needs_a_batching_model(tmp_path: Path) -> None:
    config = scale_config("flat", BATCHED).replace("max_batch_size: 16", "max_batch_size: 0")
    config = config.replace("dynamic_batching { max_queue_delay_microseconds: 2000 }", "")
    write_model(tmp_path, "flat", config, SCALE_MODEL)
    with pytest.raises(HarnessError, match="BATCHED_EXECUTE needs a batching model"):
        with run_pytriton_server(tmp_path):
            pass


# --------------------------------------------------- the compiled walk of the infer header

# Walked: what csrc/http/infer_walk.pyx reads itself. The same request with a member the
# general decode ignores (and the walk hands over) takes the general decode.
GENERAL_ONLY = {"x-general-decode": True}
FIXED_SIZE = ("F32", "I64", "BOOL", "U8", "F16")
WALK_CASES: dict[str, tuple[dict[str, np.ndarray], list[dict[str, Any]] | None, bool]] = {
    "all-outputs-binary": (io_inputs(2, 3), None, True),
    "named-outputs": (
        io_inputs(1, 4),
        [{"name": "O_I64"}, {"name": "O_STR", "parameters": {"binary_data": True}}],
        False,
    ),
    "empty-tensors": (
        io_inputs(3, 0),
        [{"name": n["name"], "parameters": {"binary_data": True}} for n in ALL_BUT_WHERE],
        False,
    ),
    "no-optional-input": (
        {k: v for k, v in io_inputs(2, 2).items() if k != "F16"},
        [{"name": "O_F32", "parameters": None}],
        False,
    ),
    "model-error": (io_inputs(1, 2, first=-1.0), None, True),
    "missing-input": ({"F32": io_inputs(1, 2)["F32"]}, None, True),
    "bad-output": (io_inputs(1, 2), [{"name": "NOPE"}], True),
    "bad-bytes": ({**io_inputs(1, 2), "STR": np.array([[b"a", b"b"]], dtype=object)}, None, True),
}


def walk_request(case: str, general: bool) -> tuple[bytes, dict[str, str]]:
    arrays, outputs, binary_out = WALK_CASES[case]
    body, headers = binary_request(arrays, outputs, binary_out)
    split = int(headers["Inference-Header-Content-Length"])
    document = json.loads(body[:split])
    if "id" in document and case == "no-optional-input":
        del document["id"]
    if case == "bad-bytes":  # STR's 2 elements in 5 bytes: one length prefix and one byte
        blobs = body[split:]
        sizes = [entry["parameters"]["binary_data_size"] for entry in document["inputs"]]
        index = [entry["name"] for entry in document["inputs"]].index("STR")
        start = sum(sizes[:index])
        blobs = blobs[:start] + b"\x01\x00\x00\x00a" + blobs[start + sizes[index] :]
        document["inputs"][index]["parameters"]["binary_data_size"] = 5
        body = body[:split] + blobs
    if general:
        document.update(GENERAL_ONLY)
    head = json.dumps(document).encode()
    headers["Inference-Header-Content-Length"] = str(len(head))
    return head + body[split:], headers


def success_and_failure(server: ServerHandle, model: str) -> tuple[int, int, int]:
    client = httpclient.InferenceServerClient(server.http_url.removeprefix("http://"))
    try:
        stats = client.get_inference_statistics(model)["model_stats"][0]
    finally:
        client.close()
    inference = stats["inference_stats"]
    return inference["success"]["count"], inference["fail"]["count"], stats["inference_count"]


@pytest.mark.parametrize("case", sorted(WALK_CASES))
def test_the_compiled_header_walk_decodes_as_the_general_decode(
    server: ServerHandle, case: str
) -> None:
    path = "/v2/models/fast_b/infer"
    answers = []
    counts = [success_and_failure(server, "fast_b")]
    for general in (False, True):
        body, headers = walk_request(case, general)
        answers.append(post(server.http_url, path, body, headers))
        counts.append(success_and_failure(server, "fast_b"))
    walked, decoded = answers
    assert walked == decoded
    first, second = (np.subtract(counts[i + 1], counts[i]).tolist() for i in range(2))
    assert first == second  # the same statistics for both
    if case in ("model-error", "missing-input", "bad-output", "bad-bytes"):
        assert walked[0] == 400, walked
    else:
        assert walked[0] == 200, walked


@pytest.mark.parametrize(
    "extra",
    [{}, {"parameters": {"binary_data_output": True, "priority": 0}}, {"outputs": None}],
)
def test_requests_the_walk_hands_over_get_the_same_answers(
    server: ServerHandle, extra: dict[str, Any]
) -> None:
    arrays = {k: v for k, v in io_inputs(1, 3).items() if k in FIXED_SIZE}
    arrays["STR"] = io_inputs(1, 3)["STR"]
    body, headers = binary_request(arrays, None, True)
    split = int(headers["Inference-Header-Content-Length"])
    document = {**json.loads(body[:split]), **extra}
    answers = []
    for member in ({}, GENERAL_ONLY):
        head = json.dumps({**document, **member}).encode()
        headers["Inference-Header-Content-Length"] = str(len(head))
        answers.append(
            post(server.http_url, "/v2/models/fast_b/infer", head + body[split:], headers)
        )
    assert answers[0] == answers[1]
    assert answers[0][0] == 200, answers[0]


def test_a_header_sent_again_is_answered_as_by_the_general_decode(server: ServerHandle) -> None:
    """The memo of common headers (``HeaderMemo``, csrc/http/infer_walk.pyx): the same header
    sent again is not parsed again. Over new data, over data the model refuses, and over a
    binary section of another size, its answers are the general decode's, byte for byte, and
    so are the statistics."""
    outputs = [{"name": "Y", "parameters": {"binary_data": True}}, {"name": "ROWSUM"}]

    def request(x: np.ndarray, general: bool, cut: int = 0) -> tuple[bytes, dict[str, str]]:
        body, headers = binary_request({"X": x}, outputs, False)
        split = int(headers["Inference-Header-Content-Length"])
        document = json.loads(body[:split])
        if general:
            document.update(GENERAL_ONLY)
        head = json.dumps(document).encode()
        headers["Inference-Header-Content-Length"] = str(len(head))
        return head + body[split : len(body) - cut], headers

    rows = [np.full((2, 4), value, np.float32) for value in (1.0, 2.5, 13.0, -4.0, 7.0)]
    for index, x in enumerate(rows):
        cut = 4 if index == 3 else 0  # a section 4 bytes short: an error from the decode
        answers, counts = [], [success_and_failure(server, "listed")]
        for general in (False, True):
            answers.append(
                post(server.http_url, "/v2/models/listed/infer", *request(x, general, cut))
            )
            counts.append(success_and_failure(server, "listed"))
        assert answers[0] == answers[1], index
        assert (
            np.subtract(counts[1], counts[0]).tolist() == np.subtract(counts[2], counts[1]).tolist()
        )
        expected_status = 400 if index in (2, 3) else 200
        assert answers[0][0] == expected_status, answers[0]
        if expected_status == 200:  # Y, the one binary output, ends the body: this x's
            y = np.frombuffer(answers[0][2][-x.nbytes :], np.float32).reshape(x.shape)
            np.testing.assert_array_equal(y, x * 3 + 1)
