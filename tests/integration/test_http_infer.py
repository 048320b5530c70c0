"""POST /v2/models/{m}/infer end to end, through the real ``tritonclient.http`` clients.

Every datatype as JSON and as binary tensors, BYTES edge cases, shapes, output selection,
classification, ids, parameters, compression, the raw binary request, keep-alive and many
concurrent requests, each checked with exact values. Raw ``http.client`` covers what the
client cannot send (nested JSON ``data``, ``binary_data_output``, a raw binary body). Expected
answers are Triton 2.51's; set HTTP_TESTS_AGAINST_REAL_TRITON=1 to run this module against
the real Triton (../shared/tools/real-triton).
"""

from __future__ import annotations

import asyncio
import gzip
import http.client
import json
import os
import zlib
from collections.abc import Iterator, Mapping
from typing import Any

import ml_dtypes
import numpy as np
import pytest
import tritonclient.http as httpclient
import tritonclient.http.aio as aiohttpclient
from harness import (
    EXAMPLES_REPOSITORY,
    TEST_MODELS_REPOSITORY,
    ServerHandle,
    run_pytriton_server,
    run_real_triton,
)

AGAINST_REAL_TRITON = os.environ.get("HTTP_TESTS_AGAINST_REAL_TRITON") == "1"


def _integers(dtype: type[np.integer[Any]]) -> np.ndarray:
    info = np.iinfo(dtype)
    low = info.min if info.min < 0 else 0
    return np.array([low, low + 1, 0, 1, info.max - 1, info.max], dtype).reshape(2, 3)


# Sample [2, 3] tensors per datatype: extremes, signed zero, subnormals, inexact decimals.
SAMPLES: dict[str, np.ndarray] = {
    "BOOL": np.array([[True, False, True], [False, False, True]]),
    "UINT8": _integers(np.uint8),
    "UINT16": _integers(np.uint16),
    "UINT32": _integers(np.uint32),
    "UINT64": _integers(np.uint64),
    "INT8": _integers(np.int8),
    "INT16": _integers(np.int16),
    "INT32": _integers(np.int32),
    "INT64": _integers(np.int64),
    "FP16": np.array([[0.0, -0.0, 0.1], [65504.0, -65504.0, 6e-08]], np.float16),
    "FP32": np.array([[0.1, -1.5, 3.4028235e38], [-3.4028235e38, 1e-45, -0.0]], np.float32),
    "FP64": np.array([[0.1, -1.5, 1e300], [-1e-300, 5e-324, -0.0]], np.float64),
    "BF16": np.array([[1.0, -2.5, 0.1], [3.0e38, -0.0, 1e-39]], ml_dtypes.bfloat16),
}
JSON_DATATYPES = [name for name in SAMPLES if name not in ("FP16", "BF16")]


@pytest.fixture(scope="module")
def server() -> Iterator[ServerHandle]:
    run = run_real_triton if AGAINST_REAL_TRITON else run_pytriton_server
    with run([TEST_MODELS_REPOSITORY, EXAMPLES_REPOSITORY]) as handle:
        yield handle


@pytest.fixture(scope="module")
def client(server: ServerHandle) -> Iterator[httpclient.InferenceServerClient]:
    with httpclient.InferenceServerClient(server.http_url) as triton:
        yield triton


def connect(server: ServerHandle) -> http.client.HTTPConnection:
    host, port = server.http_url.rsplit(":", 1)
    return http.client.HTTPConnection(host, int(port), timeout=30)


def post(
    server: ServerHandle,
    path: str,
    body: bytes | Mapping[str, Any],
    headers: Mapping[str, str] | None = None,
) -> tuple[int, dict[str, str], bytes]:
    """One raw request: status, headers (lower-case names), body."""
    if not isinstance(body, bytes):
        body = json.dumps(body).encode()
    connection = connect(server)
    try:
        connection.request("POST", path, body=body, headers=dict(headers or {}))
        response = connection.getresponse()
        answer = response.read()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, answer
    finally:
        connection.close()


def infer_input(
    name: str, data: np.ndarray, datatype: str, binary: bool = True
) -> httpclient.InferInput:
    tensor = httpclient.InferInput(name, list(data.shape), datatype)
    tensor.set_data_from_numpy(data, binary_data=binary)
    return tensor


def bytes_array(values: list[bytes], shape: tuple[int, ...]) -> np.ndarray:
    array = np.empty(len(values), dtype=np.object_)
    array[:] = values
    return array.reshape(shape)


def assert_same_array(got: np.ndarray, want: np.ndarray) -> None:
    """Same dtype, shape and bytes: -0.0 and subnormals must survive."""
    assert got.dtype == want.dtype
    assert got.shape == want.shape
    assert got.tobytes() == want.tobytes()


# --------------------------------------------------------------------------- datatypes


@pytest.mark.parametrize("datatype", list(SAMPLES))
def test_binary_tensors_of_every_datatype(
    client: httpclient.InferenceServerClient, datatype: str
) -> None:
    data = SAMPLES[datatype]
    result = client.infer(
        f"dtype_{datatype.lower()}",
        [infer_input("INPUT0", data, datatype)],
        outputs=[httpclient.InferRequestedOutput("OUTPUT0", binary_data=True)],
    )
    assert result.get_output("OUTPUT0") == {
        "name": "OUTPUT0",
        "datatype": datatype,
        "shape": [2, 3],
        "parameters": {"binary_data_size": data.nbytes},
    }
    assert_same_array(result.as_numpy("OUTPUT0"), data)


@pytest.mark.parametrize("datatype", JSON_DATATYPES)
def test_json_tensors_of_every_datatype(
    client: httpclient.InferenceServerClient, datatype: str
) -> None:
    data = SAMPLES[datatype]
    result = client.infer(
        f"dtype_{datatype.lower()}",
        [infer_input("INPUT0", data, datatype, binary=False)],
        outputs=[httpclient.InferRequestedOutput("OUTPUT0", binary_data=False)],
    )
    output = result.get_output("OUTPUT0")
    assert set(output) == {"name", "datatype", "shape", "data"}
    assert (output["name"], output["datatype"], output["shape"]) == ("OUTPUT0", datatype, [2, 3])
    # A flat list; numbers read back into the datatype give the very same values.
    assert len(output["data"]) == 6
    assert_same_array(np.array(output["data"], data.dtype).reshape(2, 3), data)
    if datatype == "BOOL":
        assert output["data"] == [True, False, True, False, False, True]
    elif not datatype.startswith("FP"):
        assert output["data"] == data.reshape(-1).tolist()


def test_binary_bytes_with_empty_non_ascii_and_non_utf8_elements(
    client: httpclient.InferenceServerClient,
) -> None:
    values = [b"", "h\u00e9llo \u2603".encode(), b"\xff\xfe\x00 not utf-8", b"plain"]
    data = bytes_array(values, (2, 2))
    result = client.infer("dtype_bytes", [infer_input("INPUT0", data, "BYTES")])
    serialized = sum(4 + len(v) for v in values)
    assert result.get_output("OUTPUT0") == {
        "name": "OUTPUT0",
        "datatype": "BYTES",
        "shape": [2, 2],
        "parameters": {"binary_data_size": serialized},
    }
    assert result.as_numpy("OUTPUT0").tolist() == [values[:2], values[2:]]


def test_the_model_sees_bytes_elements_exactly(client: httpclient.InferenceServerClient) -> None:
    values = [b"", "h\u00e9llo \u2603".encode(), b"\xff\x00\xfe", b"x" * 1000]
    result = client.infer(
        "string_identity", [infer_input("INPUT0", bytes_array(values, (4,)), "BYTES")]
    )
    assert result.as_numpy("OUTPUT0").tolist() == values
    assert_same_array(result.as_numpy("OUTPUT1"), np.array([0, 10, 3, 1000], np.int32))


def test_json_bytes_with_empty_and_non_ascii_elements(
    client: httpclient.InferenceServerClient,
) -> None:
    values = ["", "h\u00e9llo \u2603", "\u65e5\u672c", 'tab\tquote"back\\slash']
    data = bytes_array([v.encode() for v in values], (1, 4))
    result = client.infer(
        "dtype_bytes",
        [infer_input("INPUT0", data, "BYTES", binary=False)],
        outputs=[httpclient.InferRequestedOutput("OUTPUT0", binary_data=False)],
    )
    assert result.get_output("OUTPUT0") == {
        "name": "OUTPUT0",
        "datatype": "BYTES",
        "shape": [1, 4],
        "data": values,
    }


# --------------------------------------------------------------------------- shapes


def test_multi_dimensional_tensors(client: httpclient.InferenceServerClient) -> None:
    matrix = np.arange(1, 7, dtype=np.float32).reshape(2, 3)
    row = np.array([1, 2, 3], np.int32)
    result = client.infer(
        "fixed_shape", [infer_input("INPUT0", matrix, "FP32"), infer_input("INPUT1", row, "INT32")]
    )
    assert_same_array(result.as_numpy("OUTPUT0"), matrix * row.astype(np.float32))


def test_nested_json_data_is_read_in_row_major_order(server: ServerHandle) -> None:
    status, _, body = post(
        server,
        "/v2/models/fixed_shape/infer",
        {
            "inputs": [
                {
                    "name": "INPUT0",
                    "shape": [2, 3],
                    "datatype": "FP32",
                    "data": [[1, 2, 3], [4, 5, 6]],
                },
                {"name": "INPUT1", "shape": [3], "datatype": "INT32", "data": [[1], [2, 3]]},
            ]
        },
    )
    assert (status, json.loads(body)) == (
        200,
        {
            "model_name": "fixed_shape",
            "model_version": "1",
            "outputs": [
                {
                    "name": "OUTPUT0",
                    "datatype": "FP32",
                    "shape": [2, 3],
                    "data": [1.0, 4.0, 9.0, 4.0, 10.0, 18.0],
                }
            ],
        },
    )


@pytest.mark.parametrize("binary", [True, False])
def test_empty_tensors(client: httpclient.InferenceServerClient, binary: bool) -> None:
    empty = np.zeros((1, 0), np.float32)
    result = client.infer(
        "identity_fp32",
        [infer_input("INPUT0", empty, "FP32", binary=binary)],
        outputs=[httpclient.InferRequestedOutput("OUTPUT0", binary_data=binary)],
    )
    expected: dict[str, Any] = {"name": "OUTPUT0", "datatype": "FP32", "shape": [1, 0]}
    expected.update({"parameters": {"binary_data_size": 0}} if binary else {"data": []})
    assert result.get_output("OUTPUT0") == expected
    assert_same_array(result.as_numpy("OUTPUT0"), empty)


@pytest.mark.parametrize("binary", [True, False])
def test_empty_bytes_tensors(client: httpclient.InferenceServerClient, binary: bool) -> None:
    empty = bytes_array([], (1, 0))
    result = client.infer(
        "dtype_bytes",
        [infer_input("INPUT0", empty, "BYTES", binary=binary)],
        outputs=[httpclient.InferRequestedOutput("OUTPUT0", binary_data=binary)],
    )
    assert result.get_output("OUTPUT0")["shape"] == [1, 0]
    assert result.as_numpy("OUTPUT0").shape == (1, 0)


def test_empty_tensors_in_every_output(server: ServerHandle) -> None:
    status, _, body = post(
        server,
        "/v2/models/output_subset/infer",
        {"inputs": [{"name": "INPUT0", "shape": [0], "datatype": "INT32", "data": []}]},
    )
    assert (status, json.loads(body)["outputs"]) == (
        200,
        [
            {"name": "OUTPUT0", "datatype": "INT32", "shape": [0], "data": []},
            {"name": "OUTPUT1", "datatype": "INT64", "shape": [0], "data": []},
            {"name": "OUTPUT2", "datatype": "FP32", "shape": [0], "data": []},
        ],
    )


# --------------------------------------------------------------------------- outputs

SUBSET_INPUT = {"name": "INPUT0", "shape": [3], "datatype": "INT32", "data": [1, 2, 3]}


def test_one_of_several_outputs(client: httpclient.InferenceServerClient) -> None:
    result = client.infer(
        "output_subset",
        [infer_input("INPUT0", np.array([1, 2, 3], np.int32), "INT32")],
        outputs=[httpclient.InferRequestedOutput("OUTPUT1")],
    )
    assert [o["name"] for o in result.get_response()["outputs"]] == ["OUTPUT1"]
    assert_same_array(result.as_numpy("OUTPUT1"), np.array([2, 4, 6], np.int64))
    assert result.as_numpy("OUTPUT0") is None


def test_binary_and_json_outputs_in_one_response(server: ServerHandle) -> None:
    status, headers, body = post(
        server,
        "/v2/models/output_subset/infer",
        {
            "inputs": [SUBSET_INPUT],
            "outputs": [
                {"name": "OUTPUT2"},
                {"name": "OUTPUT0", "parameters": {"binary_data": True}},
            ],
        },
    )
    header = (
        b'{"model_name":"output_subset","model_version":"1","outputs":['
        b'{"name":"OUTPUT0","datatype":"INT32","shape":[3],"parameters":{"binary_data_size":12}},'
        b'{"name":"OUTPUT2","datatype":"FP32","shape":[3],"data":[0.5,1.0,1.5]}]}'
    )
    assert status == 200
    assert headers["content-type"] == "application/octet-stream"
    assert headers["inference-header-content-length"] == str(len(header))
    # Outputs come in the order the model produced them, blobs after the JSON.
    assert json.loads(body[: len(header)]) == json.loads(header)
    assert body[len(header) :] == np.array([1, 2, 3], "<i4").tobytes()


def test_binary_data_output_makes_every_output_binary(server: ServerHandle) -> None:
    status, headers, body = post(
        server,
        "/v2/models/output_subset/infer",
        {"inputs": [SUBSET_INPUT], "parameters": {"binary_data_output": True}},
    )
    header_length = int(headers["inference-header-content-length"])
    assert status == 200
    assert json.loads(body[:header_length])["outputs"] == [
        {
            "name": "OUTPUT0",
            "datatype": "INT32",
            "shape": [3],
            "parameters": {"binary_data_size": 12},
        },
        {
            "name": "OUTPUT1",
            "datatype": "INT64",
            "shape": [3],
            "parameters": {"binary_data_size": 24},
        },
        {
            "name": "OUTPUT2",
            "datatype": "FP32",
            "shape": [3],
            "parameters": {"binary_data_size": 12},
        },
    ]
    assert body[header_length:] == (
        np.array([1, 2, 3], "<i4").tobytes()
        + np.array([2, 4, 6], "<i8").tobytes()
        + np.array([0.5, 1.0, 1.5], "<f4").tobytes()
    )


@pytest.mark.parametrize("parameters", [{}, {"binary_data": False}])
def test_binary_data_output_does_not_apply_to_named_outputs(
    server: ServerHandle, parameters: dict[str, bool]
) -> None:
    # binary_data_output sets the kind of outputs the request does not name; a named output
    # is JSON unless its own binary_data says otherwise.
    status, headers, body = post(
        server,
        "/v2/models/output_subset/infer",
        {
            "inputs": [SUBSET_INPUT],
            "parameters": {"binary_data_output": True},
            "outputs": [{"name": "OUTPUT1", "parameters": parameters}],
        },
    )
    assert (status, headers["content-type"]) == (200, "application/json")
    assert json.loads(body)["outputs"] == [
        {"name": "OUTPUT1", "datatype": "INT64", "shape": [3], "data": [2, 4, 6]}
    ]


# --------------------------------------------------------------------------- classification

SCORES = np.array([[0.1, 0.5, 0.2, 0.15, 0.05], [1.0, 2.0, 3.0, 4.0, 5.0]], np.float32)


def test_classification_with_and_without_labels(server: ServerHandle) -> None:
    status, _, body = post(
        server,
        "/v2/models/classifier/infer",
        {
            "inputs": [
                {"name": "INPUT0", "shape": [2, 5], "datatype": "FP32", "data": SCORES.tolist()}
            ],
            "outputs": [
                {"name": "OUTPUT0", "parameters": {"classification": 3}},
                {"name": "OUTPUT1", "parameters": {"classification": 2}},
            ],
        },
    )
    assert (status, json.loads(body)["outputs"]) == (
        200,
        [
            {
                "name": "OUTPUT0",
                "datatype": "BYTES",
                "shape": [2, 3],
                "data": [
                    "0.500000:1:dog",
                    "0.200000:2:bird",
                    "0.150000:3:fish",
                    "5.000000:4:horse",
                    "4.000000:3:fish",
                    "3.000000:2:bird",
                ],
            },
            {
                "name": "OUTPUT1",
                "datatype": "BYTES",
                "shape": [2, 2],
                "data": ["5:1", "2:2", "50:4", "40:3"],
            },
        ],
    )


def test_classification_count_beyond_the_classes(client: httpclient.InferenceServerClient) -> None:
    result = client.infer(
        "classifier",
        [infer_input("INPUT0", SCORES[:1], "FP32")],
        outputs=[httpclient.InferRequestedOutput("OUTPUT0", binary_data=True, class_count=10)],
    )
    assert result.get_output("OUTPUT0")["shape"] == [1, 5]
    assert result.get_output("OUTPUT0")["datatype"] == "BYTES"
    assert result.as_numpy("OUTPUT0").tolist() == [
        [
            b"0.500000:1:dog",
            b"0.200000:2:bird",
            b"0.150000:3:fish",
            b"0.100000:0:cat",
            b"0.050000:4:horse",
        ]
    ]


def test_classification_of_a_model_without_batching(
    client: httpclient.InferenceServerClient,
) -> None:
    result = client.infer(
        "output_subset",
        [infer_input("INPUT0", np.array([3, 1, 2], np.int32), "INT32")],
        outputs=[
            httpclient.InferRequestedOutput("OUTPUT1", binary_data=False, class_count=2),
            httpclient.InferRequestedOutput("OUTPUT2", binary_data=False, class_count=1),
        ],
    )
    assert result.get_response()["outputs"] == [
        {"name": "OUTPUT1", "datatype": "BYTES", "shape": [2], "data": ["6:0", "4:2"]},
        {"name": "OUTPUT2", "datatype": "BYTES", "shape": [1], "data": ["1.500000:0"]},
    ]


# --------------------------------------------------------------------------- request fields


def test_request_id_is_echoed(client: httpclient.InferenceServerClient) -> None:
    inputs = [infer_input("INPUT0", np.ones((1, 2), np.float32), "FP32")]
    with_id = client.infer("identity_fp32", inputs, request_id="req-\u00e9-42").get_response()
    assert with_id["id"] == "req-\u00e9-42"
    assert list(with_id)[:3] == ["id", "model_name", "model_version"]
    assert "id" not in client.infer("identity_fp32", inputs).get_response()


def test_empty_request_id_is_not_echoed(server: ServerHandle) -> None:
    status, _, body = post(
        server,
        "/v2/models/identity_fp32/infer",
        {
            "id": "",
            "inputs": [{"name": "INPUT0", "shape": [1, 1], "datatype": "FP32", "data": [1]}],
        },
    )
    assert (status, list(json.loads(body))) == (200, ["model_name", "model_version", "outputs"])


def request_parameters_seen(result: httpclient.InferResult) -> tuple[str, str]:
    value, every = (result.as_numpy(name)[0].decode() for name in ("VALUE", "ALL"))
    return value, every


def test_request_parameters_reach_the_model(client: httpclient.InferenceServerClient) -> None:
    parameters = {"text": "h\u00e9llo", "count": 42, "flag": True, "ratio": 1.5}
    key = infer_input("KEY", bytes_array([b"count"], (1,)), "BYTES")
    # No outputs named: the client also sends binary_data_output, which the model must not see.
    result = client.infer("request_parameters", [key], parameters=parameters)
    value, every = request_parameters_seen(result)
    assert value == "42"
    assert json.loads(every) == parameters


def test_reserved_request_parameters_do_not_reach_the_model(server: ServerHandle) -> None:
    status, _, body = post(
        server,
        "/v2/models/request_parameters/infer",
        {
            "parameters": {"priority": 0, "timeout": 100000, "binary_data_output": False, "k": "v"},
            "inputs": [{"name": "KEY", "shape": [1], "datatype": "BYTES", "data": ["k"]}],
        },
    )
    assert status == 200
    outputs = {o["name"]: o["data"] for o in json.loads(body)["outputs"]}
    assert outputs == {"VALUE": ['"v"'], "ALL": ['{"k": "v"}']}


@pytest.mark.parametrize(("version", "answer"), [("", 2), ("1", 1), ("2", 2)])
def test_versions(client: httpclient.InferenceServerClient, version: str, answer: int) -> None:
    result = client.infer(
        "versioned",
        [infer_input("INPUT0", np.zeros(1, np.int32), "INT32")],
        model_version=version,
    )
    assert result.get_response()["model_version"] == str(answer)
    assert_same_array(result.as_numpy("OUTPUT0"), np.array([answer], np.int32))


# --------------------------------------------------------------------------- compression


@pytest.mark.parametrize("request_algorithm", [None, "gzip", "deflate"])
@pytest.mark.parametrize("response_algorithm", [None, "gzip", "deflate"])
def test_compression(
    client: httpclient.InferenceServerClient,
    request_algorithm: str | None,
    response_algorithm: str | None,
) -> None:
    data = np.arange(64, dtype=np.float32).reshape(2, 32)
    result = client.infer(
        "identity_fp32",
        [infer_input("INPUT0", data, "FP32")],
        request_compression_algorithm=request_algorithm,
        response_compression_algorithm=response_algorithm,
    )
    assert_same_array(result.as_numpy("OUTPUT0"), data)


@pytest.mark.parametrize(
    ("accept", "encoding", "decompress"),
    [
        ("gzip", "gzip", gzip.decompress),
        ("deflate", "deflate", zlib.decompress),
        ("deflate;q=0.5, gzip;q=0.9", "gzip", gzip.decompress),
    ],
)
def test_compressed_response_keeps_the_uncompressed_header_length(
    server: ServerHandle, accept: str, encoding: str, decompress: Any
) -> None:
    request = {
        "inputs": [{"name": "INPUT0", "shape": [1, 3], "datatype": "FP32", "data": [1, 2, 3]}],
        "parameters": {"binary_data_output": True},
    }
    status, headers, body = post(
        server, "/v2/models/identity_fp32/infer", request, {"Accept-Encoding": accept}
    )
    header = (
        b'{"model_name":"identity_fp32","model_version":"1","outputs":[{"name":"OUTPUT0",'
        b'"datatype":"FP32","shape":[1,3],"parameters":{"binary_data_size":12}}]}'
    )
    assert (status, headers["content-encoding"]) == (200, encoding)
    assert headers["inference-header-content-length"] == str(len(header))
    assert int(headers["content-length"]) == len(body)
    assert decompress(body) == header + np.array([1, 2, 3], "<f4").tobytes()


def test_identity_accept_encoding_is_not_compressed(server: ServerHandle) -> None:
    request = {"inputs": [{"name": "INPUT0", "shape": [1, 1], "datatype": "FP32", "data": [7]}]}
    status, headers, body = post(
        server, "/v2/models/identity_fp32/infer", request, {"Accept-Encoding": "identity"}
    )
    assert "content-encoding" not in headers
    assert (status, json.loads(body)["outputs"][0]["data"]) == (200, [7.0])


# --------------------------------------------------------------------------- raw binary


def test_raw_binary_request(server: ServerHandle) -> None:
    status, headers, body = post(
        server,
        "/v2/models/identity_fp32/infer",
        np.array([1, 2, 3], "<f4").tobytes(),
        {"Inference-Header-Content-Length": "0"},
    )
    header = (
        b'{"model_name":"identity_fp32","model_version":"1","outputs":[{"name":"OUTPUT0",'
        b'"datatype":"FP32","shape":[1,3],"parameters":{"binary_data_size":12}}]}'
    )
    assert (status, headers["content-type"]) == (200, "application/octet-stream")
    assert headers["inference-header-content-length"] == str(len(header))
    assert json.loads(body[: len(header)]) == json.loads(header)
    assert body[len(header) :] == np.array([1, 2, 3], "<f4").tobytes()


def test_raw_binary_request_for_a_bytes_input(server: ServerHandle) -> None:
    status, headers, body = post(
        server,
        "/v2/models/config_parameters/infer",
        b"greeting",
        {"Inference-Header-Content-Length": "0"},
    )
    header_length = int(headers["inference-header-content-length"])
    assert status == 200
    assert json.loads(body[:header_length])["outputs"] == [
        {"name": "VALUE", "datatype": "BYTES", "shape": [1], "parameters": {"binary_data_size": 16}}
    ]
    assert body[header_length:] == b"\x0c\x00\x00\x00hello, world"


# --------------------------------------------------------------------------- connections


def test_many_sequential_requests_on_one_keep_alive_connection(server: ServerHandle) -> None:
    connection = connect(server)
    try:
        connection.connect()
        sock = connection.sock
        for i in range(200):
            request = {
                "id": str(i),
                "inputs": [
                    {"name": "INPUT0", "shape": [1, 2], "datatype": "FP32", "data": [i, -i]}
                ],
            }
            connection.request("POST", "/v2/models/identity_fp32/infer", body=json.dumps(request))
            response = connection.getresponse()
            answer = json.loads(response.read())
            assert (response.status, answer["id"]) == (200, str(i))
            assert answer["outputs"][0]["data"] == [float(i), float(-i)]
            assert not response.will_close
            assert connection.sock is sock  # never reconnected
    finally:
        connection.close()


def test_200_concurrent_async_requests(server: ServerHandle) -> None:
    async def run() -> list[np.ndarray]:
        async with aiohttpclient.InferenceServerClient(server.http_url, conn_limit=200) as aio:

            async def one(i: int) -> np.ndarray:
                data = np.array([[i, i + 0.5, -i]], np.float32)
                tensor = aiohttpclient.InferInput("INPUT0", [1, 3], "FP32")
                tensor.set_data_from_numpy(data)
                result = await aio.infer("identity_fp32", [tensor], request_id=str(i))
                assert result.get_response()["id"] == str(i)
                return result.as_numpy("OUTPUT0")

            return await asyncio.gather(*(one(i) for i in range(200)))

    results = asyncio.run(run())
    assert len(results) == 200
    for i, output in enumerate(results):
        assert_same_array(output, np.array([[i, i + 0.5, -i]], np.float32))


def test_async_client_metadata_and_infer(server: ServerHandle) -> None:
    async def run() -> tuple[bool, dict[str, Any], np.ndarray]:
        async with aiohttpclient.InferenceServerClient(server.http_url) as aio:
            ready = await aio.is_model_ready("add_sub")
            metadata = await aio.get_model_metadata("add_sub")
            a = aiohttpclient.InferInput("INPUT0", [4], "FP32")
            a.set_data_from_numpy(np.array([1, 2, 3, 4], np.float32))
            b = aiohttpclient.InferInput("INPUT1", [4], "FP32")
            b.set_data_from_numpy(np.array([10, 20, 30, 40], np.float32), binary_data=False)
            result = await aio.infer("add_sub", [a, b])
            return ready, metadata, result.as_numpy("OUTPUT1")

    ready, metadata, difference = asyncio.run(run())
    assert ready is True
    assert metadata["name"] == "add_sub"
    assert_same_array(difference, np.array([-9, -18, -27, -36], np.float32))
