"""The one path rule, tried as an attacker would: model names, override keys and every
config field that names a file stay inside the model's folder; the HTTP path is decoded once;
failed loads leave no folder and unknown unloads leave no state. After each attempt the
server is alive and another client's answers are exact."""

from __future__ import annotations

import base64
import json
import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from harness import ServerHandle, http_exchange, run_pytriton_server
from ops_models import VERSIONED_MODEL, write_model
from tritonclient.utils import InferenceServerException

# Writes a marker file when imported: a model whose code must never run.
MARKER_SOURCE = """
import os
open(os.environ["PYTRITON_TEST_MARKER"], "w").write("executed")
class TritonPythonModel:
    def execute(self, requests):
        return []
"""


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("sandbox")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, sandbox: Path) -> Iterator[ServerHandle]:
    repository = tmp_path_factory.mktemp("repository")
    write_model(repository, "alpha")
    write_model(repository, "beta")
    (sandbox / "tmp").mkdir()
    (sandbox / "secret.txt").write_bytes(b"\x00\x00\x00\x05SECRET-BYTES-0123456789abcdef")
    (sandbox / "outside_model.py").write_text(MARKER_SOURCE)
    env = {"TMPDIR": str(sandbox / "tmp"), "PYTRITON_TEST_MARKER": str(sandbox / "marker")}
    with run_pytriton_server(
        repository, "--model-control-mode=explicit", "--load-model=alpha", env=env
    ) as handle:
        yield handle


@pytest.fixture
def client(server: ServerHandle) -> Iterator[httpclient.InferenceServerClient]:
    with httpclient.InferenceServerClient(server.http_url) as http_client:
        yield http_client


def infer(client: httpclient.InferenceServerClient, model: str, value: float) -> float:
    tensor = httpclient.InferInput("INPUT0", [1], "FP32")
    tensor.set_data_from_numpy(np.array([value], np.float32))
    return float(client.infer(model, [tensor]).as_numpy("OUTPUT0")[0])


def config(name: str, **fields: object) -> str:
    document: dict[str, object] = {
        "name": name,
        "backend": "python",
        "max_batch_size": 0,
        "input": [{"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [1]}],
        "output": [{"name": "OUTPUT0", "data_type": "TYPE_FP32", "dims": [1]}],
    }
    document.update(fields)
    return json.dumps(document)


def assert_unharmed(client: httpclient.InferenceServerClient, sandbox: Path) -> None:
    """The server still serves exactly, nothing ran, and no override folder is left."""
    assert infer(client, "alpha", 2.0) == 3.0
    assert not (sandbox / "marker").exists()
    assert sorted(os.listdir(sandbox / "tmp")) == []


def raw_request(
    server: ServerHandle, method: str, path: str, body: bytes = b""
) -> tuple[int, bytes]:
    status, _, answer = http_exchange(server, method, path, body)
    return status, answer


# ------------------------------------------------------------------ model names


@pytest.mark.parametrize("name", ["../escaped", "/tmp/escaped", "a/b", "..", ".", "x\\y"])
def test_a_model_name_that_is_a_path_is_refused_over_grpc(
    server: ServerHandle, client: httpclient.InferenceServerClient, sandbox: Path, name: str
) -> None:
    with grpcclient.InferenceServerClient(server.grpc_url) as grpc_client:
        with pytest.raises(InferenceServerException) as info:
            grpc_client.load_model(
                name, config=config("x"), files={"file:1/model.py": MARKER_SOURCE.encode()}
            )
    # Triton's answer for a name that is a path: its poll failure (the reason is logged).
    assert info.value.status() == "StatusCode.INTERNAL"
    assert "failed to poll from model repository" in str(info.value.message())
    assert not (sandbox / "escaped").exists()
    assert not Path("/tmp/escaped").exists()
    assert_unharmed(client, sandbox)


def test_a_percent_encoded_climbing_name_is_refused_over_http(
    server: ServerHandle, client: httpclient.InferenceServerClient, sandbox: Path
) -> None:
    body = json.dumps(
        {
            "parameters": {
                "config": config("x"),
                "file:1/model.py": base64.b64encode(MARKER_SOURCE.encode()).decode(),
            }
        }
    ).encode()
    for path in ("..%2Fescaped", "%2E%2E%2Fescaped", "%2Ftmp%2Fescaped"):
        status, answer = raw_request(server, "POST", f"/v2/repository/models/{path}/load", body)
        assert status == 500, answer
        assert b"failed to poll from model repository" in answer
    assert_unharmed(client, sandbox)


def test_the_http_path_is_decoded_once(
    server: ServerHandle, client: httpclient.InferenceServerClient
) -> None:
    assert raw_request(server, "GET", "/v2/models/alph%61/ready")[0] == 200  # once: "alpha"
    # Twice would make "%2561" an "a" and "%252F" a "/".
    assert raw_request(server, "GET", "/v2/models/alph%2561/ready")[0] == 400
    assert raw_request(server, "GET", "/v2/models/alpha%252Fready")[0] != 200
    status, answer = raw_request(server, "GET", "/v2/models/alph%2561")
    assert status != 200 and b"alph%61" in answer
    assert infer(client, "alpha", 1.0) == 2.0


# --------------------------------------------------------------- override files


@pytest.mark.parametrize(
    "key", ["file:../escaped.py", "file:1/../../escaped.py", "file:../../../../tmp/escaped.py"]
)
def test_override_files_cannot_climb_out(
    client: httpclient.InferenceServerClient, sandbox: Path, key: str
) -> None:
    with pytest.raises(InferenceServerException) as info:
        client.load_model(
            "gamma",
            config=config("gamma"),
            files={"file:1/model.py": VERSIONED_MODEL.encode(), key: MARKER_SOURCE.encode()},
        )
    # Triton's answer: INTERNAL, the reason in its log.
    assert info.value.status() == "500"
    assert info.value.message() == "failed to load 'gamma', failed to poll from model repository"
    assert not (sandbox / "escaped.py").exists()
    assert not Path("/tmp/escaped.py").exists()
    assert "gamma" not in {entry["name"] for entry in client.get_model_repository_index()}
    assert_unharmed(client, sandbox)


def test_an_absolute_override_key_lands_inside_the_model_folder(
    client: httpclient.InferenceServerClient, sandbox: Path
) -> None:
    # As Triton joins it: "/1/model.py" is "<model folder>/1/model.py".
    client.load_model(
        "delta", config=config("delta"), files={"file:/1/model.py": VERSIONED_MODEL.encode()}
    )
    assert infer(client, "delta", 1.0) == 2.0
    client.unload_model("delta")
    assert_unharmed(client, sandbox)


def test_failed_override_loads_leave_no_folder(
    client: httpclient.InferenceServerClient, sandbox: Path
) -> None:
    failing = {
        "raises": {"file:1/model.py": b"raise RuntimeError('no')\n"},
        "no model file": {"file:1/other.py": b""},
        "file under a file": {"file:1": b"", "file:1/model.py": b""},
    }
    for what, files in failing.items():
        with pytest.raises(InferenceServerException):
            client.load_model("epsilon", config=config("epsilon"), files=files)
        assert os.listdir(sandbox / "tmp") == [], what
    with pytest.raises(InferenceServerException):
        client.load_model("epsilon", config="{not json", files={"file:1/model.py": b""})
    assert_unharmed(client, sandbox)


# ------------------------------------------------------- config fields naming files


def outside(sandbox: Path, name: str, depth: int = 12) -> str:
    """A relative path that climbs from any folder to ``sandbox / name``."""
    return "../" * depth + str(sandbox / name).lstrip("/")


def test_default_model_filename_cannot_leave_the_model_folder(
    client: httpclient.InferenceServerClient, sandbox: Path
) -> None:
    for filename in (outside(sandbox, "outside_model.py"), str(sandbox / "outside_model.py")):
        with pytest.raises(InferenceServerException) as info:
            client.load_model("beta", config=config("beta", default_model_filename=filename))
        # Triton's words for a version that fails to start (climbing: the path rule's reason;
        # absolute: joined under the version folder, where no such file is).
        assert "load failed for model 'beta'" in str(info.value.message())
    assert_unharmed(client, sandbox)


def test_a_warmup_file_cannot_leave_the_model_folder(
    client: httpclient.InferenceServerClient, sandbox: Path
) -> None:
    for filename in (outside(sandbox, "secret.txt"), str(sandbox / "secret.txt")):
        warmup = [
            {
                "name": "w",
                "batch_size": 1,
                "inputs": {
                    "INPUT0": {"data_type": "TYPE_FP32", "dims": [1], "input_data_file": filename}
                },
            }
        ]
        with pytest.raises(InferenceServerException) as info:
            client.load_model("beta", config=config("beta", model_warmup=warmup))
        assert "SECRET" not in str(info.value.message())
        assert "load failed for model 'beta'" in str(info.value.message())
    assert_unharmed(client, sandbox)


def test_a_label_file_cannot_leave_the_model_folder(
    client: httpclient.InferenceServerClient, sandbox: Path
) -> None:
    output = {
        "name": "OUTPUT0",
        "data_type": "TYPE_FP32",
        "dims": [1],
        "label_filename": outside(sandbox, "secret.txt"),
    }
    with pytest.raises(InferenceServerException) as info:
        client.load_model("beta", config=config("beta", output=[output]))
    assert "must stay within the model directory" in str(info.value.message())
    assert_unharmed(client, sandbox)


# ------------------------------------------------------------------------ unload


def test_unloading_unknown_names_leaves_no_state(
    server: ServerHandle, client: httpclient.InferenceServerClient, sandbox: Path
) -> None:
    before = client.get_model_repository_index()
    for name in ("never_there", "x" * 200):
        client.unload_model(name)
    with grpcclient.InferenceServerClient(server.grpc_url) as grpc_client:
        for name in ("never_there_grpc", "../nope"):
            grpc_client.unload_model(name)
    assert client.get_model_repository_index() == before
    assert_unharmed(client, sandbox)
