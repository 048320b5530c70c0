"""--http-restricted-api and --grpc-restricted-protocol: tritonserver's syntax, answers and
messages, compared with the real Triton where it is installed."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from harness import ServerHandle, http_exchange, run_pytriton_server, run_real_triton
from ops_models import write_model
from tritonclient.utils import InferenceServerException

RESTRICTIONS = (
    "--model-control-mode=explicit",
    "--load-model=alpha",
    "--http-restricted-api=model-repository,statistics:admin-key=secret",
    "--http-restricted-api=inference:infer-key=abc=def",  # a value may hold "="
    "--grpc-restricted-protocol=model-repository:admin-key=secret",
    "--grpc-restricted-protocol=inference,statistics:infer-key=abc",
)
ADMIN = {"admin-key": "secret"}
GRPC_ADMIN = {"triton-grpc-protocol-admin-key": "secret"}
GRPC_INFER = {"triton-grpc-protocol-infer-key": "abc"}
INFER_BODY = b'{"inputs":[{"name":"INPUT0","shape":[1],"datatype":"FP32","data":[1.0]}]}'

HTTP_CASES: list[tuple[str, str, dict[str, str], bytes]] = [
    ("POST", "/v2/repository/index", {}, b""),
    ("POST", "/v2/repository/index", {"admin-key": "wrong"}, b""),
    ("POST", "/v2/repository/index", {"Admin-Key": "secret"}, b""),  # names: any case
    ("GET", "/v2/repository/index", {}, b""),  # restricted before the method is checked
    ("POST", "/v2/repository/models/alpha/unload", {}, b""),
    ("GET", "/v2/models/stats", {}, b""),
    ("GET", "/v2/models/alpha/stats", {"admin-key": "secret"}, b""),
    ("POST", "/v2/models/alpha/infer", {}, INFER_BODY),
    ("POST", "/v2/models/alpha/infer", {"infer-key": "abc"}, INFER_BODY),
    ("POST", "/v2/models/alpha/infer", {"infer-key": "abc=def"}, INFER_BODY),
    ("GET", "/v2/health/ready", {}, b""),
    ("GET", "/v2/models/alpha", {}, b""),
]


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("restricted")
    write_model(root, "alpha")
    return root


@pytest.fixture(scope="module")
def server(repository: Path) -> Iterator[ServerHandle]:
    with run_pytriton_server(repository, *RESTRICTIONS) as handle:
        yield handle


def http_answer(
    server: ServerHandle, method: str, path: str, headers: dict[str, str], body: bytes
) -> tuple[int, str | None, bytes]:
    return http_exchange(server, method, path, body, headers)


def grpc_answers(server: ServerHandle) -> list[str]:
    """What each gRPC call answers: "ok" or "<status> <message>"."""
    tensor = grpcclient.InferInput("INPUT0", [1], "FP32")
    tensor.set_data_from_numpy(np.ones(1, np.float32))
    calls = [
        lambda c: c.get_model_repository_index(),
        lambda c: c.get_model_repository_index(headers={"triton-grpc-protocol-admin-key": "x"}),
        lambda c: c.get_model_repository_index(headers=GRPC_ADMIN),
        lambda c: c.unload_model("unknown", headers={"admin-key": "secret"}),  # no prefix
        lambda c: c.get_inference_statistics("alpha"),
        lambda c: c.get_inference_statistics("alpha", headers=GRPC_INFER),
        lambda c: c.infer("alpha", [tensor]),
        lambda c: c.infer("alpha", [tensor], headers=GRPC_INFER),
        lambda c: c.is_server_ready(),
        lambda c: c.get_model_metadata("alpha"),
    ]
    answers = []
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        for call in calls:
            try:
                call(client)
                answers.append("ok")
            except InferenceServerException as exc:
                answers.append(f"{exc.status()} {exc.message()}")
    return answers


def test_http_restricted_apis_answer_403_with_tritons_message(server: ServerHandle) -> None:
    answers = [http_answer(server, *case) for case in HTTP_CASES]
    denied_admin = (
        403,
        "text/plain",
        b'{"error":"This API is restricted, expecting header \'admin-key\'"}',
    )
    denied_infer = (
        403,
        "text/plain",
        b'{"error":"This API is restricted, expecting header \'infer-key\'"}',
    )
    assert answers[0] == denied_admin
    assert answers[1] == denied_admin
    assert answers[2][0] == 200 and b'"name":"alpha"' in answers[2][2]
    assert answers[3] == denied_admin
    assert answers[4] == denied_admin
    assert answers[5] == denied_admin
    assert answers[6][0] == 200
    assert answers[7] == denied_infer
    assert answers[8] == denied_infer
    assert answers[9][0] == 200 and b'"data":[2.0]' in answers[9][2]
    assert answers[10][0] == 200
    assert answers[11][0] == 200


def test_grpc_restricted_protocols_answer_unavailable_with_tritons_message(
    server: ServerHandle,
) -> None:
    admin = "StatusCode.UNAVAILABLE This protocol is restricted, expecting header "
    admin += "'triton-grpc-protocol-admin-key'"
    infer = "StatusCode.UNAVAILABLE This protocol is restricted, expecting header "
    infer += "'triton-grpc-protocol-infer-key'"
    assert grpc_answers(server) == [admin, admin, "ok", admin, infer, "ok", infer, "ok", "ok", "ok"]


def test_a_restricted_stream_is_refused(server: ServerHandle) -> None:
    results: list[object] = []
    tensor = grpcclient.InferInput("INPUT0", [1], "FP32")
    tensor.set_data_from_numpy(np.ones(1, np.float32))
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        client.start_stream(callback=lambda result, error: results.append(error or result))
        try:
            client.async_stream_infer("alpha", [tensor])
        except InferenceServerException:
            pass  # the server may end the stream before the request is queued
        client.stop_stream()
        client.start_stream(
            callback=lambda result, error: results.append(error or result), headers=GRPC_INFER
        )
        client.async_stream_infer("alpha", [tensor])
        client.stop_stream()
    assert len(results) == 2
    assert isinstance(results[0], InferenceServerException)
    assert "expecting header 'triton-grpc-protocol-infer-key'" in str(results[0].message())
    output = results[1].as_numpy("OUTPUT0")  # type: ignore[union-attr]
    assert output is not None and output.tolist() == [2.0]


def test_the_same_answers_as_the_real_triton(server: ServerHandle, repository: Path) -> None:
    ours_http = [http_answer(server, *case) for case in HTTP_CASES]
    ours_grpc = grpc_answers(server)
    with run_real_triton(repository, *RESTRICTIONS) as triton:
        theirs_http = [http_answer(triton, *case) for case in HTTP_CASES]
        theirs_grpc = grpc_answers(triton)
    for case, ours, theirs in zip(HTTP_CASES, ours_http, theirs_http, strict=True):
        if theirs[0] == 403:
            assert ours == theirs, case
        else:
            assert ours[0] == theirs[0], (case, ours, theirs)
    assert ours_grpc == theirs_grpc


@pytest.mark.parametrize(
    ("flag", "message"),
    [
        (
            "--http-restricted-api=model-repository",
            "--http-restricted-api option format is '<config name>:<setting>=<value>'. "
            "Got model-repository",
        ),
        (
            "--grpc-restricted-protocol=inference:key=",
            "--grpc-restricted-protocol option format is '<config name>:<setting>=<value>'. "
            "Got inference:key=",
        ),
        ("--http-restricted-api=everything:k=v", "unknown restricted api 'everything'"),
        ("--grpc-restricted-protocol=health:k=v", None),
    ],
)
def test_malformed_restrictions_stop_the_start(flag: str, message: str | None) -> None:
    command = [sys.executable, "-m", "pytriton_core", flag, "--allow-metrics=false"]
    if message is None:  # the same protocol in two groups
        command.append("--grpc-restricted-protocol=metadata,health:k=w")
        message = "restricted protocol 'health' can not be specified in multiple config groups"
    result = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode != 0
    assert message in result.stderr


@pytest.mark.parametrize("endpoint", ["generate", "generate_stream"])
def test_the_generate_endpoints_are_restricted_as_inference(
    server: ServerHandle, endpoint: str
) -> None:
    path = f"/v2/models/alpha/{endpoint}"
    body = b'{"INPUT0": [1.0]}'
    assert http_answer(server, "POST", path, {}, body) == (
        403,
        "text/plain",
        b'{"error":"This API is restricted, expecting header \'infer-key\'"}',
    )
    status, _, answer = http_answer(server, "POST", path, {"infer-key": "abc=def"}, body)
    assert status == 200 and b'"OUTPUT0":2.0' in answer
