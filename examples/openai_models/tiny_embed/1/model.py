"""tiny_embed: a text embedder for the OpenAI front end (docs/openai.md), no weights needed.

Each string's embedding counts its character trigrams (the text padded with a space at
each end), each hashed to one of DIMENSIONS coordinates with a sign, and is scaled to
length 1: strings that share many trigrams point the same way.

The tensor contract of an embedding model (docs/openai.md): text_input (STRING, one
element per string) in; embedding (FP32, one row per string) and num_input_tokens (INT32:
the tokens of all the strings; a token is one character) out. The request parameter
dimensions (1 to 32) keeps that many leading coordinates, scaled to length 1 again.
"""

import json
import zlib

import numpy as np
import triton_python_backend_utils as pb_utils

DIMENSIONS = 32


def embed(text, dimensions):
    vector = np.zeros(DIMENSIONS, np.float32)
    padded = f" {text} "
    for start in range(len(padded) - 2):
        code = zlib.crc32(padded[start : start + 3].encode())
        vector[code % DIMENSIONS] += 1.0 if code & 1 << 16 else -1.0
    vector = vector[:dimensions]
    norm = float(np.linalg.norm(vector))
    return vector / norm if norm else vector


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            parameters = json.loads(request.parameters() or "{}")
            dimensions = parameters.get("dimensions", DIMENSIONS)
            if isinstance(dimensions, bool) or not isinstance(dimensions, int) or not (
                1 <= dimensions <= DIMENSIONS
            ):
                error = pb_utils.TritonError(
                    f"tiny_embed makes embeddings of 1 to {DIMENSIONS} dimensions, not {dimensions}",
                    pb_utils.TritonError.INVALID_ARG,
                )
                responses.append(pb_utils.InferenceResponse(error=error))
                continue
            strings = pb_utils.get_input_tensor_by_name(request, "text_input").as_numpy()
            texts = [bytes(s).decode("utf-8", "replace") for s in strings.reshape(-1)]
            vectors = np.stack([embed(text, dimensions) for text in texts])
            tokens = np.array([sum(len(text) for text in texts)], np.int32)
            responses.append(
                pb_utils.InferenceResponse(
                    output_tensors=[
                        pb_utils.Tensor("embedding", vectors),
                        pb_utils.Tensor("num_input_tokens", tokens),
                    ]
                )
            )
        return responses
