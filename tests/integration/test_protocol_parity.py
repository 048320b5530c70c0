"""HTTP and gRPC give the same answers: one table of requests, sent through both front ends.

Each case is written once, protocol-neutral; ``tritonclient.http`` (binary tensors) and
``tritonclient.grpc`` (raw contents) send it to the same server, and what a client sees must
match: output names, datatypes, shapes and bytes, the request id, or the error message and
an HTTP status that is the one the gRPC status maps to (``pytriton_core.errors``). Errors
whose wording Triton itself gives differently per protocol (reserved parameter names, the
decoupled-model refusal) are tested per front end, not here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import ml_dtypes
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from google.protobuf import json_format
from harness import EXAMPLES_REPOSITORY, TEST_MODELS_REPOSITORY, ServerHandle, run_pytriton_server
from tritonclient.utils import InferenceServerException

from pytriton_core.errors import ErrorCode, ServerError

# gRPC status name -> the HTTP status of the same core error.
HTTP_STATUS_OF_GRPC = {
    error.grpc_status_name: error.http_status
    for error in (ServerError.from_code(code, "") for code in ErrorCode)
}


@dataclass(frozen=True)
class Case:
    model: str
    inputs: list[tuple[str, np.ndarray, str]]
    outputs: list[tuple[str, int]] | None = None  # (name, class_count)
    parameters: dict[str, Any] = field(default_factory=dict)
    request_id: str = ""
    version: str = ""


@dataclass(frozen=True)
class Answer:
    request_id: str = ""
    outputs: tuple[tuple[str, str, tuple[int, ...], Any], ...] = ()
    status: str = ""  # gRPC status name, or the HTTP status as a string
    message: str = ""


def _fp32(*shape: int) -> tuple[str, np.ndarray, str]:
    return ("INPUT0", np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape), "FP32")


ARRAYS: dict[str, np.ndarray] = {
    "BOOL": np.array([[True, False]]),
    "UINT8": np.array([[0, 255]], np.uint8),
    "UINT16": np.array([[0, 65535]], np.uint16),
    "UINT32": np.array([[0, 2**32 - 1]], np.uint32),
    "UINT64": np.array([[0, 2**64 - 1]], np.uint64),
    "INT8": np.array([[-128, 127]], np.int8),
    "INT16": np.array([[-32768, 32767]], np.int16),
    "INT32": np.array([[-(2**31), 2**31 - 1]], np.int32),
    "INT64": np.array([[-(2**63), 2**63 - 1]], np.int64),
    "FP16": np.array([[-1.5, 65504.0]], np.float16),
    "FP32": np.array([[-1.5, 3.0e38]], np.float32),
    "FP64": np.array([[-1.5, 1e308]], np.float64),
    "BF16": np.array([[-1.5, 256.0]], ml_dtypes.bfloat16),
    "BYTES": np.array([[b"", b"\xff\x00bytes"]], np.object_),
}

CASES: dict[str, Case] = {
    **{
        f"datatype {datatype}": Case(f"dtype_{datatype.lower()}", [("INPUT0", array, datatype)])
        for datatype, array in ARRAYS.items()
    },
    "request id": Case("identity_fp32", [_fp32(2, 3)], request_id="parity-1"),
    "explicit version": Case(
        "versioned", [("INPUT0", np.array([1], np.int32), "INT32")], version="1"
    ),
    "output subset": Case(
        "output_subset",
        [("INPUT0", np.array([1, 2], np.int32), "INT32")],
        outputs=[("OUTPUT2", 0), ("OUTPUT1", 0)],
    ),
    "classification": Case("classifier", [_fp32(2, 5)], outputs=[("OUTPUT0", 3), ("OUTPUT1", 2)]),
    "custom parameters": Case(
        "request_parameters",
        [("KEY", np.array([b"k"], np.object_), "BYTES")],
        parameters={"k": "v", "n": 3, "b": False, "f": 2.5},
    ),
    "two inputs": Case(
        "add_sub",
        [("INPUT0", np.ones(4, np.float32), "FP32"), ("INPUT1", np.ones(4, np.float32), "FP32")],
    ),
    # ----- errors
    "unknown model": Case("no_such_model", [_fp32(1, 2)]),
    "unknown version": Case(
        "versioned", [("INPUT0", np.array([1], np.int32), "INT32")], version="9"
    ),
    "wrong shape": Case("classifier", [_fp32(1, 4)], request_id="shape"),
    "wrong datatype": Case("identity_fp32", [("INPUT0", np.ones((1, 2), np.int32), "INT32")]),
    "missing input": Case("add_sub", [("INPUT0", np.ones(4, np.float32), "FP32")]),
    "unexpected input": Case(
        "identity_fp32", [_fp32(1, 2), ("EXTRA", np.ones(1, np.int8), "INT8")]
    ),
    "unknown output": Case("identity_fp32", [_fp32(1, 2)], outputs=[("NOPE", 0)]),
    "batch too large": Case("identity_fp32", [_fp32(9, 1)]),
    "model raises": Case("raise_error", [("INPUT0", np.array([-1.0], np.float32), "FP32")]),
    **{
        f"model error {code}": Case(
            "triton_error",
            [("INPUT0", np.array([1.0], np.float32), "FP32")],
            parameters={"error_code": code},
        )
        for code in ("NOT_FOUND", "UNAVAILABLE", "UNSUPPORTED", "ALREADY_EXISTS", "INTERNAL")
    },
}


@pytest.fixture(scope="module")
def server() -> Iterator[ServerHandle]:
    with run_pytriton_server([TEST_MODELS_REPOSITORY, EXAMPLES_REPOSITORY]) as handle:
        yield handle


@pytest.fixture(scope="module")
def http(server: ServerHandle) -> Iterator[httpclient.InferenceServerClient]:
    client = httpclient.InferenceServerClient(server.http_url)
    yield client
    client.close()


@pytest.fixture(scope="module")
def grpc(server: ServerHandle) -> Iterator[grpcclient.InferenceServerClient]:
    client = grpcclient.InferenceServerClient(server.grpc_url)
    yield client
    client.close()


def _values(array: np.ndarray) -> Any:
    return array.tolist() if array.dtype == np.object_ else (str(array.dtype), array.tobytes())


def _send(client: Any, module: Any, case: Case) -> Answer:
    inputs = []
    for name, array, datatype in case.inputs:
        tensor = module.InferInput(name, list(array.shape), datatype)
        tensor.set_data_from_numpy(array)
        inputs.append(tensor)
    outputs = (
        None
        if case.outputs is None
        else [module.InferRequestedOutput(name, class_count=k) for name, k in case.outputs]
    )
    try:
        result = client.infer(
            case.model,
            inputs,
            model_version=case.version,
            outputs=outputs,
            request_id=case.request_id,
            parameters=case.parameters or None,
        )
    except InferenceServerException as exc:
        status = str(exc.status()).removeprefix("StatusCode.")
        return Answer(status=status, message=str(exc.message()))
    response = result.get_response()
    if isinstance(response, dict):  # HTTP
        request_id = response.get("id", "")
        described = [(o["name"], o["datatype"], tuple(o["shape"])) for o in response["outputs"]]
    else:
        request_id = response.id
        described = [(o.name, o.datatype, tuple(o.shape)) for o in response.outputs]
    return Answer(
        request_id=request_id,
        outputs=tuple(
            (name, datatype, shape, _values(result.as_numpy(name)))
            for name, datatype, shape in described
        ),
    )


@pytest.mark.parametrize("name", sorted(CASES))
def test_infer_answers_match(
    name: str, http: httpclient.InferenceServerClient, grpc: grpcclient.InferenceServerClient
) -> None:
    over_http = _send(http, httpclient, CASES[name])
    over_grpc = _send(grpc, grpcclient, CASES[name])
    if over_grpc.status:
        assert over_http.status == str(HTTP_STATUS_OF_GRPC[over_grpc.status]), over_grpc
    else:
        assert over_http.status == ""
    assert over_http.message == over_grpc.message
    assert over_http.outputs == over_grpc.outputs
    assert over_http.request_id == over_grpc.request_id
    if name.startswith(("datatype", "request id", "output subset", "classification")):
        assert over_grpc.outputs, "a success case must answer with outputs"


def _call(client: Any, method: str, *args: Any) -> tuple[str, Any]:
    """("", the answer as JSON-like data) or (status, message)."""
    try:
        answer = getattr(client, method)(*args)
    except InferenceServerException as exc:
        return str(exc.status()).removeprefix("StatusCode."), str(exc.message())
    if hasattr(answer, "DESCRIPTOR"):
        answer = json_format.MessageToDict(answer, preserving_proto_field_name=True)
    return "", answer


def _same_call(http: Any, grpc: Any, method: str, *args: Any) -> tuple[Any, Any]:
    http_status, http_answer = _call(http, method, *args)
    grpc_status, grpc_answer = _call(grpc, method, *args)
    if grpc_status:
        assert http_status == str(HTTP_STATUS_OF_GRPC[grpc_status])
        assert http_answer == grpc_answer
    else:
        assert http_status == ""
    return http_answer, grpc_answer


def _ints(value: Any) -> Any:
    """protobuf's JSON writes 64-bit integers as strings; read them back as numbers."""
    if isinstance(value, dict):
        return {k: _ints(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_ints(v) for v in value]
    if isinstance(value, str) and value.lstrip("-").isdigit():
        return int(value)
    return value


METADATA_CALLS: list[tuple[str, tuple[str, ...]]] = [
    ("get_server_metadata", ()),
    ("get_model_metadata", ("identity_fp32",)),
    ("get_model_metadata", ("versioned",)),
    ("get_model_metadata", ("versioned", "2")),
    ("get_model_metadata", ("versioned", "5")),
    ("get_model_metadata", ("no_such_model",)),
    ("get_model_config", ("no_such_model",)),
    ("get_inference_statistics", ("no_such_model",)),
    ("get_inference_statistics", ("fixed_shape",)),  # never inferred: all zero
]


@pytest.mark.parametrize(("method", "args"), METADATA_CALLS)
def test_metadata_answers_match(
    method: str,
    args: tuple[str, ...],
    http: httpclient.InferenceServerClient,
    grpc: grpcclient.InferenceServerClient,
) -> None:
    http_answer, grpc_answer = _same_call(http, grpc, method, *args)
    if isinstance(grpc_answer, dict):
        # protobuf's JSON leaves out fields at their default (zero) values.
        assert _without_defaults(_ints(grpc_answer)) == _without_defaults(_ints(http_answer))


def _without_defaults(value: Any) -> Any:
    if isinstance(value, dict):
        kept = {k: _without_defaults(v) for k, v in value.items()}
        return {k: v for k, v in kept.items() if v not in (0, "", [], {}, None, False)}
    if isinstance(value, list):
        return [_without_defaults(v) for v in value]
    return value


@pytest.mark.parametrize(
    ("model", "version"),
    [("identity_fp32", ""), ("versioned", "1"), ("versioned", "3"), ("no_such_model", "")],
)
def test_model_ready_matches(
    model: str,
    version: str,
    http: httpclient.InferenceServerClient,
    grpc: grpcclient.InferenceServerClient,
) -> None:
    assert http.is_model_ready(model, version) == grpc.is_model_ready(model, version)


def test_model_config_matches(
    http: httpclient.InferenceServerClient, grpc: grpcclient.InferenceServerClient
) -> None:
    for model in ("classifier", "decoupled_repeat", "versioned"):
        http_config = http.get_model_config(model)
        grpc_config = _ints(grpc.get_model_config(model, as_json=True)["config"])
        assert grpc_config == _subset_like(http_config, grpc_config), model


def _subset_like(full: Any, shape: Any) -> Any:
    """``full`` restricted to the keys ``shape`` has (the ones protobuf's JSON wrote)."""
    if isinstance(shape, dict) and isinstance(full, dict):
        return {k: _subset_like(full.get(k), v) for k, v in shape.items()}
    if isinstance(shape, list) and isinstance(full, list):
        return [_subset_like(f, s) for f, s in zip(full, shape, strict=False)]
    return full


def test_repository_index_matches(
    http: httpclient.InferenceServerClient, grpc: grpcclient.InferenceServerClient
) -> None:
    assert grpc.get_model_repository_index(as_json=True)["models"] == (
        http.get_model_repository_index()
    )


@pytest.mark.parametrize(
    "call",
    [
        lambda c: c.load_model("identity_fp32"),
        lambda c: c.unload_model("identity_fp32"),
        lambda c: c.unregister_system_shared_memory(),  # client shm is off by default
        lambda c: c.unregister_cuda_shared_memory(),
    ],
)
def test_refusals_match(
    call: Callable[[Any], Any],
    http: httpclient.InferenceServerClient,
    grpc: grpcclient.InferenceServerClient,
) -> None:
    answers = []
    for client in (http, grpc):
        with pytest.raises(InferenceServerException) as info:
            call(client)
        answers.append((str(info.value.status()), str(info.value.message())))
    (http_status, http_message), (grpc_status, grpc_message) = answers
    assert http_message == grpc_message
    assert http_status == str(HTTP_STATUS_OF_GRPC[grpc_status.removeprefix("StatusCode.")])
