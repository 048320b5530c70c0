"""The OpenAI-compatible front end (``--allow-openai``) through OpenAI's own Python client:
the bundled ``tiny_llm`` and ``tiny_embed`` (deterministic, so the outputs are exact), and
models this test writes for what the bundled ones cannot show (a non-decoupled text model
echoing its request parameters, a stream failing half-way, a model outside the tensor
contract, a slow generator to leave in the middle of)."""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Iterator
from typing import Any, NamedTuple

import httpx
import numpy as np
import openai
import pytest
import tritonclient.http as httpclient
from harness import REPO_ROOT, ServerHandle, free_port, run_pytriton_server, write_python_model

OPENAI_MODELS = REPO_ROOT / "examples" / "openai_models"

# Non-decoupled: answers the request parameters it received, as JSON text.
PARAMETERS_MODEL = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            text = np.array([request.parameters().encode()], np.object_)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("text_output", text)]))
        return responses
"""

PARAMETERS_CONFIG = """
name: "parameters"
backend: "python"
input [ { name: "text_input" data_type: TYPE_STRING dims: [ 1 ] } ]
output [ { name: "text_output" data_type: TYPE_STRING dims: [ 1 ] } ]
"""

# Decoupled: one chunk, then an error.
FAILING_MODEL = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            sender = request.get_response_sender()
            text = np.array([b"half"], np.object_)
            sender.send(pb_utils.InferenceResponse([pb_utils.Tensor("text_output", text)]))
            error = pb_utils.TritonError("the model broke down")
            sender.send(pb_utils.InferenceResponse(error=error),
                        flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
"""

FAILING_CONFIG = """
name: "failing"
backend: "python"
model_transaction_policy { decoupled: true }
input [ { name: "text_input" data_type: TYPE_STRING dims: [ 1 ] } ]
output [ { name: "text_output" data_type: TYPE_STRING dims: [ 1 ] } ]
"""

NOT_TEXT_CONFIG = """
name: "not_text"
backend: "python"
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "text_output" data_type: TYPE_STRING dims: [ 1 ] } ]
"""

SLOW_DELAY_MS = 10  # per token: a stream of 100000 tokens would take 1000 s


class OpenAIServer(NamedTuple):
    handle: ServerHandle
    base_url: str  # the OpenAI API's, as OpenAI's client takes it


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OpenAIServer]:
    root = tmp_path_factory.mktemp("openai-models")
    write_python_model(root, "parameters", PARAMETERS_CONFIG, PARAMETERS_MODEL)
    write_python_model(root, "failing", FAILING_CONFIG, FAILING_MODEL)
    write_python_model(root, "not_text", NOT_TEXT_CONFIG, PARAMETERS_MODEL)
    slow = root / "slow_llm"
    shutil.copytree(OPENAI_MODELS / "tiny_llm", slow, ignore=shutil.ignore_patterns("__py*"))
    config = (slow / "config.pbtxt").read_text()
    config = config.replace('name: "tiny_llm"', 'name: "slow_llm"')
    config = config.replace('string_value: "0"', f'string_value: "{SLOW_DELAY_MS}"')
    (slow / "config.pbtxt").write_text(config)
    port = free_port()
    flags = ("--allow-openai=true", "--openai-address=127.0.0.1", f"--openai-port={port}")
    with run_pytriton_server([OPENAI_MODELS, root], *flags) as handle:
        yield OpenAIServer(handle, f"http://127.0.0.1:{port}/v1")


@pytest.fixture(scope="module")
def base_url(server: OpenAIServer) -> str:
    return server.base_url


@pytest.fixture(scope="module")
def client(base_url: str) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=base_url, api_key="unused", max_retries=0, timeout=60) as made:
        yield made


def chat(text: str) -> list[Any]:
    return [{"role": "user", "content": text}]


def error_of(raised: pytest.ExceptionInfo[openai.APIStatusError]) -> dict[str, Any]:
    """The error object of an answer, checked to be in OpenAI's format."""
    body = raised.value.response.json()
    assert set(body) == {"error"}
    assert set(body["error"]) == {"message", "type", "param", "code"}
    assert raised.value.response.headers["content-type"] == "application/json"
    return dict(body["error"])


# ------------------------------------------------------------------------------ models


def test_models_lists_every_ready_model(client: openai.OpenAI) -> None:
    models = client.models.list().data
    names = ["failing", "not_text", "parameters", "slow_llm", "tiny_embed", "tiny_llm"]
    assert sorted(model.id for model in models) == names
    for model in models:
        assert model.object == "model"
        assert model.owned_by == "pytriton-core"
        assert abs(model.created - time.time()) < 24 * 3600


def test_a_model_is_retrieved_by_name(client: openai.OpenAI) -> None:
    model = client.models.retrieve("tiny_llm")
    assert (model.id, model.object) == ("tiny_llm", "model")
    with pytest.raises(openai.NotFoundError) as raised:
        client.models.retrieve("absent")
    assert error_of(raised) == {
        "message": "The model 'absent' does not exist",
        "type": "invalid_request_error",
        "param": "model",
        "code": "model_not_found",
    }


# ------------------------------------------------------------------------- completions


def test_completion_is_exact_with_its_usage(client: openai.OpenAI) -> None:
    answer = client.completions.create(model="tiny_llm", prompt="The quick brown", max_tokens=20)
    assert answer.object == "text_completion"
    assert answer.id.startswith("cmpl-")
    assert answer.model == "tiny_llm"
    assert len(answer.choices) == 1
    choice = answer.choices[0]
    assert (choice.index, choice.text, choice.finish_reason) == (
        0,
        " fox jumps over the ",
        "length",
    )
    assert answer.usage is not None
    usage = answer.usage
    assert (usage.prompt_tokens, usage.completion_tokens, usage.total_tokens) == (15, 20, 35)


def test_completion_stops_at_the_end_of_a_line_and_at_a_stop_sequence(
    client: openai.OpenAI,
) -> None:
    answer = client.completions.create(model="tiny_llm", prompt="The quick", max_tokens=100)
    assert answer.choices[0].text == " brown fox jumps over the lazy dog."
    assert answer.choices[0].finish_reason == "stop"
    stopped = client.completions.create(
        model="tiny_llm", prompt="The quick", max_tokens=100, stop=["jumps", "zzz"]
    )
    assert stopped.choices[0].text == " brown fox "  # the stop sequence is not sent
    assert stopped.choices[0].finish_reason == "stop"
    assert stopped.usage is not None and stopped.usage.completion_tokens == len(" brown fox ")


def test_completion_echo_returns_the_prompt_first(client: openai.OpenAI) -> None:
    answer = client.completions.create(
        model="tiny_llm", prompt="Once upon", max_tokens=5, echo=True
    )
    assert answer.choices[0].text == "Once upon a ti"


def test_streamed_completion_sends_a_chunk_per_token(client: openai.OpenAI) -> None:
    chunks = list(
        client.completions.create(
            model="tiny_llm",
            prompt="The quick brown",
            max_tokens=20,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    *text_chunks, last, usage_chunk = chunks
    assert [c.choices[0].text for c in text_chunks] == list(" fox jumps over the ")
    assert all(c.choices[0].finish_reason is None and c.usage is None for c in text_chunks)
    assert (last.choices[0].text, last.choices[0].finish_reason) == ("", "length")
    assert usage_chunk.choices == []
    assert usage_chunk.usage is not None
    assert (usage_chunk.usage.prompt_tokens, usage_chunk.usage.completion_tokens) == (15, 20)
    assert len({c.id for c in chunks}) == 1
    assert {c.object for c in chunks} == {"text_completion"}


def test_stream_is_server_sent_events_ending_with_done(base_url: str) -> None:
    body = {"model": "tiny_llm", "prompt": "The quick brown", "max_tokens": 3, "stream": True}
    answer = httpx.post(f"{base_url}/completions", json=body, timeout=60)
    assert answer.status_code == 200
    assert answer.headers["content-type"].startswith("text/event-stream")
    events = answer.text.split("\n\n")
    assert events[-2:] == ["data: [DONE]", ""]
    texts = [json.loads(e.removeprefix("data: "))["choices"][0]["text"] for e in events[:-2]]
    assert texts == [" ", "f", "o", ""]


# ---------------------------------------------------------------------- chat completions


def test_chat_completion_is_exact_with_its_usage(client: openai.OpenAI) -> None:
    answer = client.chat.completions.create(
        model="tiny_llm", messages=chat("Who are you?"), max_completion_tokens=100
    )
    assert answer.object == "chat.completion"
    assert answer.id.startswith("chatcmpl-")
    choice = answer.choices[0]
    assert choice.message.role == "assistant"
    assert choice.message.content == "I am tiny_llm. I only know a few lines of text."
    assert choice.finish_reason == "stop"
    assert answer.usage is not None
    # The prompt the model sees: "user: Who are you?\nassistant: " (30 characters).
    usage = answer.usage
    assert (usage.prompt_tokens, usage.completion_tokens, usage.total_tokens) == (30, 47, 77)


def test_chat_completion_reads_text_parts_and_the_whole_conversation(
    client: openai.OpenAI,
) -> None:
    messages: list[Any] = [
        {"role": "system", "content": "You are tiny."},
        {
            "role": "user",
            "content": [{"type": "text", "text": "Tell me "}, {"type": "text", "text": "a story."}],
        },
    ]
    answer = client.chat.completions.create(model="tiny_llm", messages=messages, max_tokens=200)
    text = "Once upon a time a server answered every request in order."
    assert answer.choices[0].message.content == text


def test_streamed_chat_opens_with_the_role_and_ends_with_the_reason(
    client: openai.OpenAI,
) -> None:
    chunks = list(
        client.chat.completions.create(
            model="tiny_llm", messages=chat("Hello!"), max_tokens=16, stream=True
        )
    )
    first, *text_chunks, last = chunks
    assert first.choices[0].delta.role == "assistant"
    assert first.choices[0].delta.content == ""
    assert "".join(c.choices[0].delta.content or "" for c in text_chunks) == "Hello! I am tiny"
    assert all(len(c.choices[0].delta.content or "") == 1 for c in text_chunks)
    assert last.choices[0].finish_reason == "length"
    assert last.choices[0].delta.content is None
    assert {c.object for c in chunks} == {"chat.completion.chunk"}


def test_sampling_fields_reach_the_model_as_request_parameters(client: openai.OpenAI) -> None:
    answer = client.chat.completions.create(
        model="parameters",
        messages=chat("hi"),
        max_tokens=7,
        temperature=0.5,
        top_p=0.9,
        seed=3,
        stop="END",
        presence_penalty=0.25,
        user="someone",
        extra_body={"parameters": {"top_k": 5, "ignore_eos": True}},
    )
    assert json.loads(answer.choices[0].message.content or "") == {
        "max_tokens": 7,
        "temperature": 0.5,
        "top_p": 0.9,
        "seed": 3,
        "stop": '["END"]',  # lists and objects as JSON text
        "presence_penalty": 0.25,
        "user": "someone",
        "top_k": 5,
        "ignore_eos": True,
    }
    # A model that sends no token counts: no usage.
    assert answer.usage is None


def test_a_model_that_is_not_decoupled_streams_its_one_answer(client: openai.OpenAI) -> None:
    chunks = list(
        client.completions.create(model="parameters", prompt="x", max_tokens=2, stream=True)
    )
    assert [c.choices[0].text for c in chunks] == ['{"max_tokens": 2}', ""]
    assert chunks[-1].choices[0].finish_reason == "stop"


# --------------------------------------------------------------------------- embeddings


def test_embeddings_are_unit_vectors_with_usage(client: openai.OpenAI) -> None:
    answer = client.embeddings.create(
        model="tiny_embed", input=["hello", "world", "hello"], encoding_format="float"
    )
    assert answer.object == "list"
    assert answer.model == "tiny_embed"
    assert [item.index for item in answer.data] == [0, 1, 2]
    vectors = np.array([item.embedding for item in answer.data])
    assert vectors.shape == (3, 32)
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, rtol=1e-6)
    np.testing.assert_array_equal(vectors[0], vectors[2])
    assert not np.array_equal(vectors[0], vectors[1])
    assert (answer.usage.prompt_tokens, answer.usage.total_tokens) == (15, 15)
    # " hello " has five trigrams, hashed (CRC-32) to coordinates 10 (negative), 27, 1, 20
    # and 22 (positive): each of length 1/sqrt(5).
    expected = np.zeros(32)
    expected[[27, 1, 20, 22]] = 1 / np.sqrt(5)
    expected[10] = -1 / np.sqrt(5)
    np.testing.assert_allclose(vectors[0], expected, rtol=1e-6)


def test_embeddings_in_base64_and_fewer_dimensions(client: openai.OpenAI) -> None:
    floats = client.embeddings.create(model="tiny_embed", input="hello", encoding_format="float")
    # The client asks for base64 unless told otherwise, and decodes it.
    decoded = client.embeddings.create(model="tiny_embed", input="hello")
    np.testing.assert_array_equal(
        np.array(decoded.data[0].embedding, np.float32),
        np.array(floats.data[0].embedding, np.float32),
    )
    short = client.embeddings.create(model="tiny_embed", input="hello", dimensions=8)
    assert len(short.data[0].embedding) == 8
    with pytest.raises(openai.BadRequestError) as raised:
        client.embeddings.create(model="tiny_embed", input="hello", dimensions=64)
    assert "1 to 32 dimensions, not 64" in error_of(raised)["message"]


# ------------------------------------------------------------------------------- errors


@pytest.mark.parametrize(
    ("fields", "param", "message"),
    [
        ({"temperature": 5}, "temperature", "temperature must be between 0 and 2, not 5"),
        ({"n": 2}, "n", "n must be 1: this server returns one choice per request"),
        ({"max_tokens": 0}, "max_tokens", "0 is less than the minimum of 1 - 'max_tokens'"),
        ({"colour": "red"}, "colour", "Unrecognized request argument supplied: colour"),
        ({"logprobs": 2}, "logprobs", "logprobs is not supported by this server"),
    ],
)
def test_a_bad_field_is_refused_in_openai_format(
    client: openai.OpenAI, fields: dict[str, Any], param: str, message: str
) -> None:
    with pytest.raises(openai.BadRequestError) as raised:
        client.completions.create(model="tiny_llm", prompt="x", extra_body=fields)
    assert raised.value.status_code == 400
    assert error_of(raised) == {
        "message": message,
        "type": "invalid_request_error",
        "param": param,
        "code": None,
    }


def test_unknown_model_and_unknown_path(client: openai.OpenAI, base_url: str) -> None:
    with pytest.raises(openai.NotFoundError) as raised:
        client.chat.completions.create(model="absent", messages=chat("hi"))
    assert error_of(raised)["code"] == "model_not_found"
    answer = httpx.get(f"{base_url}/assistants", timeout=60)
    assert answer.status_code == 404
    assert answer.json() == {
        "error": {
            "message": "Not Found",
            "type": "invalid_request_error",
            "param": None,
            "code": None,
        }
    }
    assert httpx.delete(f"{base_url}/models", timeout=60).status_code == 405


def test_a_body_that_is_not_json(base_url: str) -> None:
    answer = httpx.post(f"{base_url}/completions", content=b"{nope", timeout=60)
    assert answer.status_code == 400
    assert answer.json()["error"]["type"] == "invalid_request_error"
    assert answer.json()["error"]["message"].startswith("We could not parse the JSON body")


def test_a_model_outside_the_contract_is_named(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as raised:
        client.completions.create(model="not_text", prompt="x")
    error = error_of(raised)
    assert error["param"] == "model"
    assert error["message"] == (
        "The model 'not_text' does not follow the OpenAI front end's tensor contract: it has "
        "no input text_input (see docs/openai.md)"
    )
    with pytest.raises(openai.BadRequestError) as raised:
        client.embeddings.create(model="tiny_llm", input="x")
    assert "has no floating-point output embedding" in error_of(raised)["message"]


def test_an_error_of_the_model_keeps_its_status(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as raised:
        client.completions.create(model="tiny_llm", prompt="x", frequency_penalty=1.0)
    assert error_of(raised) == {
        "message": "tiny_llm does not implement frequency_penalty",
        "type": "invalid_request_error",
        "param": None,
        "code": None,
    }
    with pytest.raises(openai.InternalServerError) as raised:
        client.completions.create(model="failing", prompt="x")
    assert error_of(raised)["type"] == "server_error"
    assert error_of(raised)["message"] == "the model broke down"


def test_an_error_in_the_middle_of_a_stream_is_its_last_event(
    client: openai.OpenAI, base_url: str
) -> None:
    stream = client.completions.create(model="failing", prompt="x", stream=True)
    received = []
    with pytest.raises(openai.APIError, match="the model broke down"):
        for chunk in stream:
            received.append(chunk.choices[0].text)
    assert received == ["half"]
    body = {"model": "failing", "prompt": "x", "stream": True}
    events = httpx.post(f"{base_url}/completions", json=body, timeout=60).text.split("\n\n")
    assert json.loads(events[1].removeprefix("data: ")) == {
        "error": {
            "message": "the model broke down",
            "type": "server_error",
            "param": None,
            "code": None,
        }
    }
    assert events[2:] == ["data: [DONE]", ""]


def test_restricted_apis_group_the_openai_endpoints_as_triton_does() -> None:
    port = free_port()
    flags = (
        "--allow-openai=true",
        "--openai-address=127.0.0.1",
        f"--openai-port={port}",
        "--http-restricted-api=inference:api-key=s3cret",
    )
    with (
        run_pytriton_server(OPENAI_MODELS, *flags),
        openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="x", max_retries=0) as plain,
        openai.OpenAI(
            base_url=f"http://127.0.0.1:{port}/v1",
            api_key="x",
            max_retries=0,
            default_headers={"api-key": "s3cret"},
        ) as keyed,
    ):
        assert plain.models.retrieve("tiny_llm").id == "tiny_llm"  # model-repository: open
        with pytest.raises(openai.PermissionDeniedError) as raised:
            plain.completions.create(model="tiny_llm", prompt="x")
        assert error_of(raised) == {
            "message": "This API is restricted, expecting header 'api-key'",
            "type": "permission_error",
            "param": None,
            "code": None,
        }
        with pytest.raises(openai.PermissionDeniedError):
            plain.embeddings.create(model="tiny_embed", input="x")
        answer = keyed.completions.create(model="tiny_llm", prompt="Once upon", max_tokens=2)
        assert answer.choices[0].text == " a"


# ------------------------------------------------------------------------- cancellation


def test_leaving_in_the_middle_of_a_stream_stops_the_model(
    client: openai.OpenAI, server: OpenAIServer
) -> None:
    with httpclient.InferenceServerClient(server.handle.http_url) as triton:
        before = model_stats(triton, "slow_llm")
        stream = client.completions.create(
            model="slow_llm",
            prompt="The",
            max_tokens=100000,
            stream=True,
            extra_body={"parameters": {"ignore_eos": True}},
        )
        received = 0
        for _chunk in stream:
            received += 1
            if received == 5:
                break
        stream.close()  # the connection goes: the server cancels the request
        # Unstopped, the model would send 100000 tokens, 10 ms apart; it returns from
        # execute once it sees the cancellation.
        deadline = time.monotonic() + 120
        while model_stats(triton, "slow_llm")["execution_count"] == before["execution_count"]:
            assert time.monotonic() < deadline, "the model did not stop"
            time.sleep(0.05)
        responses = model_stats(triton, "slow_llm")["response_stats"]
        sent = sum(int(entry["success"]["count"]) for entry in responses.values())
        assert 5 <= sent < 1000


def model_stats(triton: httpclient.InferenceServerClient, name: str) -> dict[str, Any]:
    stats: dict[str, Any] = triton.get_inference_statistics(name)["model_stats"][0]
    stats["execution_count"] = int(stats["execution_count"])
    return stats
