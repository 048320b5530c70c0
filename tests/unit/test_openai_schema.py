"""The OpenAI front end's request bodies, read field by field (frontends/openai/schema.py),
and the chat rendering of the tensor contract."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from pytriton_core.frontends.openai.contract import render_chat
from pytriton_core.frontends.openai.errors import RequestFieldError, error_document
from pytriton_core.frontends.openai.schema import read_chat, read_completion, read_embedding


def body(**fields: Any) -> bytes:
    return orjson.dumps(fields)


def refusal(reader: Any, **fields: Any) -> tuple[str | None, str]:
    with pytest.raises(RequestFieldError) as raised:
        reader(body(**fields))
    return raised.value.param, raised.value.message


def test_a_completion_reads_its_fields_and_passes_the_sampling_ones() -> None:
    request = read_completion(
        body(
            model="m",
            prompt=["one prompt"],
            max_tokens=8.0,
            temperature=0,
            stop="\n",
            logit_bias={"50256": -100},
            echo=True,
            n=1,
            suffix=None,
            parameters={"top_k": 3},
        )
    )
    assert (request.model, request.prompt, request.echo, request.stream) == (
        "m",
        "one prompt",
        True,
        False,
    )
    assert request.sampling == {
        "max_tokens": 8,
        "temperature": 0.0,
        "stop": '["\\n"]',
        "logit_bias": '{"50256":-100}',
    }
    assert request.extra == {"top_k": 3}


def test_chat_prefers_max_completion_tokens_and_joins_text_parts() -> None:
    request = read_chat(
        body(
            model="m",
            messages=[
                {"role": "system", "content": "Be brief."},
                {"role": "user", "name": "ann", "content": [{"type": "text", "text": "Hi"}]},
            ],
            max_tokens=5,
            max_completion_tokens=9,
            stream=True,
            stream_options={"include_usage": True},
            tools=[],
        )
    )
    assert request.sampling == {"max_tokens": 9}
    assert (request.stream, request.include_usage) == (True, True)
    assert request.messages[1] == {"role": "user", "content": "Hi", "name": "ann"}
    assert render_chat(request.messages) == "system: Be brief.\nuser (ann): Hi\nassistant: "


def test_embeddings_take_a_string_or_strings() -> None:
    one = read_embedding(body(model="e", input="a"))
    assert (one.texts, one.base64) == (["a"], False)
    several = read_embedding(body(model="e", input=["a", "b"], encoding_format="base64"))
    assert (several.texts, several.base64) == (["a", "b"], True)
    assert read_embedding(body(model="e", input="a", dimensions=4)).parameters == {"dimensions": 4}


@pytest.mark.parametrize(
    ("fields", "param", "message"),
    [
        ({"prompt": "x"}, "model", "you must provide a model parameter"),
        ({"model": "m"}, "prompt", "you must provide a prompt parameter"),
        (
            {"model": "m", "prompt": ["a", "b"]},
            "prompt",
            "prompt must be a string (several prompts or token arrays are not supported)",
        ),
        (
            {"model": "m", "prompt": "x", "top_p": 1.5},
            "top_p",
            "top_p must be between 0 and 1, not 1.5",
        ),
        (
            {"model": "m", "prompt": "x", "stop": [""]},
            "stop",
            "stop must be a non-empty string or an array of non-empty strings",
        ),
        ({"model": "m", "prompt": "x", "echo": "yes"}, "echo", 'echo must be a boolean, not "yes"'),
        (
            {"model": "m", "prompt": "x", "best_of": 3},
            "best_of",
            "best_of must be 1: this server returns one choice per request",
        ),
        (
            {"model": "m", "prompt": "x", "stream_options": {"include_usage": True}},
            "stream_options",
            "The 'stream_options' parameter is only allowed when 'stream' is enabled.",
        ),
        (
            {"model": "m", "prompt": "x", "parameters": [1]},
            "parameters",
            "parameters must be an object",
        ),
    ],
)
def test_completion_refusals_name_the_field(
    fields: dict[str, Any], param: str, message: str
) -> None:
    assert refusal(read_completion, **fields) == (param, message)


@pytest.mark.parametrize(
    ("messages", "param"),
    [
        ([], "messages"),
        ([{"role": "tool", "content": "x"}], "messages[0].role"),
        ([{"role": "user", "content": [{"type": "image_url"}]}], "messages[0].content"),
        ([{"role": "user", "content": "x", "tool_calls": []}], "messages[0].tool_calls"),
    ],
)
def test_chat_refuses_what_it_cannot_render(messages: list[Any], param: str) -> None:
    assert refusal(read_chat, model="m", messages=messages)[0] == param


def test_unsupported_fields_are_refused_unless_they_hold_their_default() -> None:
    read_chat(body(model="m", messages=[{"role": "user", "content": "x"}], logprobs=False))
    assert refusal(
        read_chat, model="m", messages=[{"role": "user", "content": "x"}], logprobs=True
    ) == ("logprobs", "logprobs is not supported by this server")


def test_a_body_that_is_not_an_object() -> None:
    with pytest.raises(RequestFieldError) as raised:
        read_embedding(b"[1, 2]")
    assert error_document(raised.value) == {
        "error": {
            "message": "The request body must be a JSON object.",
            "type": "invalid_request_error",
            "param": None,
            "code": None,
        }
    }
