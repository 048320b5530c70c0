"""Echoes a model-config parameter: VALUE = parameters[KEY].string_value, or "" if unset."""

import json

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.parameters = {
            key: value["string_value"] for key, value in config.get("parameters", {}).items()
        }

    def execute(self, requests):
        responses = []
        for request in requests:
            key = pb_utils.get_input_tensor_by_name(request, "KEY").as_numpy()[0].decode()
            value = self.parameters.get(key, "").encode()
            output = pb_utils.Tensor("VALUE", np.array([value], dtype=np.object_))
            responses.append(pb_utils.InferenceResponse(output_tensors=[output]))
        return responses
