"""System shared memory against clients that misbehave: regions hold no descriptor (one
client registering 1,000 of them leaves the server's descriptor count flat), and an object
its client shrinks under a request fails that request instead of killing the server."""

from __future__ import annotations

import os
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
import tritonclient.utils.shared_memory as shm
from harness import ServerHandle, run_pytriton_server, write_python_model
from tritonclient.utils import InferenceServerException

# every test leaves the server as it found it (leaks.py)
pytestmark = pytest.mark.usefixtures("leak_check")

# OUTPUT0 = INPUT0 + 1. For more than one element, execute first writes
# "<gate_file>.started" and waits until gate_file exists, then reads the input.
GATED_CONFIG = """
name: "gated"
backend: "python"
max_batch_size: 0
input [ { name: "INPUT0", data_type: TYPE_FP32, dims: [ -1 ] } ]
output [ { name: "OUTPUT0", data_type: TYPE_FP32, dims: [ -1 ] } ]
parameters { key: "gate_file" value: { string_value: "%s" } }
"""
GATED_MODEL = """
import json
import os
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.gate = config["parameters"]["gate_file"]["string_value"]

    def execute(self, requests):
        responses = []
        for request in requests:
            tensor = pb_utils.get_input_tensor_by_name(request, "INPUT0")
            if tensor.shape() != [1]:
                open(self.gate + ".started", "w").close()
                while not os.path.exists(self.gate):
                    time.sleep(0.01)
            x = tensor.as_numpy()  # reads the input: a shrunk region's pages fault here
            out = (x + np.float32(1)).astype(np.float32)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", out)]))
        return responses
"""
ELEMENTS = 4 * 4096  # 64 KiB of FP32: 16 pages


@pytest.fixture(scope="module")
def gate(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("gate") / "open"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, gate: Path) -> Iterator[ServerHandle]:
    root = tmp_path_factory.mktemp("shm_security")
    write_python_model(root, "gated", GATED_CONFIG % gate, GATED_MODEL)
    with run_pytriton_server(root, "--allow-client-shm=true") as handle:
        yield handle


def descriptors(server: ServerHandle) -> int:
    return len(os.listdir(f"/proc/{server.process.pid}/fd"))


def small_infer_is_exact(server: ServerHandle) -> None:
    with httpclient.InferenceServerClient(server.http_url) as client:
        tensor = httpclient.InferInput("INPUT0", [1], "FP32")
        tensor.set_data_from_numpy(np.array([2.5], np.float32))
        result = client.infer("gated", [tensor]).as_numpy("OUTPUT0")
        assert result is not None and result.tolist() == [3.5]


def shrink(key: str, size: int) -> None:
    """What a client does to its object: ftruncate it."""
    fd = os.open(f"/dev/shm/{key.lstrip('/')}", os.O_RDWR)
    try:
        os.ftruncate(fd, size)
    finally:
        os.close(fd)


class Region:
    """A client's object registered as a system region over its whole size."""

    def __init__(self, client: grpcclient.InferenceServerClient, size: int) -> None:
        self.name = f"r{uuid.uuid4().hex[:10]}"
        self.key = f"/pytriton_sec_{self.name}"
        self.size = size
        self.handle = shm.create_shared_memory_region(self.name, self.key, size)
        self._client = client
        client.register_system_shared_memory(self.name, self.key, size)

    def close(self) -> None:
        try:
            self._client.unregister_system_shared_memory(self.name)
        finally:
            shm.destroy_shared_memory_region(self.handle)


def test_a_thousand_regions_leave_the_descriptor_count_flat(server: ServerHandle) -> None:
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        small_infer_is_exact(server)
        before = descriptors(server)
        handle = shm.create_shared_memory_region("many", "/pytriton_sec_many", 1000 * 64)
        try:
            for i in range(1000):
                client.register_system_shared_memory(f"many_{i}", "/pytriton_sec_many", 64, i * 64)
            during = descriptors(server)
            small_infer_is_exact(server)  # a new connection is accepted and served
            assert len(client.get_system_shared_memory_status().regions) == 1000
            print(f"server descriptors: {before} before, {during} with 1000 regions")
            assert during - before < 16  # a few for client connections, none per region
        finally:
            client.unregister_system_shared_memory()
            shm.destroy_shared_memory_region(handle)
    small_infer_is_exact(server)


def shrunk_while_running(call: Callable[[], object], region: Region, gate: Path) -> object:
    """Run ``call`` (a request that uses ``region``) in a thread, shrink the region's object
    to nothing once the request is inside the model, let the model go on, and return what
    the call answered (or raised)."""
    return while_running(call, lambda: shrink(region.key, 0), gate)


def while_running(call: Callable[[], object], meddle: Callable[[], None], gate: Path) -> object:
    """Run ``call`` in a thread, ``meddle`` once its request is inside the gated model and
    before the model reads its input, let the model go on, and return what the call
    answered (or raised)."""
    outcome: list[object] = []

    def target() -> None:
        try:
            outcome.append(call())
        except InferenceServerException as exc:
            outcome.append(exc)

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    started = gate.with_name(gate.name + ".started")
    deadline = time.monotonic() + 60
    while not started.exists():
        assert time.monotonic() < deadline, "the gated request never reached the model"
        time.sleep(0.01)
    started.unlink()
    meddle()  # while the model runs, before it reads
    gate.touch()
    thread.join(timeout=60)
    (answer,) = outcome
    return answer


def test_an_input_shrunk_under_a_request_fails_it_and_the_server_lives(
    server: ServerHandle, gate: Path
) -> None:
    values = np.arange(ELEMENTS, dtype=np.float32)
    gate.unlink(missing_ok=True)
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        region = Region(client, values.nbytes)
        try:
            shm.set_shared_memory_region(region.handle, [values])
            tensor = grpcclient.InferInput("INPUT0", [ELEMENTS], "FP32")
            tensor.set_shared_memory(region.name, values.nbytes)
            answer = shrunk_while_running(lambda: client.infer("gated", [tensor]), region, gate)
            assert isinstance(answer, InferenceServerException), answer
            assert "was truncated by its client" in str(answer.message())
            small_infer_is_exact(server)
            # The region stays refused until the client registers it again.
            with pytest.raises(InferenceServerException, match="was truncated by its client"):
                client.infer("gated", [tensor])
        finally:
            region.close()
            gate.unlink(missing_ok=True)
        fresh = Region(client, values.nbytes)
        try:
            shm.set_shared_memory_region(fresh.handle, [values])
            tensor = grpcclient.InferInput("INPUT0", [ELEMENTS], "FP32")
            tensor.set_shared_memory(fresh.name, values.nbytes)
            gate.touch()
            result = client.infer("gated", [tensor]).as_numpy("OUTPUT0")
            assert result is not None and np.array_equal(result, values + 1)
        finally:
            fresh.close()
            gate.unlink(missing_ok=True)


def test_an_output_region_shrunk_under_a_request_fails_it_and_the_server_lives(
    server: ServerHandle, gate: Path
) -> None:
    values = np.arange(ELEMENTS, dtype=np.float32)
    gate.unlink(missing_ok=True)
    with httpclient.InferenceServerClient(server.http_url) as client:
        with grpcclient.InferenceServerClient(server.grpc_url) as grpc_client:
            region = Region(grpc_client, values.nbytes)
            try:
                tensor = httpclient.InferInput("INPUT0", [ELEMENTS], "FP32")
                tensor.set_data_from_numpy(values, binary_data=True)
                output = httpclient.InferRequestedOutput("OUTPUT0")
                output.set_shared_memory(region.name, values.nbytes)
                answer = shrunk_while_running(
                    lambda: client.infer("gated", [tensor], outputs=[output]), region, gate
                )
                assert isinstance(answer, InferenceServerException), answer
                assert "was truncated by its client" in str(answer.message())
                small_infer_is_exact(server)
            finally:
                region.close()
                gate.unlink(missing_ok=True)


@pytest.mark.parametrize("destroy", [False, True], ids=["unregistered", "unregistered-unlinked"])
def test_a_region_unregistered_under_a_request_keeps_its_mapping_until_the_request_ends(
    server: ServerHandle, gate: Path, destroy: bool
) -> None:
    """The request holds the mapping it resolved: unregistering the region (and the client
    unlinking its object) under it neither faults nor changes what the request reads."""
    values = np.arange(ELEMENTS, dtype=np.float32)
    gate.unlink(missing_ok=True)
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        region = Region(client, values.nbytes)
        shm.set_shared_memory_region(region.handle, [values])
        tensor = grpcclient.InferInput("INPUT0", [ELEMENTS], "FP32")
        tensor.set_shared_memory(region.name, values.nbytes)

        def unregister() -> None:
            client.unregister_system_shared_memory(region.name)
            if destroy:
                shm.destroy_shared_memory_region(region.handle)

        try:
            answer = while_running(lambda: client.infer("gated", [tensor]), unregister, gate)
        finally:
            gate.unlink(missing_ok=True)
            if not destroy:
                shm.destroy_shared_memory_region(region.handle)
        assert not isinstance(answer, Exception), answer
        result = answer.as_numpy("OUTPUT0")  # type: ignore[attr-defined]
        assert result is not None and np.array_equal(result, values + 1)
        assert region.name not in client.get_system_shared_memory_status().regions  # type: ignore[union-attr]
        with pytest.raises(InferenceServerException, match="Unable to find shared memory region"):
            client.infer("gated", [tensor])
    small_infer_is_exact(server)
