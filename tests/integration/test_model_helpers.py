"""Two Python models whose folders each hold a helper module of the same name each import
their own, as under Triton (where each model runs in its own stub process)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient
from control_models import FP32_IO_CONFIG, write_model_folder
from harness import ServerHandle, run_pytriton_server, run_real_triton

# OUTPUT0 = utils.ANSWER, from the helper module beside model.py.
USES_HELPER = """
import numpy as np
import triton_python_backend_utils as pb_utils

import utils


class TritonPythonModel:
    def execute(self, requests):
        answer = np.array([utils.ANSWER], dtype=np.float32)
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", answer)]) for _ in requests]
"""


def _repository(root: Path) -> Path:
    for name, answer in (("first", 1.0), ("second", 2.0)):
        model_dir = write_model_folder(root, name, FP32_IO_CONFIG, USES_HELPER)
        (model_dir / "1" / "utils.py").write_text(f"ANSWER = {answer}\n")
    return root


def _answers(server: ServerHandle) -> dict[str, float]:
    tensor = httpclient.InferInput("INPUT0", [1], "FP32")
    tensor.set_data_from_numpy(np.zeros(1, np.float32))
    with httpclient.InferenceServerClient(server.http_url) as client:
        return {
            name: float(client.infer(name, [tensor]).as_numpy("OUTPUT0")[0])
            for name in ("first", "second")
        }


@pytest.mark.real_triton
def test_triton_gives_each_model_its_own_helper(tmp_path: Path) -> None:
    with run_real_triton(_repository(tmp_path)) as server:
        assert _answers(server) == {"first": 1.0, "second": 2.0}


def test_each_model_imports_its_own_helper(tmp_path: Path) -> None:
    with run_pytriton_server(_repository(tmp_path)) as server:
        assert _answers(server) == {"first": 1.0, "second": 2.0}
