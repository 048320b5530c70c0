"""Differential test of the control plane: pytriton-core and the real Triton 2.51 answer the
same model-repository, readiness and lookup requests alike, over HTTP and gRPC.

Both servers run in EXPLICIT mode over one repository this module writes
(control_models.py): ``simple`` and a model for each way a load fails. Every case sends the
same request to both and compares status (HTTP status or gRPC code) and message. The
servers' data-plane answers are compared in test_differential.py, whose helpers this module
shares.

Compared exactly unless a case says otherwise; the deliberate exceptions:
* ``message_until`` cuts both messages after a marker where the tail cannot match: the
  model's stack ("At:" and the frames, which name our pb_utils file where Triton names its
  own, and Python's import machinery, whose frames differ between versions), and the list
  of backends this server adds to Triton's "unable to find backend library" message.
* A Python model whose version folder lacks model.py: Triton 2.51's load never returns
  (its stub exits and the backend waits on it), so no case can send it there; ours fails
  the version (test_missing_model_file_fails_the_version_here).
* A file override whose name is longer than the file system allows crashes Triton 2.51
  (it is fixed in later releases, and Triton's own simple_grpc_model_control.py checks
  for INTERNAL "failed to poll from model repository"): checked on ours only.
"""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from control_models import (
    FAILING_MODELS,
    FP32_IO_CONFIG,
    write_control_repository,
    write_model_folder,
    write_simple,
)
from harness import ServerError, ServerHandle, run_pytriton_server, run_real_triton
from test_differential import SELF_CHECK, Raw, assert_same, send_raw
from tritonclient.utils import InferenceServerException

pytestmark = pytest.mark.real_triton

STARTUP = ("--model-control-mode=explicit", "--load-model=simple")
STACK = "\n\nAt:\n"  # where a Python model's stack starts in Triton's messages
BACKENDS_LISTED = "try specifying runtime on the model configuration."


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_control_repository(tmp_path_factory.mktemp("control") / "models")


@pytest.fixture(scope="module")
def triton(repository: Path) -> Iterator[ServerHandle]:
    with run_real_triton(repository, *STARTUP) as server:
        yield server


@pytest.fixture(scope="module")
def ours(triton: ServerHandle, repository: Path) -> Iterator[ServerHandle]:
    run = run_real_triton if SELF_CHECK else run_pytriton_server
    with run(repository, *STARTUP) as server:
        yield server


# ---------------------------------------------------------------------------------------------
# gRPC requests through tritonclient


@dataclass(frozen=True)
class GrpcReply:
    status: str  # "OK" or the gRPC status code name
    message: str | None = None
    value: Any = None  # what a successful call returned, in comparable form

    def cut(self, marker: str | None) -> GrpcReply:
        if marker is None or self.message is None or marker not in self.message:
            return self
        end = self.message.index(marker) + len(marker)
        return GrpcReply(self.status, self.message[:end], self.value)


@dataclass(frozen=True, eq=False)
class Grpc:
    method: str  # a tritonclient.grpc.InferenceServerClient method
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)
    message_until: str | None = None


def send_grpc(server: ServerHandle, case: Grpc) -> GrpcReply:
    client = grpcclient.InferenceServerClient(server.grpc_url)
    try:
        result = getattr(client, case.method)(*case.args, **case.kwargs)
    except InferenceServerException as error:
        status = str(error.status()).removeprefix("StatusCode.")
        return GrpcReply(status, error.message())
    finally:
        client.close()
    return GrpcReply("OK", value=result if isinstance(result, (bool, type(None))) else None)


def assert_same_grpc(case: Grpc, ours: GrpcReply, triton: GrpcReply) -> None:
    ours, triton = ours.cut(case.message_until), triton.cut(case.message_until)
    assert ours == triton, (
        f"pytriton-core differs from Triton:\n  ours:   {ours}\n  triton: {triton}"
    )


def _infer_inputs() -> list[grpcclient.InferInput]:
    inputs = []
    for name in ("INPUT0", "INPUT1"):
        tensor = grpcclient.InferInput(name, [1, 16], "INT32")
        tensor.set_data_from_numpy(np.ones((1, 16), np.int32))
        inputs.append(tensor)
    return inputs


def _load_body(config: str | None = None, files: dict[str, str] | None = None) -> dict[str, Any]:
    parameters: dict[str, Any] = {} if config is None else {"config": config}
    parameters.update(files or {})  # values: base64 text
    return {"parameters": parameters}


# ---------------------------------------------------------------------------------------------
# Cases: unknown models and versions, on every endpoint


def _lookup_cases() -> dict[str, Raw | Grpc]:
    cases: dict[str, Raw | Grpc] = {}
    for label, model, version in (
        ("unknown-model", "no_such_model", ""),
        ("unknown-version", "simple", "7"),
        ("never-loaded", "init_raises", ""),
    ):
        path = f"/v2/models/{model}" + (f"/versions/{version}" if version else "")
        cases[f"http-{label}-metadata"] = Raw("GET", path)
        cases[f"http-{label}-ready"] = Raw("GET", path + "/ready")
        cases[f"http-{label}-config"] = Raw("GET", path + "/config")
        cases[f"http-{label}-stats"] = Raw("GET", path + "/stats")
        cases[f"http-{label}-infer"] = Raw("POST", path + "/infer", {"inputs": []})
        cases[f"grpc-{label}-ready"] = Grpc("is_model_ready", (model, version))
        cases[f"grpc-{label}-metadata"] = Grpc("get_model_metadata", (model, version))
        cases[f"grpc-{label}-config"] = Grpc("get_model_config", (model, version))
        cases[f"grpc-{label}-stats"] = Grpc("get_inference_statistics", (model, version))
        cases[f"grpc-{label}-infer"] = Grpc(
            "infer", (model, _infer_inputs()), {"model_version": version}
        )
    return cases


# ---------------------------------------------------------------------------------------------
# Cases: load failures of every kind, unload of unknown models


def _load_cases() -> dict[str, Raw | Grpc]:
    cases: dict[str, Raw | Grpc] = {}
    for model in [*FAILING_MODELS, "no_such_model"]:
        until = STACK if model in ("init_raises", "import_fails", "autocomplete_mismatch") else None
        if model == "unknown_backend":
            until = BACKENDS_LISTED
        cases[f"http-load-{model}"] = Raw(
            "POST", f"/v2/repository/models/{model}/load", message_until=until
        )
        cases[f"grpc-load-{model}"] = Grpc("load_model", (model,), message_until=until)
    malformed = '"parameters": {"config": {{"max_batch_size": "16"}}}'
    overrides: dict[str, tuple[str | None, dict[str, str]]] = {
        "malformed-override": (malformed, {}),
        "invalid-override": ('{"max_batch_size": -3}', {}),
        "override-unknown-field": ('{"no_such_field": 1}', {}),
        "override-names-another-model": ('{"name": "another"}', {}),
        "files-without-config": (None, {"file:1/model.py": "eA=="}),
        "file-path-absolute": ("{}", {"file:/tmp/pytriton-escape/model.py": "eA=="}),
        "file-path-climbs-out": ("{}", {"file:../1/model.py": "eA=="}),
        "file-path-climbs-out-deeper": ("{}", {"file:1/../../escape.py": "eA=="}),
    }
    for label, (config, files) in overrides.items():
        cases[f"http-load-{label}"] = Raw(
            "POST", "/v2/repository/models/simple/load", _load_body(config, files)
        )
    cases["grpc-load-malformed-override"] = Grpc("load_model", ("simple",), {"config": malformed})
    cases["grpc-load-files-without-config"] = Grpc(
        "load_model", ("simple",), {"files": {"file:1/model.py": b"x"}}
    )
    cases["grpc-load-blank-name"] = Grpc("load_model", (" ",))
    cases["grpc-load-name-with-slash"] = Grpc("load_model", ("a/b",))
    cases["http-unload-unknown"] = Raw("POST", "/v2/repository/models/no_such_model/unload")
    cases["grpc-unload-unknown"] = Grpc("unload_model", ("no_such_model",))
    return cases


CASES = {**_lookup_cases(), **_load_cases()}


@pytest.mark.parametrize("name", list(CASES))
def test_case(name: str, ours: ServerHandle, triton: ServerHandle) -> None:
    case = CASES[name]
    if isinstance(case, Raw):
        assert_same(case, send_raw(ours, case), send_raw(triton, case))
    else:
        assert_same_grpc(case, send_grpc(ours, case), send_grpc(triton, case))


# ---------------------------------------------------------------------------------------------
# What the index and readiness say after the failed loads


def _index(server: ServerHandle) -> list[tuple[Any, ...]]:
    with httpclient.InferenceServerClient(server.http_url) as client:
        entries = client.get_model_repository_index()
    return [
        (e["name"], e.get("version"), e.get("state"), e.get("reason", "").split(STACK)[0])
        for e in entries
    ]


def _load_everything(server: ServerHandle) -> None:
    with httpclient.InferenceServerClient(server.http_url) as client:
        for model in FAILING_MODELS:
            with pytest.raises(InferenceServerException):
                client.load_model(model)


def test_index_and_readiness_after_failed_loads(ours: ServerHandle, triton: ServerHandle) -> None:
    for server in (ours, triton):
        _load_everything(server)
    # Our reason for the unknown backend goes on to list this server's backends.
    mine = [(*e[:3], e[3].split(" (this server provides")[0]) for e in _index(ours)]
    assert mine == _index(triton)
    for case in (Raw("GET", "/v2/health/ready"), Raw("GET", "/v2/health/live")):
        assert_same(case, send_raw(ours, case), send_raw(triton, case))


# ---------------------------------------------------------------------------------------------
# Reloads: a load of an unchanged model is a no-op; a changed one reloads


def test_unload_then_lookups(ours: ServerHandle, triton: ServerHandle) -> None:
    """An unloaded version: not at ready state, by version; no versions, by name."""
    cases: list[Raw | Grpc] = [
        Raw("POST", "/v2/repository/models/simple/unload"),
        Raw("GET", "/v2/models/simple"),
        Raw("GET", "/v2/models/simple/versions/1"),
        Raw("GET", "/v2/models/simple/versions/1/ready"),
        Grpc("get_model_metadata", ("simple", "1")),
        Raw("POST", "/v2/repository/index", {"ready": True}),
        Raw("POST", "/v2/repository/models/simple/load"),
        Raw("GET", "/v2/models/simple/ready"),
    ]
    for case in cases:
        if isinstance(case, Raw):
            assert_same(case, send_raw(ours, case), send_raw(triton, case))
        else:
            assert_same_grpc(case, send_grpc(ours, case), send_grpc(triton, case))


# ---------------------------------------------------------------------------------------------
# Startup: --exit-on-error x --strict-readiness


def _startup_repository(root: Path) -> Path:
    write_model_folder(root, "fails", *FAILING_MODELS["init_raises"])
    write_simple(root)
    return root


RunServer = Callable[..., Any]


@pytest.mark.parametrize("strict", ["true", "false"])
def test_exit_on_error_stops_the_start(tmp_path: Path, strict: str) -> None:
    repository = _startup_repository(tmp_path)
    flags = ("--exit-on-error=true", f"--strict-readiness={strict}")
    runs: list[RunServer] = [
        run_real_triton,
        run_real_triton if SELF_CHECK else run_pytriton_server,
    ]
    logs = []
    for run in runs:
        with pytest.raises(ServerError) as failure, run(repository, *flags, timeout=60):
            pass
        logs.append(str(failure.value))
    for log in logs:
        assert "exited with 1 before it was ready" in log
        assert "error: creating server: Internal - failed to load all models" in log
        assert "failed to load 'fails' version 1: Internal: ValueError: initialize refused" in log


@pytest.mark.parametrize("strict", ["true", "false"])
def test_without_exit_on_error_the_others_serve(tmp_path: Path, strict: str) -> None:
    repository = _startup_repository(tmp_path)
    flags = ("--exit-on-error=false", f"--strict-readiness={strict}")
    answers = []
    for run in (run_real_triton, run_real_triton if SELF_CHECK else run_pytriton_server):
        # With strict readiness the server never reports ready: wait until it is live.
        with run(repository, *flags, ready_path="/v2/health/live") as server:
            answers.append(
                [
                    send_raw(server, Raw("GET", path)).status
                    for path in (
                        "/v2/health/live",
                        "/v2/health/ready",
                        "/v2/models/simple/ready",
                        "/v2/models/fails/ready",
                    )
                ]
            )
            assert "Internal: failed to load all models" in server.log()
    assert answers[0] == answers[1]
    assert answers[1] == [200, 400 if strict == "true" else 200, 200, 400]


# ---------------------------------------------------------------------------------------------
# Shutdown: the exit timeout expiring with a request executing


SLEEPS_IN_EXECUTE = """
import time
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        time.sleep(30)
        return [pb_utils.InferenceResponse([]) for _ in requests]
"""


def _send_unanswered(server: ServerHandle, body: dict[str, Any]) -> None:
    with contextlib.suppress(OSError):  # the server leaves without answering
        send_raw(server, Raw("POST", "/v2/models/sleeps/infer", body))


def test_exit_timeout_with_a_request_executing(tmp_path: Path) -> None:
    write_model_folder(
        tmp_path,
        "sleeps",
        FP32_IO_CONFIG,
        SLEEPS_IN_EXECUTE,
    )
    body = {"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1], "data": [1]}]}
    outcomes = []
    for run in (run_real_triton, run_real_triton if SELF_CHECK else run_pytriton_server):
        kwargs = {} if run is run_real_triton else {"check_exit": False}
        with run(tmp_path, "--exit-timeout-secs=2", **kwargs) as server:
            threading.Thread(target=_send_unanswered, args=(server, body), daemon=True).start()
            time.sleep(1.0)  # the request is executing
            started = time.monotonic()
            server.process.send_signal(signal.SIGTERM)
            status = server.process.wait(timeout=30)
            elapsed = time.monotonic() - started
            outcomes.append((status, "Exit timeout expired. Exiting immediately." in server.log()))
            assert elapsed < 20
    assert outcomes[0] == outcomes[1] == (1, True)
