"""tiny_llm: a character-level text generator for the OpenAI front end (docs/openai.md).

It learns from the few lines of CORPUS below when it loads (no download, no weights): to
pick the next character it finds the longest end of the text so far (up to CONTEXT
characters) that occurs in the corpus, and looks at what followed it there. A question
the corpus holds ("user: What can you do?") therefore gets the corpus's answer.

The tensor contract of a text model (docs/openai.md):
- text_input (STRING, one element): the prompt;
- stream (BOOL, optional): true sends one response per token, false one response at the end;
- text_output (STRING): each response's new text; num_input_tokens / num_output_tokens
  (INT32): the prompt's tokens, and the tokens in this response; finish_reason (STRING):
  "stop" or "length", on the last response.

A token is one character. Request parameters: max_tokens (default 16), temperature
(default 0: always the most frequent next character), top_p, seed (default 0), stop (a JSON
array of strings), ignore_eos (keep going past the end of a line). Generation ends at a
newline (finish_reason "stop", the newline not sent), at a stop sequence (not sent), or
after max_tokens ("length"). presence_penalty, frequency_penalty and logit_bias are refused:
this model does not implement them.

The config parameter token_delay_ms slows each token down (for demos, and for tests that
leave in the middle of a stream); a cancelled request stops at the next token.
"""

import json
import random
import time

import numpy as np
import triton_python_backend_utils as pb_utils

CORPUS = """\
user: Hello!
assistant: Hello! I am tiny_llm, a character model served by pytriton-core.
user: Who are you?
assistant: I am tiny_llm. I only know a few lines of text.
user: What can you do?
assistant: I can stream text one character at a time.
user: How do you work?
assistant: I find the longest end of your text that I know and say what came after it.
user: Tell me a story.
assistant: Once upon a time a server answered every request in order.
The quick brown fox jumps over the lazy dog.
Once upon a time there was a small model that lived on a fast server.
"""

CONTEXT = 64  # the longest text end looked up in the corpus
END_OF_TEXT = "\n"
UNIMPLEMENTED = ("presence_penalty", "frequency_penalty", "logit_bias")
FINAL = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL


class InvalidRequest(Exception):
    pass


def next_counts(text):
    """What followed the longest end of ``text`` found in the corpus: {char: count}, in the
    order of first appearance (so ties go to the earliest)."""
    for length in range(min(CONTEXT, len(text)), 0, -1):
        suffix = text[-length:]
        counts = {}
        position = CORPUS.find(suffix)
        while position != -1 and position + length < len(CORPUS):
            following = CORPUS[position + length]
            counts[following] = counts.get(following, 0) + 1
            position = CORPUS.find(suffix, position + 1)
        if counts:
            return counts
    counts = {}
    for char in CORPUS:
        counts[char] = counts.get(char, 0) + 1
    return counts


def pick(counts, temperature, top_p, rng):
    chars = list(counts)
    if temperature <= 0:
        return max(chars, key=lambda char: counts[char])  # max keeps the first of a tie
    weights = [counts[char] ** (1.0 / temperature) for char in chars]
    total = sum(weights)
    ranked = sorted(zip(chars, (w / total for w in weights)), key=lambda item: -item[1])
    kept, mass = [], 0.0
    for char, probability in ranked:
        kept.append((char, probability))
        mass += probability
        if mass >= top_p:
            break
    point = rng.random() * mass
    for char, probability in kept:
        point -= probability
        if point < 0:
            return char
    return kept[-1][0]


class Settings:
    """A request's sampling parameters, checked."""

    def __init__(self, parameters):
        for name in UNIMPLEMENTED:
            if name in parameters:
                raise InvalidRequest(f"tiny_llm does not implement {name}")
        self.max_tokens = self._number(parameters, "max_tokens", 16, int)
        self.temperature = self._number(parameters, "temperature", 0.0, float)
        self.top_p = self._number(parameters, "top_p", 1.0, float)
        self.seed = self._number(parameters, "seed", 0, int)
        self.ignore_eos = bool(parameters.get("ignore_eos", False))
        stop = json.loads(parameters.get("stop", "[]"))
        if not isinstance(stop, list) or not all(isinstance(s, str) and s for s in stop):
            raise InvalidRequest("stop must be a JSON array of non-empty strings")
        self.stop = stop

    @staticmethod
    def _number(parameters, name, default, kind):
        value = parameters.get(name, default)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise InvalidRequest(f"{name} must be a number")
        return kind(value)


class Generation:
    """The text a request generates, held back while it may be the start of a stop
    sequence (which is never sent)."""

    def __init__(self, prompt, settings):
        self.text = prompt
        self.settings = settings
        self.rng = random.Random(settings.seed)
        self.pending = ""  # generated, not yet released
        self.generated = 0

    def step(self):
        """Generate one token: (text now safe to send, finish reason or None)."""
        settings = self.settings
        char = pick(next_counts(self.text), settings.temperature, settings.top_p, self.rng)
        self.text += char
        if char == END_OF_TEXT and not settings.ignore_eos:
            return self._release(len(self.pending)), "stop"
        self.generated += 1
        self.pending += char
        for stop in settings.stop:
            if self.pending.endswith(stop):
                return self._release(len(self.pending) - len(stop)), "stop"
        if self.generated >= settings.max_tokens:
            return self._release(len(self.pending)), "length"
        held = max((self._prefix_held(stop) for stop in settings.stop), default=0)
        return self._release(len(self.pending) - held), None

    def _prefix_held(self, stop):
        for length in range(min(len(stop) - 1, len(self.pending)), 0, -1):
            if self.pending.endswith(stop[:length]):
                return length
        return 0

    def _release(self, count):
        released, self.pending = self.pending[:count], self.pending[count:]
        return released


def text_response(text, prompt_tokens, finish_reason=None):
    outputs = [
        pb_utils.Tensor("text_output", np.array([text.encode()], np.object_)),
        pb_utils.Tensor("num_input_tokens", np.array([prompt_tokens], np.int32)),
        pb_utils.Tensor("num_output_tokens", np.array([len(text)], np.int32)),
    ]
    if finish_reason is not None:
        outputs.append(pb_utils.Tensor("finish_reason", np.array([finish_reason.encode()], np.object_)))
    return pb_utils.InferenceResponse(output_tensors=outputs)


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        delay = config.get("parameters", {}).get("token_delay_ms", {}).get("string_value", "0")
        self.token_delay_s = float(delay or 0) / 1000

    def execute(self, requests):
        for request in requests:
            sender = request.get_response_sender()
            try:
                self._generate(request, sender)
            except InvalidRequest as exc:
                error = pb_utils.TritonError(str(exc), pb_utils.TritonError.INVALID_ARG)
                sender.send(pb_utils.InferenceResponse(error=error), flags=FINAL)
        return None

    def _generate(self, request, sender):
        settings = Settings(json.loads(request.parameters() or "{}"))
        prompt_tensor = pb_utils.get_input_tensor_by_name(request, "text_input").as_numpy()
        prompt = bytes(prompt_tensor.reshape(-1)[0]).decode("utf-8", "replace")
        stream_tensor = pb_utils.get_input_tensor_by_name(request, "stream")
        stream = stream_tensor is not None and bool(stream_tensor.as_numpy().reshape(-1)[0])
        generation = Generation(prompt, settings)
        collected = []
        finish_reason = None
        while finish_reason is None:
            if sender.is_cancelled():  # the client went away: stop generating
                sender.send(flags=FINAL)
                return
            text, finish_reason = generation.step()
            if not stream:
                collected.append(text)
            elif finish_reason is None:
                if text:
                    sender.send(text_response(text, len(prompt)))
            else:
                response = text_response(text, len(prompt), finish_reason)
                sender.send(response, flags=FINAL)
            if self.token_delay_s and finish_reason is None:
                time.sleep(self.token_delay_s)
        if not stream:
            sender.send(text_response("".join(collected), len(prompt), finish_reason), flags=FINAL)
