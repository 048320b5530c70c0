"""Python models keep to themselves: each imports its own helper modules (a reload sees a
changed helper), and each may write its input arrays, whatever protocol brought them."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
import tritonclient.utils.shared_memory as shm
from harness import ServerHandle, run_pytriton_server

CONFIG = """
name: "{name}"
backend: "python"
max_batch_size: 0
input [ {{ name: "INPUT0", data_type: TYPE_FP32, dims: [ -1 ] }} ]
output [ {{ name: "OUTPUT0", data_type: TYPE_FP32, dims: [ -1 ] }} ]
"""
# OUTPUT0 = INPUT0 * helpers.SCALE + helper.VALUE, the helper read at import and again in
# execute (a lazy import), both from the model's own folders.
HELPED_MODEL = """
import helper
import helpers
import triton_python_backend_utils as pb_utils
from helpers.inner import SCALE


class TritonPythonModel:
    def execute(self, requests):
        from helper import VALUE

        assert VALUE == helper.VALUE and SCALE == helpers.SCALE
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            out = (x * SCALE + VALUE).astype(x.dtype)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", out)]))
        return responses
"""
# OUTPUT0 = INPUT0 + helper.VALUE, with helper.py beside model.py only.
PLAIN_MODEL = """
import helper
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            out = (x + helper.VALUE).astype(x.dtype)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", out)]))
        return responses
"""
# Doubles its input in place, as a model may under Triton's stub.
IN_PLACE_MODEL = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            x *= 2
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", x)]))
        return responses
"""


def write_helped(root: Path, name: str, value: int, scale: int) -> None:
    model = root / name
    (model / "1").mkdir(parents=True)
    (model / "config.pbtxt").write_text(CONFIG.format(name=name))
    (model / "1" / "model.py").write_text(HELPED_MODEL)
    (model / "1" / "helper.py").write_text(f"VALUE = {value}\n")
    # A package in the model folder (above the version folder), with a relative import.
    (model / "helpers").mkdir()
    (model / "helpers" / "__init__.py").write_text("from .inner import SCALE\n")
    (model / "helpers" / "inner.py").write_text(f"SCALE = {scale}\n")


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("model_isolation")
    write_helped(root, "first", value=1, scale=10)
    write_helped(root, "second", value=2, scale=20)
    for name, value in (("plain_a", 3), ("plain_b", 4)):
        (root / name / "1").mkdir(parents=True)
        (root / name / "config.pbtxt").write_text(CONFIG.format(name=name))
        (root / name / "1" / "model.py").write_text(PLAIN_MODEL)
        (root / name / "1" / "helper.py").write_text(f"VALUE = {value}\n")
    (root / "in_place" / "1").mkdir(parents=True)
    (root / "in_place" / "config.pbtxt").write_text(CONFIG.format(name="in_place"))
    (root / "in_place" / "1" / "model.py").write_text(IN_PLACE_MODEL)
    return root


@pytest.fixture(scope="module")
def server(repository: Path) -> Iterator[ServerHandle]:
    with run_pytriton_server(
        repository,
        "--model-control-mode=explicit",
        "--load-model=*",
        "--allow-client-shm=true",
        "--exit-on-error=false",  # each test reports its own failure
        "--strict-readiness=false",
    ) as handle:
        yield handle


def infer(url: str, model: str, values: list[float]) -> list[float]:
    with httpclient.InferenceServerClient(url) as client:
        tensor = httpclient.InferInput("INPUT0", [len(values)], "FP32")
        tensor.set_data_from_numpy(np.array(values, np.float32))
        result = client.infer(model, [tensor]).as_numpy("OUTPUT0")
        assert result is not None
        return [float(v) for v in result]


def test_two_models_with_a_helper_py_each_get_their_own(server: ServerHandle) -> None:
    assert infer(server.http_url, "plain_a", [1.0]) == [4.0]
    assert infer(server.http_url, "plain_b", [1.0]) == [5.0]


def test_helpers_in_the_model_folder_and_packages_are_the_models_own(
    server: ServerHandle,
) -> None:
    assert infer(server.http_url, "first", [1.0, 2.0]) == [11.0, 21.0]
    assert infer(server.http_url, "second", [1.0, 2.0]) == [22.0, 42.0]


def test_a_reload_imports_the_changed_helper(server: ServerHandle, repository: Path) -> None:
    helper = repository / "first" / "1" / "helper.py"
    stat = helper.stat()
    try:
        # Same size and the same mtime second: a bytecode cache would not notice.
        helper.write_text("VALUE = 7\n")
        os.utime(helper, ns=(stat.st_atime_ns, stat.st_mtime_ns))
        (repository / "first" / "helpers" / "inner.py").write_text("SCALE = 30\n")
        with httpclient.InferenceServerClient(server.http_url) as client:
            client.load_model("first")
        assert infer(server.http_url, "first", [1.0]) == [37.0]
        assert infer(server.http_url, "second", [1.0]) == [22.0]  # untouched
    finally:
        helper.write_text("VALUE = 1\n")
        (repository / "first" / "helpers" / "inner.py").write_text("SCALE = 10\n")
        with httpclient.InferenceServerClient(server.http_url) as client:
            client.load_model("first")
    assert infer(server.http_url, "first", [1.0]) == [11.0]


VALUES = np.array([1.5, -2.0, 3.25], np.float32)


def test_a_model_may_write_its_inputs_over_http(server: ServerHandle) -> None:
    with httpclient.InferenceServerClient(server.http_url) as client:
        for binary in (False, True):
            tensor = httpclient.InferInput("INPUT0", [3], "FP32")
            tensor.set_data_from_numpy(VALUES, binary_data=binary)
            result = client.infer("in_place", [tensor]).as_numpy("OUTPUT0")
            assert result is not None and result.tolist() == (VALUES * 2).tolist()


def test_a_model_may_write_its_inputs_over_grpc(server: ServerHandle) -> None:
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        tensor = grpcclient.InferInput("INPUT0", [3], "FP32")
        tensor.set_data_from_numpy(VALUES)
        result = client.infer("in_place", [tensor]).as_numpy("OUTPUT0")
        assert result is not None and result.tolist() == (VALUES * 2).tolist()
        results: list[object] = []
        client.start_stream(callback=lambda result, error: results.append(error or result))
        client.async_stream_infer("in_place", [tensor])
        client.stop_stream()
    output = results[0].as_numpy("OUTPUT0")  # type: ignore[union-attr]
    assert output is not None and output.tolist() == (VALUES * 2).tolist()
    assert infer(server.http_url, "first", [1.0]) == [11.0]


def test_a_model_may_write_a_shared_memory_input_without_touching_the_region(
    server: ServerHandle,
) -> None:
    key = f"/pytriton_in_place_{os.getpid()}"
    handle = shm.create_shared_memory_region("in_place_input", key, VALUES.nbytes)
    try:
        shm.set_shared_memory_region(handle, [VALUES])
        with grpcclient.InferenceServerClient(server.grpc_url) as client:
            client.register_system_shared_memory("in_place_input", key, VALUES.nbytes)
            try:
                tensor = grpcclient.InferInput("INPUT0", [3], "FP32")
                tensor.set_shared_memory("in_place_input", VALUES.nbytes)
                result = client.infer("in_place", [tensor]).as_numpy("OUTPUT0")
            finally:
                client.unregister_system_shared_memory("in_place_input")
        assert result is not None and result.tolist() == (VALUES * 2).tolist()
        region = shm.get_contents_as_numpy(handle, np.float32, [3])
        assert region.tolist() == VALUES.tolist()  # the client's memory is its own
    finally:
        shm.destroy_shared_memory_region(handle)
