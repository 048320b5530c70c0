"""HTTP error answers: the status, the exact ``{"error": ...}`` body, and a server that keeps
serving afterwards (a good request on the same keep-alive connection succeeds after each).

Expected answers are Triton 2.51's observable ones, or protocol.md's where the two differ and
the difference is noted; set HTTP_TESTS_AGAINST_REAL_TRITON=1 to run this module against the
real Triton (../shared/tools/real-triton).
"""

from __future__ import annotations

import http.client
import json
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest
import tritonclient.http as httpclient
from harness import (
    EXAMPLES_REPOSITORY,
    TEST_MODELS_REPOSITORY,
    ServerHandle,
    run_pytriton_server,
    run_real_triton,
)

AGAINST_REAL_TRITON = os.environ.get("HTTP_TESTS_AGAINST_REAL_TRITON") == "1"
ID = "[request id: <id_unknown>] "

GOOD_PATH = "/v2/models/identity_fp32/infer"
GOOD_REQUEST = json.dumps(
    {"inputs": [{"name": "INPUT0", "shape": [1, 3], "datatype": "FP32", "data": [1, 2, 3]}]}
).encode()
GOOD_ANSWER = {
    "model_name": "identity_fp32",
    "model_version": "1",
    "outputs": [{"name": "OUTPUT0", "datatype": "FP32", "shape": [1, 3], "data": [1.0, 2.0, 3.0]}],
}


@pytest.fixture(scope="module")
def server() -> Iterator[ServerHandle]:
    run = run_real_triton if AGAINST_REAL_TRITON else run_pytriton_server
    with run([TEST_MODELS_REPOSITORY, EXAMPLES_REPOSITORY]) as handle:
        yield handle


@pytest.fixture(scope="module")
def client(server: ServerHandle) -> Iterator[httpclient.InferenceServerClient]:
    with httpclient.InferenceServerClient(server.http_url) as triton:
        yield triton


@pytest.fixture
def connection(server: ServerHandle) -> Iterator[http.client.HTTPConnection]:
    host, port = server.http_url.rsplit(":", 1)
    connection = http.client.HTTPConnection(host, int(port), timeout=30)
    yield connection
    connection.close()


@dataclass(frozen=True)
class Answer:
    status: int
    body: bytes
    headers: dict[str, str]

    @property
    def message(self) -> str:
        """The error message of a ``{"error": "<message>"}`` body (and nothing else)."""
        try:
            document = json.loads(self.body)
        except ValueError:
            document = None
        assert isinstance(document, dict), f"not an error body: {self.status} {self.body[:300]!r}"
        assert list(document) == ["error"], self.body
        assert isinstance(document["error"], str), self.body
        return document["error"]


def send(
    connection: http.client.HTTPConnection,
    method: str,
    path: str,
    body: bytes = b"",
    headers: Mapping[str, str] | None = None,
) -> Answer:
    connection.request(method, path, body=body, headers=dict(headers or {}))
    response = connection.getresponse()
    return Answer(
        response.status, response.read(), {k.lower(): v for k, v in response.getheaders()}
    )


def assert_still_serving(
    connection: http.client.HTTPConnection, client: httpclient.InferenceServerClient
) -> None:
    """A good request on the connection that got the error, and one through the client."""
    connection.request("POST", GOOD_PATH, body=GOOD_REQUEST)
    response = connection.getresponse()
    assert (response.status, json.loads(response.read())) == (200, GOOD_ANSWER)
    tensor = httpclient.InferInput("INPUT0", [1, 2], "FP32")
    tensor.set_data_from_numpy(np.array([[4, 5]], np.float32))
    result = client.infer("identity_fp32", [tensor])
    assert result.as_numpy("OUTPUT0").tolist() == [[4.0, 5.0]]


def json_body(inputs: list[dict[str, Any]], **fields: Any) -> bytes:
    return json.dumps({"inputs": inputs, **fields}).encode()


def tensor(name: str, shape: list[int], datatype: str, data: list[Any]) -> dict[str, Any]:
    return {"name": name, "shape": shape, "datatype": datatype, "data": data}


def binary_body(
    inputs: list[dict[str, Any]], blob: bytes, header_length: str | None = None
) -> tuple[bytes, dict[str, str]]:
    header = json_body(inputs)
    length = str(len(header)) if header_length is None else header_length
    return header + blob, {"Inference-Header-Content-Length": length}


def fp32_binary_input(byte_size: int) -> list[dict[str, Any]]:
    return [
        {
            "name": "INPUT0",
            "shape": [1, 3],
            "datatype": "FP32",
            "parameters": {"binary_data_size": byte_size},
        }
    ]


THREE_FP32 = np.array([1, 2, 3], "<f4").tobytes()


@dataclass(frozen=True)
class Case:
    """A request and its error: the exact message, or its start when ``prefix_only``."""

    path: str
    body: bytes
    status: int
    message: str
    headers: dict[str, str] = field(default_factory=dict)
    method: str = "POST"
    prefix_only: bool = False


def _cases() -> dict[str, Case]:
    fp32 = tensor("INPUT0", [1, 3], "FP32", [1, 2, 3])
    fixed_input1 = tensor("INPUT1", [3], "INT32", [1, 2, 3])
    cases = {
        # protocol.md §0.1: NOT_FOUND (404), as Triton 2.51 answers.
        "unknown model": Case(
            "/v2/models/nope/infer",
            json_body([fp32]),
            404,
            "Request for unknown model: 'nope' is not found",
        ),
        "unknown version": Case(
            "/v2/models/identity_fp32/versions/7/infer",
            json_body([fp32]),
            404,
            "Request for unknown model: 'identity_fp32' version 7 is not found",
        ),
        "missing input": Case(
            "/v2/models/add_sub/infer",
            json_body([tensor("INPUT0", [4], "FP32", [1, 2, 3, 4])]),
            400,
            f"{ID}expected 2 inputs but got 1 inputs for model 'add_sub'. Got input(s) "
            "['INPUT0'], but missing required input(s) ['INPUT1']. Please provide all "
            "required input(s).",
        ),
        "no inputs": Case(
            "/v2/models/fixed_shape/infer",
            json_body([]),
            400,
            f"{ID}expected 2 inputs but got 0 inputs for model 'fixed_shape'. Got input(s) "
            "[], but missing required input(s) ['INPUT0','INPUT1']. Please provide all "
            "required input(s).",
        ),
        # The input count is checked first; the listing's order is Triton's hash order.
        "extra input": Case(
            GOOD_PATH,
            json_body([fp32, tensor("EXTRA", [1], "FP32", [1])]),
            400,
            f"{ID}expected 1 inputs but got 2 inputs for model 'identity_fp32'. Got input(s) [",
            prefix_only=True,
        ),
        "unknown input": Case(
            GOOD_PATH,
            json_body([tensor("WRONG", [1, 3], "FP32", [1, 2, 3])]),
            400,
            "unexpected inference input 'WRONG' for model 'identity_fp32'",
        ),
        "wrong shape": Case(
            "/v2/models/fixed_shape/infer",
            json_body([tensor("INPUT0", [3, 2], "FP32", [1, 2, 3, 4, 5, 6]), fixed_input1]),
            400,
            f"{ID}unexpected shape for input 'INPUT0' for model 'fixed_shape'. Expected [2,3], "
            "got [3,2]. ",
        ),
        "shape without the batch dimension": Case(
            GOOD_PATH,
            json_body([tensor("INPUT0", [3], "FP32", [1, 2, 3])]),
            400,
            f"{ID}unexpected shape for input 'INPUT0' for model 'identity_fp32'. Expected "
            "[-1,-1], got [3]. NOTE: Setting a non-zero max_batch_size in the model config "
            "requires a batch dimension to be prepended to each input shape. If you want to "
            "specify the full shape including the batch dim in your input dims config, try "
            "setting max_batch_size to zero. See the model configuration docs for more info on "
            "max_batch_size.",
        ),
        "batch too large": Case(
            GOOD_PATH,
            json_body([tensor("INPUT0", [9, 1], "FP32", [0] * 9)]),
            400,
            f"{ID}inference request batch-size must be <= 8 for 'identity_fp32'",
        ),
        "wrong datatype": Case(
            "/v2/models/fixed_shape/infer",
            json_body(
                [
                    tensor("INPUT0", [2, 3], "FP32", [1, 2, 3, 4, 5, 6]),
                    tensor("INPUT1", [3], "FP32", [1, 2, 3]),
                ]
            ),
            400,
            f"{ID}inference input 'INPUT1' data-type is 'FP32', but model 'fixed_shape' "
            "expects 'INT32'",
        ),
        "invalid datatype": Case(
            GOOD_PATH,
            json_body([tensor("INPUT0", [1, 3], "FLOAT", [1, 2, 3])]),
            400,
            "invalid datatype for input INPUT0",
        ),
        # Triton parses 'data' as INTERNAL errors (500).
        "data count does not match the shape": Case(
            GOOD_PATH,
            json_body([tensor("INPUT0", [1, 3], "FP32", [1, 2])]),
            500,
            "Unable to parse 'data': Shape does not match true shape of 'data' field",
        ),
        "malformed JSON": Case(
            GOOD_PATH,
            b'{"inputs": [',
            500,
            "failed to parse the request JSON buffer: ",
            prefix_only=True,
        ),
        "JSON FP16 input": Case(
            "/v2/models/dtype_fp16/infer",
            json_body([tensor("INPUT0", [1, 2], "FP16", [1, 2])]),
            400,
            "receiving FP16 data via JSON is not supported. Please use the binary data format "
            "for input INPUT0",
        ),
        "JSON BF16 input": Case(
            "/v2/models/dtype_bf16/infer",
            json_body([tensor("INPUT0", [1, 2], "BF16", [1, 2])]),
            400,
            "receiving BF16 data via JSON is not supported. Please use the binary data format "
            "for input INPUT0",
        ),
        "reserved triton_ parameter": Case(
            GOOD_PATH,
            json_body([fp32], parameters={"triton_enable_empty_final_response": True}),
            400,
            "parameter keys starting with 'triton_' are reserved for Triton usage and should "
            "not be specified.",
        ),
        "unknown output": Case(
            GOOD_PATH,
            json_body([fp32], outputs=[{"name": "NOPE"}]),
            400,
            "unexpected inference output 'NOPE' for model 'identity_fp32'",
        ),
        "unsupported Content-Encoding": Case(
            GOOD_PATH,
            GOOD_REQUEST,
            501,
            "Unsupported compression type",
            headers={"Content-Encoding": "br"},
        ),
        "wrong method on infer": Case(GOOD_PATH, b"", 405, "Method Not Allowed", method="GET"),
        "wrong method on health": Case(
            "/v2/health/live", b"", 405, "Method Not Allowed", method="PUT"
        ),
        "wrong method on metadata": Case(
            "/v2/models/identity_fp32", b"", 405, "Method Not Allowed", method="DELETE"
        ),
        "unknown path": Case("/v2/nothing/here", b"", 404, "Not Found", method="GET"),
        "unknown top-level path": Case("/v3", b"", 404, "Not Found", method="GET"),
        "unknown model action": Case("/v2/models/identity_fp32/explode", b"{}", 404, "Not Found"),
        "non-numeric version": Case(
            "/v2/models/identity_fp32/versions/one/infer", GOOD_REQUEST, 404, "Not Found"
        ),
    }

    body, headers = binary_body(fp32_binary_input(8), THREE_FP32[:8])
    cases["binary byte size does not match the shape"] = Case(
        GOOD_PATH,
        body,
        400,
        f"{ID}input byte size mismatch for input 'INPUT0' for model 'identity_fp32'. "
        "Expected 12, got 8",
        headers,
    )
    body, headers = binary_body(fp32_binary_input(16), THREE_FP32)
    cases["binary data shorter than binary_data_size"] = Case(
        GOOD_PATH,
        body,
        400,
        "unexpected size for input 'INPUT0', expecting 4 additional bytes for model "
        "'identity_fp32'",
        headers,
    )
    body, headers = binary_body(fp32_binary_input(12), THREE_FP32 + b"\x00")
    cases["leftover binary bytes"] = Case(
        GOOD_PATH, body, 400, "unexpected additional input data for model 'identity_fp32'", headers
    )
    cases["binary input without Inference-Header-Content-Length"] = Case(
        GOOD_PATH,
        json_body(fp32_binary_input(12)),
        400,
        "unexpected size for input 'INPUT0', expecting 12 additional bytes for model "
        "'identity_fp32'",
    )
    body, headers = binary_body(fp32_binary_input(12), THREE_FP32, header_length="10000")
    cases["Inference-Header-Content-Length beyond the body"] = Case(
        GOOD_PATH,
        body,
        400,
        f"inference header size should be in range (0, {len(body)}), got: 10000",
        headers,
    )
    body, headers = binary_body(fp32_binary_input(12), THREE_FP32, header_length="-5")
    cases["negative Inference-Header-Content-Length"] = Case(
        GOOD_PATH,
        body,
        400,
        f"inference header size should be in range (0, {len(body)}), got: -5",
        headers,
    )
    # protocol.md §1.5. (Triton 2.51 reads the value with atoi, takes "abc" as 0 and so
    # answers as for a raw binary request whose size does not fit.)
    body, headers = binary_body(fp32_binary_input(12), THREE_FP32, header_length="abc")
    cases["non-integer Inference-Header-Content-Length"] = Case(
        GOOD_PATH,
        body,
        400,
        "Unable to parse Inference-Header-Content-Length, got: abc",
        headers,
    )
    raw = {"Inference-Header-Content-Length": "0"}
    cases["raw binary request that does not fit the input"] = Case(
        GOOD_PATH,
        THREE_FP32 + b"\x00",
        400,
        f"{ID}input byte size mismatch for input 'raw_input' for model 'identity_fp32'. "
        "Expected 12, got 13",
        raw,
    )
    cases["raw binary request to a model with two inputs"] = Case(
        "/v2/models/add_sub/infer",
        THREE_FP32,
        400,
        f"{ID}Raw request must only have 1 input (found 1) to be deduced but got 2 inputs in "
        "'add_sub' model configuration",
        raw,
    )
    cases["raw binary request to a BYTES input of shape [-1]"] = Case(
        "/v2/models/dtype_bytes/infer",
        b"hello",
        400,
        f"{ID}For BYTE datatype raw input 'INPUT0', the model must have input shape [1]",
        raw,
    )
    return cases


CASES = _cases()


@pytest.mark.parametrize("name", list(CASES))
def test_error_answer(
    connection: http.client.HTTPConnection,
    client: httpclient.InferenceServerClient,
    name: str,
) -> None:
    case = CASES[name]
    answer = send(connection, case.method, case.path, case.body, case.headers)
    assert answer.status == case.status, answer
    if case.prefix_only:
        assert answer.message.startswith(case.message), answer
    else:
        assert answer.message == case.message
    assert_still_serving(connection, client)


def test_extra_input_error_names_the_inputs(
    connection: http.client.HTTPConnection, client: httpclient.InferenceServerClient
) -> None:
    answer = send(connection, "POST", CASES["extra input"].path, CASES["extra input"].body)
    listed = answer.message.split("Got input(s) [", 1)[1].split("]", 1)[0]
    assert sorted(listed.split(",")) == ["'EXTRA'", "'INPUT0'"]
    assert_still_serving(connection, client)


def test_unsupported_content_encoding_lists_the_supported_ones(
    connection: http.client.HTTPConnection, client: httpclient.InferenceServerClient
) -> None:
    case = CASES["unsupported Content-Encoding"]
    answer = send(connection, case.method, case.path, case.body, case.headers)
    assert answer.status == 501
    assert answer.headers.get("accept-encoding") == "gzip, deflate"
    assert_still_serving(connection, client)


# --------------------------------------------------------------------------- model errors


def test_model_that_raises_in_execute(
    connection: http.client.HTTPConnection, client: httpclient.InferenceServerClient
) -> None:
    answer = send(
        connection,
        "POST",
        "/v2/models/raise_error/infer",
        json_body([tensor("INPUT0", [2], "FP32", [1, -2])]),
    )
    assert answer.status == 500
    # Triton's Python backend appends the model's traceback after this.
    assert answer.message.startswith(
        "Failed to process the request(s) for model 'raise_error_0', message: ValueError: "
        "INPUT0 must not be negative"
    ), answer
    assert_still_serving(connection, client)
    # The model itself serves the next request.
    good = httpclient.InferInput("INPUT0", [2], "FP32")
    good.set_data_from_numpy(np.array([1, 2], np.float32))
    assert client.infer("raise_error", [good]).as_numpy("OUTPUT0").tolist() == [1.0, 2.0]


@pytest.mark.parametrize(
    ("code", "status"),
    [
        ("UNKNOWN", 400),
        ("INTERNAL", 500),
        ("NOT_FOUND", 404),
        ("INVALID_ARG", 400),
        ("UNAVAILABLE", 503),
        ("UNSUPPORTED", 501),
        ("ALREADY_EXISTS", 400),
        ("CANCELLED", 400),
    ],
)
def test_model_returning_triton_error(
    connection: http.client.HTTPConnection,
    client: httpclient.InferenceServerClient,
    code: str,
    status: int,
) -> None:
    answer = send(
        connection,
        "POST",
        "/v2/models/triton_error/infer",
        json_body([tensor("INPUT0", [1], "FP32", [1])], parameters={"error_code": code}),
    )
    assert (answer.status, answer.message) == (status, f"error requested with code {code}")
    assert_still_serving(connection, client)


def test_model_returning_triton_error_without_a_code(
    connection: http.client.HTTPConnection, client: httpclient.InferenceServerClient
) -> None:
    answer = send(
        connection,
        "POST",
        "/v2/models/triton_error/infer",
        json_body([tensor("INPUT0", [1], "FP32", [1])], parameters={"error_code": "DEFAULT"}),
    )
    assert (answer.status, answer.message) == (500, "error requested without a code")
    assert_still_serving(connection, client)


def test_triton_error_with_a_request_id(
    connection: http.client.HTTPConnection, client: httpclient.InferenceServerClient
) -> None:
    answer = send(
        connection,
        "POST",
        "/v2/models/triton_error/infer",
        json_body([tensor("INPUT0", [2], "FP32", [1, -2])], id="abc"),
    )
    assert (answer.status, answer.message) == (400, "INPUT0 must not be negative")
    assert_still_serving(connection, client)


def test_json_fp16_output(
    connection: http.client.HTTPConnection, client: httpclient.InferenceServerClient
) -> None:
    inputs = [
        {
            "name": "INPUT0",
            "shape": [1, 2],
            "datatype": "FP16",
            "parameters": {"binary_data_size": 4},
        }
    ]
    header = json_body(inputs, outputs=[{"name": "OUTPUT0", "parameters": {"binary_data": False}}])
    answer = send(
        connection,
        "POST",
        "/v2/models/dtype_fp16/infer",
        header + np.array([1, 2], "<f2").tobytes(),
        {"Inference-Header-Content-Length": str(len(header))},
    )
    assert (answer.status, answer.message) == (
        400,
        "sending FP16 data via JSON is not supported. Please use the binary data format for output",
    )
    assert_still_serving(connection, client)


# --------------------------------------------------------------------------- through the client


def client_error(
    client: httpclient.InferenceServerClient,
    model: str,
    inputs: list[httpclient.InferInput],
    **options: Any,
) -> httpclient.InferenceServerException:
    with pytest.raises(httpclient.InferenceServerException) as caught:
        client.infer(model, inputs, **options)
    return caught.value


def fp32_input(name: str, data: np.ndarray) -> httpclient.InferInput:
    tensor = httpclient.InferInput(name, list(data.shape), "FP32")
    tensor.set_data_from_numpy(data)
    return tensor


def test_client_sees_status_and_message(
    connection: http.client.HTTPConnection, client: httpclient.InferenceServerClient
) -> None:
    row = np.ones((1, 3), np.float32)
    unknown = client_error(client, "nope", [fp32_input("INPUT0", row)])
    assert (unknown.status(), unknown.message()) == (
        "404",
        "Request for unknown model: 'nope' is not found",
    )
    version = client_error(client, "identity_fp32", [fp32_input("INPUT0", row)], model_version="3")
    assert (version.status(), version.message()) == (
        "404",
        "Request for unknown model: 'identity_fp32' version 3 is not found",
    )
    shape = client_error(client, "identity_fp32", [fp32_input("INPUT0", np.ones(3, np.float32))])
    assert shape.status() == "400"
    assert shape.message().startswith(
        f"{ID}unexpected shape for input 'INPUT0' for model 'identity_fp32'. Expected [-1,-1], "
        "got [3]. "
    )
    raised = client_error(client, "raise_error", [fp32_input("INPUT0", np.array([-1], np.float32))])
    assert raised.status() == "500"
    assert "ValueError: INPUT0 must not be negative" in raised.message()
    assert_still_serving(connection, client)


@pytest.mark.parametrize(
    "misplaced",
    [
        {"parameters": {"data": [1.0, 2.0, 3.0]}},  # data belongs to the input itself
        {"binary_data_size": 12},  # and binary_data_size to its parameters
    ],
    ids=["data_in_parameters", "binary_data_size_outside_parameters"],
)
def test_a_data_source_in_the_wrong_place_is_no_source(
    connection: http.client.HTTPConnection,
    client: httpclient.InferenceServerClient,
    misplaced: dict[str, Any],
) -> None:
    # Found by the json_infer fuzzer: each was taken for the input's source, then looked up
    # where it is not (a KeyError, answered 500).
    entry = {"name": "INPUT0", "shape": [1, 3], "datatype": "FP32", **misplaced}
    answer = send(connection, "POST", GOOD_PATH, json_body([entry]))
    assert answer.status == 400, answer.body
    assert answer.message.endswith("But no field is set"), answer.message
    assert_still_serving(connection, client)
