"""The leak check (leaks.py, the ``leak_check`` fixture) passes after clean traffic over
HTTP, gRPC and system shared memory, and fails, naming the count, when a model keeps its
requests and when a region is left registered."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
import tritonclient.utils.shared_memory as shm
from harness import ServerHandle, run_pytriton_server, write_python_model
from leaks import check_no_leaks, live_objects
from robustness import fp32_input, identity_config, write_identity_model

# Keeps each request it gets until asked to forget them (a -1 input).
KEEPER_MODEL = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    kept = []

    def execute(self, requests):
        responses = []
        for request in requests:
            data = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            if data.size and data[0] == -1:
                self.kept.clear()
            else:
                self.kept.append(request)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", data.copy())]))
        return responses
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerHandle]:
    root = tmp_path_factory.mktemp("leaks")
    write_identity_model(root, "identity")
    write_python_model(
        root, "request_keeper", identity_config("request_keeper", "TYPE_FP32"), KEEPER_MODEL
    )
    with run_pytriton_server(root, "--allow-client-shm=true") as handle:
        yield handle


def infer(server: ServerHandle, model: str, values: list[float]) -> None:
    with httpclient.InferenceServerClient(server.http_url) as client:
        data = np.array(values, np.float32)
        result = client.infer(model, [fp32_input(httpclient, data)]).as_numpy("OUTPUT0")
        assert result is not None and result.tolist() == data.tolist()


class SystemRegion:
    """A client's system region of ``elements`` FP32 values (0, 1, 2, ...), registered with
    the server. From 1 MiB on, a Python model's writable input is a private mapping of it."""

    def __init__(self, server: ServerHandle, name: str, elements: int = 4) -> None:
        self.name = name
        self.values = np.arange(elements, dtype=np.float32)
        self.handle = shm.create_shared_memory_region(
            name, f"/pytriton_leak_{name}", self.values.nbytes
        )
        shm.set_shared_memory_region(self.handle, [self.values])
        self.client = httpclient.InferenceServerClient(server.http_url)
        self.client.register_system_shared_memory(
            name, f"/pytriton_leak_{name}", self.values.nbytes
        )

    def infer(self, model: str) -> None:
        tensor = httpclient.InferInput("INPUT0", [self.values.size], "FP32")
        tensor.set_shared_memory(self.name, self.values.nbytes)
        result = self.client.infer(model, [tensor]).as_numpy("OUTPUT0")
        assert result is not None and np.array_equal(result, self.values)

    def close(self) -> None:
        self.client.unregister_system_shared_memory(self.name)
        self.client.close()
        shm.destroy_shared_memory_region(self.handle)


def test_clean_traffic_leaves_nothing(server: ServerHandle, leak_check: None) -> None:
    infer(server, "identity", [1.0, 2.0])
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        data = np.array([3.0], np.float32)
        result = client.infer("identity", [fp32_input(grpcclient, data)]).as_numpy("OUTPUT0")
        assert result is not None and result.tolist() == [3.0]
    for name, elements in (("clean", 4), ("clean_large", 1 << 18)):  # 16 B, 1 MiB
        region = SystemRegion(server, name, elements)
        try:
            region.infer("identity")
        finally:
            region.close()


def test_a_model_keeping_its_requests_fails_the_check(server: ServerHandle) -> None:
    baseline = live_objects(server)
    infer(server, "request_keeper", [1.0])
    with pytest.raises(AssertionError, match="'requests': 1"):
        check_no_leaks(server, baseline, settle_s=2.0)
    infer(server, "request_keeper", [-1.0])  # forgets them
    check_no_leaks(server, baseline)


def test_a_region_left_registered_fails_the_check(server: ServerHandle) -> None:
    baseline = live_objects(server)
    region = SystemRegion(server, "forgotten")
    try:
        region.infer("identity")
        with pytest.raises(AssertionError, match="'shm_mappings'"):
            check_no_leaks(server, baseline, settle_s=2.0)
    finally:
        region.close()
    check_no_leaks(server, baseline)
