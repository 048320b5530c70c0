"""The request bodies of ``/v1/completions``, ``/v1/chat/completions`` and ``/v1/embeddings``,
read and checked field by field.

Each field of OpenAI's API is one of: used by the front end (``model``, ``prompt``,
``messages``, ``stream``, ``echo``, ...); a sampling parameter, passed to the model as a
request parameter of the same name (``max_tokens``, ``temperature``, ``top_p``, ``seed``,
``stop``, ...: list and object values as JSON text); or one this server does not
implement, refused with 400 naming it unless it has its default value. A field OpenAI's
API does not have is refused as OpenAI refuses it ("Unrecognized request argument
supplied"). Beyond OpenAI's fields, ``parameters`` (an object) carries further request
parameters for the model, as the KServe protocol's ``parameters`` do (``top_k``, say).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

from pytriton_core.frontends.http.messages import Buffer
from pytriton_core.frontends.openai.errors import RequestFieldError
from pytriton_core.inference.response import ParameterValue

# The extension: further request parameters for the model.
PARAMETERS = "parameters"

# Sampling fields, passed to the model as request parameters: (low, high) for numbers.
_FLOATS: dict[str, tuple[float, float]] = {
    "temperature": (0.0, 2.0),
    "top_p": (0.0, 1.0),
    "presence_penalty": (-2.0, 2.0),
    "frequency_penalty": (-2.0, 2.0),
}
_COMMON = ("model", "stream", "stream_options", "n", "seed", "stop", "logit_bias", "user")
_COMPLETION_FIELDS = (*_COMMON, *_FLOATS, "prompt", "max_tokens", "echo", "best_of")
_CHAT_FIELDS = (*_COMMON, *_FLOATS, "messages", "max_tokens", "max_completion_tokens")
_EMBEDDING_FIELDS = ("model", "input", "encoding_format", "dimensions", "user")

# OpenAI's fields this server does not implement: the values accepted (their defaults).
_UNSUPPORTED_COMPLETION: dict[str, tuple[object, ...]] = {
    "logprobs": (0,),
    "suffix": ("",),
}
_UNSUPPORTED_CHAT: dict[str, tuple[object, ...]] = {
    "logprobs": (False,),
    "top_logprobs": (),
    "tools": ([],),
    "tool_choice": ("none",),
    "parallel_tool_calls": (),
    "functions": ([],),
    "function_call": ("none",),
    "response_format": ({"type": "text"},),
    "modalities": (["text"],),
    "audio": (),
    "prediction": (),
    "web_search_options": (),
    "reasoning_effort": (),
    "verbosity": (),
    "store": (False,),
    "metadata": ({},),
    "service_tier": ("auto", "default"),
}
_UNSUPPORTED_EMBEDDING: dict[str, tuple[object, ...]] = {}

CHAT_ROLES = ("system", "developer", "user", "assistant")


@dataclass
class GenerationRequest:
    """What ``/v1/completions`` and ``/v1/chat/completions`` share."""

    model: str
    stream: bool
    include_usage: bool  # stream_options.include_usage: a last chunk with the usage
    # For the model, as request parameters: the sampling fields, then ``parameters``.
    sampling: dict[str, ParameterValue] = field(default_factory=dict)
    extra: dict[str, object] = field(default_factory=dict)


@dataclass
class CompletionRequest(GenerationRequest):
    prompt: str = ""
    echo: bool = False  # the prompt comes back before the completion


@dataclass
class ChatRequest(GenerationRequest):
    # Each {"role", "content"[, "name"]}, the content as text.
    messages: list[dict[str, str]] = field(default_factory=list)


@dataclass
class EmbeddingRequest:
    model: str
    texts: list[str]
    base64: bool  # encoding_format "base64": each vector as the base64 of its float32s
    parameters: dict[str, ParameterValue] = field(default_factory=dict)
    extra: dict[str, object] = field(default_factory=dict)


def read_completion(body: Buffer) -> CompletionRequest:
    fields = _Fields(body, _COMPLETION_FIELDS, _UNSUPPORTED_COMPLETION)
    request = CompletionRequest(fields.model(), *fields.streaming())
    request.prompt = _prompt(fields)
    request.echo = fields.boolean("echo")
    for name in ("n", "best_of"):
        fields.only_one(name)
    fields.sampling(request.sampling, max_tokens=fields.integer("max_tokens", low=1))
    request.extra = fields.extra()
    return request


def read_chat(body: Buffer) -> ChatRequest:
    fields = _Fields(body, _CHAT_FIELDS, _UNSUPPORTED_CHAT)
    request = ChatRequest(fields.model(), *fields.streaming())
    request.messages = _messages(fields.take("messages"))
    fields.only_one("n")
    # max_completion_tokens replaces max_tokens (deprecated for chat); the model sees one.
    max_tokens = fields.integer("max_completion_tokens", low=1)
    legacy = fields.integer("max_tokens", low=1)
    fields.sampling(request.sampling, max_tokens=max_tokens if max_tokens is not None else legacy)
    request.extra = fields.extra()
    return request


def read_embedding(body: Buffer) -> EmbeddingRequest:
    fields = _Fields(body, _EMBEDDING_FIELDS, _UNSUPPORTED_EMBEDDING)
    model = fields.model()
    texts = _embedding_input(fields.take("input"))
    encoding = fields.take("encoding_format")
    if encoding not in (None, "float", "base64"):
        raise RequestFieldError(
            f"encoding_format must be 'float' or 'base64', not {_shown(encoding)}",
            param="encoding_format",
        )
    request = EmbeddingRequest(model, texts, encoding == "base64")
    dimensions = fields.integer("dimensions", low=1)
    if dimensions is not None:
        request.parameters["dimensions"] = dimensions
    user = fields.string("user")
    if user is not None:
        request.parameters["user"] = user
    request.extra = fields.extra()
    return request


class _Fields:
    """A request body's fields, each read once; null reads as absent, as in OpenAI's API."""

    def __init__(
        self,
        body: Buffer,
        known: Collection[str],
        unsupported: Mapping[str, tuple[object, ...]],
    ) -> None:
        try:
            document = orjson.loads(body)
        except orjson.JSONDecodeError:
            raise RequestFieldError(
                "We could not parse the JSON body of your request. The body must be a JSON "
                "object with the request's fields (see docs/openai.md).",
                param=None,
            ) from None
        if not isinstance(document, dict):
            raise RequestFieldError("The request body must be a JSON object.", param=None)
        for name, value in document.items():
            if name in unsupported:
                if value is not None and value not in unsupported[name]:
                    raise RequestFieldError(f"{name} is not supported by this server", param=name)
            elif name not in known and name != PARAMETERS:
                raise RequestFieldError(
                    f"Unrecognized request argument supplied: {name}", param=name
                )
        self._document = {key: value for key, value in document.items() if value is not None}

    def take(self, name: str) -> Any:
        return self._document.get(name)

    def model(self) -> str:
        model = self.take("model")
        if model is None:
            raise RequestFieldError("you must provide a model parameter", param="model")
        if not isinstance(model, str):
            raise RequestFieldError("model must be a string", param="model")
        return model

    def boolean(self, name: str, default: bool = False) -> bool:
        value = self.take(name)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise RequestFieldError(f"{name} must be a boolean, not {_shown(value)}", param=name)
        return value

    def string(self, name: str) -> str | None:
        value = self.take(name)
        if value is not None and not isinstance(value, str):
            raise RequestFieldError(f"{name} must be a string, not {_shown(value)}", param=name)
        return value

    def integer(self, name: str, *, low: int | None = None) -> int | None:
        value = self.take(name)
        if value is None:
            return None
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int):
            raise RequestFieldError(f"{name} must be an integer, not {_shown(value)}", param=name)
        if low is not None and value < low:
            raise RequestFieldError(
                f"{_shown(value)} is less than the minimum of {low} - '{name}'", param=name
            )
        return value

    def number(self, name: str, low: float, high: float) -> float | None:
        value = self.take(name)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise RequestFieldError(f"{name} must be a number, not {_shown(value)}", param=name)
        if not low <= value <= high:
            raise RequestFieldError(
                f"{name} must be between {low:g} and {high:g}, not {_shown(value)}", param=name
            )
        return float(value)

    def only_one(self, name: str) -> None:
        """A count of choices: only 1 is implemented."""
        value = self.integer(name, low=1)
        if value is not None and value != 1:
            raise RequestFieldError(
                f"{name} must be 1: this server returns one choice per request", param=name
            )

    def streaming(self) -> tuple[bool, bool]:
        """``stream`` and ``stream_options.include_usage``."""
        stream = self.boolean("stream")
        options = self.take("stream_options")
        if options is None:
            return stream, False
        if not stream:
            raise RequestFieldError(
                "The 'stream_options' parameter is only allowed when 'stream' is enabled.",
                param="stream_options",
            )
        if not isinstance(options, dict) or set(options) - {"include_usage"}:
            raise RequestFieldError(
                "stream_options supports only include_usage", param="stream_options"
            )
        include_usage = options.get("include_usage", False)
        if not isinstance(include_usage, bool):
            raise RequestFieldError(
                "stream_options.include_usage must be a boolean", param="stream_options"
            )
        return stream, include_usage

    def sampling(self, into: dict[str, ParameterValue], *, max_tokens: int | None) -> None:
        """The sampling fields the client set, as the model receives them."""
        if max_tokens is not None:
            into["max_tokens"] = max_tokens
        for name, (low, high) in _FLOATS.items():
            value = self.number(name, low, high)
            if value is not None:
                into[name] = value
        seed = self.integer("seed")
        if seed is not None:
            into["seed"] = seed
        stop = self.take("stop")
        if stop is not None:
            into["stop"] = _json(_stop_sequences(stop))
        bias = self.take("logit_bias")
        if bias is not None:
            into["logit_bias"] = _json(_logit_bias(bias))
        user = self.string("user")
        if user is not None:
            into["user"] = user

    def extra(self) -> dict[str, object]:
        """The ``parameters`` extension (checked by the request-parameter rules later)."""
        extra = self.take(PARAMETERS)
        if extra is None:
            return {}
        if not isinstance(extra, dict):
            raise RequestFieldError(f"{PARAMETERS} must be an object", param=PARAMETERS)
        return extra


def _prompt(fields: _Fields) -> str:
    prompt = fields.take("prompt")
    if isinstance(prompt, list) and len(prompt) == 1:
        prompt = prompt[0]
    if prompt is None:
        raise RequestFieldError("you must provide a prompt parameter", param="prompt")
    if not isinstance(prompt, str):
        raise RequestFieldError(
            "prompt must be a string (several prompts or token arrays are not supported)",
            param="prompt",
        )
    return prompt


def _messages(value: object) -> list[dict[str, str]]:
    if value is None:
        raise RequestFieldError("you must provide a messages parameter", param="messages")
    if not isinstance(value, list) or not value:
        raise RequestFieldError("messages must be a non-empty array", param="messages")
    return [_message(index, message) for index, message in enumerate(value)]


def _message(index: int, message: object) -> dict[str, str]:
    where = f"messages[{index}]"
    if not isinstance(message, dict):
        raise RequestFieldError(f"{where} must be an object", param=where)
    role = message.get("role")
    if role not in CHAT_ROLES:
        raise RequestFieldError(
            f"{where}.role must be one of {', '.join(CHAT_ROLES)}, not {_shown(role)}"
            " (tool messages need tools, which are not supported)",
            param=f"{where}.role",
        )
    unknown = set(message) - {"role", "content", "name"}
    if unknown:
        name = sorted(unknown)[0]
        raise RequestFieldError(
            f"{where}.{name} is not supported by this server", param=f"{where}.{name}"
        )
    read: dict[str, str] = {"role": role, "content": _content(where, message.get("content"))}
    name = message.get("name")
    if name is not None:
        if not isinstance(name, str):
            raise RequestFieldError(f"{where}.name must be a string", param=f"{where}.name")
        read["name"] = name
    return read


def _content(where: str, content: object) -> str:
    """A message's text: a string, or an array of text parts (joined)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = []
        for index, part in enumerate(content):
            if not isinstance(part, dict) or part.get("type") != "text":
                kind = part.get("type") if isinstance(part, dict) else part
                raise RequestFieldError(
                    f"{where}.content[{index}]: only text parts are supported, not {_shown(kind)}",
                    param=f"{where}.content",
                )
            text = part.get("text")
            if not isinstance(text, str):
                raise RequestFieldError(
                    f"{where}.content[{index}].text must be a string", param=f"{where}.content"
                )
            texts.append(text)
        return "".join(texts)
    raise RequestFieldError(
        f"{where}.content must be a string or an array of text parts", param=f"{where}.content"
    )


def _stop_sequences(stop: object) -> list[str]:
    sequences = [stop] if isinstance(stop, str) else stop
    if not isinstance(sequences, list) or not all(isinstance(s, str) and s for s in sequences):
        raise RequestFieldError(
            "stop must be a non-empty string or an array of non-empty strings", param="stop"
        )
    return sequences


def _logit_bias(bias: object) -> dict[str, float]:
    if not isinstance(bias, dict) or not all(
        isinstance(value, int | float) and not isinstance(value, bool) and -100 <= value <= 100
        for value in bias.values()
    ):
        raise RequestFieldError(
            "logit_bias must map tokens to numbers between -100 and 100", param="logit_bias"
        )
    return bias


def _embedding_input(value: object) -> list[str]:
    texts = [value] if isinstance(value, str) else value
    if value is None:
        raise RequestFieldError("you must provide an input parameter", param="input")
    if not isinstance(texts, list) or not texts or not all(isinstance(t, str) for t in texts):
        raise RequestFieldError(
            "input must be a string or a non-empty array of strings (token arrays are not "
            "supported)",
            param="input",
        )
    if any(not text for text in texts):
        raise RequestFieldError("input must not contain empty strings", param="input")
    return texts


def _json(value: object) -> str:
    return orjson.dumps(value).decode()


def _shown(value: object) -> str:
    """A value of the body as the client wrote it."""
    return orjson.dumps(value).decode()
