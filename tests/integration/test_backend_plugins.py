"""Backend plug-ins through the real tritonclient: the example plug-in package
(examples/backend_plugin) installed as a package serves a model through its entry point,
the same code serves from ``--backend-directory``, and a Python-based backend's
``model.py`` serves every model that names it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient
from harness import REPO_ROOT, ServerHandle, run_pytriton_server
from tritonclient.utils import InferenceServerException

PLUGIN_SOURCE = REPO_ROOT / "examples" / "backend_plugin"
WEIGHTS = np.arange(12, dtype=np.float32).reshape(3, 4) / 10
BIAS = np.array([1, -1, 0.5, 0], np.float32)

ECHO_BACKEND = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.name = args["model_name"]

    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", x + 1)]))
        return responses
"""


def linear_model(root: Path, name: str, backend: str = "linear") -> None:
    folder = root / name
    (folder / "1").mkdir(parents=True)
    np.savez(folder / "1" / "model.npz", W=WEIGHTS, b=BIAS)
    # No inputs or outputs: the plug-in's auto-complete fills them from W.
    (folder / "config.pbtxt").write_text(
        f'name: "{name}"\nbackend: "{backend}"\nmax_batch_size: 8\n'
    )


@pytest.fixture(scope="module")
def installed_plugin(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The example package, installed (with its entry point) into a folder of its own."""
    target = tmp_path_factory.mktemp("plugin-site")
    build = tmp_path_factory.mktemp("plugin-build")
    shutil.copytree(PLUGIN_SOURCE, build / "src")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "--target",
            str(target),
            str(build / "src"),
        ],
        check=True,
        timeout=300,
    )
    return target


@pytest.fixture(scope="module")
def server(
    installed_plugin: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerHandle]:
    root = tmp_path_factory.mktemp("plugin-repo")
    repository = root / "models"
    linear_model(repository, "linear_model")
    linear_model(repository, "from_directory", backend="linear_copy")
    for name, runtime in (("echo_model", ""), ("echo_runtime", 'runtime: "model.py"\n')):
        (repository / name / "1").mkdir(parents=True)  # no model.py: the backend's
        (repository / name / "config.pbtxt").write_text(
            f'name: "{name}"\nbackend: "echo"\nmax_batch_size: 0\n{runtime}'
            'input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 2 ] } ]\n'
            'output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 2 ] } ]\n'
        )
    linear_model(repository, "unknown_backend", backend="no_such_backend")
    backends = root / "backends"
    shutil.copytree(PLUGIN_SOURCE / "pytriton_linear_backend", backends / "linear_copy")
    (backends / "echo").mkdir()
    (backends / "echo" / "model.py").write_text(ECHO_BACKEND)
    (backends / "python").mkdir()  # a tritonserver layout's folder: passed over
    (backends / "python" / "libtriton_python.so").write_bytes(b"")
    env = {"PYTHONPATH": os.pathsep.join([str(installed_plugin), os.environ.get("PYTHONPATH", "")])}
    with run_pytriton_server(
        repository,
        f"--backend-directory={backends}",
        "--model-control-mode=explicit",
        "--load-model=linear_model",
        "--load-model=from_directory",
        "--load-model=echo_model",
        "--load-model=echo_runtime",
        env=env,
    ) as handle:
        yield handle


@pytest.fixture(scope="module")
def client(server: ServerHandle) -> Iterator[httpclient.InferenceServerClient]:
    with httpclient.InferenceServerClient(server.http_url) as http_client:
        yield http_client


def infer(client: httpclient.InferenceServerClient, model: str, data: np.ndarray) -> np.ndarray:
    tensor = httpclient.InferInput("INPUT0", list(data.shape), "FP32")
    tensor.set_data_from_numpy(data)
    result = client.infer(model, [tensor]).as_numpy("OUTPUT0")
    assert result is not None
    return result


@pytest.mark.parametrize(
    ("model", "backend"), [("linear_model", "linear"), ("from_directory", "linear_copy")]
)
def test_the_plugin_serves_a_model(
    client: httpclient.InferenceServerClient, model: str, backend: str
) -> None:
    data = np.array([[1, 2, 3], [0, -1, 0.5]], np.float32)
    np.testing.assert_allclose(infer(client, model, data), data @ WEIGHTS + BIAS, rtol=1e-6)
    config = client.get_model_config(model)
    assert config["backend"] == backend
    assert [t["dims"] for t in config["input"]] == [[3]]
    assert [t["dims"] for t in config["output"]] == [[4]]
    stats = client.get_inference_statistics(model)["model_stats"][0]
    assert stats["execution_count"] == 1 and stats["inference_count"] == 2


@pytest.mark.parametrize("model", ["echo_model", "echo_runtime"])
def test_a_python_based_backend_runs_its_own_model_py(
    client: httpclient.InferenceServerClient, model: str
) -> None:
    # echo_runtime also says `runtime: "model.py"` (accepted: the backend's own runtime).
    data = np.array([1.5, -2], np.float32)
    np.testing.assert_array_equal(infer(client, model, data), data + 1)


def test_an_unknown_backend_fails_the_load_naming_it(
    client: httpclient.InferenceServerClient,
) -> None:
    with pytest.raises(InferenceServerException, match="no_such_backend"):
        client.load_model("unknown_backend")
