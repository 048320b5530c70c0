"""Model control modes: POLL follows the repository while serving; EXPLICIT loads and
unloads on request, with config and file overrides confined to the model folder."""

from __future__ import annotations

import json
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from harness import ServerHandle, run_pytriton_server
from ops_models import VERSIONED_MODEL, add_version, write_model
from tritonclient.utils import InferenceServerException

POLL_TIMEOUT_S = 20.0


def wait_for(condition: Callable[[], bool], timeout: float = POLL_TIMEOUT_S) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.1)


def infer(client: httpclient.InferenceServerClient, model: str, value: float) -> float:
    tensor = httpclient.InferInput("INPUT0", [1], "FP32")
    tensor.set_data_from_numpy(np.array([value], np.float32))
    return float(client.infer(model, [tensor]).as_numpy("OUTPUT0")[0])


def staged(write: Callable[[Path], Path], destination: Path, outside: Path) -> None:
    """Write a model (or version) in a folder under ``outside`` (not the repository), then
    move it in at once, as a deploy would: the poller never sees half a model."""
    staging = Path(tempfile.mkdtemp(dir=outside))
    written = write(staging)
    written.rename(destination)
    shutil.rmtree(staging)


class Traffic:
    """Sends requests to one model in a loop, keeping every answer and every failure."""

    def __init__(self, url: str, model: str) -> None:
        self.answers: list[float] = []  # OUTPUT0 - INPUT0: the version that answered
        self.failures: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(url, model), daemon=True)
        self._thread.start()

    def _run(self, url: str, model: str) -> None:
        with httpclient.InferenceServerClient(url) as client:
            i = 0
            while not self._stop.is_set():
                try:
                    self.answers.append(infer(client, model, float(i)) - i)
                except Exception as exc:
                    self.failures.append(str(exc))
                i += 1

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)


def test_poll_follows_the_repository_while_a_client_keeps_sending(tmp_path: Path) -> None:
    repository = tmp_path / "models"
    write_model(repository, "served")
    with (
        run_pytriton_server(
            repository, "--model-control-mode=poll", "--repository-poll-secs=1"
        ) as server,
        httpclient.InferenceServerClient(server.http_url) as client,
    ):
        traffic = Traffic(server.http_url, "served")
        try:
            wait_for(lambda: len(traffic.answers) > 10)
            # A new model.
            staged(lambda root: write_model(root, "added"), repository / "added", tmp_path)
            wait_for(lambda: client.is_model_ready("added"))
            assert infer(client, "added", 1.0) == 2.0
            # A new version of the served model replaces version 1 (policy: latest 1).
            staged(
                lambda root: (add_version(root, 2), root / "2")[1],
                repository / "served" / "2",
                tmp_path,
            )
            wait_for(lambda: client.is_model_ready("served", "2"))
            wait_for(lambda: traffic.answers[-1] == 2.0)
            assert not client.is_model_ready("served", "1")
            # A removed model is unloaded.
            shutil.rmtree(repository / "added")
            wait_for(lambda: not client.is_model_ready("added"))
            with pytest.raises(InferenceServerException):
                infer(client, "added", 1.0)
            states = {e["name"]: e.get("state") for e in client.get_model_repository_index()}
            assert states.get("added") != "READY" and states["served"] == "READY"
            served_after = len(traffic.answers)
            wait_for(lambda: len(traffic.answers) > served_after + 10)
        finally:
            traffic.stop()
    assert traffic.failures == []
    assert set(traffic.answers) == {1.0, 2.0}
    first_two = traffic.answers.index(2.0)
    assert set(traffic.answers[first_two:]) == {2.0}  # never back to the old version


def test_poll_mode_refuses_explicit_load(tmp_path: Path) -> None:
    write_model(tmp_path, "served")
    with (
        run_pytriton_server(tmp_path, "--model-control-mode=poll") as server,
        httpclient.InferenceServerClient(server.http_url) as client,
        pytest.raises(InferenceServerException, match="polling is enabled"),
    ):
        client.load_model("served")


# --------------------------------------------------------------------------- explicit


@pytest.fixture(scope="module")
def explicit_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerHandle]:
    repository = tmp_path_factory.mktemp("explicit")
    write_model(repository, "alpha")
    write_model(repository, "beta")
    with run_pytriton_server(
        repository, "--model-control-mode=explicit", "--load-model=alpha"
    ) as server:
        yield server


@pytest.fixture
def client(explicit_server: ServerHandle) -> Iterator[httpclient.InferenceServerClient]:
    with httpclient.InferenceServerClient(explicit_server.http_url) as http_client:
        yield http_client


def index(client: httpclient.InferenceServerClient) -> dict[str, dict[str, str]]:
    return {entry["name"]: entry for entry in client.get_model_repository_index()}


def full_config(name: str, tag: str) -> str:
    return json.dumps(
        {
            "name": name,
            "backend": "python",
            "max_batch_size": 0,
            "input": [{"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [-1]}],
            "output": [{"name": "OUTPUT0", "data_type": "TYPE_FP32", "dims": [-1]}],
            "parameters": {"tag": {"string_value": tag}},
        }
    )


def test_explicit_loads_only_what_is_asked(client: httpclient.InferenceServerClient) -> None:
    entries = index(client)
    assert entries["alpha"] == {"name": "alpha", "version": "1", "state": "READY"}
    if "beta" in entries and "state" not in entries["beta"]:
        assert entries["beta"] == {"name": "beta"}  # never loaded: name only
        client.load_model("beta")
    assert index(client)["beta"] == {"name": "beta", "version": "1", "state": "READY"}
    assert infer(client, "beta", 1.0) == 2.0


def test_load_with_a_config_override(client: httpclient.InferenceServerClient) -> None:
    client.load_model("alpha", config=full_config("alpha", "overridden"))
    config = client.get_model_config("alpha")
    assert config["parameters"]["tag"]["string_value"] == "overridden"
    assert infer(client, "alpha", 1.0) == 2.0
    client.load_model("alpha")  # back to config.pbtxt
    assert "tag" not in client.get_model_config("alpha").get("parameters", {})


def test_load_with_file_overrides(
    explicit_server: ServerHandle, client: httpclient.InferenceServerClient
) -> None:
    source = VERSIONED_MODEL.encode()
    client.load_model(
        "from_files", config=full_config("from_files", "files"), files={"file:3/model.py": source}
    )
    assert index(client)["from_files"] == {"name": "from_files", "version": "3", "state": "READY"}
    assert infer(client, "from_files", 1.0) == 4.0
    # The same over gRPC, where file contents travel as bytes.
    with grpcclient.InferenceServerClient(explicit_server.grpc_url) as grpc_client:
        grpc_client.load_model(
            "from_grpc_files",
            config=full_config("from_grpc_files", "files"),
            files={"file:5/model.py": source},
        )
    assert infer(client, "from_grpc_files", 1.0) == 6.0


@pytest.mark.parametrize("key", ["file:../escaped.py", "file:1/../../escaped.py"])
def test_file_overrides_cannot_leave_the_model_folder(
    client: httpclient.InferenceServerClient, key: str, tmp_path: Path
) -> None:
    before = index(client).get("alpha")
    with pytest.raises(InferenceServerException) as info:
        client.load_model(
            "alpha", config=full_config("alpha", "escape"), files={key: b"raise SystemExit"}
        )
    # As Triton answers a path outside the model folder: the poll step fails (the detail,
    # "must be relative to the model folder", is in the server log).
    assert info.value.status() == "500"
    assert info.value.message() == "failed to load 'alpha', failed to poll from model repository"
    assert not Path("/tmp/escaped.py").exists()
    assert not (Path(tempfile.gettempdir()) / "escaped.py").exists()
    assert index(client).get("alpha") == before  # the model keeps serving
    assert infer(client, "alpha", 1.0) == 2.0


def test_file_overrides_need_a_config(client: httpclient.InferenceServerClient) -> None:
    with pytest.raises(InferenceServerException, match="failed to poll from model repository"):
        client.load_model("alpha", files={"file:1/model.py": b""})


def test_unload_and_index_states(client: httpclient.InferenceServerClient) -> None:
    client.load_model("beta")
    client.unload_model("beta")
    assert index(client)["beta"] == {
        "name": "beta",
        "version": "1",
        "state": "UNAVAILABLE",
        "reason": "unloaded",
    }
    assert not client.is_model_ready("beta")
    with pytest.raises(InferenceServerException):
        infer(client, "beta", 1.0)
    client.load_model("beta")
    assert client.is_model_ready("beta")


def test_a_failing_load_reports_why_and_leaves_the_others(
    client: httpclient.InferenceServerClient,
) -> None:
    with pytest.raises(InferenceServerException, match="load failed for model 'broken'"):
        client.load_model(
            "broken", config=full_config("broken", "x"), files={"file:1/model.py": b"1/0\n"}
        )
    entry = index(client)["broken"]
    assert entry["state"] == "UNAVAILABLE"
    assert "ZeroDivisionError" in entry["reason"]
    assert infer(client, "alpha", 1.0) == 2.0
    with pytest.raises(InferenceServerException, match="failed to poll from model repository"):
        client.load_model("no_such_model")
