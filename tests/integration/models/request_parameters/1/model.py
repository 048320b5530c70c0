"""Echoes request parameters, which reach the model as one JSON string (request.parameters())."""

import json

import numpy as np
import triton_python_backend_utils as pb_utils


def _bytes_tensor(name, text):
    return pb_utils.Tensor(name, np.array([text.encode()], dtype=np.object_))


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            parameters = json.loads(request.parameters())
            key = pb_utils.get_input_tensor_by_name(request, "KEY").as_numpy()[0].decode()
            value = json.dumps(parameters.get(key))
            every = json.dumps(parameters, sort_keys=True)
            responses.append(
                pb_utils.InferenceResponse(
                    output_tensors=[_bytes_tensor("VALUE", value), _bytes_tensor("ALL", every)]
                )
            )
        return responses
