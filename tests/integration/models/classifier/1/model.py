"""Class scores: OUTPUT0 = INPUT0 (FP32), OUTPUT1 = round(10 * INPUT0) (INT32)."""

import json

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.int_dtype = pb_utils.triton_string_to_numpy(
            pb_utils.get_output_config_by_name(config, "OUTPUT1")["data_type"]
        )

    def execute(self, requests):
        responses = []
        for request in requests:
            scores = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            rounded = np.rint(scores * 10).astype(self.int_dtype)
            responses.append(
                pb_utils.InferenceResponse(
                    output_tensors=[
                        pb_utils.Tensor("OUTPUT0", scores),
                        pb_utils.Tensor("OUTPUT1", rounded),
                    ]
                )
            )
        return responses
