"""The tensor contract between the OpenAI front end and the models it serves
(docs/openai.md has it for model authors).

A **text model** (completions and chat) takes

- ``text_input`` (STRING, one element): the prompt; for chat, the conversation rendered by
  ``render_chat`` (one ``<role>: <content>`` line per message, then ``assistant: ``);
- ``messages`` (STRING, one element), instead of or beside ``text_input``, chat only: the
  conversation as a JSON array of ``{"role", "content"[, "name"]}``, for a model that
  applies its own chat template;
- ``stream`` (BOOL, one element), when the model declares it: whether the client streams;

and the sampling fields as request parameters. Each of its responses carries

- ``text_output`` (STRING): the text it adds (the elements are joined; UTF-8 split across
  responses is joined before decoding);
- optionally ``num_input_tokens`` and ``num_output_tokens`` (integers): the prompt's
  tokens, and the tokens of this response; the usage counts come from these (the prompt's
  from the first response that has it, the completion's summed);
- optionally ``finish_reason`` (STRING): ``stop``, ``length`` or ``content_filter``; the
  last one sent wins, and ``stop`` is the default.

A decoupled model may send any number of responses (token chunks, streamed as they come);
a model that is not sends one.

An **embedding model** takes ``text_input`` (STRING, one element per input string: a
variable dim, or the batch dim of a batching model) and answers ``embedding`` (FP16, FP32
or FP64, one row per string) and optionally ``num_input_tokens``; ``dimensions`` arrives as
a request parameter.

A model whose inputs do not fit (another input it requires, a wrong datatype) is refused
with 400 naming the input, before anything is sent to it.
"""

from __future__ import annotations

import codecs
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import orjson

from pytriton_core import types
from pytriton_core.config import TensorSpec
from pytriton_core.errors import InternalError, ServerError
from pytriton_core.frontends.http.generate_codec import fill_shape
from pytriton_core.frontends.openai.errors import RequestFieldError
from pytriton_core.inference.parameters import apply_request_parameter
from pytriton_core.inference.request import InferenceRequest
from pytriton_core.inference.response import InferenceResponse, ParameterValue
from pytriton_core.inference.tensor import Tensor
from pytriton_core.runtime.model import Model

TEXT_INPUT = "text_input"
MESSAGES_INPUT = "messages"
STREAM_INPUT = "stream"
TEXT_OUTPUT = "text_output"
INPUT_TOKENS = "num_input_tokens"
OUTPUT_TOKENS = "num_output_tokens"
FINISH_REASON = "finish_reason"
EMBEDDING_OUTPUT = "embedding"
FINISH_REASONS = ("stop", "length", "content_filter")
_FLOAT_TYPES = ("FP16", "FP32", "FP64")
ASSISTANT = "assistant"
_BOOL = types.BY_WIRE_NAME["BOOL"]


def render_chat(messages: list[dict[str, str]]) -> str:
    """The conversation as one prompt: a line per message, then the assistant's turn."""
    lines = []
    for message in messages:
        speaker = message["role"]
        if "name" in message:
            speaker += f" ({message['name']})"
        lines.append(f"{speaker}: {message['content']}")
    return "\n".join(lines) + f"\n{ASSISTANT}: "


def text_request(
    model: Model,
    *,
    prompt: str,
    messages: list[dict[str, str]] | None,
    stream: bool,
    sampling: Mapping[str, ParameterValue],
    extra: Mapping[str, object],
) -> InferenceRequest:
    """A request to a text model; ``messages`` is None for a completion."""
    spec = model.spec
    values: dict[str, np.ndarray] = {
        TEXT_INPUT: np.array([prompt.encode()], np.object_),
        STREAM_INPUT: np.array([stream], np.bool_),
    }
    if messages is not None:
        values[MESSAGES_INPUT] = np.array([orjson.dumps(messages)], np.object_)
    if TEXT_INPUT not in spec.inputs and (messages is None or MESSAGES_INPUT not in spec.inputs):
        wanted = TEXT_INPUT if messages is None else f"{TEXT_INPUT} or {MESSAGES_INPUT}"
        raise _unfit(model, f"it has no input {wanted}")
    if TEXT_OUTPUT not in spec.outputs:
        raise _unfit(model, f"it has no output {TEXT_OUTPUT}")
    request = _request(model, sampling, extra)
    for name, tensor_spec in spec.inputs.items():
        value = values.get(name)
        if value is None:
            if not tensor_spec.optional:
                raise _unfit(model, f"its input '{name}' is not one the front end fills")
            continue
        _check_datatype(model, tensor_spec, _BOOL if name == STREAM_INPUT else types.BYTES)
        shape = _shape(model, tensor_spec, 1)
        request.inputs[name] = Tensor(name, tensor_spec.datatype, value.reshape(shape))
    return request


def embedding_request(
    model: Model,
    texts: list[str],
    parameters: Mapping[str, ParameterValue],
    extra: Mapping[str, object],
) -> InferenceRequest:
    spec = model.spec
    text_spec = spec.inputs.get(TEXT_INPUT)
    if text_spec is None:
        raise _unfit(model, f"it has no input {TEXT_INPUT}")
    output = spec.outputs.get(EMBEDDING_OUTPUT)
    if output is None or output.datatype.wire_name not in _FLOAT_TYPES:
        raise _unfit(model, f"it has no floating-point output {EMBEDDING_OUTPUT}")
    for name, tensor_spec in spec.inputs.items():
        if name != TEXT_INPUT and not tensor_spec.optional:
            raise _unfit(model, f"its input '{name}' is not one the front end fills")
    _check_datatype(model, text_spec, types.BYTES)
    request = _request(model, parameters, extra)
    data = np.array([text.encode() for text in texts], np.object_)
    shape = _shape(model, text_spec, len(texts))
    request.inputs[TEXT_INPUT] = Tensor(TEXT_INPUT, text_spec.datatype, data.reshape(shape))
    return request


def _request(
    model: Model, parameters: Mapping[str, ParameterValue], extra: Mapping[str, object]
) -> InferenceRequest:
    request = InferenceRequest(model_name=model.name, model_version=model.version)
    request.parameters.update(parameters)
    for key, value in extra.items():
        if key in request.parameters:
            raise RequestFieldError(
                f"parameters.{key} is also a field of the request: set it once",
                param=f"parameters.{key}",
            )
        if not isinstance(value, str | int | float | bool):
            raise RequestFieldError(
                f"parameters.{key} must be a string, a number or a boolean",
                param=f"parameters.{key}",
            )
        try:  # priority, timeout and the other reserved keys work as in /infer
            apply_request_parameter(request, key, value)
        except ServerError as exc:
            raise RequestFieldError(exc.message, param=f"parameters.{key}") from None
    return request


def _shape(model: Model, tensor_spec: TensorSpec, count: int) -> list[int]:
    full_shape = model.spec.full_shape(tensor_spec)
    try:
        return fill_shape(tensor_spec.name, full_shape, count)
    except ServerError:
        raise _unfit(
            model, f"its input '{tensor_spec.name}' (shape {full_shape}) cannot hold {count}"
        ) from None


def _check_datatype(model: Model, tensor_spec: TensorSpec, expected: types.DataType) -> None:
    if tensor_spec.datatype is not expected:
        raise _unfit(
            model,
            f"its input '{tensor_spec.name}' is {tensor_spec.datatype.config_name}, "
            f"not {expected.config_name}",
        )


def _unfit(model: Model, why: str) -> RequestFieldError:
    return RequestFieldError(
        f"The model '{model.name}' does not follow the OpenAI front end's tensor contract: "
        f"{why} (see docs/openai.md)",
        param="model",
    )


# ------------------------------------------------------------------ responses


@dataclass(frozen=True, slots=True)
class TextPiece:
    """What one response of a text model says."""

    text: str
    input_tokens: int | None
    output_tokens: int | None
    finish_reason: str | None


class TextReader:
    """Reads a text model's responses in order (UTF-8 may be split between two)."""

    def __init__(self, model_name: str) -> None:
        self._model_name = model_name
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")

    def read(self, response: InferenceResponse) -> TextPiece:
        text = ""
        tensor = response.output(TEXT_OUTPUT)
        if tensor is not None:
            if not tensor.datatype.is_bytes:
                raise self._bad(f"{TEXT_OUTPUT} is {tensor.datatype.wire_name}, not BYTES")
            text = self._decoder.decode(b"".join(bytes(part) for part in tensor.data.flat))
        return TextPiece(
            text,
            self._count(response, INPUT_TOKENS),
            self._count(response, OUTPUT_TOKENS),
            self._finish_reason(response),
        )

    def rest(self) -> str:
        """What is left of a character split at the end (shown as U+FFFD)."""
        return self._decoder.decode(b"", final=True)

    def _count(self, response: InferenceResponse, name: str) -> int | None:
        return count_output(self._model_name, response, name)

    def _finish_reason(self, response: InferenceResponse) -> str | None:
        tensor = response.output(FINISH_REASON)
        if tensor is None:
            return None
        values = [bytes(v).decode("utf-8", "replace") for v in tensor.data.flat]
        if not tensor.datatype.is_bytes or len(values) != 1 or values[0] not in FINISH_REASONS:
            raise self._bad(f"{FINISH_REASON} must be one of {', '.join(FINISH_REASONS)}")
        return values[0]

    def _bad(self, why: str) -> InternalError:
        return bad_output(self._model_name, why)


def read_embeddings(
    model_name: str, response: InferenceResponse, count: int
) -> tuple[np.ndarray, int | None]:
    """The ``count`` embeddings of a response (one row each) and the input token count."""
    tensor = response.output(EMBEDDING_OUTPUT)
    if tensor is None or tensor.datatype.wire_name not in _FLOAT_TYPES:
        raise bad_output(model_name, f"it sent no floating-point {EMBEDDING_OUTPUT}")
    data = tensor.data
    if data.size == 0 or data.size % count:
        raise bad_output(
            model_name, f"{EMBEDDING_OUTPUT} of shape {list(data.shape)} for {count} inputs"
        )
    tokens = count_output(model_name, response, INPUT_TOKENS)
    return data.reshape(count, -1).astype(np.float32, copy=False), tokens


def count_output(model_name: str, response: InferenceResponse, name: str) -> int | None:
    """A token count the model sent (its elements summed), None if it sent none."""
    tensor = response.output(name)
    if tensor is None:
        return None
    if tensor.datatype.numpy_dtype.kind not in "iu":
        raise bad_output(model_name, f"{name} is {tensor.datatype.wire_name}, not an integer")
    return int(tensor.data.sum())


def bad_output(model_name: str, why: str) -> InternalError:
    return InternalError(f"The model '{model_name}' answered outside the tensor contract: {why}")
