"""System shared memory end to end, through tritonclient's own shared-memory utilities.

The client side is ``tritonclient.utils.shared_memory`` (POSIX shared memory, as Triton's
users create it); the same behaviour is checked over HTTP and gRPC: register, infer with
inputs and outputs in shared memory for every datatype (the bytes read back from the
client's region are exact), status, unregister one and all. Bad input is refused with
Triton's message and the server keeps serving: unknown regions, ranges outside a region,
negative and overflowing values (raw JSON and raw protobuf where tritonclient refuses to
send them), keys that do not exist, names registered twice, and a region unregistered while
a request uses it (the request completes against it; the server unmaps it afterwards).
"""

from __future__ import annotations

import base64
import contextlib
import http.client
import json
import shutil
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
import tritonclient.utils.shared_memory as shm
from harness import (
    DTYPE_CASES,
    TEST_MODELS_REPOSITORY,
    ServerHandle,
    run_pytriton_server,
    wire_bytes,
)
from tritonclient.grpc import service_pb2, service_pb2_grpc
from tritonclient.utils import InferenceServerException

from pytriton_core.memory import CLIENT_SHM_DISABLED

PROTOCOLS = ("http", "grpc")
# A cudaIpcMemHandle_t as tritonclient takes it (base64), all zeros.
NULL_HANDLE = base64.b64encode(b"\0" * 64)
Client = httpclient.InferenceServerClient | grpcclient.InferenceServerClient


# A model that holds its request for a while: the in-flight unregister test.
SLOW_DELAY_S = 1.5
SLOW_CONFIG = """
name: "slow_identity"
backend: "python"
max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
"""
SLOW_MODEL = f"""
import time

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        time.sleep({SLOW_DELAY_S})
        responses = []
        for request in requests:
            data = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", data)]))
        return responses
"""


# A model that writes into its input (as a model may, its inputs being its own under
# Triton's stub) and returns it: a large input in shared memory is then a private mapping of
# the client's pages, which the model's writes must not reach.
IN_PLACE_CONFIG = """
name: "add_one_in_place"
backend: "python"
max_batch_size: 0
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
"""
IN_PLACE_MODEL = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            data = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            data += 1
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", data)]))
        return responses
"""


# Returns its input array itself (as the bench's identity model does): from 1 MiB on, the
# output is then the private mapping of the client's input pages.
AS_IS_CONFIG = IN_PLACE_CONFIG.replace("add_one_in_place", "identity_as_is")
AS_IS_MODEL = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [
            pb_utils.InferenceResponse([pb_utils.Tensor(
                "OUTPUT0", pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy())])
            for request in requests
        ]
"""


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("shm-models")
    for datatype in DTYPE_CASES:
        name = f"dtype_{datatype.lower()}"
        shutil.copytree(
            TEST_MODELS_REPOSITORY / name, root / name, ignore=shutil.ignore_patterns("__pycache__")
        )
    slow = root / "slow_identity"
    (slow / "1").mkdir(parents=True)
    (slow / "config.pbtxt").write_text(SLOW_CONFIG)
    (slow / "1" / "model.py").write_text(SLOW_MODEL)
    in_place = root / "add_one_in_place"
    (in_place / "1").mkdir(parents=True)
    (in_place / "config.pbtxt").write_text(IN_PLACE_CONFIG)
    (in_place / "1" / "model.py").write_text(IN_PLACE_MODEL)
    as_is = root / "identity_as_is"
    (as_is / "1").mkdir(parents=True)
    (as_is / "config.pbtxt").write_text(AS_IS_CONFIG)
    (as_is / "1" / "model.py").write_text(AS_IS_MODEL)
    return root


@pytest.fixture(scope="module")
def server(repository: Path) -> Iterator[ServerHandle]:
    with run_pytriton_server(repository, "--allow-client-shm=true") as handle:
        yield handle


def _client(server: ServerHandle, protocol: str) -> Client:
    if protocol == "http":
        return httpclient.InferenceServerClient(server.http_url)
    return grpcclient.InferenceServerClient(server.grpc_url)


@pytest.fixture(params=PROTOCOLS)
def protocol(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def client(server: ServerHandle, protocol: str) -> Iterator[Client]:
    connection = _client(server, protocol)
    yield connection
    with contextlib.suppress(InferenceServerException):
        connection.unregister_system_shared_memory()
    connection.close()


def _mod(protocol: str) -> Any:
    return httpclient if protocol == "http" else grpcclient


def _key() -> str:
    return f"/pytriton_it_{uuid.uuid4().hex[:16]}"


@contextlib.contextmanager
def client_region(byte_size: int, name: str = "") -> Iterator[tuple[Any, str, str]]:
    """A client-side region (tritonclient's handle, its name, its key), destroyed after."""
    key = _key()
    handle = shm.create_shared_memory_region(name or key.strip("/"), key, byte_size)
    try:
        yield handle, name or key.strip("/"), key
    finally:
        shm.destroy_shared_memory_region(handle)


def _write(handle: Any, data: bytes, offset: int = 0) -> None:
    shm.set_shared_memory_region(handle, [np.frombuffer(data, np.uint8)], offset=offset)


def _read(handle: Any, nbytes: int, offset: int = 0) -> bytes:
    return shm.get_contents_as_numpy(handle, np.uint8, [nbytes], offset=offset).tobytes()


def _error(call: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[str, str]:
    """(status, message) of a client call that must fail."""
    with pytest.raises(InferenceServerException) as info:
        call(*args, **kwargs)
    return str(info.value.status()), str(info.value.message())


def _shm_infer(
    client: Client,
    protocol: str,
    model: str,
    datatype: str,
    shape: list[int],
    inp: tuple[str, int, int],
    out: tuple[str, int, int] | None,
) -> Any:
    """infer with INPUT0 in (region, byte_size, offset) and OUTPUT0 in ``out`` (or not)."""
    mod = _mod(protocol)
    tensor = mod.InferInput("INPUT0", shape, datatype)
    region, size, offset = inp
    tensor.set_shared_memory(region, size, offset=offset)
    output = mod.InferRequestedOutput("OUTPUT0")
    if out is not None:
        output.set_shared_memory(out[0], out[1], offset=out[2])
    return client.infer(model, [tensor], outputs=[output])


# ------------------------------------------------------------------------------ round trips


@pytest.mark.parametrize("datatype", sorted(DTYPE_CASES))
def test_every_datatype_round_trips_through_shared_memory(
    client: Client, protocol: str, datatype: str
) -> None:
    array = DTYPE_CASES[datatype]
    data = wire_bytes(array)
    out_offset = 64 + len(data)  # the output after the input, in the same region
    with client_region(2 * out_offset) as (handle, name, key):
        _write(handle, data, offset=64)
        client.register_system_shared_memory(name, key, 2 * out_offset)
        result = _shm_infer(
            client,
            protocol,
            f"dtype_{datatype.lower()}",
            datatype,
            list(array.shape),
            (name, len(data), 64),
            (name, len(data), out_offset),
        )
        assert _read(handle, len(data), offset=out_offset) == data
        if datatype == "BYTES":
            decoded = shm.get_contents_as_numpy(handle, np.object_, array.shape, out_offset)
            assert decoded.tolist() == array.tolist()
        # The response names the output; its data is only in the region.
        if protocol == "http":
            assert result.get_response()["outputs"] == [
                {"name": "OUTPUT0", "datatype": datatype, "shape": list(array.shape)}
            ]
        else:
            response = result.get_response()
            assert [
                (o.name, o.datatype, list(o.shape), dict(o.parameters)) for o in response.outputs
            ] == [("OUTPUT0", datatype, list(array.shape), {})]
            assert list(response.raw_output_contents) == [b""]


def test_input_in_shared_memory_output_in_the_response(client: Client, protocol: str) -> None:
    array = np.arange(1000, dtype=np.float32).reshape(1, 1000)
    with client_region(array.nbytes) as (handle, name, key):
        shm.set_shared_memory_region(handle, [array])
        client.register_system_shared_memory(name, key, array.nbytes)
        result = _shm_infer(
            client, protocol, "dtype_fp32", "FP32", [1, 1000], (name, array.nbytes, 0), None
        )
        assert np.array_equal(result.as_numpy("OUTPUT0"), array)


def test_the_same_http_body_sent_again_reads_its_regions_anew(server: ServerHandle) -> None:
    """The HTTP front end keeps its reading of a body whose tensors are all in shared
    memory, and reads the same body sent again from it (no JSON parse): each time the input
    is read from the region and the output written to it anew, and a region unregistered
    meanwhile is refused as the general decode refuses it (a body it has not seen: the same
    request under another id)."""
    client = httpclient.InferenceServerClient(server.http_url)
    request = ("dtype_fp32", "FP32", [1, 16])
    with client_region(128) as (handle, name, key):
        client.register_system_shared_memory(name, key, 128)
        for step in range(5):
            values = np.arange(16, dtype=np.float32) * (step + 1)
            _write(handle, values.tobytes())
            _shm_infer(client, "http", *request, (name, 64, 0), (name, 64, 64))
            assert _read(handle, 64, offset=64) == values.tobytes()
        client.unregister_system_shared_memory(name)
        remembered = _error(_shm_infer, client, "http", *request, (name, 64, 0), (name, 64, 64))
        tensor = httpclient.InferInput("INPUT0", [1, 16], "FP32")
        tensor.set_shared_memory(name, 64)
        output = httpclient.InferRequestedOutput("OUTPUT0")
        output.set_shared_memory(name, 64, offset=64)
        general = _error(client.infer, "dtype_fp32", [tensor], outputs=[output], request_id="x")
        assert remembered == general
        assert remembered == ("404", f"Unable to find shared memory region: '{name}'")
        client.register_system_shared_memory(name, key, 128)  # and served again
        _write(handle, np.full(16, 7, np.float32).tobytes())
        _shm_infer(client, "http", *request, (name, 64, 0), (name, 64, 64))
        assert _read(handle, 64, offset=64) == np.full(16, 7, np.float32).tobytes()
        client.unregister_system_shared_memory(name)
    client.close()


def test_a_registered_region_can_start_at_an_offset_of_the_object(
    client: Client, protocol: str
) -> None:
    array = np.array([[1.0, 2.0, 3.0, 4.0]], np.float32)
    with client_region(4096 + 100) as (handle, name, key):
        _write(handle, array.tobytes(), offset=4096 + 10)
        client.register_system_shared_memory(name, key, 64, offset=4096)
        _shm_infer(client, protocol, "dtype_fp32", "FP32", [1, 4], (name, 16, 10), (name, 16, 40))
        assert _read(handle, 16, offset=4096 + 40) == array.tobytes()


def test_large_tensors_round_trip(client: Client, protocol: str) -> None:
    array = np.random.default_rng(7).standard_normal((1, 1 << 20)).astype(np.float32)  # 4 MiB
    with client_region(2 * array.nbytes) as (handle, name, key):
        shm.set_shared_memory_region(handle, [array])
        client.register_system_shared_memory(name, key, 2 * array.nbytes)
        _shm_infer(
            client,
            protocol,
            "dtype_fp32",
            "FP32",
            [1, 1 << 20],
            (name, array.nbytes, 0),
            (name, array.nbytes, array.nbytes),
        )
        # (no name for the array over the client's mapping: it must be gone before the
        # region is destroyed)
        assert np.array_equal(
            shm.get_contents_as_numpy(handle, np.float32, [1, 1 << 20], array.nbytes), array
        )


@pytest.mark.parametrize("elements", [1 << 20, (1 << 20) + 3, 1000])
def test_a_model_writing_its_large_input_leaves_the_client_region_alone(
    client: Client, protocol: str, elements: int
) -> None:
    # From 1 MiB on the model's writable input is a copy-on-write mapping of the client's
    # pages (memory/system_shm.writable_copy); below, a copy. Either way the model's writes
    # stay its own, at any offset of the object.
    array = np.random.default_rng(elements).standard_normal(elements).astype(np.float32)
    lead = 4096 + 12  # not page aligned
    with client_region(lead + 2 * array.nbytes + 64) as (handle, name, key):
        shm.set_shared_memory_region(handle, [array], offset=lead)
        client.register_system_shared_memory(name, key, lead + 2 * array.nbytes + 64)
        for _ in range(2):
            _shm_infer(
                client,
                protocol,
                "add_one_in_place",
                "FP32",
                [elements],
                (name, array.nbytes, lead),
                (name, array.nbytes, lead + array.nbytes + 64),
            )
            assert np.array_equal(
                shm.get_contents_as_numpy(handle, np.float32, [elements], lead), array
            )
            assert np.array_equal(
                shm.get_contents_as_numpy(handle, np.float32, [elements], lead + array.nbytes + 64),
                array + 1,
            )


@pytest.mark.parametrize("shift", [-4100, -4, 0, 4, 8, 8192])
def test_an_output_over_its_own_input_range_is_exact(
    client: Client, protocol: str, shift: int
) -> None:
    # The model returns its input array (a private mapping of these very pages, from 1 MiB
    # on): written into an overlapping range of the same object, the output must be the
    # input as it was, not bytes the copy has already overwritten.
    array = np.random.default_rng(11).standard_normal(1 << 20).astype(np.float32)
    start = 3 * 4096
    with client_region(start * 2 + array.nbytes + 64) as (handle, name, key):
        shm.set_shared_memory_region(handle, [array], offset=start)
        client.register_system_shared_memory(name, key, start * 2 + array.nbytes + 64)
        _shm_infer(
            client,
            protocol,
            "identity_as_is",
            "FP32",
            [array.size],
            (name, array.nbytes, start),
            (name, array.nbytes, start + shift),
        )
        assert np.array_equal(
            shm.get_contents_as_numpy(handle, np.float32, [array.size], start + shift), array
        )


def test_grpc_stream_uses_shared_memory(server: ServerHandle) -> None:
    client = grpcclient.InferenceServerClient(server.grpc_url)
    array = np.array([[5, 6, 7]], np.int32)
    results: list[Any] = []
    done = threading.Event()

    def callback(result: Any, error: Any) -> None:
        results.append(error or result)
        done.set()

    with client_region(64) as (handle, name, key):
        shm.set_shared_memory_region(handle, [array])
        client.register_system_shared_memory(name, key, 64)
        tensor = grpcclient.InferInput("INPUT0", [1, 3], "INT32")
        tensor.set_shared_memory(name, 12)
        output = grpcclient.InferRequestedOutput("OUTPUT0")
        output.set_shared_memory(name, 12, offset=32)
        client.start_stream(callback)
        client.async_stream_infer("dtype_int32", [tensor], outputs=[output])
        assert done.wait(30)
        client.stop_stream()
        assert not isinstance(results[0], InferenceServerException), results[0]
        assert list(results[0].get_response().raw_output_contents) == [b""]
        assert shm.get_contents_as_numpy(handle, np.int32, [1, 3], 32).tolist() == [[5, 6, 7]]
        client.unregister_system_shared_memory()
    client.close()


# ------------------------------------------------------------------- status and unregister


def _status(client: Client, protocol: str, name: str = "") -> list[dict[str, Any]]:
    if protocol == "http":
        answer: list[dict[str, Any]] = client.get_system_shared_memory_status(name)  # type: ignore[assignment]
        return answer
    regions = client.get_system_shared_memory_status(name, as_json=True).get("regions", {})  # type: ignore[call-arg]
    return [
        {
            "name": r["name"],
            "key": r["key"],
            "offset": int(r.get("offset", 0)),
            "byte_size": int(r["byte_size"]),
        }
        for _, r in sorted(regions.items())
    ]


def test_status_and_unregister_one_and_all(client: Client, protocol: str) -> None:
    with client_region(256) as (_, _, key_a), client_region(512) as (_, _, key_b):
        assert _status(client, protocol) == []
        client.register_system_shared_memory("b_region", key_b, 256, offset=128)
        client.register_system_shared_memory("a_region", key_a, 256)
        a = {"name": "a_region", "key": key_a, "offset": 0, "byte_size": 256}
        b = {"name": "b_region", "key": key_b, "offset": 128, "byte_size": 256}
        assert _status(client, protocol) == [a, b]
        assert _status(client, protocol, "b_region") == [b]
        client.unregister_system_shared_memory("a_region")
        assert _status(client, protocol) == [b]
        client.unregister_system_shared_memory("a_region")  # unknown now: nothing to do
        client.register_system_shared_memory("a_region", key_a, 128)  # the name is free
        client.unregister_system_shared_memory()
        assert _status(client, protocol) == []
        assert _error(client.get_system_shared_memory_status, "a_region") == (
            _NOT_FOUND[protocol],
            "Unable to find system shared memory region: 'a_region'",
        )


def test_cuda_status_is_empty_and_unregister_is_a_no_op(client: Client, protocol: str) -> None:
    client.unregister_cuda_shared_memory()
    if protocol == "http":
        assert client.get_cuda_shared_memory_status() == []
    else:
        assert client.get_cuda_shared_memory_status(as_json=True) == {}  # type: ignore[call-arg]


# ------------------------------------------------------------------------------ bad input

_NOT_FOUND = {"http": "404", "grpc": "StatusCode.NOT_FOUND"}
_INVALID = {"http": "400", "grpc": "StatusCode.INVALID_ARGUMENT"}
_INTERNAL = {"http": "500", "grpc": "StatusCode.INTERNAL"}
_EXISTS = {"http": "400", "grpc": "StatusCode.ALREADY_EXISTS"}


def _still_serves(client: Client, protocol: str) -> None:
    array = np.array([[1.0, 2.0]], np.float32)
    mod = _mod(protocol)
    tensor = mod.InferInput("INPUT0", [1, 2], "FP32")
    tensor.set_data_from_numpy(array)
    assert client.infer("dtype_fp32", [tensor]).as_numpy("OUTPUT0").tolist() == [[1.0, 2.0]]


@pytest.mark.parametrize(
    ("inp", "out", "kind", "message"),
    [
        (("nope", 16, 0), None, _NOT_FOUND, "Unable to find shared memory region: 'nope'"),
        (("r", 16, 0), ("nope", 16, 0), _NOT_FOUND, "Unable to find shared memory region: 'nope'"),
        (("r", 16, 65), None, _INVALID, "Invalid offset for shared memory region: 'r'"),
        (("r", 16, 56), None, _INVALID, "Invalid offset + byte size for shared memory region: 'r'"),
        (("r", 80, 0), None, _INVALID, "Invalid offset + byte size for shared memory region: 'r'"),
        (
            ("r", 16, 0),
            ("r", 16, 60),
            _INVALID,
            "Invalid offset + byte size for shared memory region: 'r'",
        ),
        (
            ("r", 12, 0),
            None,
            _INVALID,
            "[request id: <id_unknown>] input byte size mismatch for input 'INPUT0' for model "
            "'dtype_fp32'. Expected 16, got 12",
        ),
        (
            ("r", 16, 0),
            ("r", 8, 16),
            _INTERNAL,
            "shared memory size specified with the request for output 'OUTPUT0' (8 bytes) "
            "should be at least 16 bytes to hold the results",
        ),
    ],
)
def test_bad_ranges_are_refused(
    client: Client,
    protocol: str,
    inp: tuple[str, int, int],
    out: tuple[str, int, int] | None,
    kind: dict[str, str],
    message: str,
) -> None:
    with client_region(64) as (_, _, key):
        client.register_system_shared_memory("r", key, 64)
        assert _error(_shm_infer, client, protocol, "dtype_fp32", "FP32", [1, 4], inp, out) == (
            kind[protocol],
            message,
        )
        _still_serves(client, protocol)


def test_registration_errors(client: Client, protocol: str) -> None:
    with client_region(64) as (_, _, key):
        missing = "/pytriton_it_no_such_key"
        status, message = _error(client.register_system_shared_memory, "x", missing, 64)
        assert status == _INTERNAL[protocol]
        assert message.startswith(f"Unable to open shared memory region: '{missing}'")
        for byte_size, offset in ((65, 0), (8, 60), (0, 0), (8, 2**64 - 1)):
            status, message = _error(
                client.register_system_shared_memory, "x", key, byte_size, offset=offset
            )
            assert status == _INTERNAL[protocol]
            assert message.startswith(f"Invalid shared memory region: '{key}'"), message
        client.register_system_shared_memory("r", key, 64)
        assert _error(client.register_system_shared_memory, "r", key, 64) == (
            _EXISTS[protocol],
            "shared memory region 'r' already in manager",
        )
        assert _status(client, protocol) == [
            {"name": "r", "key": key, "offset": 0, "byte_size": 64}
        ]
        _still_serves(client, protocol)


def _post(server: ServerHandle, path: str, body: Any) -> tuple[int, Any]:
    host, port = server.http_url.rsplit(":", 1)
    connection = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        connection.request("POST", path, body=data)
        response = connection.getresponse()
        payload = response.read()
        return response.status, json.loads(payload) if payload else None
    finally:
        connection.close()


_NOT_UNSIGNED = "attempt to access JSON non-unsigned-integer as unsigned-integer"


@pytest.mark.parametrize(
    ("parameters", "status", "message"),
    [
        (
            {"shared_memory_offset": -1},
            500,
            f"Unable to parse 'shared_memory_offset': {_NOT_UNSIGNED}",
        ),
        (
            {"shared_memory_byte_size": -16},
            500,
            f"Unable to parse 'shared_memory_byte_size': {_NOT_UNSIGNED}",
        ),
        (  # beyond uint64: JSON readers make it a double
            {"shared_memory_offset": 2**64},
            500,
            f"Unable to parse 'shared_memory_offset': {_NOT_UNSIGNED}",
        ),
        (
            {"shared_memory_offset": 2**64 - 1},
            400,
            "Invalid offset for shared memory region: 'r'",
        ),
        (  # 8 + (2**64 - 1) wraps around to 7 in uint64: must not pass for "inside"
            {"shared_memory_offset": 8, "shared_memory_byte_size": 2**64 - 1},
            400,
            "Invalid offset + byte size for shared memory region: 'r'",
        ),
        (
            {"shared_memory_region": 5},
            500,
            "Unable to parse 'shared_memory_region': attempt to access JSON non-string as string",
        ),
        (
            {"shared_memory_byte_size": "16"},
            500,
            f"Unable to parse 'shared_memory_byte_size': {_NOT_UNSIGNED}",
        ),
        (
            {"binary_data_size": 16},
            400,
            "Input must set only one of the following fields: 'data', 'binary_data_size' in "
            "'parameters', 'shared_memory_region' in 'parameters'. But set 'binary_data_size' "
            "'shared_memory_region'",
        ),
    ],
)
def test_raw_http_input_parameters_are_checked(
    server: ServerHandle, parameters: dict[str, Any], status: int, message: str
) -> None:
    client = httpclient.InferenceServerClient(server.http_url)
    with client_region(64) as (_, _, key):
        client.register_system_shared_memory("r", key, 64)
        shm_parameters = {"shared_memory_region": "r", "shared_memory_byte_size": 16}
        shm_parameters.update(parameters)
        body = {
            "inputs": [
                {
                    "name": "INPUT0",
                    "shape": [1, 4],
                    "datatype": "FP32",
                    "parameters": shm_parameters,
                }
            ]
        }
        assert _post(server, "/v2/models/dtype_fp32/infer", body) == (status, {"error": message})
        _still_serves(client, "http")
        client.unregister_system_shared_memory()


@pytest.mark.parametrize(
    ("parameters", "message"),
    [
        ({"binary_data": True}, "Output can't set both 'shared_memory_region' and 'binary_data'"),
        (
            {"classification": 1},
            "Output can't set both 'shared_memory_region' and 'classification'",
        ),
        (
            {"shared_memory_byte_size": None},
            "'shared_memory_byte_size' must be specified along with 'shared_memory_region' "
            "parameter for tensor 'OUTPUT0'",
        ),
    ],
)
def test_raw_http_output_parameters_are_checked(
    server: ServerHandle, parameters: dict[str, Any], message: str
) -> None:
    client = httpclient.InferenceServerClient(server.http_url)
    with client_region(64) as (handle, _, key):
        _write(handle, np.ones(4, np.float32).tobytes())
        client.register_system_shared_memory("r", key, 64)
        tensor = {"shared_memory_region": "r", "shared_memory_byte_size": 16}
        out = {
            "shared_memory_region": "r",
            "shared_memory_byte_size": 16,
            "shared_memory_offset": 16,
        }
        out.update(parameters)
        out = {k: v for k, v in out.items() if v is not None}
        body = {
            "inputs": [
                {"name": "INPUT0", "shape": [1, 4], "datatype": "FP32", "parameters": tensor}
            ],
            "outputs": [{"name": "OUTPUT0", "parameters": out}],
        }
        assert _post(server, "/v2/models/dtype_fp32/infer", body) == (400, {"error": message})
        # binary_data false is no conflict
        out.pop("binary_data", None)
        out.pop("classification", None)
        out.setdefault("shared_memory_byte_size", 16)
        out["binary_data"] = False
        status, answer = _post(server, "/v2/models/dtype_fp32/infer", body)
        assert status == 200, answer
        assert answer["outputs"] == [{"name": "OUTPUT0", "datatype": "FP32", "shape": [1, 4]}]
        client.unregister_system_shared_memory()


@pytest.mark.parametrize(
    ("body", "status", "message"),
    [
        ({"key": "/k", "offset": -1, "byte_size": 8}, 500, _NOT_UNSIGNED),
        ({"key": "/k", "offset": 0, "byte_size": -8}, 500, _NOT_UNSIGNED),
        ({"key": "/k", "offset": 2**64, "byte_size": 8}, 500, _NOT_UNSIGNED),
        ({"key": 5, "byte_size": 8}, 500, "attempt to access JSON non-string as string"),
        ({"offset": 0, "byte_size": 8}, 400, "Shared memory register request has no 'key' field"),
        ({"key": "/k"}, 400, "Shared memory register request has no 'byte_size' field"),
    ],
)
def test_raw_http_registration_is_checked(
    server: ServerHandle, body: dict[str, Any], status: int, message: str
) -> None:
    assert _post(server, "/v2/systemsharedmemory/region/x/register", body) == (
        status,
        {"error": message},
    )


def test_raw_http_registration_needs_a_name_and_a_json_body(server: ServerHandle) -> None:
    assert _post(server, "/v2/systemsharedmemory/register", {"key": "/k", "byte_size": 8}) == (
        400,
        {"error": "'region name' is necessary to register system shared memory region"},
    )
    status, answer = _post(server, "/v2/systemsharedmemory/region/x/register", b"{not json")
    assert status == 500
    assert answer["error"].startswith("failed to parse the request JSON buffer")


def _raw_infer_request(region: str = "r") -> Any:
    request = service_pb2.ModelInferRequest(model_name="dtype_fp32")
    tensor = request.inputs.add(name="INPUT0", datatype="FP32", shape=[1, 4])
    tensor.parameters["shared_memory_region"].string_param = region
    tensor.parameters["shared_memory_byte_size"].int64_param = 16
    return request


@pytest.mark.parametrize(
    ("mutate", "code", "message"),
    [
        (
            lambda r: (
                r.inputs[0]
                .parameters["shared_memory_offset"]
                .MergeFrom(service_pb2.InferParameter(int64_param=-1))
            ),
            grpc.StatusCode.INVALID_ARGUMENT,
            "Invalid offset for shared memory region: 'r'",
        ),
        (
            lambda r: (
                r.inputs[0]
                .parameters["shared_memory_byte_size"]
                .MergeFrom(service_pb2.InferParameter(int64_param=-16))
            ),
            grpc.StatusCode.INVALID_ARGUMENT,
            "Invalid offset + byte size for shared memory region: 'r'",
        ),
        (
            lambda r: (
                r.inputs[0]
                .parameters["shared_memory_offset"]
                .MergeFrom(service_pb2.InferParameter(int64_param=2**63 - 1))
            ),
            grpc.StatusCode.INVALID_ARGUMENT,
            "Invalid offset for shared memory region: 'r'",
        ),
        (
            lambda r: (
                r.inputs[0]
                .parameters["shared_memory_byte_size"]
                .CopyFrom(service_pb2.InferParameter(uint64_param=16))
            ),
            grpc.StatusCode.INVALID_ARGUMENT,
            "invalid value type for 'shared_memory_byte_size' parameter for tensor 'INPUT0', "
            "expected int64_param.",
        ),
        (
            lambda r: (
                r.inputs[0]
                .parameters["shared_memory_region"]
                .CopyFrom(service_pb2.InferParameter(int64_param=3))
            ),
            grpc.StatusCode.INVALID_ARGUMENT,
            "invalid value type for 'shared_memory_region' parameter for tensor 'INPUT0', "
            "expected string_param.",
        ),
        (
            lambda r: r.inputs[0].parameters.pop("shared_memory_byte_size"),
            grpc.StatusCode.INVALID_ARGUMENT,
            "'shared_memory_byte_size' must be specified along with 'shared_memory_region' "
            "parameter for tensor 'INPUT0'",
        ),
        (
            lambda r: r.inputs[0].contents.fp32_contents.extend([1, 2, 3, 4]),
            grpc.StatusCode.INVALID_ARGUMENT,
            "unexpected 'content' provided when using shared memory for input tensor 'INPUT0' "
            "for model 'dtype_fp32'",
        ),
        (
            lambda r: (
                r.outputs.add(name="OUTPUT0")
                .parameters["shared_memory_region"]
                .MergeFrom(service_pb2.InferParameter(string_param="r"))
                or r.outputs[0]
                .parameters["shared_memory_byte_size"]
                .MergeFrom(service_pb2.InferParameter(int64_param=16))
                or r.outputs[0]
                .parameters["classification"]
                .MergeFrom(service_pb2.InferParameter(int64_param=1))
            ),
            grpc.StatusCode.INVALID_ARGUMENT,
            "output can't set both 'shared_memory_region' and 'classification'",
        ),
    ],
)
def test_raw_grpc_parameters_are_checked(
    server: ServerHandle, mutate: Callable[[Any], Any], code: grpc.StatusCode, message: str
) -> None:
    client = grpcclient.InferenceServerClient(server.grpc_url)
    with client_region(64) as (_, _, key), grpc.insecure_channel(server.grpc_url) as channel:
        client.register_system_shared_memory("r", key, 64)
        request = _raw_infer_request()
        mutate(request)
        with pytest.raises(grpc.RpcError) as info:
            service_pb2_grpc.GRPCInferenceServiceStub(channel).ModelInfer(request)
        assert (info.value.code(), info.value.details()) == (code, message)
        _still_serves(client, "grpc")
        client.unregister_system_shared_memory()


def test_raw_grpc_shm_inputs_consume_no_raw_contents(server: ServerHandle) -> None:
    client = grpcclient.InferenceServerClient(server.grpc_url)
    with client_region(64) as (handle, _, key), grpc.insecure_channel(server.grpc_url) as channel:
        _write(handle, np.array([1, 2, 3, 4], np.float32).tobytes())
        client.register_system_shared_memory("r", key, 64)
        request = _raw_infer_request()
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        response = stub.ModelInfer(request)
        assert np.frombuffer(response.raw_output_contents[0], np.float32).tolist() == [1, 2, 3, 4]
        request.raw_input_contents.append(b"\x00" * 16)  # belongs to no input: refused
        with pytest.raises(grpc.RpcError) as info:
            stub.ModelInfer(request)
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "1 raw_input_contents for 0 inputs that take raw data" in info.value.details()
        client.unregister_system_shared_memory()


# ------------------------------------------------------------------- lifetime of regions


def _server_maps(server: ServerHandle, key: str) -> bool:
    """Whether the server process has the shared-memory object ``key`` mapped."""
    maps = Path(f"/proc/{server.process.pid}/maps").read_text()
    return f"/dev/shm/{key.lstrip('/')}" in maps


def test_unregistering_a_region_in_use_waits_for_its_requests(
    server: ServerHandle, protocol: str
) -> None:
    client = _client(server, protocol)
    array = np.arange(8, dtype=np.float32).reshape(1, 8)
    with client_region(64) as (handle, name, key):
        shm.set_shared_memory_region(handle, [array])
        client.register_system_shared_memory(name, key, 64)
        assert _server_maps(server, key)
        results: list[Any] = []

        def infer() -> None:
            try:
                results.append(
                    _shm_infer(
                        _client(server, protocol),
                        protocol,
                        "slow_identity",
                        "FP32",
                        [1, 8],
                        (name, 32, 0),
                        (name, 32, 32),
                    )
                )
            except InferenceServerException as exc:
                results.append(exc)

        worker = threading.Thread(target=infer)
        worker.start()
        time.sleep(SLOW_DELAY_S / 3)  # the request is in the model now
        client.unregister_system_shared_memory(name)
        assert _status(client, protocol) == []
        assert _server_maps(server, key)  # still mapped: the request holds it
        # The name is free at once; the new region is another mapping.
        with client_region(64) as (_, _, other_key):
            client.register_system_shared_memory(name, other_key, 64)
            worker.join(30)
            assert not isinstance(results[0], InferenceServerException), results[0]
            assert shm.get_contents_as_numpy(handle, np.float32, [1, 8], 32).tolist() == (
                array.tolist()
            )
            deadline = time.monotonic() + 10
            while _server_maps(server, key) and time.monotonic() < deadline:
                time.sleep(0.05)
            assert not _server_maps(server, key)  # unmapped once the request let go
            assert _server_maps(server, other_key)
            client.unregister_system_shared_memory()
        assert not _server_maps(server, other_key)
    client.close()


# ---------------------------------------------------------- --allow-client-shm, CUDA, metadata


@pytest.fixture(scope="module")
def default_server(repository: Path) -> Iterator[ServerHandle]:
    """The server as started without --allow-client-shm: Triton 2.73's default, off."""
    with run_pytriton_server(repository) as handle:
        yield handle


def test_client_shm_is_off_by_default(default_server: ServerHandle, protocol: str) -> None:
    client = _client(default_server, protocol)
    status = "501" if protocol == "http" else "StatusCode.UNIMPLEMENTED"
    with client_region(64) as (_, name, key):
        assert _error(client.register_system_shared_memory, name, key, 64) == (
            status,
            CLIENT_SHM_DISABLED,
        )
        assert _error(client.unregister_system_shared_memory) == (status, CLIENT_SHM_DISABLED)
        assert _error(client.register_cuda_shared_memory, name, NULL_HANDLE, 0, 64) == (
            status,
            CLIENT_SHM_DISABLED,
        )
        assert _error(client.unregister_cuda_shared_memory) == (status, CLIENT_SHM_DISABLED)
    assert _status(client, protocol) == []  # status still works
    assert _error(
        _shm_infer, client, protocol, "dtype_fp32", "FP32", [1, 4], ("r", 16, 0), None
    ) == (_NOT_FOUND[protocol], "Unable to find shared memory region: 'r'")
    client.close()


def test_both_extensions_are_listed(server: ServerHandle) -> None:
    client = httpclient.InferenceServerClient(server.http_url)
    extensions = client.get_server_metadata()["extensions"]
    assert "system_shared_memory" in extensions
    assert "cuda_shared_memory" in extensions
    assert extensions.index("system_shared_memory") + 1 == extensions.index("cuda_shared_memory")


def _gpu_unsupported() -> bool:
    from pytriton_core.memory.cuda_shm import gpu_unavailable_reason

    return gpu_unavailable_reason() is not None


@pytest.mark.skipif(not _gpu_unsupported(), reason="a GPU is usable here: tests/gpu covers CUDA")
def test_cuda_registration_without_gpu_support(server: ServerHandle, protocol: str) -> None:
    expected = "failed to register CUDA shared memory region: 'c', GPUs not supported"
    if protocol == "http":
        body = {"raw_handle": {"b64": "A" * 88}, "device_id": 0, "byte_size": 64}
        assert _post(server, "/v2/cudasharedmemory/region/c/register", body) == (
            400,
            {"error": expected},
        )
    client = _client(server, protocol)
    assert _error(client.register_cuda_shared_memory, "c", NULL_HANDLE, 0, 64) == (
        _INVALID[protocol],
        expected,
    )
    client.close()
