"""Repository agents through the real tritonclient: the bundled checksum agent serves a
model whose files match their listed hashes and refuses a tampered one with a clear error;
an agent plug-in from ``--repoagent-directory`` rewrites a model's files on load and hears
every action, in Triton's order.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient
from harness import ServerHandle, real_triton_home, run_pytriton_server, run_real_triton
from tritonclient.utils import InferenceServerException

MODEL = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", x * {factor})]))
        return responses
"""

# An agent that "decrypts" model.py from model.py.b64 into a folder of its own, and writes
# each action it hears to the file named by its parameter "log".
DECODING_AGENT = """
import base64
import shutil
from pathlib import Path

from pytriton_core.repository.agents import RepositoryAgent


class DecodingAgent(RepositoryAgent):
    def _note(self, model, action, where=None):
        with open(model.parameters["log"], "a") as log:
            log.write(f"{action} {where or model.location}\\n")

    def on_load(self, model):
        target = model.new_location()
        self._note(model, "load", f"{model.location} {target}")
        shutil.copytree(model.location, target, dirs_exist_ok=True)
        for encoded in target.rglob("*.b64"):
            encoded.with_suffix("").write_bytes(base64.b64decode(encoded.read_bytes()))
            encoded.unlink()

    def on_load_complete(self, model):
        self._note(model, "load_complete")

    def on_load_fail(self, model):
        self._note(model, "load_fail")

    def on_unload(self, model):
        self._note(model, "unload")

    def on_unload_complete(self, model):
        self._note(model, "unload_complete")


def create_agent():
    return DecodingAgent()
"""


def write_model(root: Path, name: str, agents: str, source: str) -> Path:
    folder = root / name
    (folder / "1").mkdir(parents=True)
    (folder / "1" / "model.py").write_text(source)
    (folder / "config.pbtxt").write_text(
        f'name: "{name}"\nbackend: "python"\nmax_batch_size: 0\n'
        'input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 2 ] } ]\n'
        'output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 2 ] } ]\n'
        f"model_repository_agents {{ agents [ {agents} ] }}\n"
    )
    return folder


def checksum(file: str, digest: str, algorithm: str = "MD5") -> str:
    return f'{{ name: "checksum" parameters {{ key: "{algorithm}:{file}" value: "{digest}" }} }}'


def md5(text: str) -> str:
    return hashlib.md5(text.encode()).hexdigest()


def build_checksum_models(root: Path) -> tuple[str, str]:
    """Models "intact" and "tampered" (its model.py changed after its hash was listed);
    returns the listed and the actual digest of the tampered file."""
    good = MODEL.format(factor=2)
    write_model(root, "intact", checksum("1/model.py", md5(good)), good)
    tampered = write_model(root, "tampered", checksum("1/model.py", md5(good)), good)
    evil = MODEL.format(factor=-1)
    (tampered / "1" / "model.py").write_text(evil)
    return md5(good), md5(evil)


@pytest.fixture(scope="module")
def agent_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("agent-log") / "actions.txt"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, agent_log: Path) -> Iterator[ServerHandle]:
    root = tmp_path_factory.mktemp("agents")
    repository = root / "models"
    build_checksum_models(repository)
    good = MODEL.format(factor=2)
    sha = hashlib.sha256(good.encode()).hexdigest()
    write_model(repository, "sha_checked", checksum("1/model.py", sha, "SHA256"), good)
    write_model(repository, "escaping", checksum("../intact/1/model.py", md5(good)), good)
    write_model(repository, "unknown_agent", '{ name: "no_such_agent" }', good)
    encoded = write_model(
        repository,
        "encoded",
        f'{{ name: "decoding" parameters {{ key: "log" value: "{agent_log}" }} }}',
        "this is not Python until the agent decodes it",
    )
    (encoded / "1" / "model.py").unlink()
    (encoded / "1" / "model.py.b64").write_bytes(base64.b64encode(MODEL.format(factor=3).encode()))
    agents = root / "agents"
    (agents / "decoding").mkdir(parents=True)
    (agents / "decoding" / "__init__.py").write_text(DECODING_AGENT)
    with run_pytriton_server(
        repository,
        f"--repoagent-directory={agents}",
        "--model-control-mode=explicit",
        "--load-model=intact",
        "--load-model=sha_checked",
    ) as handle:
        yield handle


@pytest.fixture(scope="module")
def client(server: ServerHandle) -> Iterator[httpclient.InferenceServerClient]:
    with httpclient.InferenceServerClient(server.http_url) as http_client:
        yield http_client


def infer(client: httpclient.InferenceServerClient, model: str) -> np.ndarray:
    tensor = httpclient.InferInput("INPUT0", [2], "FP32")
    tensor.set_data_from_numpy(np.array([1, 2], np.float32))
    out = client.infer(model, [tensor]).as_numpy("OUTPUT0")
    assert out is not None
    return out


def test_matching_hashes_load(client: httpclient.InferenceServerClient) -> None:
    np.testing.assert_array_equal(infer(client, "intact"), [2, 4])
    np.testing.assert_array_equal(infer(client, "sha_checked"), [2, 4])


def test_a_tampered_file_is_refused(client: httpclient.InferenceServerClient) -> None:
    good = MODEL.format(factor=2)
    evil = MODEL.format(factor=-1)
    with pytest.raises(InferenceServerException) as failure:
        client.load_model("tampered")
    assert f"Mismatched MD5 hash for file 1/model.py, expect: {md5(good)}, got: {md5(evil)}" in str(
        failure.value
    )
    assert not client.is_model_ready("tampered")


@pytest.mark.parametrize(
    ("model", "message"),
    [
        ("escaping", "the file must be inside the model's folder"),
        ("unknown_agent", "unable to find repository agent 'no_such_agent'"),
    ],
)
def test_agent_failures_fail_the_load(
    client: httpclient.InferenceServerClient, model: str, message: str
) -> None:
    with pytest.raises(InferenceServerException, match=message):
        client.load_model(model)


def test_an_agent_plugin_rewrites_files_and_hears_every_action(
    client: httpclient.InferenceServerClient, agent_log: Path
) -> None:
    client.load_model("encoded")
    np.testing.assert_array_equal(infer(client, "encoded"), [3, 6])
    client.unload_model("encoded")
    actions = [line.split(" ", 1) for line in agent_log.read_text().splitlines()]
    assert [action for action, _ in actions] == [
        "load",
        "load_complete",
        "unload",
        "unload_complete",
    ]
    # It read the repository's folder and wrote its own, which is gone after the unload.
    source, written = actions[0][1].split(" ")
    assert source.endswith("models/encoded")
    assert not Path(written).exists()


def _checksum_agent_installed() -> Path | None:
    folder = real_triton_home() / "dist" / "repoagents"
    return folder if (folder / "checksum" / "libtritonrepoagent_checksum.so").is_file() else None


@pytest.mark.real_triton
def test_the_real_triton_refuses_the_same_model(tmp_path: Path) -> None:
    folder = _checksum_agent_installed()
    if folder is None:
        pytest.skip("the real Triton has no checksum agent library (docs/repository-agents.md)")
    expected, actual = build_checksum_models(tmp_path)
    with (
        run_real_triton(
            tmp_path,
            f"--repoagent-directory={folder}",
            "--model-control-mode=explicit",
            "--load-model=intact",
        ) as triton,
        httpclient.InferenceServerClient(triton.http_url) as client,
    ):
        np.testing.assert_array_equal(infer(client, "intact"), [2, 4])
        with pytest.raises(InferenceServerException):
            client.load_model("tampered")
        assert not client.is_model_ready("tampered")
        # Triton answers "failed to poll from model repository" and logs why.
        assert f"Mismatched MD5 hash for file 1/model.py, expect: {expected}, got: {actual}" in (
            triton.log()
        )
