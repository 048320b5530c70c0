"""The generate extension and the opt-in event stream of ``/infer``, with the clients users
call them with: ``requests`` for the single JSON answer, ``httpx`` with ``httpx-sse`` (which
reads server-sent events by the HTML standard's rules, as a browser's EventSource does) for
the streams. Expected bodies, statuses and messages are Triton 2.51's where Triton has the
endpoint (checked against it; the differential test compares the two servers directly).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import numpy as np
import pytest
import requests
import tritonclient.http as httpclient
from harness import ServerHandle, run_pytriton_server
from httpx_sse import connect_sse
from streaming_models import write_echo, write_tokens

ONE_RESPONSE = (
    "generate expects model to produce exactly 1 response, use generate stream for model that "
    "generates various number of responses"
)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerHandle]:
    root = tmp_path_factory.mktemp("http-streaming")
    write_tokens(root, "tokens")
    write_echo(root, "echo")
    with run_pytriton_server(root) as handle:
        yield handle


def url(server: ServerHandle, path: str) -> str:
    return f"http://{server.http_url}{path}"


def stream_events(
    server: ServerHandle, path: str, body: Any
) -> tuple[int, str, list[dict[str, Any]]]:
    """(status, content type, every event's data as JSON) of an event-stream answer; the
    request sends ``Accept: text/event-stream``, as a browser's EventSource does."""
    with (
        httpx.Client(timeout=60) as client,
        connect_sse(client, "POST", url(server, path), json=body) as source,
    ):
        events = [json.loads(event.data) for event in source.iter_sse()]
        response = source.response
        return response.status_code, response.headers["content-type"], events


def token(index: int, text: str = "t", **extra: Any) -> dict[str, Any]:
    return {
        "index": index,
        "model_name": "tokens",
        "model_version": "1",
        "text_output": f"{text}{index}",
        **extra,
    }


# ----------------------------------------------------------------------- generate_stream


@pytest.mark.parametrize("count", [0, 1, 100])
def test_generate_stream_sends_every_response_in_order(server: ServerHandle, count: int) -> None:
    status, content_type, events = stream_events(
        server, "/v2/models/tokens/generate_stream", {"text_input": "t", "count": count}
    )
    assert status == 200
    assert content_type == "text/event-stream; charset=utf-8"
    assert events == [token(i) for i in range(count)]


def test_generate_stream_final_flag_with_the_last_response(server: ServerHandle) -> None:
    body = {"text_input": "w", "count": 3, "parameters": {"final_with_last": True}, "id": "r7"}
    _, _, events = stream_events(server, "/v2/models/tokens/versions/1/generate_stream", body)
    assert events == [token(i, "w", id="r7") for i in range(3)]


def test_generate_stream_error_after_the_first_response_keeps_the_status(
    server: ServerHandle,
) -> None:
    status, _, events = stream_events(
        server, "/v2/models/tokens/generate_stream", {"text_input": "t", "count": 3, "fail_at": 1}
    )
    assert status == 200
    assert events == [token(0), {"error": "failed at 1"}, token(2)]


def test_generate_stream_error_first_sets_the_status(server: ServerHandle) -> None:
    status, content_type, events = stream_events(
        server, "/v2/models/tokens/generate_stream", {"text_input": "t", "count": 2, "fail_at": 0}
    )
    assert (status, content_type) == (400, "text/event-stream; charset=utf-8")
    assert events == [{"error": "failed at 0"}, token(1)]


def test_generate_stream_reads_like_a_browser_line_by_line(server: ServerHandle) -> None:
    # What a hand-written client does with requests: split lines, keep the data fields.
    with requests.post(
        url(server, "/v2/models/tokens/generate_stream"),
        json={"text_input": "t", "count": 5},
        stream=True,
        timeout=60,
    ) as response:
        lines = list(response.iter_lines())
    assert response.headers["Transfer-Encoding"] == "chunked"
    assert lines == [line for i in range(5) for line in (b"data: " + _compact(token(i)), b"")]


def _compact(document: dict[str, Any]) -> bytes:
    return json.dumps(document, separators=(",", ":")).encode()


# ------------------------------------------------------------------------------ generate


@pytest.mark.parametrize(
    ("count", "expected"),
    [(1, token(0)), (0, {"error": ONE_RESPONSE}), (2, {"error": ONE_RESPONSE})],
    ids=["one", "none", "two"],
)
def test_generate_answers_exactly_one_response(
    server: ServerHandle, count: int, expected: dict[str, Any]
) -> None:
    response = requests.post(
        url(server, "/v2/models/tokens/generate"), json={"text_input": "t", "count": count}
    )
    assert response.status_code == 200  # Triton's status, even for the error
    assert response.headers["Content-Type"] == "application/json"
    assert response.json() == expected


def test_generate_maps_inputs_and_parameters_as_triton(server: ServerHandle) -> None:
    body = {
        "id": "q1",
        "text_input": "hello",
        "ivec": [1, 2, 3],
        "temperature": 0.5,
        "stream": False,
        "max_tokens": 7,
        "big": 2**64,
        "parameters": {"fmat": [1, 2, 3, 4], "top_p": "x"},
    }
    response = requests.post(url(server, "/v2/models/echo/generate"), json=body)
    assert response.status_code == 200
    answer = response.json()
    assert list(answer) == sorted(answer)  # Triton's keys come sorted
    params = json.loads(answer.pop("params"))
    assert answer == {
        "fmat_out": [1.0, 2.0, 3.0, 4.0],  # [2, -1] filled as [2, 2], flat in the answer
        "id": "q1",
        "ivec_out": [1, 2, 3],
        "model_name": "echo",
        "model_version": "1",
        "text_output": "hello",
    }
    # Every other key is a parameter, as sent ("id" too), beyond int64 a double.
    assert params == {
        "id": "q1",
        "temperature": 0.5,
        "stream": False,
        "max_tokens": 7,
        "big": float(2**64),
        "top_p": "x",
    }


def test_generate_unwraps_one_element_outputs(server: ServerHandle) -> None:
    response = requests.post(
        url(server, "/v2/models/echo/generate"), json={"text_input": "a", "ivec": 5}
    )
    assert response.json()["ivec_out"] == 5


@pytest.mark.parametrize(
    ("body", "status", "message"),
    [
        (
            {"text_input": "a", "fmat": [1, 2, 3]},
            400,
            "The schema can not convert input 'fmat' to tensor with proper shape",
        ),
        (
            {"text_input": ["a", "b"]},
            400,
            "The schema can not convert input 'text_input' to tensor with proper shape",
        ),
        (
            {"text_input": 5},
            500,
            "Unable to parse JSON bytes array: attempt to access JSON non-string as string",
        ),
        (
            {"text_input": "a", "ivec": ["x"]},
            500,
            "Unable to parse 'data': attempt to access JSON non-signed-integer as signed-integer",
        ),
        (
            {"text_input": "a", "weird": [1]},
            400,
            "parameter 'weird' has invalid type. It should be either 'int', 'bool', or 'string'.",
        ),
        (
            {"text_input": "a", "parameters": {"parameters": {"x": 1}}},
            400,
            "Converting keyword: 'parameters': parameter 'parameters' has invalid type. It "
            "should be either 'int', 'bool', or 'string'.",
        ),
        (
            {"text_input": "a", "parameters": 5},
            500,
            "Expected JSON object for keyword: 'parameters': attempt to access JSON non-object "
            "as object",
        ),
        (
            {"text_input": "a", "id": 5},
            500,
            "Unable to parse 'id': attempt to access JSON non-string as string",
        ),
        ([1, 2], 500, "attempt to get members for non-object"),
    ],
)
@pytest.mark.parametrize("endpoint", ["generate", "generate_stream"])
def test_generate_refuses_bad_bodies_with_tritons_answers(
    server: ServerHandle, endpoint: str, body: Any, status: int, message: str
) -> None:
    response = requests.post(url(server, f"/v2/models/echo/{endpoint}"), json=body)
    assert (response.status_code, response.json()) == (status, {"error": message})
    assert response.headers["Content-Type"] == "application/json"


def test_generate_refuses_a_compressed_body(server: ServerHandle) -> None:
    response = requests.post(
        url(server, "/v2/models/echo/generate"),
        data=b"{}",
        headers={"Content-Encoding": "gzip"},
    )
    assert response.status_code == 400
    assert response.json() == {
        "error": "Unsupported content-encoding, only 'identity' is supported."
    }


def test_generate_of_an_unknown_version(server: ServerHandle) -> None:
    response = requests.post(url(server, "/v2/models/echo/versions/9/generate"), json={})
    assert response.status_code == 404
    assert response.json() == {"error": "Request for unknown model: 'echo' version 9 is not found"}


# ------------------------------------------------------------- /infer as an event stream


def infer_body(count: int, **parameters: Any) -> dict[str, Any]:
    return {
        "id": "s",
        "inputs": [
            {"name": "text_input", "shape": [1], "datatype": "BYTES", "data": ["e"]},
            {"name": "count", "shape": [1], "datatype": "INT32", "data": [count]},
        ],
        "parameters": parameters,
    }


def infer_event(index: int, final: bool) -> dict[str, Any]:
    return {
        "id": "s",
        "model_name": "tokens",
        "model_version": "1",
        "parameters": {"triton_final_response": final},
        "outputs": [
            {"name": "text_output", "datatype": "BYTES", "shape": [1], "data": [f"e{index}"]},
            {"name": "index", "datatype": "INT32", "shape": [1], "data": [index]},
        ],
    }


SSE = {"Accept": "text/event-stream"}


def test_decoupled_infer_without_the_opt_in_is_tritons_501(server: ServerHandle) -> None:
    response = requests.post(url(server, "/v2/models/tokens/infer"), json=infer_body(2))
    assert response.status_code == 501
    assert response.json() == {
        "error": "HTTP end point doesn't support models with decoupled transaction policy"
    }
    with httpclient.InferenceServerClient(server.http_url) as client:
        text = httpclient.InferInput("text_input", [1], "BYTES")
        text.set_data_from_numpy(np.array([b"e"], np.object_))
        with pytest.raises(httpclient.InferenceServerException, match="decoupled"):
            client.infer("tokens", [text])


@pytest.mark.parametrize("count", [0, 1, 100])
def test_decoupled_infer_streams_events_on_request(server: ServerHandle, count: int) -> None:
    status, content_type, events = stream_events(
        server, "/v2/models/tokens/infer", infer_body(count)
    )
    assert (status, content_type) == (200, "text/event-stream; charset=utf-8")
    # FINAL comes alone after the last response: no event for it unless asked.
    assert events == [infer_event(i, False) for i in range(count)]


def test_infer_stream_final_flag_and_empty_final_response(server: ServerHandle) -> None:
    _, _, with_last = stream_events(
        server, "/v2/models/tokens/infer", infer_body(2, final_with_last=True)
    )
    assert with_last == [infer_event(0, False), infer_event(1, True)]
    _, _, empty_final = stream_events(
        server,
        "/v2/models/tokens/infer",
        infer_body(1, triton_enable_empty_final_response=True),
    )
    assert empty_final == [
        infer_event(0, False),
        {
            "id": "s",
            "model_name": "tokens",
            "model_version": "1",
            "parameters": {"triton_final_response": True},
            "outputs": [],
        },
    ]


def test_infer_stream_of_a_model_that_is_not_decoupled(server: ServerHandle) -> None:
    body = {"inputs": [{"name": "text_input", "shape": [1], "datatype": "BYTES", "data": ["x"]}]}
    _, _, events = stream_events(server, "/v2/models/echo/infer", body)
    assert [event["parameters"] for event in events] == [{"triton_final_response": True}]
    assert events[0]["outputs"][0]["data"] == ["x"]


def test_infer_stream_refuses_binary_outputs(server: ServerHandle) -> None:
    response = requests.post(
        url(server, "/v2/models/tokens/infer"),
        json=infer_body(1, binary_data_output=True),
        headers=SSE,
    )
    assert response.status_code == 400
    assert "binary tensor data cannot be sent as server-sent events" in response.json()["error"]
