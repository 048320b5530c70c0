"""Decodes an image and resizes it for the classifier (Pillow: pip install pillow)."""

import io

import numpy as np
import triton_python_backend_utils as pb_utils
from PIL import Image

SIZE = 64


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            encoded = pb_utils.get_input_tensor_by_name(request, "IMAGE").as_numpy()[0]
            try:
                image = Image.open(io.BytesIO(encoded)).convert("RGB").resize((SIZE, SIZE))
            except Exception as exc:  # not an image Pillow can read
                error = pb_utils.TritonError(
                    f"IMAGE is not a readable image: {exc}", pb_utils.TritonError.INVALID_ARG
                )
                responses.append(pb_utils.InferenceResponse(error=error))
                continue
            pixels = (np.asarray(image, np.float32) / 255.0).transpose(2, 0, 1)
            responses.append(
                pb_utils.InferenceResponse(
                    [pb_utils.Tensor("PIXELS", np.ascontiguousarray(pixels))]
                )
            )
        return responses
