"""The gRPC front end end to end, through Triton's own clients.

``tritonclient.grpc`` (sync and ``aio``, unary and streaming) against a server on free
loopback ports, checking exact values: every RPC of inference.GRPCInferenceService, infer
for every datatype with raw and typed contents, output subsets, streams of many requests,
errors inside a stream, decoupled models, compression, TLS and the standard health service.
Where tritonclient cannot express a request (typed ``contents``, raw stream messages), the
test talks to the server through tritonclient's generated stub.
"""

from __future__ import annotations

import asyncio
import json
import queue
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as aiogrpcclient
import tritonclient.http as httpclient
from harness import (
    DTYPE_CASES,
    EXAMPLES_REPOSITORY,
    LOOPBACK,
    TEST_MODELS_REPOSITORY,
    ServerError,
    ServerHandle,
    free_port,
    run_pytriton_server,
)
from tritonclient.grpc import service_pb2, service_pb2_grpc
from tritonclient.utils import InferenceServerException

from pytriton_core import Server, ServerOptions, __version__
from pytriton_core.memory import CLIENT_SHM_DISABLED
from pytriton_core.service import EXTENSIONS

REPOSITORIES = [TEST_MODELS_REPOSITORY, EXAMPLES_REPOSITORY]


@pytest.fixture(scope="module")
def server() -> Iterator[ServerHandle]:
    with run_pytriton_server(REPOSITORIES) as handle:
        yield handle


@pytest.fixture
def client(server: ServerHandle) -> Iterator[grpcclient.InferenceServerClient]:
    grpc_client = grpcclient.InferenceServerClient(server.grpc_url)
    yield grpc_client
    grpc_client.close()


@pytest.fixture
def stub(server: ServerHandle) -> Iterator[service_pb2_grpc.GRPCInferenceServiceStub]:
    channel = grpc.insecure_channel(server.grpc_url)
    yield service_pb2_grpc.GRPCInferenceServiceStub(channel)
    channel.close()


def _error(call: Any, *args: Any, **kwargs: Any) -> tuple[str, str]:
    """(status, message) of a call that must fail."""
    with pytest.raises(InferenceServerException) as info:
        call(*args, **kwargs)
    return str(info.value.status()), str(info.value.message())


def _input(name: str, array: np.ndarray, datatype: str) -> grpcclient.InferInput:
    tensor = grpcclient.InferInput(name, list(array.shape), datatype)
    tensor.set_data_from_numpy(array)
    return tensor


def _fp32_input(values: np.ndarray) -> list[grpcclient.InferInput]:
    return [_input("INPUT0", values.astype(np.float32), "FP32")]


# ------------------------------------------------------------------- health and metadata


def test_server_live_ready_and_metadata(client: grpcclient.InferenceServerClient) -> None:
    assert client.is_server_live() is True
    assert client.is_server_ready() is True
    metadata = client.get_server_metadata(as_json=True)
    assert metadata == {
        "name": "triton",
        "version": __version__,
        "extensions": list(EXTENSIONS),
    }


def test_server_metadata_matches_http(
    client: grpcclient.InferenceServerClient, server: ServerHandle
) -> None:
    http = httpclient.InferenceServerClient(server.http_url)
    assert client.get_server_metadata(as_json=True) == http.get_server_metadata()


def test_model_ready(client: grpcclient.InferenceServerClient) -> None:
    assert client.is_model_ready("identity_fp32") is True
    assert client.is_model_ready("versioned", "1") is True
    assert client.is_model_ready("versioned", "2") is True
    assert client.is_model_ready("versioned", "3") is False
    assert client.is_model_ready("no_such_model") is False
    assert _error(client.is_model_ready, "versioned", "v1") == (
        "StatusCode.INVALID_ARGUMENT",
        "failed to get model version from specified version string 'v1' (details: stoll)",
    )


def test_model_metadata(client: grpcclient.InferenceServerClient) -> None:
    metadata = client.get_model_metadata("identity_fp32")
    assert metadata.name == "identity_fp32"
    assert list(metadata.versions) == ["1"]
    assert metadata.platform == "python"
    assert [(t.name, t.datatype, list(t.shape)) for t in metadata.inputs] == [
        ("INPUT0", "FP32", [-1, -1])
    ]
    assert [(t.name, t.datatype, list(t.shape)) for t in metadata.outputs] == [
        ("OUTPUT0", "FP32", [-1, -1])
    ]
    versioned = client.get_model_metadata("versioned")
    assert list(versioned.versions) == ["1", "2"]
    assert list(client.get_model_metadata("versioned", "2").versions) == ["2"]
    assert _error(client.get_model_metadata, "versioned", "7") == (
        "StatusCode.NOT_FOUND",
        "Request for unknown model: 'versioned' version 7 is not found",
    )


def test_model_config(client: grpcclient.InferenceServerClient, server: ServerHandle) -> None:
    config = client.get_model_config("classifier").config
    assert config.name == "classifier"
    assert config.backend == "python"
    assert config.max_batch_size == 8
    assert [(i.name, i.data_type, list(i.dims)) for i in config.input] == [
        ("INPUT0", 11, [5])  # TYPE_FP32
    ]
    assert [o.label_filename for o in config.output] == ["labels.txt", ""]
    # The same document as HTTP's, field for field (JSON writes int64 as strings).
    http = httpclient.InferenceServerClient(server.http_url)
    grpc_json = client.get_model_config("classifier", as_json=True)["config"]
    http_json = http.get_model_config("classifier")
    assert grpc_json["name"] == http_json["name"]
    assert grpc_json["input"][0]["dims"] == [str(d) for d in http_json["input"][0]["dims"]]
    assert grpc_json["output"][0]["label_filename"] == http_json["output"][0]["label_filename"]


def test_model_statistics_count_inferences(client: grpcclient.InferenceServerClient) -> None:
    def count() -> int:
        stats = client.get_inference_statistics("dtype_int16").model_stats
        assert [(s.name, s.version) for s in stats] == [("dtype_int16", "1")]
        return int(stats[0].inference_count)

    before = count()
    for _ in range(3):
        client.infer("dtype_int16", [_input("INPUT0", np.ones((2, 3), np.int16), "INT16")])
    assert count() == before + 2 * 3
    everything = client.get_inference_statistics().model_stats
    assert "dtype_int16" in {s.name for s in everything}
    assert _error(client.get_inference_statistics, "no_such_model") == (
        "StatusCode.INVALID_ARGUMENT",
        "requested model 'no_such_model' is not available",
    )


# ---------------------------------------------------------------------- model repository


def test_repository_index_matches_http(
    client: grpcclient.InferenceServerClient, server: ServerHandle
) -> None:
    index = client.get_model_repository_index(as_json=True)["models"]
    http = httpclient.InferenceServerClient(server.http_url).get_model_repository_index()
    assert index == http
    assert {"name": "identity_fp32", "version": "1", "state": "READY"} in index


def test_repository_index_refuses_a_named_repository(
    stub: service_pb2_grpc.GRPCInferenceServiceStub,
) -> None:
    with pytest.raises(grpc.RpcError) as info:
        stub.RepositoryIndex(service_pb2.RepositoryIndexRequest(repository_name="other"))
    assert info.value.code() == grpc.StatusCode.UNIMPLEMENTED
    assert info.value.details() == "'repository_name' specification is not supported"


def test_load_and_unload_refused_without_explicit_mode(
    client: grpcclient.InferenceServerClient,
) -> None:
    refused = (
        "StatusCode.UNAVAILABLE",
        "explicit model load / unload is not allowed if polling is enabled",
    )
    assert _error(client.load_model, "identity_fp32") == refused
    assert _error(client.unload_model, "identity_fp32") == refused


def test_load_and_unload_in_explicit_mode() -> None:
    flags = ("--model-control-mode=explicit", "--load-model=identity_fp32")
    with run_pytriton_server(EXAMPLES_REPOSITORY, *flags) as server:
        client = grpcclient.InferenceServerClient(server.grpc_url)

        def states() -> dict[str, str | None]:
            index = client.get_model_repository_index(as_json=True)["models"]
            return {m["name"]: m.get("state") for m in index}

        assert states() == {"add_sub": None, "identity_fp32": "READY", "string_identity": None}
        client.unload_model("identity_fp32")
        assert client.is_model_ready("identity_fp32") is False
        client.load_model("string_identity")
        assert client.is_model_ready("string_identity") is True
        assert states()["identity_fp32"] == "UNAVAILABLE"
        client.unload_model("string_identity", unload_dependents=True)
        client.load_model("identity_fp32")
        assert states() == {
            "add_sub": None,
            "identity_fp32": "READY",
            "string_identity": "UNAVAILABLE",
        }
        assert _infer_once(client) == [[2.5, 2.5]]
        client.close()


@pytest.mark.parametrize(
    "call", ["unregister_system_shared_memory", "unregister_cuda_shared_memory"]
)
def test_client_shared_memory_is_off_by_default(
    client: grpcclient.InferenceServerClient, call: str
) -> None:
    # Triton 2.73's default (--allow-client-shm=false); status still answers.
    assert _error(getattr(client, call)) == ("StatusCode.UNIMPLEMENTED", CLIENT_SHM_DISABLED)
    assert client.get_system_shared_memory_status(as_json=True) == {}
    assert client.get_cuda_shared_memory_status(as_json=True) == {}


def test_shared_memory_register_answers_unimplemented(
    stub: service_pb2_grpc.GRPCInferenceServiceStub,
) -> None:
    for call, request in (
        (stub.SystemSharedMemoryRegister, service_pb2.SystemSharedMemoryRegisterRequest()),
        (stub.CudaSharedMemoryRegister, service_pb2.CudaSharedMemoryRegisterRequest()),
    ):
        with pytest.raises(grpc.RpcError) as info:
            call(request)
        assert info.value.code() == grpc.StatusCode.UNIMPLEMENTED


# ----------------------------------------------------------------------------------- infer


def _model_for(datatype: str) -> str:
    return f"dtype_{datatype.lower()}"


@pytest.mark.parametrize("datatype", sorted(DTYPE_CASES))
def test_infer_every_datatype_raw(client: grpcclient.InferenceServerClient, datatype: str) -> None:
    array = DTYPE_CASES[datatype]
    result = client.infer(_model_for(datatype), [_input("INPUT0", array, datatype)])
    output = result.as_numpy("OUTPUT0")
    assert output.shape == array.shape
    assert output.tolist() == array.tolist()
    response = result.get_response()
    assert [(o.name, o.datatype, list(o.shape)) for o in response.outputs] == [
        ("OUTPUT0", datatype, list(array.shape))
    ]
    assert len(response.raw_output_contents) == 1


# Typed contents field per datatype, and how values are written into it.
CONTENTS_FIELDS = {
    "BOOL": "bool_contents",
    "UINT8": "uint_contents",
    "UINT16": "uint_contents",
    "UINT32": "uint_contents",
    "UINT64": "uint64_contents",
    "INT8": "int_contents",
    "INT16": "int_contents",
    "INT32": "int_contents",
    "INT64": "int64_contents",
    "FP32": "fp32_contents",
    "FP64": "fp64_contents",
    "BYTES": "bytes_contents",
}


def _typed_request(model: str, datatype: str, array: np.ndarray) -> service_pb2.ModelInferRequest:
    request = service_pb2.ModelInferRequest(model_name=model, id="typed")
    tensor = request.inputs.add(name="INPUT0", datatype=datatype, shape=list(array.shape))
    field = CONTENTS_FIELDS.get(datatype, "fp32_contents")
    values = array.reshape(-1).tolist()
    getattr(tensor.contents, field).extend(values)
    return request


@pytest.mark.parametrize("datatype", sorted(CONTENTS_FIELDS))
def test_infer_every_datatype_typed_contents(
    stub: service_pb2_grpc.GRPCInferenceServiceStub, datatype: str
) -> None:
    array = DTYPE_CASES[datatype]
    response = stub.ModelInfer(_typed_request(_model_for(datatype), datatype, array))
    assert response.id == "typed"
    output = grpcclient.InferResult(response).as_numpy("OUTPUT0")
    assert output.tolist() == array.tolist()


@pytest.mark.parametrize("datatype", ["FP16", "BF16"])
def test_typed_contents_refused_for_half_precision(
    stub: service_pb2_grpc.GRPCInferenceServiceStub, datatype: str
) -> None:
    request = _typed_request(_model_for(datatype), datatype, DTYPE_CASES[datatype])
    with pytest.raises(grpc.RpcError) as info:
        stub.ModelInfer(request)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert info.value.details() == (
        f"unexpected explicit tensor data for input tensor 'INPUT0' for model "
        f"'{_model_for(datatype)}' of type 'FP32', expected datatype '{datatype}'"
    )


def test_typed_contents_narrow_small_integers(
    stub: service_pb2_grpc.GRPCInferenceServiceStub,
) -> None:
    request = service_pb2.ModelInferRequest(model_name="dtype_int8")
    tensor = request.inputs.add(name="INPUT0", datatype="INT8", shape=[1, 2])
    tensor.contents.int_contents.extend([-1, 127])
    output = grpcclient.InferResult(stub.ModelInfer(request)).as_numpy("OUTPUT0")
    assert output.dtype == np.int8
    assert output.tolist() == [[-1, 127]]


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (
            lambda r: r.raw_input_contents.append(b"\x00" * 12),
            "contents field must not be specified when using raw_input_contents for 'INPUT0' "
            "for model 'dtype_fp32'",
        ),
        (
            lambda r: (
                r.inputs[0].contents.ClearField("fp32_contents")
                or r.inputs[0].ClearField("contents")
            ),
            "unable to find data for input tensor 'INPUT0' for model 'dtype_fp32' in request.",
        ),
        (
            lambda r: r.inputs[0].contents.fp32_contents.append(1.0),
            "[request id: typed] input byte size mismatch for input 'INPUT0' for model "
            "'dtype_fp32'. Expected 12, got 16",
        ),
        (
            lambda r: r.inputs[0].contents.int_contents.append(1),
            "unexpected explicit tensor data for input tensor 'INPUT0' for model 'dtype_fp32' "
            "of type 'INT32', expected datatype 'FP32'",
        ),
        (
            lambda r: r.parameters["triton_other"].CopyFrom(service_pb2.InferParameter()),
            "parameter keys starting with 'triton_' are reserved for Triton usage. Only the "
            "following keys starting with 'triton_' are allowed: "
            "triton_enable_empty_final_response",
        ),
        (
            lambda r: r.parameters["sequence_start"].CopyFrom(
                service_pb2.InferParameter(int64_param=1)
            ),
            # Triton's gRPC front end checks the parameter's kind.
            "invalid value type for 'sequence_start' parameter, expected bool_param.",
        ),
        (
            lambda r: r.parameters["timeout"].CopyFrom(service_pb2.InferParameter(int64_param=-1)),
            "Unable to parse 'timeout', expecting an unsigned integer",
        ),
        (
            lambda r: (
                r.outputs.add(name="OUTPUT0")
                .parameters["classification"]
                .CopyFrom(service_pb2.InferParameter(string_param="x"))
            ),
            "Unable to parse 'classification' for output 'OUTPUT0'",
        ),
        (
            lambda r: setattr(r.inputs[0], "datatype", "FLOAT"),
            "invalid datatype for input INPUT0",
        ),
    ],
)
def test_infer_request_errors(
    stub: service_pb2_grpc.GRPCInferenceServiceStub, mutate: Any, message: str
) -> None:
    request = _typed_request("dtype_fp32", "FP32", np.array([[1.0, 2.0, 3.0]], np.float32))
    mutate(request)
    with pytest.raises(grpc.RpcError) as info:
        stub.ModelInfer(request)
    assert (info.value.code(), info.value.details()) == (grpc.StatusCode.INVALID_ARGUMENT, message)


def test_malformed_message_is_an_invalid_argument(server: ServerHandle) -> None:
    channel = grpc.insecure_channel(server.grpc_url)
    infer = channel.unary_unary("/inference.GRPCInferenceService/ModelInfer")
    with pytest.raises(grpc.RpcError) as info:
        infer(b"\x3a\xff\xff\xff\x0f")  # raw_input_contents announcing 4 GB that never come
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert info.value.details().startswith("failed to parse the ModelInferRequest")
    channel.close()


def test_raw_inputs_beyond_the_inputs_are_refused(
    stub: service_pb2_grpc.GRPCInferenceServiceStub,
) -> None:
    """More raw_input_contents than inputs is INVALID_ARGUMENT, as too few is (Triton 2.51
    ignores the spare ones silently)."""
    request = service_pb2.ModelInferRequest(model_name="dtype_int32")
    request.inputs.add(name="INPUT0", datatype="INT32", shape=[1, 2])
    request.raw_input_contents.append(np.array([7, 8], np.int32).tobytes())
    request.raw_input_contents.append(b"spare")
    with pytest.raises(grpc.RpcError) as info:
        stub.ModelInfer(request)
    assert (info.value.code(), info.value.details()) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        "unexpected additional input data for model 'dtype_int32': 2 raw_input_contents for "
        "1 inputs that take raw data",
    )
    del request.raw_input_contents[1]
    output = grpcclient.InferResult(stub.ModelInfer(request)).as_numpy("OUTPUT0")
    assert output.tolist() == [[7, 8]]


def test_request_id_and_model_version_echoed(client: grpcclient.InferenceServerClient) -> None:
    value = np.array([5], np.int32)
    result = client.infer(
        "versioned", [_input("INPUT0", value, "INT32")], model_version="1", request_id="id-42"
    )
    response = result.get_response()
    assert (response.id, response.model_name, response.model_version) == ("id-42", "versioned", "1")
    assert result.as_numpy("OUTPUT0").tolist() == [1]
    latest = client.infer("versioned", [_input("INPUT0", value, "INT32")]).get_response()
    assert (latest.id, latest.model_version) == ("", "2")


def test_output_subset(client: grpcclient.InferenceServerClient) -> None:
    data = np.array([1, 2, 3], np.int32)
    outputs = [
        grpcclient.InferRequestedOutput("OUTPUT2"),
        grpcclient.InferRequestedOutput("OUTPUT0"),
    ]
    result = client.infer("output_subset", [_input("INPUT0", data, "INT32")], outputs=outputs)
    response = result.get_response()
    names = [o.name for o in response.outputs]
    assert sorted(names) == ["OUTPUT0", "OUTPUT2"]
    assert len(response.raw_output_contents) == len(names)
    assert result.as_numpy("OUTPUT0").tolist() == [1, 2, 3]
    assert result.as_numpy("OUTPUT2").tolist() == [0.5, 1.0, 1.5]
    assert result.as_numpy("OUTPUT1") is None
    every = client.infer("output_subset", [_input("INPUT0", data, "INT32")])
    assert [o.name for o in every.get_response().outputs] == ["OUTPUT0", "OUTPUT1", "OUTPUT2"]
    assert every.as_numpy("OUTPUT1").tolist() == [2, 4, 6]


def test_classification(client: grpcclient.InferenceServerClient) -> None:
    scores = np.array([[0.1, 0.7, 0.2, 0.0, 0.5]], np.float32)
    outputs = [grpcclient.InferRequestedOutput("OUTPUT0", class_count=2)]
    result = client.infer("classifier", [_input("INPUT0", scores, "FP32")], outputs=outputs)
    assert result.as_numpy("OUTPUT0").tolist() == [[b"0.700000:1:dog", b"0.500000:4:horse"]]
    assert result.get_response().outputs[0].datatype == "BYTES"


def test_request_parameters_reach_the_model(client: grpcclient.InferenceServerClient) -> None:
    key = np.array([b"flag"], np.object_)
    parameters = {"flag": True, "count": 3, "name": "x", "ratio": 0.5}
    result = client.infer(
        "request_parameters",
        [_input("KEY", key, "BYTES")],
        parameters=parameters,
        sequence_id=0,
        priority=1,
        timeout=1_000_000,
    )
    assert json.loads(result.as_numpy("VALUE")[0]) is True
    assert json.loads(result.as_numpy("ALL")[0]) == parameters


def test_large_tensor_beyond_the_default_message_limit(
    client: grpcclient.InferenceServerClient,
) -> None:
    array = np.arange(8 * 1024 * 1024, dtype=np.float32).reshape(1, -1)  # 32 MiB each way
    result = client.infer("dtype_fp32", [_input("INPUT0", array, "FP32")])
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), array)


@pytest.mark.parametrize(
    ("model", "values", "status", "message"),
    [
        (
            "no_such_model",
            np.zeros((1, 2)),
            "StatusCode.NOT_FOUND",
            "Request for unknown model: 'no_such_model' is not found",
        ),
        (
            "classifier",
            np.zeros((1, 4)),
            "StatusCode.INVALID_ARGUMENT",
            "[request id: <id_unknown>] unexpected shape for input 'INPUT0' for model "
            "'classifier'. Expected [-1,5], got [1,4]. NOTE: Setting a non-zero "
            "max_batch_size in the model config requires a batch dimension",
        ),
    ],
)
def test_infer_errors(
    client: grpcclient.InferenceServerClient,
    model: str,
    values: np.ndarray,
    status: str,
    message: str,
) -> None:
    got_status, got_message = _error(client.infer, model, _fp32_input(values))
    assert got_status == status
    assert got_message.startswith(message)


def test_model_exception_is_an_internal_error(client: grpcclient.InferenceServerClient) -> None:
    status, message = _error(client.infer, "raise_error", _fp32_input(np.array([-1.0])))
    assert status == "StatusCode.INTERNAL"
    # The wording around the model's own message is the core's (and the same over HTTP).
    assert "ValueError: INPUT0 must not be negative" in message


# Triton's error codes as a model returns them, and the gRPC status each maps to.
ERROR_CODES = {
    "UNKNOWN": "UNKNOWN",
    "INTERNAL": "INTERNAL",
    "NOT_FOUND": "NOT_FOUND",
    "INVALID_ARG": "INVALID_ARGUMENT",
    "UNAVAILABLE": "UNAVAILABLE",
    "UNSUPPORTED": "UNIMPLEMENTED",
    "ALREADY_EXISTS": "ALREADY_EXISTS",
    "CANCELLED": "CANCELLED",
}


@pytest.mark.parametrize("code", sorted(ERROR_CODES))
def test_model_error_codes_map_to_grpc_status(
    client: grpcclient.InferenceServerClient, code: str
) -> None:
    status, message = _error(
        client.infer, "triton_error", _fp32_input(np.array([1.0])), parameters={"error_code": code}
    )
    assert status == f"StatusCode.{ERROR_CODES[code]}"
    assert message.endswith(f"error requested with code {code}")


def test_unary_infer_refuses_decoupled_models(client: grpcclient.InferenceServerClient) -> None:
    inputs = [_input("IN", np.array([1], np.int32), "INT32")]
    assert _error(client.infer, "decoupled_repeat", inputs) == (
        "StatusCode.UNIMPLEMENTED",
        "ModelInfer RPC doesn't support models with decoupled transaction policy",
    )


def test_request_compression(client: grpcclient.InferenceServerClient) -> None:
    array = np.zeros((1, 4096), np.float32)
    for algorithm in ("gzip", "deflate"):
        result = client.infer(
            "dtype_fp32", [_input("INPUT0", array, "FP32")], compression_algorithm=algorithm
        )
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), array)


# ------------------------------------------------------------------------------ streaming


class StreamCollector:
    """A ``start_stream`` callback that queues (result, error) pairs."""

    def __init__(self) -> None:
        self.items: queue.Queue[tuple[Any, Any]] = queue.Queue()

    def __call__(self, result: Any, error: Any) -> None:
        self.items.put((result, error))

    def take(self, count: int, timeout: float = 30.0) -> list[tuple[Any, Any]]:
        return [self.items.get(timeout=timeout) for _ in range(count)]

    def assert_empty(self, wait: float = 0.3) -> None:
        with pytest.raises(queue.Empty):
            self.items.get(timeout=wait)


def _final_flag(result: Any) -> bool:
    return bool(result.get_response().parameters["triton_final_response"].bool_param)


def test_stream_of_100_requests_answered_with_their_ids(
    client: grpcclient.InferenceServerClient,
) -> None:
    collector = StreamCollector()
    client.start_stream(collector)
    for i in range(100):
        values = np.full((1, 4), float(i), np.float32)
        client.async_stream_infer("identity_fp32", _fp32_input(values), request_id=f"req-{i}")
    items = collector.take(100)
    client.stop_stream()
    seen = {}
    for result, error in items:
        assert error is None
        response = result.get_response()
        assert response.model_name == "identity_fp32"
        assert _final_flag(result) is True
        seen[response.id] = result.as_numpy("OUTPUT0").tolist()
    assert seen == {f"req-{i}": [[float(i)] * 4] for i in range(100)}


def test_errors_inside_a_stream_keep_it_open(client: grpcclient.InferenceServerClient) -> None:
    collector = StreamCollector()
    client.start_stream(collector)
    client.async_stream_infer("no_such_model", _fp32_input(np.zeros((1, 2))), request_id="a")
    client.async_stream_infer("classifier", _fp32_input(np.zeros((1, 4))), request_id="b")
    client.async_stream_infer("raise_error", _fp32_input(np.array([-1.0])), request_id="c")
    client.async_stream_infer("identity_fp32", _fp32_input(np.ones((1, 2))), request_id="d")
    items = collector.take(4)
    client.stop_stream()
    errors = sorted(str(error.message()) for _, error in items if error is not None)
    assert len(errors) == 3
    assert errors[1:] == [
        "Request for unknown model: 'no_such_model' is not found",
        "[request id: b] unexpected shape for input 'INPUT0' for model 'classifier'. "
        "Expected [-1,5], got [1,4]. NOTE: Setting a non-zero max_batch_size in the model "
        "config requires a batch dimension to be prepended to each input shape. If you want to "
        "specify the full shape including the batch dim in your input dims config, try setting "
        "max_batch_size to zero. See the model configuration docs for more info on "
        "max_batch_size.",
    ]
    assert "ValueError: INPUT0 must not be negative" in errors[0]
    results = [result for result, error in items if error is None]
    assert [r.get_response().id for r in results] == ["d"]


def _stream_message(model: str, request_id: str, values: np.ndarray) -> Any:
    request = service_pb2.ModelInferRequest(model_name=model, id=request_id)
    request.inputs.add(name="INPUT0", datatype="FP32", shape=list(values.shape))
    request.raw_input_contents.append(values.astype(np.float32).tobytes())
    return request


def test_stream_errors_carry_the_request_id(
    stub: service_pb2_grpc.GRPCInferenceServiceStub,
) -> None:
    requests = [
        _stream_message("no_such_model", "unknown", np.zeros((1, 2))),
        _stream_message("raise_error", "raises", np.array([-1.0])),
    ]
    responses = list(stub.ModelStreamInfer(iter(requests)))
    by_id = {r.infer_response.id: r for r in responses}
    unknown = by_id["unknown"]
    assert unknown.error_message == "Request for unknown model: 'no_such_model' is not found"
    expected = service_pb2.ModelInferResponse(id="unknown")
    expected.parameters["triton_final_response"].bool_param = True
    assert unknown.infer_response == expected
    raises = by_id["raises"]
    assert "ValueError: INPUT0 must not be negative" in raises.error_message
    assert raises.infer_response.model_name == "raise_error"
    assert raises.infer_response.parameters["triton_final_response"].bool_param is True
    assert not raises.infer_response.outputs


def test_grpc_error_header_ends_the_stream_with_a_status(
    client: grpcclient.InferenceServerClient,
) -> None:
    collector = StreamCollector()
    client.start_stream(collector, headers={"triton_grpc_error": "true"})
    client.async_stream_infer("identity_fp32", _fp32_input(np.ones((1, 2))), request_id="ok")
    ok, no_error = collector.take(1)[0]
    assert no_error is None and ok.get_response().id == "ok"
    client.async_stream_infer("no_such_model", _fp32_input(np.ones((1, 2))))
    _, error = collector.take(1)[0]
    assert str(error.status()) == "StatusCode.NOT_FOUND"
    assert str(error.message()) == "Request for unknown model: 'no_such_model' is not found"
    client.stop_stream()


def _decoupled_input(values: list[int]) -> list[grpcclient.InferInput]:
    return [_input("IN", np.array(values, np.int32), "INT32")]


def test_decoupled_stream_sends_every_response(client: grpcclient.InferenceServerClient) -> None:
    collector = StreamCollector()
    client.start_stream(collector)
    client.async_stream_infer("decoupled_repeat", _decoupled_input([5, 6, 7]), request_id="r")
    items = collector.take(3)
    collector.assert_empty()  # the flag-only FINAL is not sent by default
    client.stop_stream()
    assert [error for _, error in items] == [None] * 3
    assert [r.as_numpy("OUT").tolist() for r, _ in items] == [[5], [6], [7]]
    assert [r.as_numpy("INDEX").tolist() for r, _ in items] == [[0], [1], [2]]
    assert [_final_flag(r) for r, _ in items] == [False, False, False]
    assert {r.get_response().id for r, _ in items} == {"r"}


def test_decoupled_empty_final_response(client: grpcclient.InferenceServerClient) -> None:
    collector = StreamCollector()
    client.start_stream(collector)
    client.async_stream_infer(
        "decoupled_repeat",
        _decoupled_input([1, 2]),
        request_id="e",
        enable_empty_final_response=True,
    )
    items = collector.take(3)
    client.stop_stream()
    assert [_final_flag(r) for r, _ in items] == [False, False, True]
    last = items[-1][0].get_response()
    assert (last.id, last.model_name, last.model_version) == ("e", "decoupled_repeat", "")
    assert not last.outputs and not last.raw_output_contents


def test_decoupled_final_with_last_and_zero_responses(
    client: grpcclient.InferenceServerClient,
) -> None:
    collector = StreamCollector()
    client.start_stream(collector)
    client.async_stream_infer(
        "decoupled_repeat", _decoupled_input([4, 9]), parameters={"final_with_last": True}
    )
    assert [_final_flag(r) for r, _ in collector.take(2)] == [False, True]
    client.async_stream_infer(
        "decoupled_repeat", _decoupled_input([]), enable_empty_final_response=True
    )
    ((empty, error),) = collector.take(1)
    assert error is None and _final_flag(empty) is True
    client.stop_stream()


def test_decoupled_error_response_inside_the_stream(
    client: grpcclient.InferenceServerClient,
) -> None:
    collector = StreamCollector()
    client.start_stream(collector)
    client.async_stream_infer(
        "decoupled_repeat", _decoupled_input([1, 2, 3]), parameters={"fail_at": 1}
    )
    items = collector.take(3)
    client.stop_stream()
    assert items[0][0].as_numpy("OUT").tolist() == [1]
    assert items[1][0] is None and str(items[1][1].message()) == "failed at index 1"
    assert items[2][0].as_numpy("OUT").tolist() == [3]


def test_many_decoupled_requests_interleave_on_one_stream(
    client: grpcclient.InferenceServerClient,
) -> None:
    collector = StreamCollector()
    client.start_stream(collector)
    for i in range(10):
        client.async_stream_infer(
            "decoupled_repeat", _decoupled_input([i, i, i]), request_id=str(i)
        )
    items = collector.take(30)
    client.stop_stream()
    per_request: dict[str, list[int]] = {}
    for result, error in items:
        assert error is None
        per_request.setdefault(result.get_response().id, []).append(int(result.as_numpy("OUT")[0]))
    assert per_request == {str(i): [i, i, i] for i in range(10)}


def test_cancelled_stream_and_deadlines_leave_the_server_serving(
    client: grpcclient.InferenceServerClient, server: ServerHandle
) -> None:
    collector = StreamCollector()
    client.start_stream(collector)
    client.async_stream_infer(
        "decoupled_repeat", _decoupled_input(list(range(10))), parameters={"delay_ms": 50}
    )
    first, error = collector.take(1)[0]
    assert error is None and first.as_numpy("OUT").tolist() == [0]
    client.stop_stream(cancel_requests=True)
    collector = StreamCollector()
    client.start_stream(collector, stream_timeout=1.5)  # a deadline that runs out mid-way
    client.async_stream_infer(
        "decoupled_repeat", _decoupled_input(list(range(30))), parameters={"delay_ms": 100}
    )
    items = [collector.items.get(timeout=30)]
    while items[-1][1] is None:
        items.append(collector.items.get(timeout=30))
    assert len(items) > 1 and all(error is None for _, error in items[:-1])
    assert str(items[-1][1].status()) == "StatusCode.DEADLINE_EXCEEDED"
    client.stop_stream()
    assert _infer_once(client) == [[2.5, 2.5]]
    collector = StreamCollector()
    client.start_stream(collector)
    client.async_stream_infer("decoupled_repeat", _decoupled_input([8]), request_id="after")
    ((result, error),) = collector.take(1)
    assert error is None and result.get_response().id == "after"
    client.stop_stream()
    assert "Traceback" not in server.log()


# ------------------------------------------------------------------------------------ aio


def test_aio_client(server: ServerHandle) -> None:
    async def scenario() -> None:
        client = aiogrpcclient.InferenceServerClient(server.grpc_url)
        try:
            assert await client.is_server_live() is True
            assert await client.is_model_ready("identity_fp32") is True
            metadata = await client.get_model_metadata("string_identity", as_json=True)
            assert metadata["name"] == "string_identity"
            strings = np.array([b"a", b"bc"], np.object_)
            result = await client.infer(
                "string_identity", [_input("INPUT0", strings, "BYTES")], request_id="aio"
            )
            assert result.as_numpy("OUTPUT0").tolist() == [b"a", b"bc"]
            assert result.get_response().id == "aio"
            results = await asyncio.gather(
                *(
                    client.infer("identity_fp32", _fp32_input(np.full((1, 3), float(i))))
                    for i in range(20)
                )
            )
            assert [r.as_numpy("OUTPUT0")[0, 0] for r in results] == [float(i) for i in range(20)]

            async def requests() -> Any:
                for i in range(50):
                    yield {
                        "model_name": "identity_fp32",
                        "inputs": _fp32_input(np.full((1, 2), float(i))),
                        "request_id": f"s{i}",
                    }

            seen = {}
            async for result, error in client.stream_infer(requests()):
                assert error is None
                seen[result.get_response().id] = float(result.as_numpy("OUTPUT0")[0, 0])
                if len(seen) == 50:
                    break
            assert seen == {f"s{i}": float(i) for i in range(50)}
        finally:
            await client.close()

    asyncio.run(scenario())


# --------------------------------------------------------------------------- health service


def test_grpc_health_check(server: ServerHandle) -> None:
    health_pb2 = pytest.importorskip("grpc_health.v1.health_pb2")
    health_pb2_grpc = pytest.importorskip("grpc_health.v1.health_pb2_grpc")
    with grpc.insecure_channel(server.grpc_url) as channel:
        health = health_pb2_grpc.HealthStub(channel)
        response = health.Check(health_pb2.HealthCheckRequest(service="anything"))
        assert response.status == health_pb2.HealthCheckResponse.SERVING
        with pytest.raises(grpc.RpcError) as info:
            next(iter(health.Watch(health_pb2.HealthCheckRequest())))
        assert info.value.code() == grpc.StatusCode.UNIMPLEMENTED


def test_health_not_serving_while_a_model_is_not_ready(tmp_path: Path) -> None:
    """Strict readiness and a model that failed to load: Check answers NOT_SERVING."""
    health_pb2 = pytest.importorskip("grpc_health.v1.health_pb2")
    health_pb2_grpc = pytest.importorskip("grpc_health.v1.health_pb2_grpc")
    broken = tmp_path / "broken"
    (broken / "1").mkdir(parents=True)
    (broken / "config.pbtxt").write_text('name: "broken"\nbackend: "python"\n')
    (broken / "1" / "model.py").write_text("raise RuntimeError('cannot load')\n")
    port = free_port()
    options = ServerOptions(
        model_repositories=(tmp_path,),
        allow_http=False,
        allow_metrics=False,
        grpc_address=LOOPBACK,
        grpc_port=port,
        exit_on_error=False,
    )
    with Server(options), grpc.insecure_channel(f"{LOOPBACK}:{port}") as channel:
        response = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest())
        assert response.status == health_pb2.HealthCheckResponse.NOT_SERVING


# -------------------------------------------------------------- transport: compression, TLS


class CountingProxy:
    """A TCP forwarder on a free loopback port that counts the bytes flowing each way."""

    def __init__(self, target_port: int) -> None:
        self._target_port = target_port
        self._listener = socket.create_server((LOOPBACK, 0))
        self.port = self._listener.getsockname()[1]
        self.to_client = 0
        self.to_server = 0
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            upstream = socket.create_connection((LOOPBACK, self._target_port))
            threading.Thread(target=self._pump, args=(client, upstream, False), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client, True), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket, to_client: bool) -> None:
        try:
            while data := source.recv(1 << 16):
                with self._lock:
                    if to_client:
                        self.to_client += len(data)
                    else:
                        self.to_server += len(data)
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (source, sink):
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self) -> None:
        self._listener.close()


def _bytes_to_client(grpc_port: int, array: np.ndarray) -> int:
    proxy = CountingProxy(grpc_port)
    client = grpcclient.InferenceServerClient(f"{LOOPBACK}:{proxy.port}")
    result = client.infer("dtype_fp32", [_input("INPUT0", array, "FP32")])
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), array)
    client.close()
    proxy.close()
    return proxy.to_client


def test_response_compression_level(server: ServerHandle) -> None:
    zeros = np.zeros((1, 1024 * 1024), np.float32)  # 4 MiB that compress to almost nothing
    plain = _bytes_to_client(int(server.grpc_url.rsplit(":", 1)[1]), zeros)
    assert plain > zeros.nbytes
    flags = (
        "--grpc-infer-response-compression-level=high",
        # The transport flags are accepted together (and keep the server serving).
        "--grpc-keepalive-time=10000",
        "--grpc-keepalive-timeout=5000",
        "--grpc-keepalive-permit-without-calls=true",
        "--grpc-http2-max-pings-without-data=0",
        "--grpc-http2-min-recv-ping-interval-without-data=1000",
        "--grpc-http2-max-ping-strikes=0",
        "--grpc-max-connection-age=60000",
        "--grpc-max-connection-age-grace=5000",
        "--grpc-infer-allocation-pool-size=16",
    )
    with run_pytriton_server(TEST_MODELS_REPOSITORY, *flags) as compressing:
        compressed = _bytes_to_client(int(compressing.grpc_url.rsplit(":", 1)[1]), zeros)
    assert compressed < zeros.nbytes // 20


def _infer_once(client: grpcclient.InferenceServerClient) -> list[list[float]]:
    result = client.infer("identity_fp32", _fp32_input(np.full((1, 2), 2.5)))
    return result.as_numpy("OUTPUT0").tolist()  # type: ignore[no-any-return]


def test_tls(certificates: dict[str, Path]) -> None:
    certs = certificates
    flags = (
        "--grpc-use-ssl=true",
        f"--grpc-server-cert={certs['server_cert']}",
        f"--grpc-server-key={certs['server_key']}",
    )
    with run_pytriton_server(EXAMPLES_REPOSITORY, *flags) as server:
        secure = grpcclient.InferenceServerClient(
            server.grpc_url, ssl=True, root_certificates=str(certs["ca"])
        )
        assert secure.is_server_ready() is True
        assert _infer_once(secure) == [[2.5, 2.5]]
        secure.close()
        plain = grpcclient.InferenceServerClient(server.grpc_url)
        with pytest.raises(InferenceServerException):
            plain.is_server_live(client_timeout=5)
        plain.close()


def test_mutual_tls(certificates: dict[str, Path]) -> None:
    certs = certificates
    flags = (
        "--grpc-use-ssl-mutual=true",
        f"--grpc-server-cert={certs['server_cert']}",
        f"--grpc-server-key={certs['server_key']}",
        f"--grpc-root-cert={certs['ca']}",
    )
    with run_pytriton_server(EXAMPLES_REPOSITORY, *flags) as server:
        with_certificate = grpcclient.InferenceServerClient(
            server.grpc_url,
            ssl=True,
            root_certificates=str(certs["ca"]),
            private_key=str(certs["client_key"]),
            certificate_chain=str(certs["client_cert"]),
        )
        assert _infer_once(with_certificate) == [[2.5, 2.5]]
        with_certificate.close()
        without = grpcclient.InferenceServerClient(
            server.grpc_url, ssl=True, root_certificates=str(certs["ca"])
        )
        with pytest.raises(InferenceServerException):
            without.is_server_live(client_timeout=5)
        without.close()


def test_tls_without_a_key_fails_at_start() -> None:
    with pytest.raises(ServerError, match="--grpc-server-key is required"):
        with run_pytriton_server(EXAMPLES_REPOSITORY, "--grpc-use-ssl=true", timeout=30):
            pass
