"""The logging and trace extensions over HTTP and gRPC, their effect on the server log, and
request traces in Triton's trace JSON. Expected answers are Triton 2.51's (checked
against it: ../shared/spec/protocol.md §1.12, §1.13)."""

from __future__ import annotations

import http.client
import json
import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from harness import ServerError, ServerHandle, run_pytriton_server
from ops_models import LOGGING_MODEL, write_model
from tritonclient.utils import InferenceServerException

DEFAULT_LOG = {
    "log_file": "",
    "log_info": True,
    "log_warning": True,
    "log_error": True,
    "log_verbose_level": 0,
    "log_format": "default",
}
HTTP_STAGES = [
    "HTTP_RECV_START",
    "HTTP_RECV_END",
    "REQUEST_START",
    "QUEUE_START",
    "COMPUTE_START",
    "COMPUTE_INPUT_END",
    "COMPUTE_OUTPUT_START",
    "COMPUTE_END",
    "INFER_RESPONSE_COMPLETE",
    "REQUEST_END",
    "HTTP_SEND_START",
    "HTTP_SEND_END",
]


def raw(server: ServerHandle, method: str, path: str, body: bytes = b"") -> tuple[int, Any]:
    host, port = server.http_url.rsplit(":", 1)
    connection = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        connection.request(method, path, body=body)
        response = connection.getresponse()
        return response.status, json.loads(response.read() or b"null")
    finally:
        connection.close()


def post(server: ServerHandle, path: str, document: Any) -> tuple[int, Any]:
    return raw(server, "POST", path, json.dumps(document).encode())


def infer(client: Any, module: Any, model: str, value: float = 1.0, request_id: str = "") -> None:
    tensor = module.InferInput("INPUT0", [1], "FP32")
    tensor.set_data_from_numpy(np.array([value], np.float32))
    client.infer(model, [tensor], request_id=request_id)


def wait_for(condition: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.02)


# --------------------------------------------------------------------------- logging


@pytest.fixture(scope="module")
def log_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("logs") / "server.log"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, log_file: Path) -> Iterator[ServerHandle]:
    repository = tmp_path_factory.mktemp("logging-trace")
    write_model(repository, "chatty", source=LOGGING_MODEL)
    write_model(repository, "plain")
    with run_pytriton_server(repository, f"--log-file={log_file}") as handle:
        yield handle


def test_log_settings_defaults(server: ServerHandle, log_file: Path) -> None:
    expected = {**DEFAULT_LOG, "log_file": str(log_file)}
    assert raw(server, "GET", "/v2/logging") == (200, expected)
    with httpclient.InferenceServerClient(server.http_url) as client:
        assert client.get_log_settings() == expected
    with grpcclient.InferenceServerClient(server.grpc_url) as grpc_client:
        settings = grpc_client.get_log_settings(as_json=True)["settings"]
    assert {k: next(iter(v.values())) for k, v in settings.items()} == {
        **expected,
        "log_verbose_level": 0,
    }


def test_log_settings_change_what_is_logged(server: ServerHandle, log_file: Path) -> None:
    def lines_after(marker: int) -> str:
        return log_file.read_text()[marker:]

    with httpclient.InferenceServerClient(server.http_url) as client:
        start = len(log_file.read_text())
        infer(client, httpclient, "chatty")
        wait_for(lambda: "model error line" in lines_after(start))
        logged = lines_after(start)
        assert "model info line" in logged and "model warning line" in logged
        assert "model verbose line" not in logged
        assert re.search(
            r"^I\d{4} \d\d:\d\d:\d\d\.\d{6} \d+ \S+:\d+\] model info line$", logged, re.M
        )

        changed = client.update_log_settings(
            {"log_info": False, "log_verbose_level": 1, "log_format": "ISO8601"}
        )
        assert changed == {
            **DEFAULT_LOG,
            "log_file": str(log_file),
            "log_info": False,
            "log_verbose_level": 1,
            "log_format": "ISO8601",
        }
        start = len(log_file.read_text())
        infer(client, httpclient, "chatty")
        wait_for(lambda: "model error line" in lines_after(start))
        logged = lines_after(start)
        assert "model info line" not in logged
        assert "model verbose line" in logged
        assert re.search(
            r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ W \d+ \S+:\d+\] model warning line$", logged, re.M
        )
        # Back to the defaults, over gRPC this time.
        with grpcclient.InferenceServerClient(server.grpc_url) as grpc_client:
            grpc_client.update_log_settings(
                {"log_info": True, "log_verbose_level": 0, "log_format": "default"}
            )
        assert client.get_log_settings()["log_format"] == "default"


@pytest.mark.parametrize(
    ("body", "status", "message"),
    [
        (
            {"log_file": "other.log"},
            501,
            "log file location can not be updated through network protocol",
        ),
        ({"log_format": "bad"}, 503, "invalid argument for --log_format, got: bad"),
        ({"log_info": "yes"}, 500, "attempt to access JSON non-boolean as boolean"),
        (
            {"log_verbose_level": -1},
            500,
            "attempt to access JSON non-unsigned-integer as unsigned-integer",
        ),
        (
            {"log_verbose_level": "1"},
            500,
            "attempt to access JSON non-unsigned-integer as unsigned-integer",
        ),
    ],
)
def test_log_settings_refusals(server: ServerHandle, body: Any, status: int, message: str) -> None:
    assert post(server, "/v2/logging", body) == (status, {"error": message})
    assert raw(server, "GET", "/v2/logging")[1]["log_info"] is True  # nothing changed


def test_log_settings_ignore_nulls_and_unknown_keys(server: ServerHandle, log_file: Path) -> None:
    expected = {**DEFAULT_LOG, "log_file": str(log_file)}
    assert post(server, "/v2/logging", {"log_file": None, "log_info": None, "x": 1}) == (
        200,
        expected,
    )
    assert raw(server, "PUT", "/v2/logging") == (405, {"error": "Method Not Allowed"})


def test_grpc_log_settings_refusals(server: ServerHandle) -> None:
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        with pytest.raises(InferenceServerException) as info:
            client.update_log_settings({"log_file": "x"})
        assert info.value.status() == "StatusCode.UNIMPLEMENTED"
        with pytest.raises(InferenceServerException) as info:
            client.update_log_settings({"log_format": "bad"})
        assert info.value.status() == "StatusCode.INVALID_ARGUMENT"
        assert info.value.message() == "invalid argument for log_format, got: bad"


# --------------------------------------------------------------------------- trace settings


def test_trace_settings_defaults_and_model_overrides(server: ServerHandle) -> None:
    off = {
        "trace_level": ["OFF"],
        "trace_rate": "1000",
        "trace_count": "-1",
        "log_frequency": "0",
        "trace_file": "",
        "trace_mode": "triton",
    }
    assert raw(server, "GET", "/v2/trace/setting") == (200, off)
    assert raw(server, "GET", "/v2/models/plain/trace/setting") == (200, off)
    status, model = post(server, "/v2/models/plain/trace/setting", {"trace_rate": "3"})
    assert (status, model) == (200, {**off, "trace_rate": "3"})
    # A global change reaches the model where it has no setting of its own.
    assert post(server, "/v2/trace/setting", {"trace_count": "5"})[1]["trace_count"] == "5"
    assert raw(server, "GET", "/v2/models/plain/trace/setting")[1] == {
        **off,
        "trace_rate": "3",
        "trace_count": "5",
    }
    # null clears: the model falls back to the global value, the global one to its start value.
    assert (
        post(server, "/v2/models/plain/trace/setting", {"trace_rate": None})[1]["trace_rate"]
        == "1000"
    )
    assert post(server, "/v2/trace/setting", {"trace_count": None})[1] == off
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        settings = client.update_trace_settings("plain", {"trace_rate": "9"}, as_json=True)
        assert settings["settings"]["trace_rate"]["value"] == ["9"]
        settings = client.update_trace_settings("plain", {"trace_rate": None}, as_json=True)
        assert settings["settings"]["trace_rate"]["value"] == ["1000"]
        assert client.get_trace_settings(as_json=True)["settings"]["trace_level"]["value"] == [
            "OFF"
        ]


@pytest.mark.parametrize(
    ("path", "body", "status", "message"),
    [
        ("/v2/trace/setting", {"trace_rate": "x"}, 400, "Unable to parse 'trace_rate', got: x"),
        (
            "/v2/trace/setting",
            {"trace_rate": "0"},
            400,
            "Attempting to set invalid trace setting :sample rate must be non-zero",
        ),
        (
            "/v2/trace/setting",
            {"trace_count": "-2"},
            400,
            "Unable to parse 'trace_count'. Expecting value >= -1, got:-2",
        ),
        (
            "/v2/trace/setting",
            {"trace_rate": 5},
            500,
            "attempt to access JSON non-string as string",
        ),
        (
            "/v2/trace/setting",
            {"trace_level": "OFF"},
            500,
            "attempt to access JSON non-array as array",
        ),
        (
            "/v2/trace/setting",
            {"trace_file": "/tmp/other.json"},
            501,
            "trace file location can not be updated through network protocol",
        ),
        ("/v2/models/nope/trace/setting", {}, 400, "Request for unknown model : nope"),
    ],
)
def test_trace_settings_refusals(
    server: ServerHandle, path: str, body: Any, status: int, message: str
) -> None:
    assert post(server, path, body) == (status, {"error": message})


def test_trace_setting_paths(server: ServerHandle) -> None:
    assert raw(server, "GET", "/v2/models/nope/trace/setting") == (
        400,
        {"error": "Request for unknown model : nope"},
    )
    assert raw(server, "GET", "/v2/models/plain/versions/1/trace/setting")[0] == 404
    assert raw(server, "PUT", "/v2/trace/setting") == (405, {"error": "Method Not Allowed"})
    with (
        grpcclient.InferenceServerClient(server.grpc_url) as client,
        pytest.raises(InferenceServerException, match="Request for unknown model : nope"),
    ):
        client.get_trace_settings("nope")


# --------------------------------------------------------------------------- traces


def read_traces(paths: list[Path]) -> dict[int, list[dict[str, Any]]]:
    by_id: dict[int, list[dict[str, Any]]] = {}
    for path in paths:
        for entry in json.loads(path.read_text()):
            by_id.setdefault(entry["id"], []).append(entry)
    return by_id


def stamps(entries: list[dict[str, Any]]) -> dict[str, int]:
    found = {}
    for entry in entries:
        for stamp in entry.get("timestamps", ()):
            found[stamp["name"]] = stamp["ns"]
    return found


def test_request_traces_in_tritons_trace_json(tmp_path: Path) -> None:
    write_model(tmp_path / "models", "plain")
    trace_file = tmp_path / "trace.json"
    flags = (
        f"--trace-config=triton,file={trace_file}",
        "--trace-config=level=TIMESTAMPS",
        "--trace-config=rate=1",
        "--trace-config=triton,log-frequency=1",
    )
    with (
        run_pytriton_server(tmp_path / "models", *flags) as server,
        httpclient.InferenceServerClient(server.http_url) as client,
        grpcclient.InferenceServerClient(server.grpc_url) as grpc_client,
    ):
        infer(client, httpclient, "plain", request_id="first")
        infer(client, httpclient, "plain")
        infer(grpc_client, grpcclient, "plain", request_id="by-grpc")
        wait_for(lambda: Path(f"{trace_file}.2").is_file())
        traces = read_traces([Path(f"{trace_file}.{i}") for i in range(3)])
        # Every 2nd request from now on; TENSORS adds the tensors.
        client.update_trace_settings(
            settings={"trace_rate": "2", "trace_level": ["TIMESTAMPS", "TENSORS"]}
        )
        for value in range(4):
            infer(client, httpclient, "plain", value=float(value))
        # The same file and frequency: its numbering goes on.
        wait_for(lambda: Path(f"{trace_file}.4").is_file())
        sampled = read_traces([Path(f"{trace_file}.{i}") for i in (3, 4)])
    assert sorted(traces) == [1, 2, 3]
    assert traces[1][0] == {
        "id": 1,
        "model_name": "plain",
        "model_version": 1,
        "request_id": "first",
    }
    assert traces[2][0] == {"id": 2, "model_name": "plain", "model_version": 1}
    for trace_id in (1, 2):
        found = stamps(traces[trace_id])
        assert list(found) == HTTP_STAGES
        assert list(found.values()) == sorted(found.values())
    grpc_stamps = stamps(traces[3])
    assert (
        grpc_stamps["REQUEST_START"] <= grpc_stamps["COMPUTE_START"] <= grpc_stamps["REQUEST_END"]
    )
    assert {"GRPC_WAITREAD_START", "GRPC_SEND_END"} <= set(grpc_stamps)
    # Rate 2: the 1st and 3rd of the four requests, with their tensors.
    assert sorted(sampled) == [4, 5]
    tensors = [e for e in sampled[5] if "activity" in e]
    assert {
        "id": 5,
        "activity": "TENSOR_QUEUE_INPUT",
        "tensor": {"name": "INPUT0", "data": "2.0", "shape": "1", "dtype": "FP32"},
    } in tensors
    assert {
        "id": 5,
        "activity": "TENSOR_BACKEND_OUTPUT",
        "tensor": {"name": "OUTPUT0", "data": "3.0", "shape": "1", "dtype": "FP32"},
    } in tensors


def test_trace_count_and_the_file_written_at_exit(tmp_path: Path) -> None:
    write_model(tmp_path / "models", "plain")
    trace_file = tmp_path / "trace.json"
    flags = (f"--trace-file={trace_file}", "--trace-level=TIMESTAMPS", "--trace-rate=1")
    with (
        run_pytriton_server(tmp_path / "models", *flags) as server,
        httpclient.InferenceServerClient(server.http_url) as client,
    ):
        client.update_trace_settings("plain", {"trace_count": "2"})
        for _ in range(3):
            infer(client, httpclient, "plain")
        assert client.get_trace_settings("plain")["trace_count"] == "0"
        wait_for(lambda: Path(f"{trace_file}.0").is_file())
        assert sorted(read_traces([Path(f"{trace_file}.0")])) == [1, 2]
        # Back on the global settings (no count): traced again, written when the server exits.
        client.update_trace_settings("plain", {"trace_count": None})
        infer(client, httpclient, "plain")
        assert not trace_file.exists()
    assert sorted(read_traces([trace_file])) == [3]


def test_opentelemetry_mode_needs_its_packages(tmp_path: Path) -> None:
    try:
        import opentelemetry.sdk  # noqa: F401

        pytest.skip("the OpenTelemetry packages are installed")
    except ImportError:
        pass
    write_model(tmp_path, "plain")
    with (
        pytest.raises(ServerError) as info,
        run_pytriton_server(tmp_path, "--trace-config=mode=opentelemetry", timeout=30),
    ):
        pass
    assert "trace mode 'opentelemetry' needs the OpenTelemetry packages" in str(info.value)
    assert "pip install opentelemetry-api opentelemetry-sdk" in str(info.value)
